// MappedFile (util layer): memory files (AddMemoryFile, what the browser build loads models
// from) open like files, keep their bytes while a mapping holds them, and are gone once removed;
// files on disk map as before.
#include "util/mapped_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "util/temp_dir.h"

namespace tlr {
namespace {

TEST(MemoryFile, OpensLikeAFileAndOutlivesItsRemoval) {
  const std::string text = "GGUF and then some bytes";
  uint8_t* bytes = AllocateMemoryFile(text.size());
  ASSERT_NE(bytes, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(bytes) % 64, 0u);
  std::memcpy(bytes, text.data(), text.size());
  AddMemoryFile("/models/1/slm.gguf", bytes, text.size());
  auto a = MappedFile::Open("/models/1/slm.gguf");
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(a->bytes().data()), a->size()), text);
  RemoveMemoryFile("/models/1/slm.gguf");
  EXPECT_FALSE(MappedFile::Open("/models/1/slm.gguf").ok());  // gone (no such file on disk either)
  MappedFile moved = std::move(a).value();                     // the bytes live on with the mapping
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(moved.bytes().data()), moved.size()), text);
}

TEST(MemoryFile, ShadowsNothingElse) {
  TempDir dir;
  const std::string path = dir.File("f.bin");
  std::ofstream(path, std::ios::binary) << "on disk";
  AddMemoryFile(dir.File("other.bin"), AllocateMemoryFile(1), 1);
  auto f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f->bytes().data()), f->size()), "on disk");
  RemoveMemoryFile(dir.File("other.bin"));
}

// A named pipe given as a model path is refused at once (opening one waits for a writer).
TEST(MappedFileOpen, RefusesAFifoWithoutWaiting) {
  TempDir dir;
  const std::string path = dir.File("model.gguf");
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  auto f = MappedFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("is not a regular file"), std::string::npos) << f.status().message();
}

// A pipe gives its bytes in pieces of any size: they come back whole and in order, past the
// 1 MiB chunks they are read into (and a regular file as it is).
TEST(ReadFileToString, StreamsOfAnySizeComeBackWhole) {
  TempDir dir;
  std::string want((size_t{5} << 19) + 17, '\0');  // 2.5 MiB and a bit
  for (size_t i = 0; i < want.size(); ++i) want[i] = static_cast<char>((i * 131 + i / 7) & 0xff);
  for (const size_t size : {size_t{0}, size_t{1}, size_t{1} << 20, want.size()}) {
    const std::string path = dir.File("fifo" + std::to_string(size));
    ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
    std::thread writer([&] {
      const int fd = ::open(path.c_str(), O_WRONLY);
      size_t at = 0, piece = 1;
      while (fd >= 0 && at < size) {
        const size_t n = std::min(piece, size - at);
        const ssize_t w = ::write(fd, want.data() + at, n);
        if (w <= 0) break;
        at += static_cast<size_t>(w);
        piece = piece * 3 + 1;  // 1, 4, 13, ... bytes: pieces that straddle the chunks
      }
      if (fd >= 0) ::close(fd);
    });
    auto got = ReadFileToString(path);
    writer.join();
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got->size(), size);
    EXPECT_TRUE(*got == want.substr(0, size)) << "size " << size;
  }
  const std::string file = dir.File("plain.bin");
  std::ofstream(file, std::ios::binary) << want;
  auto plain = ReadFileToString(file);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(*plain == want);
}

}  // namespace
}  // namespace tlr
