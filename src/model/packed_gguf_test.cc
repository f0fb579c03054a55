// The packed GGUF (model layer, label model): a packed model gives logits bit-identical to its
// source repacked at load, keeps the source's fingerprint, writes no weight cache, and unpacks
// to the source file byte for byte; a packed file that is damaged (a tensor byte, its metadata,
// truncated), from another layout version or with its keys missing is refused with the reason.
#include "model/packed_gguf.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/gguf/gguf_writer.h"
#include "model/load_check.h"
#include "model/model.h"
#include "model/random_model.h"
#include "ops/matmul.h"
#include "util/hash.h"
#include "util/mapped_file.h"
#include "util/temp_dir.h"
#include "util/test_support.h"

namespace tlr {
namespace {

namespace fs = std::filesystem;



std::string Bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<std::string> CacheFiles(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".tlrw") out.push_back(e.path().string());
  }
  return out;
}

// Rewrites a GGUF through `edit` (which may change metadata) with the same tensors.
Status Rewrite(const std::string& in, const std::string& out, const std::function<void(GgufWriter&)>& edit,
               bool add_output = false) {
  auto f = GgufFile::Open(in);
  if (!f.ok()) return f.status();
  GgufWriter w(f->version());
  for (const auto& [key, value] : f->metadata()) w.Set(key, value);
  edit(w);
  for (const GgufTensorInfo& t : f->tensors()) {
    TLR_RETURN_IF_ERROR(w.AddTensor(t.name, t.type, t.dims, {t.data, t.n_bytes}));
    // An untied copy of the LM head (the random presets tie it).
    if (add_output && t.name == "token_embd.weight") {
      TLR_RETURN_IF_ERROR(w.AddTensor("output.weight", t.type, t.dims, {t.data, t.n_bytes}));
    }
  }
  return w.WriteFile(out);
}

class PackedGgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // No cache goes to the user's directory either.
    setenv("XDG_CACHE_HOME", dir_.File("cache").c_str(), 1);
  }
  // Packs `src` and checks the packed model against it; returns the packed path.
  std::string PackAndCompare(const std::string& src, bool panels = true) {
    const std::string packed = src + ".packed.gguf";
    Status s = WritePackedGguf(src, packed);
    EXPECT_TRUE(s.ok()) << s.message();
    Model::Options off;
    off.weight_cache = "off";
    auto want = Model::Load(src, off);
    EXPECT_TRUE(want.ok()) << want.status().message();
    auto got = Model::Load(packed);  // the cache on, as by default: nothing is written
    EXPECT_TRUE(got.ok()) << got.status().message();
    if (!want.ok() || !got.ok()) return packed;
    EXPECT_TRUE((*got)->packed());
    EXPECT_EQ((*got)->fingerprint(), (*want)->fingerprint());
    EXPECT_EQ(PromptLogits(**got), PromptLogits(**want)) << src;
    bool any = false;
    for (const auto& [t, view] : (*got)->PanelMatrices()) any |= view.repacked;
    EXPECT_EQ(any, panels) << src;
    // Without repacking at load the file's panels are used all the same.
    Model::Options plain;
    plain.repack = false;
    auto raw = Model::Load(packed, plain);
    EXPECT_TRUE(raw.ok()) << raw.status().message();
    if (raw.ok()) {
      EXPECT_EQ(PromptLogits(**raw), PromptLogits(**want));
    }
    EXPECT_TRUE(CacheFiles(dir_.path()).empty());
    // Unpacked: the source, byte for byte.
    const std::string back = src + ".unpacked.gguf";
    s = WriteUnpackedGguf(packed, back);
    EXPECT_TRUE(s.ok()) << s.message();
    EXPECT_TRUE(Bytes(back) == Bytes(src)) << src;
    return packed;
  }
  std::string Load(const std::string& path) {
    auto m = Model::Load(path);
    return m.ok() ? "" : m.status().message();
  }
  void Flip(const std::string& path, uint64_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x04);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
  }
  TempDir dir_;
};

