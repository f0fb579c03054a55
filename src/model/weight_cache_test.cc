// The weight cache (model layer, label model): a model loaded from its cache gives logits
// bit-identical to one repacked at load and to one with the cache off; a cache that is
// truncated, bit-flipped, another model's or another layout version's is never used: it is
// rebuilt, the load says why, and the logits stay the same; a cache that cannot be written
// leaves the model loading as before.
#include "model/weight_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/load_check.h"
#include "model/model.h"
#include "util/temp_dir.h"
#include "util/test_support.h"

namespace tlr {
namespace {

namespace fs = std::filesystem;



class WeightCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.File("llm.gguf");
    fs::copy_file(kDemo + "llm.gguf", model_);
    fs::copy_file(kDemo + "slm.gguf", dir_.File("slm.gguf"));
    Model::Options off;
    off.weight_cache = "off";
    auto m = Model::Load(model_, off);
    ASSERT_TRUE(m.ok()) << m.status().message();
    want_ = PromptLogits(**m);
    EXPECT_FALSE(fs::exists(model_ + ".tlrw"));
  }
  // Loads with the cache on; the logits must be the reference ones. Returns the load notes.
  std::string LoadAndCheck() {
    auto m = Model::Load(model_);
    EXPECT_TRUE(m.ok()) << m.status().message();
    if (!m.ok()) return "";
    EXPECT_EQ(PromptLogits(**m), want_);
    return LoadNotes(**m);
  }
  void Damage(uint64_t at, uint8_t x) {
    std::fstream f(model_ + ".tlrw", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c;
    f.read(&c, 1);
    c = static_cast<char>(c ^ x);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
  }
  TempDir dir_;
  std::string model_;
  std::vector<float> want_;
};

TEST_F(WeightCacheTest, UsedWhenWholeRebuiltOtherwise) {
  EXPECT_NE(LoadAndCheck().find("wrote the weight cache"), std::string::npos);
  const std::string cache = model_ + ".tlrw";
  ASSERT_TRUE(fs::exists(cache));
  const uint64_t size = fs::file_size(cache);
  EXPECT_NE(LoadAndCheck().find("from the weight cache"), std::string::npos);

  fs::resize_file(cache, size / 2);  // truncated
  std::string notes = LoadAndCheck();
  EXPECT_NE(notes.find("outside the file"), std::string::npos) << notes;
  EXPECT_NE(notes.find("rebuilt"), std::string::npos) << notes;
  EXPECT_EQ(fs::file_size(cache), size);
  EXPECT_NE(LoadAndCheck().find("from the weight cache"), std::string::npos);

  Damage(size - 1, 0x10);  // one bit of the last matrix (the file ends where it does)
  notes = LoadAndCheck();
  EXPECT_NE(notes.find("damaged (a checksum differs)"), std::string::npos) << notes;

  Damage(32, 0x01);  // the layout version
  notes = LoadAndCheck();
  EXPECT_NE(notes.find("another TLR version"), std::string::npos) << notes;

  Damage(0, 0xff);  // the magic
  notes = LoadAndCheck();
  EXPECT_NE(notes.find("not a weight cache"), std::string::npos) << notes;

  // Another model's cache under this model's name.
  ASSERT_TRUE(Model::Load(dir_.File("slm.gguf")).ok());
  fs::copy_file(dir_.File("slm.gguf.tlrw"), cache, fs::copy_options::overwrite_existing);
  notes = LoadAndCheck();
  EXPECT_NE(notes.find("made for another model"), std::string::npos) << notes;

  // The model file changed (its modification time): rebuilt.
  fs::last_write_time(model_, fs::last_write_time(model_) + std::chrono::seconds(5));
  notes = LoadAndCheck();
  EXPECT_NE(notes.find("the model file changed"), std::string::npos) << notes;
  EXPECT_NE(LoadAndCheck().find("from the weight cache"), std::string::npos);
}

TEST_F(WeightCacheTest, UnwritableCacheLeavesTheLoadAsBefore) {
  Model::Options o;
  o.weight_cache = "/proc/no-such-dir";
  auto m = Model::Load(model_, o);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(PromptLogits(**m), want_);
  EXPECT_NE(LoadNotes(**m).find("weight cache not kept"), std::string::npos) << LoadNotes(**m);
}

// Two copies of one model sharing a cache folder each keep their own cache (before, each load
// of one rebuilt the other's: "the model file changed"); "OFF" is off in any case.
TEST_F(WeightCacheTest, CopiesInASharedFolderKeepTheirOwnAndOffIsOffInAnyCase) {
  fs::create_directories(dir_.File("copy"));
  const std::string copy = dir_.File("copy/llm.gguf");
  fs::copy_file(model_, copy);
  fs::last_write_time(copy, fs::last_write_time(model_) + std::chrono::seconds(5));
  Model::Options o;
  o.weight_cache = dir_.File("shared");
  for (int round = 0; round < 2; ++round) {
    for (const std::string& path : {model_, copy}) {
      auto m = Model::Load(path, o);
      ASSERT_TRUE(m.ok()) << m.status().message();
      EXPECT_EQ(PromptLogits(**m), want_);
      const std::string notes = LoadNotes(**m);
      EXPECT_NE(notes.find(round == 0 ? "wrote the weight cache" : "from the weight cache"), std::string::npos)
          << path << ": " << notes;
    }
  }
  int caches = 0;
  for (const auto& e : fs::directory_iterator(dir_.File("shared"))) caches += e.path().extension() == ".tlrw";
  EXPECT_EQ(caches, 2);

  Model::Options upper;
  upper.weight_cache = "OFF";
  auto m = Model::Load(copy, upper);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(LoadNotes(**m).find("weight cache"), std::string::npos) << LoadNotes(**m);  // neither read nor written
  EXPECT_FALSE(fs::exists("OFF"));
}

// Large matrices on 2 MiB boundaries in order, small ones in the gaps (largest first) or after
// the last, every one on a page, none overlapping, and no more file than the pages they need
// plus what the boundaries force.
TEST(WeightCacheLayout, BigOnBoundariesSmallInTheGaps) {
  constexpr uint64_t kMiB = 1 << 20;
  const std::vector<uint64_t> sizes = {3 * kMiB + 5, 100, kMiB / 2, 2 * kMiB, 5000, kMiB + 1, 9 * kMiB, 4096, 1};
  const std::vector<uint64_t> off = WeightCacheLayout(sizes, 12345);
  ASSERT_EQ(off.size(), sizes.size());
  uint64_t prev_big = 0, end = 0, pages = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(off[i] % 4096, 0u) << i;
    EXPECT_GE(off[i], 12345u) << i;
    if (sizes[i] >= 2 * kMiB) {
      EXPECT_EQ(off[i] % (2 * kMiB), 0u) << i;
      EXPECT_GT(off[i], prev_big) << i;
      prev_big = off[i];
    }
    for (size_t j = 0; j < i; ++j) {
      EXPECT_TRUE(off[i] + sizes[i] <= off[j] || off[j] + sizes[j] <= off[i]) << i << " overlaps " << j;
    }
    end = std::max(end, off[i] + sizes[i]);
    pages += (sizes[i] + 4095) / 4096;
  }
  // Every small one fits in the gap before the first boundary: the file ends with the 9 MiB
  // matrix (3 MiB + 5 at 2 MiB, 2 MiB at 6, 9 MiB at 8).
  for (size_t i : {1, 2, 4, 5, 7, 8}) EXPECT_LT(off[i], 2 * kMiB) << i;
  EXPECT_EQ(off[0], 2 * kMiB);
  EXPECT_EQ(off[3], 6 * kMiB);
  EXPECT_EQ(off[6], 8 * kMiB);
  EXPECT_EQ(end, 17 * kMiB);
  // With no gap before the first boundary, small ones follow the last large one.
  const std::vector<uint64_t> tight = WeightCacheLayout({2 * kMiB, kMiB, 2 * kMiB - 4096}, 2 * kMiB - 4096);
  EXPECT_EQ(tight[0], 2 * kMiB);
  EXPECT_EQ(tight[2], 4 * kMiB);  // the larger small one first
  EXPECT_EQ(tight[1], 6 * kMiB - 4096);
  EXPECT_LE(pages * 4096, end);
  EXPECT_TRUE(WeightCacheLayout({}, 10).empty());
}

TEST(WeightChecksum, SeesEveryByte) {
  std::vector<uint8_t> a(1000, 7);
  const uint64_t h = WeightChecksum(a);
  for (size_t i : {0u, 31u, 32u, 500u, 999u}) {
    a[i] ^= 1;
    EXPECT_NE(WeightChecksum(a), h) << i;
    a[i] ^= 1;
  }
  EXPECT_EQ(WeightChecksum(a), h);
}

}  // namespace
}  // namespace tlr
