// Memory-mapped files and small whole-file I/O helpers (util layer).
#include "util/mapped_file.h"

#include <algorithm>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <new>
#include <sstream>
#include <vector>

namespace tlr {
namespace {
std::string ErrnoText() { return std::strerror(errno); }

// Memory files (AddMemoryFile): the browser build has no file system, so its models open from
// here (MappedFile::Open looks here first).
struct MemoryFiles {
  std::mutex mu;
  std::map<std::string, std::pair<std::shared_ptr<const uint8_t>, size_t>> files;
};
MemoryFiles& Memory() {
  static MemoryFiles* m = new MemoryFiles();
  return *m;
}
}  // namespace

uint8_t* AllocateMemoryFile(size_t size) {
  return static_cast<uint8_t*>(::operator new[](std::max<size_t>(size, 1), std::align_val_t(64), std::nothrow));
}

void AddMemoryFile(const std::string& name, uint8_t* bytes, size_t size) {
  std::shared_ptr<const uint8_t> p(bytes, [](const uint8_t* b) { ::operator delete[](const_cast<uint8_t*>(b), std::align_val_t(64)); });
  std::lock_guard<std::mutex> l(Memory().mu);
  Memory().files[name] = {std::move(p), size};
}

void RemoveMemoryFile(const std::string& name) {
  std::lock_guard<std::mutex> l(Memory().mu);
  Memory().files.erase(name);
}

MappedFile::~MappedFile() {
  if (mapped_) munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(other.data_), size_(other.size_), mapped_(other.mapped_), memory_(std::move(other.memory_)) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.mapped_ = false;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (mapped_) munmap(const_cast<uint8_t*>(data_), size_);
    data_ = other.data_;
    size_ = other.size_;
    mapped_ = other.mapped_;
    memory_ = std::move(other.memory_);
    other.data_ = nullptr;
    other.size_ = 0;
    other.mapped_ = false;
  }
  return *this;
}

Expected<MappedFile> MappedFile::Open(const std::string& path, bool huge) {
  {
    std::lock_guard<std::mutex> l(Memory().mu);
    auto it = Memory().files.find(path);
    if (it != Memory().files.end()) {
      MappedFile f;
      f.memory_ = it->second.first;
      f.data_ = f.memory_.get();
      f.size_ = it->second.second;
      return f;
    }
  }
  // O_NONBLOCK: opening a FIFO (a named pipe given as a model path) would otherwise wait for a
  // writer forever; it is refused below as not a regular file (for one, the flag changes nothing).
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::Error("cannot open '" + path + "': " + ErrnoText());
  struct stat st;
  if (fstat(fd, &st) != 0) {
    std::string e = ErrnoText();
    ::close(fd);
    return Status::Error("cannot stat '" + path + "': " + e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::Error("'" + path + "' is not a regular file");
  }
  MappedFile f;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0) {
    void* want = nullptr;
    constexpr size_t kHuge = size_t{2} << 20;
    if (huge) {  // a 2 MiB-aligned address: reserve more, keep the aligned part
      void* r = mmap(nullptr, f.size_ + kHuge, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (r != MAP_FAILED) {
        const uintptr_t base = reinterpret_cast<uintptr_t>(r);
        const uintptr_t aligned = (base + kHuge - 1) / kHuge * kHuge;
        if (aligned > base) munmap(r, aligned - base);
        const uintptr_t end = base + f.size_ + kHuge, used = aligned + f.size_;
        const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
        const uintptr_t used_end = (used + page - 1) / page * page;
        if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
        want = reinterpret_cast<void*>(aligned);
      }
    }
    void* p = mmap(want, f.size_, PROT_READ, MAP_PRIVATE | (want ? MAP_FIXED : 0), fd, 0);
#ifdef MADV_HUGEPAGE
    if (huge && p != MAP_FAILED) madvise(p, f.size_, MADV_HUGEPAGE);
#endif
    if (p == MAP_FAILED) {
      std::string e = ErrnoText();
      ::close(fd);
      return Status::Error("cannot mmap '" + path + "': " + e);
    }
    f.data_ = static_cast<const uint8_t*>(p);
    f.mapped_ = true;
  }
  ::close(fd);
  return f;
}

void MappedFile::ReleaseResident() const {
  if (mapped_ && size_ > 0) madvise(const_cast<uint8_t*>(data_), size_, MADV_DONTNEED);
}

void MappedFile::ReleaseResident(size_t offset, size_t length) const {
  if (!mapped_ || offset >= size_) return;
  length = std::min(length, size_ - offset);
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t from = reinterpret_cast<uintptr_t>(data_) + offset;
  const uintptr_t lo = (from + page - 1) / page * page, hi = (from + length) / page * page;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

namespace {

constexpr size_t kMaxStream = size_t{1} << 30;  // what a pipe or device may give

// Reads fd (closed after) whole: a regular file as it is, a pipe or device up to kMaxStream.
Expected<std::string> ReadAll(int fd, const std::string& path, bool close_after) {
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const std::string e = ErrnoText();
    if (close_after) ::close(fd);
    return Status::Error("cannot read '" + path + "': " + e);
  }
  if (S_ISDIR(st.st_mode)) {
    if (close_after) ::close(fd);
    return Status::Error("'" + path + "' is a folder, not a file");
  }
  // read(2) into p, up to n bytes, again after a signal; the error closes fd and names path.
  auto read_some = [&](char* p, size_t n) -> Expected<size_t> {
    for (;;) {
      const ssize_t got = ::read(fd, p, n);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno == EINTR) continue;
      const std::string e = ErrnoText();
      if (close_after) ::close(fd);
      return Status::Error("error reading '" + path + "': " + e);
    }
  };
  std::string out;
  if (S_ISREG(st.st_mode)) {
    out.reserve(static_cast<size_t>(st.st_size));
    std::vector<char> buf(size_t{1} << 16);
    for (;;) {
      TLR_ASSIGN_OR_RETURN(const size_t n, read_some(buf.data(), buf.size()));
      if (n == 0) break;
      out.append(buf.data(), n);
    }
  } else {
    // A stream of unknown size: chunks of 1 MiB read straight into, joined at the end. A string
    // grown as the bytes came touched each byte about three times (an endless device took ~7 s
    // to be refused, ~2.5 s now).
    constexpr size_t kChunk = size_t{1} << 20;
    std::vector<std::unique_ptr<char[]>> chunks;
    size_t total = 0, in_last = kChunk;
    for (;;) {
      if (in_last == kChunk) {
        chunks.emplace_back(new char[kChunk]);
        in_last = 0;
      }
      TLR_ASSIGN_OR_RETURN(const size_t n, read_some(chunks.back().get() + in_last, kChunk - in_last));
      if (n == 0) break;
      in_last += n;
      total += n;
      if (total > kMaxStream) {
        if (close_after) ::close(fd);
        return Status::Error("'" + path + "' is not a file and gives more than 1 GiB (a device such as /dev/zero?)");
      }
    }
    out.reserve(total);
    for (size_t i = 0; i < chunks.size(); ++i) out.append(chunks[i].get(), i + 1 == chunks.size() ? in_last : kChunk);
  }
  if (close_after) ::close(fd);
  return out;
}

// The descriptor /dev/stdout, /dev/stderr, /dev/fd/N or /proc/self/fd/N names in this process,
// else -1.
int OwnDescriptor(const std::string& path) {
  if (path == "/dev/stdout") return 1;
  if (path == "/dev/stderr") return 2;
  for (const char* prefix : {"/dev/fd/", "/proc/self/fd/"}) {
    const std::string pre = prefix;
    if (path.size() > pre.size() && path.compare(0, pre.size(), pre) == 0) {
      char* end = nullptr;
      const long n = std::strtol(path.c_str() + pre.size(), &end, 10);
      if (*end == '\0' && n >= 0 && n < (1 << 20)) return static_cast<int>(n);
    }
  }
  return -1;
}

}  // namespace

