// MappedFile: a read-only memory map of a whole file (util layer).
//
// Model weights are used straight from the map (no copies at load). The object owns the
// mapping and unmaps on destruction; it is movable, not copyable. Reading the bytes is
// thread-safe; the object itself is not synchronised.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "util/status.h"

namespace tlr {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps `path` read-only. An empty file maps to an empty span. With `huge`, the mapping starts
  // on a 2 MiB boundary and is advised for huge pages (file offsets that are multiples of 2 MiB
  // then sit on 2 MiB boundaries in memory, where the kernel can map large page-cache folios
  // with one TLB entry).
  static Expected<MappedFile> Open(const std::string& path, bool huge = false);

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  size_t size() const { return size_; }
  // Drops this process's resident pages of the mapping (MADV_DONTNEED): they stop counting in
  // its resident set and come back from the file (the page cache, usually) when read again.
  // The contents never change. A no-op for an empty file or where the call is unavailable.
  void ReleaseResident() const;
  // The same for the whole pages within [offset, offset + length).
  void ReleaseResident(size_t offset, size_t length) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::shared_ptr<const uint8_t> memory_;  // a memory file's bytes (AddMemoryFile)
};

// Bytes already in memory that MappedFile::Open serves under `name` as if they were a file: the
// browser build has no file system, and a download goes straight into WebAssembly memory. Takes
// the bytes (from AllocateMemoryFile); an open MappedFile keeps them alive after RemoveMemoryFile.
uint8_t* AllocateMemoryFile(size_t size);  // 64-byte aligned; null when out of memory
void AddMemoryFile(const std::string& name, uint8_t* bytes, size_t size);
void RemoveMemoryFile(const std::string& name);

// Reads a whole (small) file into a string, e.g. a tokenizer.json. A pipe or device (/dev/stdin)
// is read up to 1 GiB; a folder is an error.
Expected<std::string> ReadFileToString(const std::string& path);
// Standard input, whole, up to the same 1 GiB.
Expected<std::string> ReadStdin();

// Writes a file atomically in pieces: bytes go to a temporary file beside `path`, and only
// Commit (fsync + rename) makes it appear under its name. Destroyed without Commit, the
// temporary file is removed. A symbolic link to a file stays: the file it points to is replaced.
// A device or pipe (/dev/null, a FIFO) is written in place (it cannot be replaced), and
// /dev/stdout, /dev/stderr and /dev/fd/N write to this process's descriptor (whatever it was
// redirected to: a file there is appended to, not replaced); a folder is an error. Not thread-safe.
class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  Status Open(const std::string& path);
  Status Write(std::span<const uint8_t> bytes);
  // n zero bytes, as a hole where the file system makes one (no disk blocks).
  Status Skip(uint64_t n);
  Status Commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  bool direct_ = false;  // writing a device or pipe in place
};

// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename. A crash
// half-way never leaves a truncated file under the final name.
Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace tlr
