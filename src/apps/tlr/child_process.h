// A `tlr` command (serve, ui) or another server (haproxy) as a child process for tests (apps
// layer, tests only): Start runs it and waits for its "listening on URL" line, Spawn only runs
// it; Exited tells whether it died (and how).
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

namespace tlr {

// An executable found on PATH or in the usual sbin directories (ctest's PATH may lack them);
// empty when there is none.
inline std::string FindTool(const std::string& name) {
  std::string dirs = std::getenv("PATH") ? std::getenv("PATH") : "";
  dirs += ":/usr/sbin:/sbin:/usr/bin:/bin";
  for (size_t at = 0; at <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', at), dirs.size());
    const std::string path = dirs.substr(at, end - at) + "/" + name;
    if (end > at && access(path.c_str(), X_OK) == 0) return path;
    at = end + 1;
  }
  return "";
}

class ChildProcess {
 public:
  ~ChildProcess() { Kill(); }
  // Runs `binary args...`; true once it printed "listening on URL" (within 20 s).
  bool Start(const std::string& binary, const std::vector<std::string>& args, std::string* url) {
    int fds[2];
    if (pipe(fds) != 0) return false;
    Exec(binary, args, fds);
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
  // Runs `binary args...` (its output goes to this process's) without waiting for anything.
  bool Spawn(const std::string& binary, const std::vector<std::string>& args) {
    Exec(binary, args, nullptr);
    return pid_ > 0;
  }
  // Whether the process has ended; *status gets its wait status.
  bool Exited(int* status) {
    if (pid_ <= 0) return true;
    if (waitpid(pid_, status, WNOHANG) != pid_) return false;
    pid_ = -1;
    return true;
  }
  pid_t pid() const { return pid_; }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  // Forks and execs; with `fds` (a pipe), the child's stdout goes to fds[1] and the parent
  // keeps fds[0].
  void Exec(const std::string& binary, const std::vector<std::string>& args, int* fds) {
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test that died (no orphaned servers)
      if (fds) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
      }
      std::vector<char*> argv{const_cast<char*>(binary.c_str())};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
    if (fds) close(fds[1]);
  }

  pid_t pid_ = -1;
};

}  // namespace tlr
