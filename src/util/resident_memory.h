// This process's resident memory, split the way a mobile OS weighs it (util layer): pages backed
// by a file (clean: the OS can drop them and read them again, as model weights in a file
// mapping) and anonymous pages (dirty: heap, copies, caches; what gets an app killed). From
// /proc/self/status on Linux and Android; elsewhere an error.
#pragma once

#include <cstdint>
#include <string>

#include "util/status.h"

namespace tlr {

struct ResidentMemory {
  uint64_t total = 0;      // VmRSS
  uint64_t anonymous = 0;  // RssAnon
  uint64_t file = 0;       // RssFile
  uint64_t shmem = 0;      // RssShmem
  uint64_t peak = 0;       // VmHWM: the most resident so far
  // "510 MiB resident (file-backed 21 MiB, anonymous 489 MiB), peak 598 MiB"
  std::string Describe() const;
};

Expected<ResidentMemory> ReadResidentMemory();

}  // namespace tlr
