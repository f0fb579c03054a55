// Router training data for PyTorch (see feature_dump.h).
#include "routing/feature_dump.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "routing/safetensors.h"
#include "util/mapped_file.h"

namespace tlr {

using nlohmann::json;

namespace {
constexpr const char* kFormat = "tlr-router-features-1";
}  // namespace

Status DumpRouterFeatures(const std::string& dir, const RouterExamples& ex, const std::vector<uint8_t>& validation,
                          const std::vector<DumpedQuestion>& questions, const std::string& slm_fingerprint,
                          int64_t rows_per_shard, const std::vector<float>* embeddings, int64_t vocab) {
  namespace fs = std::filesystem;
  if (rows_per_shard < 1) return Status::Error("rows per shard must be positive");
  if (static_cast<int64_t>(validation.size()) != ex.size() || static_cast<int64_t>(ex.x.size()) != ex.size() * ex.dim) {
    return Status::Error("internal error: the examples' arrays disagree");
  }
  if (ex.topk > 0 && (static_cast<int64_t>(ex.top_logits.size()) != ex.size() * ex.topk ||
                      static_cast<int64_t>(ex.token.size()) != ex.size())) {
    return Status::Error("internal error: the examples' top logits or tokens disagree with their count");
  }
  if (embeddings && (vocab < 1 || static_cast<int64_t>(embeddings->size()) != vocab * ex.dim)) {
    return Status::Error("internal error: the embedding table is not [vocabulary, hidden size]");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Error("cannot create " + dir + ": " + ec.message());
  fs::remove(fs::path(dir) / "manifest.json", ec);  // whole again only when the new one is written
  json shards = json::array();
  const int64_t n = ex.size(), h = ex.dim;
  for (int64_t b = 0, k = 0; b < n || k == 0; b += rows_per_shard, ++k) {
    const int64_t e = std::min(n, b + rows_per_shard);
    char name[64];
    std::snprintf(name, sizeof name, "features-%05lld.safetensors", static_cast<long long>(k));
    SafeTensorsFile f;
    f.tensors["features"] = MakeF32Tensor({e - b, h}, std::vector<float>(ex.x.begin() + b * h, ex.x.begin() + e * h));
    f.tensors["labels"] = MakeU8Tensor({e - b}, std::vector<uint8_t>(ex.label.begin() + b, ex.label.begin() + e));
    f.tensors["question"] = MakeI32Tensor({e - b}, std::vector<int32_t>(ex.group.begin() + b, ex.group.begin() + e));
    f.tensors["validation"] = MakeU8Tensor({e - b}, std::vector<uint8_t>(validation.begin() + b, validation.begin() + e));
    if (ex.topk > 0) {
      f.tensors["top_logits"] = MakeF32Tensor(
          {e - b, ex.topk}, std::vector<float>(ex.top_logits.begin() + b * ex.topk, ex.top_logits.begin() + e * ex.topk));
      f.tensors["tokens"] = MakeI32Tensor({e - b}, std::vector<int32_t>(ex.token.begin() + b, ex.token.begin() + e));
    }
    f.metadata = {{"format", kFormat}, {"slm_fingerprint", slm_fingerprint}};
    TLR_RETURN_IF_ERROR(WriteSafeTensors((fs::path(dir) / name).string(), f));
    shards.push_back({{"file", name}, {"rows", e - b}});
    if (e >= n) break;
  }
  json qs = json::array();
  for (const DumpedQuestion& q : questions) qs.push_back({{"row", q.row}, {"id", q.id}});
  json manifest = {{"format", kFormat}, {"hidden_size", h}, {"slm_fingerprint", slm_fingerprint},
                   {"rows", n},         {"shards", shards}, {"questions", qs}};
  if (ex.topk > 0) manifest["topk"] = ex.topk;
  if (embeddings) {
    SafeTensorsFile f;
    f.tensors["embeddings"] = MakeF32Tensor({vocab, h}, *embeddings);
    f.metadata = {{"format", kFormat}, {"slm_fingerprint", slm_fingerprint}};
    TLR_RETURN_IF_ERROR(WriteSafeTensors((fs::path(dir) / "embeddings.safetensors").string(), f));
    manifest["embeddings"] = "embeddings.safetensors";
  }
  const std::string text = manifest.dump(1) + "\n";
  return WriteFileAtomic((fs::path(dir) / "manifest.json").string(),
                         std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

Expected<RouterExamples> ReadRouterFeatures(const std::string& dir, std::vector<uint8_t>* validation) {
  namespace fs = std::filesystem;
  const std::string mpath = (fs::path(dir) / "manifest.json").string();
  TLR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(mpath));
  const json m = json::parse(text, nullptr, false);
  if (m.is_discarded() || !m.is_object() || m.value("format", "") != kFormat || !m.contains("hidden_size") ||
      !m["hidden_size"].is_number_unsigned() || !m.contains("shards") || !m["shards"].is_array()) {
    return Status::Error(mpath + " is not a feature dump's manifest (" + kFormat + ")");
  }
  RouterExamples ex;
  ex.dim = m["hidden_size"].get<int64_t>();
  for (const json& s : m["shards"]) {
    if (!s.is_object() || !s.contains("file") || !s["file"].is_string()) return Status::Error(mpath + ": a shard without a file");
    const std::string file = s["file"].get<std::string>();
    if (file.find('/') != std::string::npos) return Status::Error(mpath + ": shard '" + file + "' is not a file name");
    TLR_ASSIGN_OR_RETURN(SafeTensorsFile f, ReadSafeTensors((fs::path(dir) / file).string()));
    auto need = [&](const char* name, const char* dtype, size_t rank) -> Expected<const SafeTensor*> {
      auto it = f.tensors.find(name);
      if (it == f.tensors.end() || it->second.dtype != dtype || it->second.shape.size() != rank) {
        return Status::Error(file + ": needs a " + dtype + " tensor '" + name + "' of rank " + std::to_string(rank));
      }
      return &it->second;
    };
    TLR_ASSIGN_OR_RETURN(const SafeTensor* x, need("features", "F32", 2));
    TLR_ASSIGN_OR_RETURN(const SafeTensor* y, need("labels", "U8", 1));
    TLR_ASSIGN_OR_RETURN(const SafeTensor* q, need("question", "I32", 1));
    TLR_ASSIGN_OR_RETURN(const SafeTensor* v, need("validation", "U8", 1));
    const int64_t rows = x->shape[0];
    if (x->shape[1] != ex.dim || y->shape[0] != rows || q->shape[0] != rows || v->shape[0] != rows) {
      return Status::Error(file + ": the tensors' shapes disagree with each other or with hidden_size " + std::to_string(ex.dim));
    }
    TLR_ASSIGN_OR_RETURN(std::vector<float> xs, SafeTensorFloats("features", *x));
    ex.x.insert(ex.x.end(), xs.begin(), xs.end());
    ex.label.insert(ex.label.end(), y->data.begin(), y->data.end());
    const auto* qi = reinterpret_cast<const int32_t*>(q->data.data());
    ex.group.insert(ex.group.end(), qi, qi + rows);
    if (validation) validation->insert(validation->end(), v->data.begin(), v->data.end());
  }
  return ex;
}

}  // namespace tlr
