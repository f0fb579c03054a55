// This process's resident memory (see resident_memory.h).
#include "util/resident_memory.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tlr {

std::string ResidentMemory::Describe() const {
  char b[160];
  std::snprintf(b, sizeof b, "%.0f MiB resident (file-backed %.0f MiB, anonymous %.0f MiB), peak %.0f MiB",
                total / 1048576.0, file / 1048576.0, anonymous / 1048576.0, peak / 1048576.0);
  return b;
}

Expected<ResidentMemory> ReadResidentMemory() {
#ifdef __EMSCRIPTEN__
  return Status::Error("resident memory: not known in the browser");  // no /proc (no file system at all)
#endif
  std::ifstream in("/proc/self/status");
  if (!in) return Status::Error("resident memory: /proc/self/status is not readable here");
  ResidentMemory m;
  int found = 0;
  std::string line;
  while (std::getline(in, line)) {
    uint64_t* field = nullptr;
    if (line.rfind("VmRSS:", 0) == 0) field = &m.total;
    else if (line.rfind("RssAnon:", 0) == 0) field = &m.anonymous;
    else if (line.rfind("RssFile:", 0) == 0) field = &m.file;
    else if (line.rfind("RssShmem:", 0) == 0) field = &m.shmem;
    else if (line.rfind("VmHWM:", 0) == 0) field = &m.peak;
    if (!field) continue;
    std::istringstream v(line.substr(line.find(':') + 1));
    uint64_t kib = 0;
    if (v >> kib) {
      *field = kib * 1024;
      ++found;
    }
  }
  if (found < 5) return Status::Error("resident memory: /proc/self/status lacks VmRSS, RssAnon, RssFile, RssShmem or VmHWM");
  return m;
}

}  // namespace tlr