TEST_F(PackedGgufTest, SameLogitsAndSourceBackForEveryPanelType) {
  for (const char* type : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "q2_k", "q3_k", "iq4_nl",
                           "iq4_xs", "f16"}) {
    RandomModelOptions o;
    o.preset = "tiny256";
    o.type = type;
    o.pure = true;
    const std::string src = dir_.File(std::string(type) + ".gguf");
    ASSERT_TRUE(WriteRandomModel(o, src).ok());
    PackAndCompare(src, std::string(type) != "f16");
  }
}

TEST_F(PackedGgufTest, ArchitecturesTiedAndUntied) {
  for (const char* preset : {"tiny-qwen3", "tiny-gemma3"}) {
    RandomModelOptions o;
    o.preset = preset;
    const std::string src = dir_.File(std::string(preset) + ".gguf");
    ASSERT_TRUE(WriteRandomModel(o, src).ok());
    PackAndCompare(src);
  }
  RandomModelOptions o;
  o.arch = "llama";
  o.type = "q4_k_m";
  const std::string tied = dir_.File("llama-tied.gguf"), untied = dir_.File("llama-untied.gguf");
  ASSERT_TRUE(WriteRandomModel(o, tied).ok());
  ASSERT_TRUE(Rewrite(tied, untied, [](GgufWriter&) {}, /*add_output=*/true).ok());
  PackAndCompare(untied);
  // The demo pair's LLM, a trained model with its real tokenizer.
  fs::copy_file(kDemo + "llm.gguf", dir_.File("llm.gguf"));
  PackAndCompare(dir_.File("llm.gguf"), /*panels=*/false);  // f32: no panels, mapped as they are
}

// The panel layout does not depend on the SIMD target: a file packed under every other target
// compiled in (as on another CPU) maps here with the logits of the original repacked here.
// TLR_PACKED_FOREIGN=DIR (the ARM test under qemu) also checks DIR/src.gguf against
// DIR/src.packed.gguf packed on another machine.
TEST_F(PackedGgufTest, PackedOnAnotherTargetOrMachineMapsHere) {
  RandomModelOptions o;
  o.preset = "tiny256";
  o.type = "q4_k_m";
  const std::string src = dir_.File("src.gguf");
  ASSERT_TRUE(WriteRandomModel(o, src).ok());
  Model::Options off;
  off.weight_cache = "off";
  auto want = Model::Load(src, off);
  ASSERT_TRUE(want.ok());
  const std::string here = ActiveSimdTarget();
  int others = 0;
  for (const std::string& target : CompiledSimdTargets()) {
    if (target == here || !ForceSimdTarget(target)) continue;
    const std::string packed = dir_.File("packed-" + target + ".gguf");
    Status s = WritePackedGguf(src, packed);
    ASSERT_TRUE(ForceSimdTarget(""));
    ASSERT_TRUE(s.ok()) << s.message();
    auto got = Model::Load(packed);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_NE(LoadNotes(**got).find("packed on " + target), std::string::npos) << LoadNotes(**got);
    EXPECT_EQ(PromptLogits(**got), PromptLogits(**want)) << target;
    ++others;
  }
  if (CompiledSimdTargets().size() > 1) {  // the ARM device build has NEON alone
    EXPECT_GT(others, 0);
  }
  if (const char* dir = std::getenv("TLR_PACKED_FOREIGN"); dir && *dir) {
    auto orig = Model::Load(std::string(dir) + "/src.gguf", off);
    auto foreign = Model::Load(std::string(dir) + "/src.packed.gguf");
    ASSERT_TRUE(orig.ok()) << orig.status().message();
    ASSERT_TRUE(foreign.ok()) << foreign.status().message();
    EXPECT_EQ(PromptLogits(**foreign), PromptLogits(**orig));
    std::printf("%s: packed on another machine, mapped here (%s): same logits as the original\n", dir, here.c_str());
  }
}

