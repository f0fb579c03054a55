// ModelConfig from GGUF metadata (model layer).
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>

#include "model/gguf/gguf_keys.h"
#include "model/gguf/gguf_reader.h"
#include "model/packed_gguf.h"

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

constexpr const char* kKeyLength = "attention.key_length";
constexpr const char* kValueLength = "attention.value_length";

// Gemma 3: embedding scale, sliding-window layers and their RoPE base, logit soft-capping.
// As llama.cpp: with attention.sliding_window > 0 every layer but each 6th is local (unless
// attention.sliding_window_pattern says otherwise: a period, or one bool per layer, true =
// local), local layers rotate with base 10000 (rope.freq_base_swa if present) and no scaling.
Status ReadGemma3(const GgufFile& f, ModelConfig* c) {
  namespace k = gguf_keys;
  const std::string a = c->arch_name;
  c->embd_scale = std::sqrt(static_cast<float>(c->n_embd));
  const std::string window_key = k::ArchKey(a, "attention.sliding_window");
  if (f.Find(window_key)) {
    auto w = RequiredInt(f, window_key, 0, 1 << 24);
    if (!w.ok()) return w.status();
    c->sliding_window = *w;
  }
  const std::string pattern_key = k::ArchKey(a, "attention.sliding_window_pattern");
  const GgufValue* pattern = f.Find(pattern_key);
  if (c->sliding_window > 0) {
    c->local_layer.assign(c->n_layers, 0);
    int64_t period = 6;
    if (pattern && pattern->type() == GgufType::kArray) {
      const auto& arr = std::get<GgufArray>(pattern->v);
      if (arr.elem_type != GgufType::kBool || static_cast<int64_t>(arr.items.size()) != c->n_layers) {
        return Status::Error(pattern_key + " is not a layer pattern TLR knows: expected a period or " +
                             std::to_string(c->n_layers) + " bools (one per layer), got " + pattern->ToString());
      }
      for (int64_t l = 0; l < c->n_layers; ++l) c->local_layer[l] = std::get<bool>(arr.items[l].v);
      period = 0;
    } else if (pattern) {
      auto p = RequiredInt(f, pattern_key, 1, c->n_layers + 1);
      if (!p.ok()) {
        return Status::Error(pattern_key + " is not a layer pattern TLR knows (" + p.status().message() + ")");
      }
      period = *p;
    }
    for (int64_t l = 0; period > 0 && l < c->n_layers; ++l) c->local_layer[l] = l % period < period - 1;
  } else if (pattern) {
    return Status::Error(pattern_key + " is set but " + window_key + " is missing or 0");
  }
  const std::string base_key = k::ArchKey(a, "rope.freq_base_swa");
  if (f.Find(base_key)) {
    auto b = f.GetFloat(base_key);
    if (!b.ok()) return b.status();
    if (!(*b > 1.0)) return Status::Error(base_key + " must be > 1");
    c->rope_base_local = static_cast<float>(*b);
  }
  const std::string cap_key = k::ArchKey(a, "final_logit_softcapping");
  if (f.Find(cap_key)) {
    auto v = f.GetFloat(cap_key);
    if (!v.ok()) return v.status();
    if (!(*v >= 0)) return Status::Error(cap_key + " must be >= 0");
    c->final_softcap = static_cast<float>(*v);
  }
  return Status::Ok();
}
}  // namespace

