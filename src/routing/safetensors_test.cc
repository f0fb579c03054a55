// safetensors files and the feature dump (routing layer, label unit): a round trip keeps every
// byte, and each way a file can be damaged is an error naming it; the feature dump reads back
// as written and a shard with wrong shapes is refused.
#include "routing/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "routing/feature_dump.h"
#include "util/mapped_file.h"
#include "util/temp_dir.h"

namespace tlr {
namespace {

// A file made of a header (as given) and `data` bytes.
std::string Raw(const std::string& header, size_t data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return out + header + std::string(data, '\x01');
}

TEST(SafeTensors, RoundTripAndDamage) {
  TempDir dir;
  SafeTensorsFile f;
  f.tensors["a.weight"] = MakeF32Tensor({2, 3}, {1, 2, 3, 4, 5, 6.5f});
  f.tensors["ids"] = MakeI32Tensor({4}, {7, -1, 0, 3});
  f.tensors["flags"] = MakeU8Tensor({3}, {1, 0, 1});
  f.metadata = {{"format", "pt"}};
  const std::string path = dir.File("t.safetensors");
  ASSERT_TRUE(WriteSafeTensors(path, f).ok());
  auto back = ReadSafeTensors(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->metadata, f.metadata);
  ASSERT_EQ(back->tensors.size(), 3u);
  for (const auto& [name, t] : f.tensors) {
    EXPECT_EQ(back->tensors[name].dtype, t.dtype) << name;
    EXPECT_EQ(back->tensors[name].shape, t.shape) << name;
    EXPECT_EQ(back->tensors[name].data, t.data) << name;
  }
  auto floats = SafeTensorFloats("a.weight", back->tensors["a.weight"]);
  ASSERT_TRUE(floats.ok());
  EXPECT_EQ((*floats)[5], 6.5f);
  EXPECT_FALSE(SafeTensorFloats("ids", back->tensors["ids"]).ok());

  auto read = [&](const std::string& bytes) {
    const std::string p = dir.File("bad.safetensors");
    EXPECT_TRUE(WriteFileAtomic(p, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())).ok());
    auto r = ReadSafeTensors(p);
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_NE(read("abc").find("too short"), std::string::npos);
  EXPECT_NE(read(Raw(std::string(100, ' '), 0).substr(0, 8) + "x").find("does not fit"), std::string::npos);  // header > file
  EXPECT_NE(read(Raw("[1]", 0)).find("not a JSON object"), std::string::npos);
  EXPECT_NE(read(Raw(R"({"t":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1)).find("unknown dtype"), std::string::npos);
  EXPECT_NE(read(Raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4)).find("needs 8 bytes"), std::string::npos);
  EXPECT_NE(read(Raw(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 2)).find("outside the data"), std::string::npos);
  EXPECT_NE(read(Raw(R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"u":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", 3))
                .find("share bytes"),
            std::string::npos);
  EXPECT_NE(read(Raw(R"({"t":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", 1)).find("not a size"), std::string::npos);
  EXPECT_NE(read(Raw(R"({"t":{"dtype":"U8"}})", 0)).find("needs dtype, shape and data_offsets"), std::string::npos);
  // Two entries of 2^40 elements: their product wrapped around to 0 and an empty range passed.
  EXPECT_NE(read(Raw(R"({"t":{"dtype":"U8","shape":[1099511627776,1099511627776],"data_offsets":[0,0]}})", 0))
                .find("is too large"),
            std::string::npos);
  EXPECT_EQ(read(Raw(R"({"t":{"dtype":"U8","shape":[0,1099511627776],"data_offsets":[0,0]}})", 0)), "ok");
  EXPECT_EQ(read(Raw(R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2)), "ok");
}

TEST(FeatureDump, RoundTripAndWrongShapes) {
  TempDir dir;
  RouterExamples ex;
  ex.dim = 3;
  for (int i = 0; i < 10; ++i) {
    for (int c = 0; c < 3; ++c) ex.x.push_back(static_cast<float>(i * 10 + c));
    ex.label.push_back(i % 3 == 0);
    ex.group.push_back(i / 2);
  }
  std::vector<uint8_t> val(10, 0);
  val[4] = 1;
  std::vector<DumpedQuestion> qs;
  for (int q = 0; q < 5; ++q) qs.push_back({q, "id" + std::to_string(q)});
  ASSERT_TRUE(DumpRouterFeatures(dir.File("d"), ex, val, qs, "fp", /*rows_per_shard=*/4).ok());
  std::vector<uint8_t> val_back;
  auto back = ReadRouterFeatures(dir.File("d"), &val_back);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->dim, 3);
  EXPECT_EQ(back->x, ex.x);
  EXPECT_EQ(back->label, ex.label);
  EXPECT_EQ(back->group, ex.group);
  EXPECT_EQ(val_back, val);
  // A shard whose features have another width than the manifest says.
  SafeTensorsFile bad;
  bad.tensors["features"] = MakeF32Tensor({1, 2}, {1, 2});
  bad.tensors["labels"] = MakeU8Tensor({1}, {1});
  bad.tensors["question"] = MakeI32Tensor({1}, {0});
  bad.tensors["validation"] = MakeU8Tensor({1}, {0});
  ASSERT_TRUE(WriteSafeTensors(dir.File("d/features-00001.safetensors"), bad).ok());
  auto wrong = ReadRouterFeatures(dir.File("d"));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("shapes disagree"), std::string::npos) << wrong.status().message();

  // With top logits, tokens and an embedding table (R2R's inputs): in each shard and a file of their own.
  ex.topk = 2;
  for (int i = 0; i < 10; ++i) {
    ex.top_logits.push_back(static_cast<float>(i));
    ex.top_logits.push_back(static_cast<float>(-i));
    ex.token.push_back(100 + i);
  }
  const std::vector<float> emb(4 * 3, 0.5f);
  ASSERT_TRUE(DumpRouterFeatures(dir.File("e"), ex, val, qs, "fp", 4, &emb, 4).ok());
  auto shard = ReadSafeTensors(dir.File("e/features-00001.safetensors"));
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ(shard->tensors.at("top_logits").shape, (std::vector<int64_t>{4, 2}));
  auto tl = SafeTensorFloats("top_logits", shard->tensors.at("top_logits"));
  ASSERT_TRUE(tl.ok());
  EXPECT_EQ((*tl)[0], 4.0f);  // row 4's
  EXPECT_EQ((*tl)[1], -4.0f);
  EXPECT_EQ(shard->tensors.at("tokens").shape, (std::vector<int64_t>{4}));
  auto e = ReadSafeTensors(dir.File("e/embeddings.safetensors"));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->tensors.at("embeddings").shape, (std::vector<int64_t>{4, 3}));
  ex.token.pop_back();  // the arrays disagree: refused
  EXPECT_FALSE(DumpRouterFeatures(dir.File("f"), ex, val, qs, "fp", 4).ok());
}

}  // namespace
}  // namespace tlr
