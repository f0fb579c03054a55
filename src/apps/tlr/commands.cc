// Helpers the `tlr` subcommands share (apps layer). See commands.h.
#include "apps/tlr/commands.h"

#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <iterator>

#include "apps/tlr/options.h"
#include "util/mapped_file.h"

namespace tlr::cli {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnStopSignal(int) { g_stop = 1; }

}  // namespace

Command MakeCommand(CLI::App* app, std::shared_ptr<Params> p, std::function<nlohmann::json()> own, CommandFn run) {
  return {app, [app, p, own, run]() -> int {
            const CLI::App* parent = app->get_parent();
            const std::string name =
                parent && parent->get_parent() ? parent->get_name() + " " + app->get_name() : app->get_name();
            Status st = Resolve(app, p.get());
            if (!st.ok()) return ReportError(name, st.message());
            if (p->print_params) {
              nlohmann::json j = ToJson(*p);
              j["command"] = name;
              j["own"] = own ? own() : nlohmann::json::object();
              std::printf("%s\n", j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
              return 0;
            }
            return run(name);
          }};
}

Expected<std::string> ReadTextArg(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  return ReadFileToString(path);
}

Expected<std::string> PromptText(const std::string& text, const std::string& file) {
  if (file.empty()) return text;
  return ReadTextArg(file);
}

bool ParseBytes(const std::string& s, uint64_t* out) {
  if (s.empty()) return false;
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    return false;
  }
  if (v <= 0) return false;
  std::string unit = s.substr(pos);
  double mul = 1;
  if (unit == "" || unit == "B") mul = 1;
  else if (unit == "K" || unit == "KiB" || unit == "k") mul = 1024.0;
  else if (unit == "M" || unit == "MiB") mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") mul = 1024.0 * 1024 * 1024;
  else return false;
  *out = static_cast<uint64_t>(v * mul);
  return true;
}

void InstallStopSignals() {
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGPIPE, SIG_IGN);
}

int ServeUntilStopSignal(const std::string& cmd, const std::function<void()>& stop) {
  std::fflush(stdout);
  while (!g_stop) ::usleep(100 * 1000);
  std::fprintf(stderr, "tlr %s: stopping\n", cmd.c_str());
  stop();
  return 0;
}

}  // namespace tlr::cli
