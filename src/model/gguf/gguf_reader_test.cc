// GGUF reader on hand-made bad files (unit): each problem is an error that names it, with an
// offset; no input makes the reader crash or read out of bounds (the ASan build checks the
// latter, and a fuzzer runs on the same code).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "model/gguf/gguf_reader.h"
#include "model/gguf/gguf_writer.h"

namespace tlr {
namespace {

// Little-endian byte builder for hand-made files.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& Put(T x) {
    const size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &x, sizeof(T));
    return *this;
  }
  Bytes& Str(const std::string& s) {
    Put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return Put<uint32_t>(kGgufMagic).Put<uint32_t>(version).Put<uint64_t>(n_tensors).Put<uint64_t>(n_kv);
  }
  Bytes& Pad(size_t align = 32) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
  Bytes& Zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

std::string ErrorOf(const Bytes& x) {
  auto f = GgufFile::FromBytes(x.b);
  return f.ok() ? "OK" : f.status().message();
}

void ExpectError(const Bytes& x, const std::string& needle) {
  const std::string e = ErrorOf(x);
  EXPECT_NE(e, "OK");
  EXPECT_NE(e.find(needle), std::string::npos) << "error was: " << e;
  EXPECT_NE(e.find("offset "), std::string::npos) << "no offset in: " << e;
}

// One f32 tensor "w" of `dim` elements, data included.
Bytes OneTensor(int64_t dim, uint32_t type = 0, uint64_t offset = 0, size_t data_bytes = 16) {
  Bytes x;
  x.Header(1, 0).Str("w").Put<uint32_t>(1).Put<int64_t>(dim).Put<uint32_t>(type).Put<uint64_t>(offset);
  x.Pad().Zeros(data_bytes);
  return x;
}

TEST(GgufReader, ReadsMinimalFiles) {
  Bytes x;
  x.Header(0, 1).Str("general.architecture").Put<uint32_t>(8).Str("llama");
  auto f = GgufFile::FromBytes(x.b);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_FALSE(f->GetUint("general.architecture").ok());
  EXPECT_NE(f->GetString("missing").status().message().find("'missing' is missing"), std::string::npos);
  Bytes v2;
  v2.Header(0, 0, 2);
  EXPECT_TRUE(GgufFile::FromBytes(v2.b).ok());
  auto t = GgufFile::FromBytes(OneTensor(4).b);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->tensors()[0].n_bytes, 16u);
}

TEST(GgufReader, RejectsBadMagicAndVersions) {
  ExpectError(Bytes{}, "magic");
  Bytes m;
  m.Put<uint32_t>(0x464c457f).Zeros(20);  // an ELF file
  ExpectError(m, "bad magic");
  Bytes v1;
  v1.Header(0, 0, 1);
  ExpectError(v1, "version 1");
  Bytes v9;
  v9.Header(0, 0, 9);
  ExpectError(v9, "unsupported GGUF version 9");
  Bytes be;
  be.Header(0, 0, 0x03000000);
  ExpectError(be, "big-endian");
}

TEST(GgufReader, RejectsAbsurdCounts) {
  Bytes t;
  t.Header(uint64_t{1} << 40, 0);
  ExpectError(t, "tensor count");
  Bytes k;
  k.Header(0, 1000000);
  ExpectError(k, "metadata count");
  Bytes a;
  a.Header(0, 1).Str("k").Put<uint32_t>(9).Put<uint32_t>(4).Put<uint64_t>(uint64_t{1} << 33);
  ExpectError(a, "array");
  Bytes s;
  s.Header(0, 1).Str("k").Put<uint32_t>(8).Put<uint64_t>(~uint64_t{0});
  ExpectError(s, "length");
  Bytes s2;
  s2.Header(0, 1).Str("k").Put<uint32_t>(8).Put<uint64_t>(100).Zeros(10);
  ExpectError(s2, "runs past the end");
}

TEST(GgufReader, RejectsBadMetadata) {
  Bytes ut;
  ut.Header(0, 1).Str("k").Put<uint32_t>(13).Zeros(8);
  ExpectError(ut, "unknown value type 13");
  Bytes ua;
  ua.Header(0, 1).Str("k").Put<uint32_t>(9).Put<uint32_t>(99).Put<uint64_t>(0);
  ExpectError(ua, "unknown array element type 99");
  Bytes dup;
  dup.Header(0, 2).Str("k").Put<uint32_t>(4).Put<uint32_t>(1).Str("k").Put<uint32_t>(4).Put<uint32_t>(2);
  ExpectError(dup, "duplicate metadata key 'k'");
  Bytes utf;
  utf.Header(0, 1).Str("bad\xC3(").Put<uint32_t>(4).Put<uint32_t>(1);
  ExpectError(utf, "not valid UTF-8");
  Bytes empty_key;
  empty_key.Header(0, 1).Str("").Put<uint32_t>(4).Put<uint32_t>(1);
  ExpectError(empty_key, "empty key");
  Bytes bad_bool;
  bad_bool.Header(0, 1).Str("b").Put<uint32_t>(7).Put<uint8_t>(2);
  ExpectError(bad_bool, "bool value 2");
  Bytes align;
  align.Header(0, 1).Str("general.alignment").Put<uint32_t>(4).Put<uint32_t>(24);
  ExpectError(align, "power of two");
  Bytes align_type;
  align_type.Header(0, 1).Str("general.alignment").Put<uint32_t>(10).Put<uint64_t>(32);
  ExpectError(align_type, "must be u32");
  // Arrays nested deeper than the limit.
  Bytes deep;
  deep.Header(0, 1).Str("k").Put<uint32_t>(9);
  for (int i = 0; i < 20; ++i) deep.Put<uint32_t>(9).Put<uint64_t>(1);
  deep.Put<uint32_t>(4).Put<uint64_t>(0);
  ExpectError(deep, "nested deeper");
}

