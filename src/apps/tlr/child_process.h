// A `tlr` command (serve, ui) as a child process for tests (apps layer, tests only): Start runs
// it and waits for its "listening on URL" line; Exited tells whether it died (and how).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace tlr {

class ChildProcess {
 public:
  ~ChildProcess() { Kill(); }
  // Runs `binary args...`; true once it printed "listening on URL" (within 20 s).
  bool Start(const std::string& binary, const std::vector<std::string>& args, std::string* url) {
    int fds[2];
    if (pipe(fds) != 0) return false;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> argv{const_cast<char*>(binary.c_str())};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    close(fds[1]);
    std::string out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd pfd{fds[0], POLLIN, 0};
      if (poll(&pfd, 1, 100) <= 0) continue;
      char buf[512];
      const ssize_t n = read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      const size_t at = out.find("listening on ");
      const size_t end = at == std::string::npos ? at : out.find('\n', at);
      if (end != std::string::npos) {
        *url = out.substr(at + 13, end - at - 13);
        close(fds[0]);
        return true;
      }
    }
    close(fds[0]);
    return false;
  }
  // Whether the process has ended; *status gets its wait status.
  bool Exited(int* status) {
    if (pid_ <= 0) return true;
    if (waitpid(pid_, status, WNOHANG) != pid_) return false;
    pid_ = -1;
    return true;
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace tlr
