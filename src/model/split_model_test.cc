// Split models (model layer, label model): a GGUF split into shards as llama.cpp's gguf-split
// writes them (how the large models on Hugging Face are published) opens from its first shard
// as the whole file does: the same tensors in the same order, the same fingerprint and logits,
// a weight cache keyed on every shard, and `tlr convert` packs it into one file. A shard given
// first, a missing or foreign shard, a renamed first shard, a tensor in two shards or a tensor
// count that does not add up is an error naming the file.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "model/gguf/gguf_split_fixture.h"
#include "model/load_check.h"
#include "model/model.h"
#include "model/packed_gguf.h"
#include "model/random_model.h"
#include "util/temp_dir.h"

namespace tlr {
namespace {

namespace fs = std::filesystem;
namespace k = gguf_keys;

std::string ErrorOpening(const std::string& path) {
  auto f = GgufFile::Open(path);
  return f.ok() ? "OK" : f.status().message();
}

void ExpectError(const std::string& path, const std::vector<std::string>& needles) {
  const std::string e = ErrorOpening(path);
  for (const std::string& n : needles) EXPECT_NE(e.find(n), std::string::npos) << "'" << n << "' not in: " << e;
}

class SplitModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("XDG_CACHE_HOME", dir_.File("cache").c_str(), 1);  // no cache goes to the user's directory
    RandomModelOptions o;
    o.preset = "tiny";
    o.arch = "qwen2";
    o.type = "q4_0";  // a type with a panel layout: loads repack, and keep a weight cache
    whole_ = dir_.File("whole.gguf");
    ASSERT_TRUE(WriteRandomModel(o, whole_).ok());
    auto f = GgufFile::Open(whole_);
    ASSERT_TRUE(f.ok());
    auto paths = WriteSplitGguf(*f, dir_.File("model"), 3);
    ASSERT_TRUE(paths.ok()) << paths.status().message();
    shards_ = *paths;
    for (const std::string& p : shards_) fs::copy_file(p, p + ".orig");
  }
  // Writes shard `no` of 3 anew from `edit` (given the whole file); Restore(no) puts it back.
  void RewriteShard(int no, const std::function<void(GgufWriter&, const GgufFile&)>& edit) {
    auto f = GgufFile::Open(whole_);
    ASSERT_TRUE(f.ok());
    GgufWriter w(3);
    edit(w, *f);
    ASSERT_TRUE(w.WriteFile(shards_[no]).ok());
  }
  void Restore(int no) { fs::copy_file(shards_[no] + ".orig", shards_[no], fs::copy_options::overwrite_existing); }

  TempDir dir_{"tlr_split_test"};
  std::string whole_;
  std::vector<std::string> shards_;
};

TEST_F(SplitModelTest, ShardsOpenAsTheWholeFile) {
  auto whole = GgufFile::Open(whole_);
  auto split = GgufFile::Open(shards_[0]);
  ASSERT_TRUE(whole.ok() && split.ok()) << split.status().message();
  EXPECT_TRUE(whole->shard_paths().empty());
  EXPECT_EQ(split->shard_paths(), shards_);
  ASSERT_EQ(split->tensors().size(), whole->tensors().size());
  std::vector<int> per_shard(3);
  uint64_t bytes = 0;
  for (size_t i = 0; i < whole->tensors().size(); ++i) {
    const GgufTensorInfo& a = whole->tensors()[i];
    const GgufTensorInfo& b = split->tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.type, b.type);
    EXPECT_EQ(a.dims, b.dims);
    ASSERT_EQ(a.n_bytes, b.n_bytes);
    EXPECT_EQ(0, std::memcmp(a.data, b.data, a.n_bytes)) << a.name;
    EXPECT_EQ(split->FindTensor(a.name), &b);
    ++per_shard.at(b.shard);
    bytes += b.n_bytes;
  }
  for (int n : per_shard) EXPECT_GT(n, 0);
  EXPECT_GE(split->data_bytes(), bytes);
  // The metadata is the first shard's: the whole file's plus the split keys.
  EXPECT_EQ(split->metadata().size(), whole->metadata().size() + 3);
  EXPECT_EQ(*split->GetString(k::kArchitecture), "qwen2");
}