TEST(GgufReader, RejectsBadTensors) {
  ExpectError(OneTensor(4, 77), "unknown tensor type id 77");
  // A ggml type TLR does not read (bartowski's IQ3_M files hold iq3_s) is named as such.
  ExpectError(OneTensor(256, 21), "type iq3_s (ggml type 21) is not one TLR reads: a file of the same model in another quantization loads");
  ExpectError(OneTensor(0), "dimension 0 = 0");
  ExpectError(OneTensor(-5), "dimension 0 = -5");
  ExpectError(OneTensor(8), "runs past the end");              // 32 bytes needed, 16 there
  ExpectError(OneTensor(4, 0, 7), "not a multiple of the alignment");
  ExpectError(OneTensor(33, 2), "block size");                   // q4_0 rows of 33
  Bytes nd;
  nd.Header(1, 0).Str("w").Put<uint32_t>(5).Zeros(60);
  ExpectError(nd, "n_dims 5");
  Bytes ov;
  ov.Header(1, 0).Str("w").Put<uint32_t>(4);
  for (int i = 0; i < 4; ++i) ov.Put<int64_t>(int64_t{1} << 39);
  ov.Put<uint32_t>(0).Put<uint64_t>(0).Pad();
  ExpectError(ov, "overflows");
  Bytes dup;
  dup.Header(2, 0);
  for (int i = 0; i < 2; ++i) dup.Str("w").Put<uint32_t>(1).Put<int64_t>(4).Put<uint32_t>(0).Put<uint64_t>(0);
  dup.Pad().Zeros(16);
  ExpectError(dup, "duplicate tensor 'w'");
  Bytes noname;
  noname.Header(1, 0).Str("").Put<uint32_t>(1).Put<int64_t>(4).Put<uint32_t>(0).Put<uint64_t>(0).Pad().Zeros(16);
  ExpectError(noname, "empty name");
  Bytes huge_off = OneTensor(4, 0, uint64_t{1} << 63);
  ExpectError(huge_off, "runs past the end");
}

// Every prefix of a valid file fails cleanly (the file ends somewhere in the middle).
TEST(GgufReader, EveryTruncationIsAnError) {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str("llama"));
  w.Set("tokenizer.ggml.tokens", GgufValue::StrArray({"a", "b", "cd"}));
  w.Set("x.nested", GgufValue(GgufArray{GgufType::kArray, {GgufValue(GgufArray{GgufType::kUint8, {GgufValue(uint8_t{1})}})}}));
  std::vector<uint8_t> d(34 * 2, 1);
  ASSERT_TRUE(w.AddTensor("blk.0.attn_q.weight", GgmlType::kQ8_0, {64}, d).ok());
  auto bytes = *w.ToBytes();
  auto full = GgufFile::FromBytes(bytes);
  ASSERT_TRUE(full.ok());
  // Past the end of the last tensor's data there is only padding, which may be cut.
  const auto& last = full->tensors().back();
  const size_t needed = last.file_offset + last.n_bytes;
  for (size_t n = 0; n < needed; ++n) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + n);
    auto f = GgufFile::FromBytes(prefix);
    EXPECT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
  }
}

// Random corruption never crashes; whatever parses has its tensors inside the buffer.
TEST(GgufReader, RandomCorruptionNeverCrashes) {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str("qwen2"));
  w.Set("a", GgufValue::F32Array({1, 2, 3}));
  std::vector<uint8_t> d(4 * 8, 0);
  ASSERT_TRUE(w.AddTensor("t1", GgmlType::kF32, {8}, d).ok());
  ASSERT_TRUE(w.AddTensor("t2", GgmlType::kF32, {4, 2}, d).ok());
  const auto good = *w.ToBytes();
  std::mt19937 rng(7);
  int parsed = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    auto bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    auto f = GgufFile::FromBytes(bytes);
    if (!f.ok()) continue;
    ++parsed;
    for (const auto& t : f->tensors()) ASSERT_LE(t.file_offset + t.n_bytes, bytes.size());
  }
  EXPECT_GT(parsed, 0);  // some flips land in data bytes and keep the file valid
}

TEST(GgufReader, OpenReportsPathProblems) {
  auto f = GgufFile::Open("/nonexistent/model.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("/nonexistent/model.gguf"), std::string::npos);
  auto d = GgufFile::Open("/tmp");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace tlr
