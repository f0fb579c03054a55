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
#include "util/clock.h"

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
// command's own options as JSON) instead of running, else `run` runs, given the command's name
// for its messages ("router train").
using CommandFn = std::function<int(const std::string& cmd)>;
Command MakeCommand(CLI::App* app, std::shared_ptr<Params> p, std::function<nlohmann::json()> own, CommandFn run);
// The same with the command's own options in a struct that converts to JSON.
template <typename Own>
Command MakeCommand(CLI::App* app, std::shared_ptr<Params> p, std::shared_ptr<Own> own, CommandFn run) {
  return MakeCommand(app, std::move(p), std::function<nlohmann::json()>([own] { return nlohmann::json(*own); }),
                     std::move(run));
}

// The commands (cmd_*.cc): each adds its subcommand to the root and returns how to run it.
using AddCommandFn = Command(CLI::App& root);
AddCommandFn AddInfoCommand, AddTokenizeCommand, AddRunCommand, AddMakeRandomCommand, AddConvertCommand, AddBenchCommand,
    AddGenerateCommand, AddChatCommand, AddRouterCommand, AddEvalCommand, AddServeCommand, AddLoadtestCommand,
    AddUiCommand;

// The paths on a command line, before any work: no path option is empty, a file output is not a
// folder and its folder exists, no output is the same file as an input (given or the demo
// default: it would be replaced; `router calibrate -o` may name its --router), two output folders
// are not one. MakeCommand runs it after Resolve.
Status CheckPathArgs(const CLI::App* app, const std::string& command, const Params& p);

// The summary `tlr generate` prints after a generation (and `tlr chat` on /stats).
std::string FormatDecodeSummary(const DecodeStats& st);

// Prints "tlr <cmd>: error: <message>" to stderr and returns the exit code for errors (1).
int ReportError(const std::string& command, const std::string& message);

// The text of a file argument; "-": standard input.
Expected<std::string> ReadTextArg(const std::string& path);
// The prompt of -p TEXT or -f FILE (the file's text when given).
Expected<std::string> PromptText(const std::string& text, const std::string& file);

// Why `text` is not JSON, with where ("parse error at line 3, column 7: ..."), for messages.
std::string JsonErrorIn(const std::string& text);

// A check for an unsigned 64-bit option (a seed, a count): CLI11 takes a number past 64 bits
// as the largest one without a word; this refuses it. A negative number passes, to be refused
// where the option's own check or type says so.
const CLI::Validator& WholeNumberU64();

// A size flag: "512M", "4G", "1048576" -> bytes (K, M, G binary). False when malformed or <= 0.
bool ParseBytes(const std::string& s, uint64_t* out);

// A warning on stderr when a generation may reach past the context the model was trained on
// (`tokens`: the prompt and the most new tokens; `trained`: its context_length), as llama.cpp
// warns: the output past it is unreliable.
void WarnPastTrainedContext(int64_t tokens, int64_t trained, const std::string& model_path);


// For the commands that serve until stopped (serve, ui): SIGINT and SIGTERM ask to stop and
// SIGPIPE is ignored (a client that hangs up must not end the server). Install before saying
// "listening", so a signal sent right after that line is never lost; then wait.
void InstallStopSignals();
// Waits for SIGINT/SIGTERM, says "tlr <cmd>: stopping" and calls `stop`; returns 0.
int ServeUntilStopSignal(const std::string& cmd, const std::function<void()>& stop);

}  // namespace tlr::cli

// Returns the error exit code from the enclosing command when `expr` (a Status) failed.
#define TLR_CLI_CHECK(cmd, expr)                                               \
  do {                                                                          \
    ::tlr::Status tlr_cli_status_ = (expr);                                     \
    if (!tlr_cli_status_.ok()) return ::tlr::cli::ReportError(cmd, tlr_cli_status_.message()); \
  } while (0)
