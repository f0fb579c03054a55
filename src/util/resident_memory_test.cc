// This process's resident memory (util layer, label unit): touching 64 MiB of heap grows the
// anonymous part, reading 32 MiB of a mapped file grows the file-backed part.
#include "util/resident_memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <memory>

#include "util/mapped_file.h"
#include "util/temp_dir.h"

namespace tlr {
namespace {

TEST(ResidentMemory, SplitsAnonymousFromFileBacked) {
  auto before = ReadResidentMemory();
  ASSERT_TRUE(before.ok()) << before.status().message();
  EXPECT_GT(before->total, 0u);
  EXPECT_GE(before->peak, before->total);
  EXPECT_NE(before->Describe().find("MiB resident (file-backed"), std::string::npos);

  constexpr size_t kHeap = size_t{64} << 20;
  std::unique_ptr<char[]> heap(new char[kHeap]);
  std::memset(heap.get(), 1, kHeap);
  auto anon = ReadResidentMemory();
  ASSERT_TRUE(anon.ok());
  EXPECT_GE(anon->anonymous, before->anonymous + kHeap * 9 / 10);

  TempDir dir;
  constexpr size_t kFile = size_t{32} << 20;
  {
    std::ofstream out(dir.File("f.bin"), std::ios::binary);
    std::string block(1 << 20, 'x');
    for (size_t i = 0; i < kFile >> 20; ++i) out << block;
  }
  auto f = MappedFile::Open(dir.File("f.bin"));
  ASSERT_TRUE(f.ok()) << f.status().message();
  volatile uint64_t sum = 0;
  for (size_t i = 0; i < kFile; i += 4096) sum = sum + f->bytes()[i];
  auto file = ReadResidentMemory();
  ASSERT_TRUE(file.ok());
  EXPECT_GE(file->file, anon->file + kFile * 9 / 10);
  EXPECT_LT(file->anonymous, anon->anonymous + (kFile / 4));  // reading a mapping allocates nothing
  (void)sum;
}

}  // namespace
}  // namespace tlr