// A model in memory (AddMemoryFile: how the browser build loads), plain or packed, gives the
// logits of the same file on disk.
TEST_F(PackedGgufTest, MemoryFilesLoadAsTheFileOnDisk) {
  RandomModelOptions o;
  o.preset = "tiny256";
  o.type = "q4_0";
  const std::string src = dir_.File("m.gguf"), packed = dir_.File("m.packed.gguf");
  ASSERT_TRUE(WriteRandomModel(o, src).ok());
  ASSERT_TRUE(WritePackedGguf(src, packed).ok());
  Model::Options off;
  off.weight_cache = "off";
  auto want = Model::Load(src, off);
  ASSERT_TRUE(want.ok());
  for (const std::string& file : {src, packed}) {
    const std::string bytes = Bytes(file);
    uint8_t* mem = AllocateMemoryFile(bytes.size());
    std::memcpy(mem, bytes.data(), bytes.size());
    AddMemoryFile("/memory/model.gguf", mem, bytes.size());
    auto got = Model::Load("/memory/model.gguf", off);
    RemoveMemoryFile("/memory/model.gguf");
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ((*got)->packed(), file == packed);
    EXPECT_EQ(PromptLogits(**got), PromptLogits(**want)) << file;
  }
}

TEST_F(PackedGgufTest, DamagedForeignAndMisusedFilesAreRefused) {
  RandomModelOptions o;
  o.preset = "tiny256";
  const std::string src = dir_.File("m.gguf");
  ASSERT_TRUE(WriteRandomModel(o, src).ok());
  const std::string packed = PackAndCompare(src);
  const std::string bytes = Bytes(packed);
  auto restore = [&] { std::ofstream(packed, std::ios::binary | std::ios::trunc) << bytes; };

  // A bit of the last tensor (a norm vector) and of a repacked matrix.
  uint64_t q_at = 0, last_at = 0;
  {
    auto f = GgufFile::Open(packed);
    ASSERT_TRUE(f.ok());
    const GgufTensorInfo* q = f->FindTensor("blk.1.attn_q.weight");
    ASSERT_NE(q, nullptr);
    q_at = q->file_offset + 100;
    last_at = f->tensors().back().file_offset + f->tensors().back().n_bytes - 1;
  }
  Flip(packed, last_at);
  EXPECT_NE(Load(packed).find("is damaged (its checksum differs)"), std::string::npos) << Load(packed);
  restore();
  Flip(packed, q_at);
  EXPECT_NE(Load(packed).find("tensor 'blk.1.attn_q.weight' is damaged"), std::string::npos) << Load(packed);
  restore();

  // Truncated.
  fs::resize_file(packed, bytes.size() - 5000);
  EXPECT_FALSE(Load(packed).empty());
  restore();
  EXPECT_EQ(Load(packed), "");

  // Metadata changed after packing (a hyperparameter), another layout version, keys missing.
  const std::string edited = dir_.File("edited.gguf");
  ASSERT_TRUE(Rewrite(packed, edited, [](GgufWriter& w) { w.Set("qwen2.rope.freq_base", GgufValue::F32(500.0f)); }).ok());
  EXPECT_NE(Load(edited).find("tlr.packed.structure differs"), std::string::npos) << Load(edited);
  ASSERT_TRUE(Rewrite(packed, edited, [](GgufWriter& w) { w.Set("tlr.packed.layout_version", GgufValue::U32(999)); }).ok());
  EXPECT_NE(Load(edited).find("weight layout 999 by another TLR version"), std::string::npos) << Load(edited);
  ASSERT_TRUE(Rewrite(packed, edited, [](GgufWriter& w) { w.Set("tlr.packed.format", GgufValue::U32(7)); }).ok());
  EXPECT_NE(Load(edited).find("format 7"), std::string::npos) << Load(edited);
  ASSERT_TRUE(Rewrite(packed, edited, [](GgufWriter& w) { w.Set("tlr.packed.checksums", GgufValue::StrArray({"x"})); }).ok());
  EXPECT_NE(Load(edited).find("TLR keys are damaged"), std::string::npos) << Load(edited);
  ASSERT_TRUE(Rewrite(packed, edited, [](GgufWriter& w) { w.Set("tlr.packed.tensors", GgufValue::StrArray({"token_embd.weight", "no.such"})); }).ok());
  EXPECT_NE(Load(edited).find("'no.such', which the file does not hold"), std::string::npos) << Load(edited);
  // The keys that say how the bytes are read are covered by the structure hash: a matrix left
  // out of the packed list, another fingerprint.
  ASSERT_TRUE(Rewrite(packed, edited, [](GgufWriter& w) { w.Set("tlr.packed.tensors", GgufValue::StrArray({"blk.0.attn_q.weight"})); }).ok());
  EXPECT_NE(Load(edited).find("tlr.packed.structure differs"), std::string::npos) << Load(edited);
  ASSERT_TRUE(Rewrite(packed, edited, [](GgufWriter& w) { w.Set("tlr.packed.fingerprint", GgufValue::Str("1234")); }).ok());
  EXPECT_NE(Load(edited).find("tlr.packed.structure differs"), std::string::npos) << Load(edited);
  // Edited with the structure hash made again: a norm vector marked as a matrix in panels, and
  // a matrix in panels not marked.
  auto restructure = [&](std::vector<std::string> names) {
    return Rewrite(packed, edited, [&](GgufWriter& w) {
      auto f = GgufFile::Open(packed);
      auto tok = Tokenizer::FromGguf(*f, {});
      std::vector<std::pair<std::string, GgufValue>> kv = f->metadata();
      for (auto& [key, value] : kv) {
        if (key == "tlr.packed.tensors") value = GgufValue::StrArray(names);
      }
      char hex[17];
      w.Set("tlr.packed.tensors", GgufValue::StrArray(names));
      w.Set("tlr.packed.structure", GgufValue::Str(std::string(HexU64(PackedStructureHash(kv, f->tensors(), tok->Fingerprint()), hex))));
    });
  };
  ASSERT_TRUE(restructure({"output_norm.weight"}).ok());
  EXPECT_NE(Load(edited).find("'output_norm.weight' is marked packed but is not one of the model's matrices"), std::string::npos)
      << Load(edited);
  std::vector<std::string> all_but_one;
  {
    auto f = GgufFile::Open(packed);
    for (const GgufValue& v : std::get<GgufArray>(f->Find("tlr.packed.tensors")->v).items) {
      if (std::get<std::string>(v.v) != "blk.1.ffn_down.weight") all_but_one.push_back(std::get<std::string>(v.v));
    }
  }
  ASSERT_TRUE(restructure(all_but_one).ok());
  EXPECT_NE(Load(edited).find("'blk.1.ffn_down.weight' has a panel layout but is not marked packed"), std::string::npos)
      << Load(edited);
  // A plain GGUF that says it is packed.
  ASSERT_TRUE(Rewrite(src, edited, [](GgufWriter& w) { w.Set("general.architecture", GgufValue::Str("tlr-packed")); }).ok());
  EXPECT_NE(Load(edited).find("TLR keys are damaged"), std::string::npos) << Load(edited);

  // Packing a packed file, unpacking a plain one.
  Status s = WritePackedGguf(packed, dir_.File("twice.gguf"));
  EXPECT_NE(s.message().find("is packed already"), std::string::npos) << s.message();
  s = WriteUnpackedGguf(src, dir_.File("x.gguf"));
  EXPECT_NE(s.message().find("is a plain GGUF"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(dir_.File("twice.gguf")));
  EXPECT_FALSE(fs::exists(dir_.File("x.gguf")));
}

}  // namespace
}  // namespace tlr
