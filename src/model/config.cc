// ModelConfig from GGUF metadata (model layer).
#include "model/config.h"

#include <cstdio>

#include "model/gguf/gguf_keys.h"
#include "model/gguf/gguf_reader.h"

namespace tlr {

namespace {
Expected<int64_t> RequiredInt(const GgufFile& f, const std::string& key, int64_t lo, int64_t hi) {
  auto v = f.GetInt(key);
  if (!v.ok()) return v.status();
  if (*v < lo || *v > hi) {
    return Status::Error(key + " = " + std::to_string(*v) + " is outside " + std::to_string(lo) +
                         ".." + std::to_string(hi));
  }
  return *v;
}
}  // namespace

Expected<ModelConfig> ModelConfig::FromGguf(const GgufFile& f) {
  namespace k = gguf_keys;
  ModelConfig c;
  auto arch = f.GetString(k::kArchitecture);
  if (!arch.ok()) return arch.status();
  c.arch_name = *arch;
  if (*arch == "qwen2") {
    c.arch = Arch::kQwen2;
    c.rope_style = RopeStyle::kNeox;
    c.attn_bias = true;
  } else if (*arch == "llama") {
    c.arch = Arch::kLlama;
    c.rope_style = RopeStyle::kNormal;
  } else {
    return Status::Error("architecture '" + *arch + "' is not supported (supported: qwen2, llama)");
  }
  if (auto n = f.GetString(k::kName); n.ok()) c.name = *n;
  const std::string a = *arch;
  auto get = [&](const char* key, int64_t lo, int64_t hi, int64_t* dst) -> Status {
    auto v = RequiredInt(f, k::ArchKey(a, key), lo, hi);
    if (!v.ok()) return v.status();
    *dst = *v;
    return Status::Ok();
  };
  TLR_RETURN_IF_ERROR(get(k::kEmbeddingLength, 1, 1 << 16, &c.n_embd));
  TLR_RETURN_IF_ERROR(get(k::kBlockCount, 1, 1024, &c.n_layers));
  TLR_RETURN_IF_ERROR(get(k::kHeadCount, 1, 1024, &c.n_heads));
  TLR_RETURN_IF_ERROR(get(k::kFeedForwardLength, 1, 1 << 20, &c.n_ff));
  TLR_RETURN_IF_ERROR(get(k::kContextLength, 1, 1 << 24, &c.n_ctx_train));
  c.n_kv_heads = c.n_heads;
  if (f.Find(k::ArchKey(a, k::kHeadCountKv))) {
    TLR_RETURN_IF_ERROR(get(k::kHeadCountKv, 1, 1024, &c.n_kv_heads));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    return Status::Error("head_count " + std::to_string(c.n_heads) +
                         " is not a multiple of head_count_kv " + std::to_string(c.n_kv_heads));
  }
  c.head_dim = c.n_embd / c.n_heads;
  if (f.Find(k::ArchKey(a, "attention.key_length"))) {
    TLR_RETURN_IF_ERROR(get("attention.key_length", 2, 4096, &c.head_dim));
  } else if (c.n_embd % c.n_heads != 0) {
    return Status::Error("embedding_length is not a multiple of head_count");
  }
  if (c.head_dim % 2 != 0) return Status::Error("head dimension must be even for RoPE");
  if (f.Find(k::ArchKey(a, k::kRmsEps))) {
    auto e = f.GetFloat(k::ArchKey(a, k::kRmsEps));
    if (!e.ok()) return e.status();
    c.rms_eps = static_cast<float>(*e);
  }
  if (f.Find(k::ArchKey(a, k::kRopeFreqBase))) {
    auto b = f.GetFloat(k::ArchKey(a, k::kRopeFreqBase));
    if (!b.ok()) return b.status();
    if (!(*b > 1.0)) return Status::Error(k::ArchKey(a, k::kRopeFreqBase) + " must be > 1");
    c.rope_base = static_cast<float>(*b);
  }
  if (auto type = f.GetString(k::ArchKey(a, "rope.scaling.type")); type.ok() && *type == "linear") {
    auto factor = f.GetFloat(k::ArchKey(a, "rope.scaling.factor"));
    if (factor.ok() && *factor > 0) c.rope_scale = static_cast<float>(1.0 / *factor);
  }
  // The vocabulary size is the embedding matrix's row count (checked against the tokenizer
  // and tensors by the model loader).
  if (const auto* emb = f.FindTensor(k::kTokenEmbd); emb && emb->dims.size() == 2) {
    c.n_vocab = emb->dims[1];
  }
  return c;
}

std::string ModelConfig::Summary() const {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%s: vocab %lld, embd %lld, layers %lld, heads %lld (kv %lld, dim %lld), ff %lld, "
                "ctx %lld, rope base %g",
                arch_name.c_str(), static_cast<long long>(n_vocab), static_cast<long long>(n_embd),
                static_cast<long long>(n_layers), static_cast<long long>(n_heads),
                static_cast<long long>(n_kv_heads), static_cast<long long>(head_dim),
                static_cast<long long>(n_ff), static_cast<long long>(n_ctx_train), rope_base);
  return buf;
}

}  // namespace tlr
