// A progress display for long commands (apps layer): one line on stderr, redrawn in place on
// a terminal with a bar and ETA; when stderr is not a terminal, a line at each stage change
// and every 10% (so logs stay readable).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace tlr::cli {

class Progress {
 public:
  Progress() : tty_(isatty(STDERR_FILENO)), t0_(std::chrono::steady_clock::now()) {}
  void Update(const std::string& stage, int64_t done, int64_t total) {
    if (stage != stage_) {
      if (tty_ && !stage_.empty()) std::fputc('\n', stderr);
      stage_ = stage;
      st_ = std::chrono::steady_clock::now();
      last_pct_ = -1;
    }
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - st_).count();
    const int pct = total > 0 ? static_cast<int>(100 * done / total) : 100;
    const double eta = done > 0 && total > done ? el * (total - done) / done : 0;
    if (tty_) {
      const int w = 30, fill = total > 0 ? static_cast<int>(w * done / total) : w;
      std::fprintf(stderr, "\r%-9s [%.*s%*s] %lld/%lld  ETA %.0fs  %s", stage.c_str(), fill,
                   "##############################", w - fill, "", static_cast<long long>(done),
                   static_cast<long long>(total), eta, extra_.c_str());
    } else if (pct / 10 != last_pct_ / 10 || done == total) {
      std::fprintf(stderr, "%s %lld/%lld (%d%%) %s\n", stage.c_str(), static_cast<long long>(done),
                   static_cast<long long>(total), pct, extra_.c_str());
    }
    last_pct_ = pct;
    std::fflush(stderr);
  }
  void SetExtra(std::string s) { extra_ = std::move(s); }
  void Done() {
    if (tty_ && !stage_.empty()) std::fputc('\n', stderr);
  }
  double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  bool tty_;
  std::chrono::steady_clock::time_point t0_, st_;
  std::string stage_, extra_;
  int last_pct_ = -1;
};

}  // namespace tlr::cli
