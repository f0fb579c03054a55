// Subcommands of the `tlr` binary (apps layer). Each Add*Command registers its options on
// the CLI11 app and returns the function that runs it; main() runs the one the user chose.
// Commands print to stdout/stderr and return an exit code; only main() exits.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace tlr::cli {

using RunFn = std::function<int()>;

struct Command {
  CLI::App* app;
  RunFn run;
};

Command AddInfoCommand(CLI::App& root);
Command AddTokenizeCommand(CLI::App& root);

// Prints "tlr <cmd>: error: <message>" to stderr and returns the exit code for errors (1).
int ReportError(const std::string& command, const std::string& message);

}  // namespace tlr::cli