Expected<ModelConfig> ModelConfig::FromGguf(const GgufFile& f) {
  namespace k = gguf_keys;
  ModelConfig c;
  auto arch = ModelArchitecture(f);  // a packed file's own (packed_gguf.h)
  if (!arch.ok()) return arch.status();
  c.arch_name = *arch;
  if (*arch == "qwen2") {
    c.arch = Arch::kQwen2;
    c.rope_style = RopeStyle::kNeox;
    c.attn_bias = true;
  } else if (*arch == "llama") {
    c.arch = Arch::kLlama;
    c.rope_style = RopeStyle::kNormal;
  } else if (*arch == "qwen3") {
    c.arch = Arch::kQwen3;
    c.rope_style = RopeStyle::kNeox;
    c.qk_norm = true;
  } else if (*arch == "gemma3") {
    c.arch = Arch::kGemma3;
    c.rope_style = RopeStyle::kNeox;
    c.qk_norm = c.post_norms = c.gelu_ffn = true;
  } else if (*arch == "tlr-router") {
    return Status::Error("this is a router file, not a language model (a router goes to --router of tlr generate, "
                         "chat, eval or ui)");
  } else {
    return Status::Error("architecture '" + *arch +
                         "' is not supported (supported: qwen2, llama, qwen3, gemma3)");
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
  if (f.Find(k::ArchKey(a, kKeyLength))) {
    TLR_RETURN_IF_ERROR(get(kKeyLength, 2, 4096, &c.head_dim));
  } else if (c.n_embd % c.n_heads != 0) {
    return Status::Error("embedding_length is not a multiple of head_count");
  }
  if (f.Find(k::ArchKey(a, kValueLength))) {
    int64_t v_dim = 0;
    TLR_RETURN_IF_ERROR(get(kValueLength, 2, 4096, &v_dim));
    if (v_dim != c.head_dim) {
      return Status::Error(k::ArchKey(a, kValueLength) + " = " + std::to_string(v_dim) + " differs from " +
                           k::ArchKey(a, kKeyLength) + " = " + std::to_string(c.head_dim) +
                           " (only equal key and value head dimensions are supported)");
    }
  }
  if (c.head_dim % 2 != 0) {
    return Status::Error(k::ArchKey(a, kKeyLength) + ": head dimension " + std::to_string(c.head_dim) +
                         " must be even for RoPE");
  }
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
  // RoPE scaling as llama.cpp reads it: a factor without a type is linear, type "none" scales
  // nothing; yarn also scales the attention by mscale^2 (below).
  std::string scaling = "linear";
  if (f.Find(k::ArchKey(a, "rope.scaling.type"))) {
    auto type = f.GetString(k::ArchKey(a, "rope.scaling.type"));
    if (!type.ok()) return type.status();
    scaling = *type;
  }
  double factor = 0;
  for (const char* key : {"rope.scaling.factor", "rope.scale_linear"}) {
    if (factor != 0 || !f.Find(k::ArchKey(a, key))) continue;
    auto v = f.GetFloat(k::ArchKey(a, key));
    if (!v.ok()) return v.status();
    if (!(*v >= 0 && *v < 1e6)) return Status::Error(k::ArchKey(a, key) + " = " + std::to_string(*v) + " is not a scaling factor");
    factor = *v;
  }
  float yarn_mscale = 1.0f, yarn_attn_factor = 1.0f;
  if (scaling != "none" && scaling != "linear" && scaling != "yarn") {
    return Status::Error(k::ArchKey(a, "rope.scaling.type") + " '" + scaling +
                         "' is not supported (linear, yarn and none are)");
  }
  if (scaling != "none" && factor > 0) c.rope_scale = static_cast<float>(1.0 / factor);
  if (scaling == "yarn") {
    c.rope_yarn = true;
    c.yarn_orig_ctx = c.n_ctx_train;
    if (f.Find(k::ArchKey(a, "rope.scaling.original_context_length"))) {
      TLR_RETURN_IF_ERROR(get("rope.scaling.original_context_length", 1, 1 << 24, &c.yarn_orig_ctx));
    }
    double attn_factor = 1.0;
    if (f.Find(k::ArchKey(a, "rope.scaling.attn_factor"))) {
      auto v = f.GetFloat(k::ArchKey(a, "rope.scaling.attn_factor"));
      if (!v.ok()) return v.status();
      if (!(*v > 0 && *v < 100)) return Status::Error(k::ArchKey(a, "rope.scaling.attn_factor") + " must be positive");
      attn_factor = *v;
    }
    // Hugging Face's get_mscale: no boost for a factor of 1 or less.
    yarn_attn_factor = static_cast<float>(attn_factor);
    yarn_mscale = static_cast<float>(attn_factor * (factor > 1 ? 1.0 + 0.1 * std::log(factor) : 1.0));
  }
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (f.Find(k::ArchKey(a, "attention.scale"))) {
    auto v = f.GetFloat(k::ArchKey(a, "attention.scale"));
    if (!v.ok()) return v.status();
    if (!(*v > 0 && *v < 1e3)) return Status::Error(k::ArchKey(a, "attention.scale") + " must be positive");
    c.attn_scale = static_cast<float>(*v);
  } else if (c.arch == Arch::kGemma3 && c.n_layers == 62) {
    // Gemma 3 27B scales by query_pre_attn_scalar = n_embd / n_heads, not head_dim (as
    // llama.cpp decides it, by the layer count).
    c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.n_embd / c.n_heads));
  }
  // YaRN scales both q's and k's rotations by mscale: the scores by its square. Sliding-window
  // layers (gemma3) rotate unscaled: their rotations keep only attn_factor (as in llama.cpp,
  // where their frequency scale is 1).
  c.attn_scale_local = c.attn_scale * yarn_attn_factor * yarn_attn_factor;
  c.attn_scale *= yarn_mscale * yarn_mscale;
  if (c.arch == Arch::kGemma3) TLR_RETURN_IF_ERROR(ReadGemma3(f, &c));
  // The vocabulary size is the embedding matrix's row count (checked against the tokenizer
  // and tensors by the model loader).
  if (const auto* emb = f.FindTensor(k::kTokenEmbd); emb && emb->dims.size() == 2) {
    c.n_vocab = emb->dims[1];
  }
  return c;
}

