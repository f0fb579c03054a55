// Subcommands of the `tlr` binary (apps layer). Each Add*Command registers its options on
// the CLI11 app and returns the function that runs it; main() runs the one the user chose.
// Commands print to stdout/stderr and return an exit code; only main() exits.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "util/status.h"

namespace tlr {
struct DecodeStats;
}  // namespace tlr

namespace tlr::cli {

using RunFn = std::function<int()>;

struct Command {
  CLI::App* app;
  RunFn run;
};

struct Params;
// A command on the options layer (options.h): after parsing, `p` is resolved (an error is
// reported as the command's), then --print-params prints the shared parameters with `own` (the
// command's own options as JSON) instead of running, else `run` runs.
Command MakeCommand(CLI::App* app, std::shared_ptr<Params> p, std::function<nlohmann::json()> own, RunFn run);
// The same with the command's own options in a struct that converts to JSON.
template <typename Own>
Command MakeCommand(CLI::App* app, std::shared_ptr<Params> p, std::shared_ptr<Own> own, RunFn run) {
  return MakeCommand(app, std::move(p), std::function<nlohmann::json()>([own] { return nlohmann::json(*own); }),
                     std::move(run));
}

Command AddInfoCommand(CLI::App& root);
Command AddTokenizeCommand(CLI::App& root);
Command AddRunCommand(CLI::App& root);
Command AddMakeRandomCommand(CLI::App& root);
Command AddConvertCommand(CLI::App& root);
Command AddBenchCommand(CLI::App& root);
Command AddGenerateCommand(CLI::App& root);
Command AddRouterCommand(CLI::App& root);
Command AddEvalCommand(CLI::App& root);
Command AddServeCommand(CLI::App& root);
Command AddLoadtestCommand(CLI::App& root);
Command AddUiCommand(CLI::App& root);

Command AddChatCommand(CLI::App& root);

// The summary `tlr generate` prints after a generation (and `tlr chat` on /stats).
std::string FormatDecodeSummary(const DecodeStats& st);

// Prints "tlr <cmd>: error: <message>" to stderr and returns the exit code for errors (1).
int ReportError(const std::string& command, const std::string& message);

// The text of a file argument; "-": standard input.
Expected<std::string> ReadTextArg(const std::string& path);

// A size flag: "512M", "4G", "1048576" -> bytes (K, M, G binary). False when malformed or <= 0.
bool ParseBytes(const std::string& s, uint64_t* out);

// Seconds elapsed on the steady clock since t0.
double SecondsSince(std::chrono::steady_clock::time_point t0);

// For the commands that serve until stopped (serve, ui): SIGINT and SIGTERM ask to stop and
// SIGPIPE is ignored (a client that hangs up must not end the server). Install before saying
// "listening", so a signal sent right after that line is never lost; then wait.
void InstallStopSignals();
void WaitForStopSignal();

}  // namespace tlr::cli

// Returns the error exit code from the enclosing command when `expr` (a Status) failed.
#define TLR_CLI_CHECK(cmd, expr)                                               \
  do {                                                                          \
    ::tlr::Status tlr_cli_status_ = (expr);                                     \
    if (!tlr_cli_status_.ok()) return ::tlr::cli::ReportError(cmd, tlr_cli_status_.message()); \
  } while (0)
