// Helpers the `tlr` subcommands share (apps layer). See commands.h.
#include "apps/tlr/commands.h"

#include <unistd.h>

#include <csignal>

namespace tlr::cli {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnStopSignal(int) { g_stop = 1; }

}  // namespace

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
