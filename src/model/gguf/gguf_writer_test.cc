// GGUF writer round trip (unit): every metadata value type (including arrays of strings and
// nested arrays) and every tensor type is written and read back identically.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "model/gguf/gguf_reader.h"
#include "model/gguf/gguf_writer.h"

namespace tlr {
namespace {

GgufWriter AllTypesWriter(std::vector<std::vector<uint8_t>>* tensor_data) {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str("qwen2"));
  w.Set("t.u8", GgufValue(uint8_t{200}));
  w.Set("t.i8", GgufValue(int8_t{-100}));
  w.Set("t.u16", GgufValue(uint16_t{60000}));
  w.Set("t.i16", GgufValue(int16_t{-30000}));
  w.Set("t.u32", GgufValue(uint32_t{4000000000u}));
  w.Set("t.i32", GgufValue(int32_t{-2000000000}));
  w.Set("t.f32", GgufValue(3.25f));
  w.Set("t.bool", GgufValue(true));
  w.Set("t.str", GgufValue::Str("h\xC3\xA9llo \xF0\x9F\x98\x81"));
  w.Set("t.empty_str", GgufValue::Str(""));
  w.Set("t.u64", GgufValue(uint64_t{18000000000000000000ull}));
  w.Set("t.i64", GgufValue(int64_t{-9000000000000000000ll}));
  w.Set("t.f64", GgufValue(-1.5e300));
  w.Set("t.arr_str", GgufValue::StrArray({"a", "", "\xE2\x96\x81x", "<0x0A>"}));
  w.Set("t.arr_f32", GgufValue::F32Array({0.5f, -2.0f}));
  w.Set("t.arr_i32", GgufValue::I32Array({1, -1, 7}));
  GgufArray bools{GgufType::kBool, {GgufValue(true), GgufValue(false)}};
  w.Set("t.arr_bool", GgufValue(bools));
  GgufArray empty{GgufType::kUint64, {}};
  w.Set("t.arr_empty", GgufValue(empty));
  GgufArray inner1{GgufType::kInt16, {GgufValue(int16_t{1}), GgufValue(int16_t{2})}};
  GgufArray inner2{GgufType::kInt16, {}};
  GgufArray nested{GgufType::kArray, {GgufValue(inner1), GgufValue(inner2)}};
  w.Set("t.arr_nested", GgufValue(nested));
  GgufArray strs_in_arr{GgufType::kArray,
                        {GgufValue(GgufArray{GgufType::kString, {GgufValue::Str("x")}})}};
  w.Set("t.arr_nested_str", GgufValue(strs_in_arr));
  w.Set("general.alignment", GgufValue::U32(64));

  std::mt19937 rng(42);
  for (const auto& t : AllGgmlTypes()) {
    const int64_t row = 2 * t.block_size;
    auto bytes = GgmlTensorBytes(t.type, row, row * 3);
    EXPECT_TRUE(bytes.ok());
    std::vector<uint8_t> data(*bytes);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    EXPECT_TRUE(w.AddTensor("blk.0." + std::string(t.name), t.type, {row, 3}, data).ok());
    tensor_data->push_back(std::move(data));
  }
  return w;
}

void ExpectSameAsWritten(const GgufFile& f, const std::vector<std::vector<uint8_t>>& data) {
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  ASSERT_EQ(f.metadata().size(), 22u);
  EXPECT_EQ(*f.GetString("t.str"), "h\xC3\xA9llo \xF0\x9F\x98\x81");
  EXPECT_EQ(*f.GetUint("t.u64"), 18000000000000000000ull);
  EXPECT_EQ(*f.GetInt("t.i64"), -9000000000000000000ll);
  EXPECT_EQ(*f.GetFloat("t.f64"), -1.5e300);
  EXPECT_EQ(*f.GetBool("t.bool"), true);
  // Every value equal to what was written, type included.
  std::vector<std::vector<uint8_t>> unused;
  GgufWriter again = AllTypesWriter(&unused);
  auto bytes = again.ToBytes();
  ASSERT_TRUE(bytes.ok());
  auto ref = GgufFile::FromBytes(*bytes);
  ASSERT_TRUE(ref.ok());
  for (size_t i = 0; i < f.metadata().size(); ++i) {
    EXPECT_EQ(f.metadata()[i].first, ref->metadata()[i].first);
    EXPECT_TRUE(f.metadata()[i].second == ref->metadata()[i].second) << f.metadata()[i].first;
  }
  ASSERT_EQ(f.tensors().size(), AllGgmlTypes().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const auto& t = f.tensors()[i];
    EXPECT_EQ(t.type, AllGgmlTypes()[i].type);
    EXPECT_EQ(t.dims, (std::vector<int64_t>{2 * AllGgmlTypes()[i].block_size, 3}));
    EXPECT_EQ(t.file_offset % 64, 0u);
    ASSERT_EQ(t.n_bytes, data[i].size());
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.n_bytes), data[i]) << t.name;
    EXPECT_EQ(f.FindTensor(t.name), &t);
  }
}

TEST(GgufWriter, RoundTripInMemoryAllValueAndTensorTypes) {
  std::vector<std::vector<uint8_t>> data;
  GgufWriter w = AllTypesWriter(&data);
  auto bytes = w.ToBytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto f = GgufFile::FromBytes(*bytes);
  ASSERT_TRUE(f.ok()) << f.status().message();
  ExpectSameAsWritten(*f, data);
}

TEST(GgufWriter, RoundTripThroughFileAndMmap) {
  std::vector<std::vector<uint8_t>> data;
  GgufWriter w = AllTypesWriter(&data);
  const auto path = std::filesystem::temp_directory_path() /
                    ("tlr_gguf_rt_" + std::to_string(::getpid()) + ".gguf");
  ASSERT_TRUE(w.WriteFile(path.string()).ok());
  {
    auto f = GgufFile::Open(path.string());
    ASSERT_TRUE(f.ok()) << f.status().message();
    ExpectSameAsWritten(*f, data);
  }
  std::filesystem::remove(path);
}

TEST(GgufWriter, RejectsInconsistentTensors) {
  GgufWriter w;
  std::vector<uint8_t> d(18);
  EXPECT_TRUE(w.AddTensor("a", GgmlType::kQ4_0, {32}, d).ok());
  EXPECT_FALSE(w.AddTensor("a", GgmlType::kQ4_0, {32}, d).ok());           // duplicate
  EXPECT_FALSE(w.AddTensor("b", GgmlType::kQ4_0, {16}, d).ok());           // not a block
  EXPECT_FALSE(w.AddTensor("c", GgmlType::kQ4_0, {64}, d).ok());           // wrong size
  EXPECT_FALSE(w.AddTensor(std::string(64, 'n'), GgmlType::kQ4_0, {32}, d).ok());
  EXPECT_FALSE(w.AddTensor("d", GgmlType::kQ4_0, {32, 1, 1, 1, 1}, d).ok());  // 5 dims
  GgufWriter bad;
  bad.Set("x", GgufValue(GgufArray{GgufType::kInt32, {GgufValue(1.0f)}}));  // mixed array
  EXPECT_FALSE(bad.ToBytes().ok());
}

TEST(GgufWriter, SetReplacesKeepingOrder) {
  GgufWriter w;
  w.Set("a", GgufValue::U32(1));
  w.Set("b", GgufValue::U32(2));
  w.Set("a", GgufValue::Str("x"));
  auto f = GgufFile::FromBytes(*w.ToBytes());
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata()[0].first, "a");
  EXPECT_EQ(*f->GetString("a"), "x");
}

}  // namespace
}  // namespace tlr