TEST_F(SplitModelTest, LoadsAndRunsAsTheWholeFile) {
  Model::Options opts;
  opts.weight_cache = dir_.File("wc");
  auto whole = Model::Load(whole_, opts);
  auto split = Model::Load(shards_[0], opts);
  ASSERT_TRUE(whole.ok() && split.ok()) << split.status().message();
  EXPECT_EQ((*split)->fingerprint(), (*whole)->fingerprint());
  EXPECT_EQ(PromptLogits(**split), PromptLogits(**whole));
  EXPECT_NE(LoadNotes(**split).find("wrote the weight cache"), std::string::npos) << LoadNotes(**split);
  split = Model::Load(shards_[0], opts);
  ASSERT_TRUE(split.ok());
  EXPECT_NE(LoadNotes(**split).find("from the weight cache"), std::string::npos) << LoadNotes(**split);
  // The cache's key covers every shard: a later shard rewritten (same bytes, a new time) makes
  // the cache stale.
  const auto t = fs::last_write_time(shards_[2]);
  fs::last_write_time(shards_[2], t + std::chrono::seconds(5));
  split = Model::Load(shards_[0], opts);
  ASSERT_TRUE(split.ok());
  EXPECT_NE(LoadNotes(**split).find("cannot be used"), std::string::npos) << LoadNotes(**split);
  EXPECT_EQ(PromptLogits(**split), PromptLogits(**whole));
}

TEST_F(SplitModelTest, ConvertPacksItIntoOneFile) {
  const std::string packed = dir_.File("packed.gguf");
  Status s = WritePackedGguf(shards_[0], packed);
  ASSERT_TRUE(s.ok()) << s.message();
  auto f = GgufFile::Open(packed);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE(f->shard_paths().empty());
  EXPECT_EQ(f->Find(k::kSplitCount), nullptr);
  Model::Options off;
  off.weight_cache = "off";
  auto want = Model::Load(whole_, off);
  auto got = Model::Load(packed);
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().message();
  EXPECT_TRUE((*got)->packed());
  EXPECT_EQ((*got)->fingerprint(), (*want)->fingerprint());
  EXPECT_EQ(PromptLogits(**got), PromptLogits(**want));
}

TEST_F(SplitModelTest, BrokenSetsAreClearErrors) {
  // A later shard given: the error names the first.
  ExpectError(shards_[1], {"is shard 2 of 3", "open its first shard, '" + shards_[0] + "'"});
  auto m = Model::Load(shards_[2]);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("is shard 3 of 3"), std::string::npos) << m.status().message();
  // The first shard renamed: the others cannot be found.
  const std::string renamed = dir_.File("renamed.gguf");
  fs::copy_file(shards_[0], renamed);
  ExpectError(renamed, {"is the first of 3 shards", "does not end in '-00001-of-00003.gguf'"});
  // A shard missing.
  fs::rename(shards_[2], shards_[2] + ".away");
  ExpectError(shards_[0], {"shard 3 of 3, '" + shards_[2] + "'"});
  fs::rename(shards_[2] + ".away", shards_[2]);
  EXPECT_EQ(ErrorOpening(shards_[0]), "OK");
  // Another shard in its place (the third as the second).
  fs::copy_file(shards_[2], shards_[1], fs::copy_options::overwrite_existing);
  ExpectError(shards_[0], {"shard 2 of 3, '" + shards_[1] + "' is not that shard", "say 3 of 3"});
  Restore(1);
  // A shard of another split (of 4).
  auto whole = GgufFile::Open(whole_);
  ASSERT_TRUE(whole.ok());
  auto four = WriteSplitGguf(*whole, dir_.File("four"), 4);
  ASSERT_TRUE(four.ok());
  fs::copy_file((*four)[1], shards_[1], fs::copy_options::overwrite_existing);
  ExpectError(shards_[0], {"is not that shard", "say 2 of 4"});
  Restore(1);
  // A tensor in two shards.
  RewriteShard(1, [&](GgufWriter& w, const GgufFile& f) {
    w.Set(k::kSplitNo, GgufValue(static_cast<uint16_t>(1)));
    w.Set(k::kSplitCount, GgufValue(static_cast<uint16_t>(3)));
    const GgufTensorInfo& t = f.tensors()[0];
    ASSERT_TRUE(w.AddTensor(t.name, t.type, t.dims, {t.data, t.n_bytes}).ok());
  });
  ExpectError(shards_[0], {"tensor '" + whole->tensors()[0].name + "' is in shard 2 of 3", "and in shard 1"});
  Restore(1);
  // Tensors that do not add up to split.tensors.count (a shard holding none).
  RewriteShard(2, [&](GgufWriter& w, const GgufFile&) {
    w.Set(k::kSplitNo, GgufValue(static_cast<uint16_t>(2)));
    w.Set(k::kSplitCount, GgufValue(static_cast<uint16_t>(3)));
  });
  ExpectError(shards_[0], {"split.tensors.count says " + std::to_string(whole->tensors().size())});
  Restore(2);
  // A damaged shard is named as the shard.
  {
    std::fstream f(shards_[2], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.write("XXXX", 4);
  }
  ExpectError(shards_[0], {"is split: shard 3 of 3", "gguf '" + shards_[2] + "'"});
  Restore(2);
  EXPECT_EQ(ErrorOpening(shards_[0]), "OK");
}

}  // namespace
}  // namespace tlr
