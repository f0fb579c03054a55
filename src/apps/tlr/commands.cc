// Helpers the `tlr` subcommands share (apps layer). See commands.h.
#include "apps/tlr/commands.h"

#include <unistd.h>

#include <csignal>

namespace tlr::cli {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnStopSignal(int) { g_stop = 1; }

}  // namespace

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

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void InstallStopSignals() {
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGPIPE, SIG_IGN);
}

void WaitForStopSignal() {
  while (!g_stop) ::usleep(100 * 1000);
}

}  // namespace tlr::cli