float ModelConfig::RopeFrequencyScale(int64_t i) const {
  if (!rope_yarn) return rope_scale;
  // The rotation count at which dimension pair d turns `rotations` times over the original
  // context, then the ramp from extrapolated (below low) to interpolated (above high).
  const double dims = static_cast<double>(head_dim);
  auto corr = [&](double rotations) {
    return dims * std::log(static_cast<double>(yarn_orig_ctx) / (rotations * 2 * std::numbers::pi)) / (2 * std::log(static_cast<double>(rope_base)));
  };
  const double low = std::max(0.0, std::floor(corr(yarn_beta_fast)));
  const double high = std::min(dims - 1, std::ceil(corr(yarn_beta_slow)));
  const double y = (static_cast<double>(i) - low) / std::max(0.001, high - low);
  const double extrapolate = 1.0 - std::clamp(y, 0.0, 1.0);  // 1: the original frequency
  return static_cast<float>(rope_scale * (1.0 - extrapolate) + extrapolate);
}

std::string ModelConfig::Summary() const {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%s: vocab %lld, embd %lld, layers %lld, heads %lld (kv %lld, dim %lld), ff %lld, "
                "ctx %lld, rope base %g%s",
                arch_name.c_str(), static_cast<long long>(n_vocab), static_cast<long long>(n_embd),
                static_cast<long long>(n_layers), static_cast<long long>(n_heads),
                static_cast<long long>(n_kv_heads), static_cast<long long>(head_dim),
                static_cast<long long>(n_ff), static_cast<long long>(n_ctx_train), rope_base,
                local_layer.empty() ? "" : ", sliding window");
  std::string out = buf;
  if (!local_layer.empty()) {
    int64_t n_local = 0;
    for (uint8_t v : local_layer) n_local += v;
    out += " " + std::to_string(sliding_window) + " on " + std::to_string(n_local) + "/" +
           std::to_string(n_layers) + " layers (local rope base " + std::to_string(static_cast<int>(rope_base_local)) + ")";
  }
  return out;
}

}  // namespace tlr