Expected<std::string> ReadStdin() { return ReadAll(0, "standard input", /*close_after=*/false); }

Expected<std::string> ReadFileToString(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error("cannot open '" + path + "': " + ErrnoText());
  return ReadAll(fd, path, /*close_after=*/true);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    if (!direct_) ::unlink(tmp_.c_str());
  }
}

Status AtomicFileWriter::Open(const std::string& path) {
  path_ = path;
  direct_ = false;
  if (const int own = OwnDescriptor(path); own >= 0) {
    // This process's own output: written where it goes (reopening /proc/self/fd/1 would
    // replace or overwrite a file it was redirected to).
    fd_ = ::fcntl(own, F_DUPFD_CLOEXEC, 0);
    if (fd_ < 0) return Status::Error("cannot write '" + path + "': " + ErrnoText());
    direct_ = true;
    return Status::Ok();
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // A symbolic link: what it points to is replaced (atomically), and the link stays.
    if (char* real = ::realpath(path.c_str(), nullptr)) {
      path_ = real;
      std::free(real);
    }
  }
  if (::stat(path_.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::Error("cannot write '" + path + "': it is a folder");
    if (!S_ISREG(st.st_mode)) {
      // A device or a pipe (/dev/null, /dev/stdout, a FIFO) cannot be replaced: written in place.
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd_ < 0) return Status::Error("cannot write '" + path + "': " + ErrnoText());
      direct_ = true;
      return Status::Ok();
    }
  }
  tmp_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::Error("cannot write '" + path + "': " + ErrnoText() + " (creating '" + tmp_ + "')");
  return Status::Ok();
}

Status AtomicFileWriter::Write(std::span<const uint8_t> bytes) {
  if (fd_ < 0) return Status::Error("write to a file that is not open");
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Error("cannot write '" + path_ + "': " + ErrnoText());
    }
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status AtomicFileWriter::Skip(uint64_t n) {
  if (fd_ < 0) return Status::Error("write to a file that is not open");
  if (direct_) {  // no holes in a pipe
    const std::vector<uint8_t> zeros(size_t{1} << 16, 0);
    while (n > 0) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(n, zeros.size()));
      TLR_RETURN_IF_ERROR(Write(std::span<const uint8_t>(zeros.data(), k)));
      n -= k;
    }
    return Status::Ok();
  }
  const off_t at = ::lseek(fd_, static_cast<off_t>(n), SEEK_CUR);
  if (at < 0 || ::ftruncate(fd_, at) != 0) return Status::Error("cannot extend '" + path_ + "': " + ErrnoText());
  return Status::Ok();
}

Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return Status::Error("commit of a file that is not open");
  if (direct_) {
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return Status::Error("cannot write '" + path_ + "': " + ErrnoText());
    return Status::Ok();
  }
  if (::fsync(fd_) != 0 || ::close(fd_) != 0) {
    fd_ = -1;
    std::string e = ErrnoText();
    ::unlink(tmp_.c_str());
    return Status::Error("cannot write '" + path_ + "': " + e);
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    std::string e = ErrnoText();
    ::unlink(tmp_.c_str());
    return Status::Error("cannot write '" + path_ + "': " + e + " (renaming '" + tmp_ + "' to it)");
  }
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> bytes) {
  AtomicFileWriter w;
  TLR_RETURN_IF_ERROR(w.Open(path));
  TLR_RETURN_IF_ERROR(w.Write(bytes));
  return w.Commit();
}

}  // namespace tlr
