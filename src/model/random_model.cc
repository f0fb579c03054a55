// Random-weight GGUF models (model layer). See random_model.h.
//
// Weight scales keep activations O(1) through any depth and the logits informative:
// matrices ~ N(0, 1/n_cols), embedding / LM head ~ N(0, (2.5)^2 / n_embd) (logit spread of a
// few nats), norms ~ 1 + N(0, 0.1^2), biases ~ N(0, 0.1^2).
#include "model/random_model.h"

#include <cmath>
#include <cstdio>
#include <map>

#include "model/chat_template.h"
#include "model/gguf/gguf_keys.h"
#include "model/gguf/gguf_reader.h"
#include "model/gguf/gguf_writer.h"
#include "model/tokenizer/tokenizer.h"
#include "quant/quant_mix.h"
#include "quant/quantize.h"
#include "util/utf8.h"

namespace tlr {
namespace {

struct Preset {
  const char* name;
  const char* arch;
  int64_t n_embd, n_layers, n_heads, n_kv_heads, n_ff, n_vocab, n_ctx;
  double rope_base, rms_eps;
  bool tied;
  bool llama3_rope;  // Llama 3.x frequency scaling (rope_freqs.weight)
  int64_t head_dim = 0;        // attention.key_length; 0: n_embd / n_heads
  int64_t sliding_window = 0;  // gemma3: attention.sliding_window
  bool any_arch = false;       // --arch may pick any architecture (the tiny test shapes)
};

const Preset kPresets[] = {
    {"tiny", "qwen2", 64, 2, 4, 2, 192, 512, 4096, 1e6, 1e-6, true, false, 0, 0, true},
    // Tests: rows of 256 and 512, so the K-quant and IQ4_XS types apply without fallback.
    {"tiny256", "qwen2", 256, 2, 4, 2, 512, 512, 4096, 1e6, 1e-6, true, false, 0, 0, true},
    // Tests of the newer families: heads wider than n_embd / n_heads (q_dim 128 > n_embd), and
    // for gemma3 six layers (five local with a window of 5 positions, then a global one).
    {"tiny-qwen3", "qwen3", 64, 2, 4, 2, 192, 512, 4096, 1e6, 1e-6, true, false, 32},
    {"tiny-gemma3", "gemma3", 64, 6, 4, 1, 192, 512, 4096, 1e6, 1e-6, true, false, 32, 5},
    {"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, 32768, 1e6, 1e-6, true, false},
    {"qwen2.5-1.5b", "qwen2", 1536, 28, 12, 2, 8960, 151936, 32768, 1e6, 1e-6, true, false},
    {"qwen2.5-7b", "qwen2", 3584, 28, 28, 4, 18944, 152064, 32768, 1e6, 1e-6, false, false},
    {"llama3.2-1b", "llama", 2048, 16, 32, 8, 8192, 128256, 131072, 500000, 1e-5, true, true},
    // Qwen3 (config.json of Qwen/Qwen3-0.6B and -1.7B): head_dim 128, tied embeddings.
    {"qwen3-0.6b", "qwen3", 1024, 28, 16, 8, 3072, 151936, 40960, 1e6, 1e-6, true, false, 128},
    {"qwen3-1.7b", "qwen3", 2048, 28, 16, 8, 6144, 151936, 40960, 1e6, 1e-6, true, false, 128},
    // Gemma 3 (google/gemma-3-270m and gemma-3-1b-pt): head_dim 256, one KV head, sliding
    // window 512 on five layers of six, tied embeddings.
    {"gemma3-270m", "gemma3", 640, 18, 4, 1, 2048, 262144, 32768, 1e6, 1e-6, true, false, 256, 512},
    {"gemma3-1b", "gemma3", 1152, 26, 4, 1, 6912, 262144, 32768, 1e6, 1e-6, true, false, 256, 512},
};

// SplitMix64: a seedable, portable generator; one stream per tensor (seeded from the tensor
// name), so tensors can be generated lazily in any order with the same result.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  void Normals(float* out, int64_t n, double sigma, double mean) {
    for (int64_t i = 0; i < n; i += 2) {  // Box-Muller
      const double r = std::sqrt(-2.0 * std::log(Uniform())), t = 2.0 * M_PI * Uniform();
      out[i] = static_cast<float>(mean + sigma * r * std::cos(t));
      if (i + 1 < n) out[i + 1] = static_cast<float>(mean + sigma * r * std::sin(t));
    }
  }
};

uint64_t SeedFor(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

const char* const kWords[] = {
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at",
    "from", "it", "an", "are", "which", "be", "this", "or", "have", "not", "one", "but", "they",
    "all", "can", "will", "there", "into", "some", "time", "new", "after", "first", "other",
    "what", "where", "when", "who", "how", "answer", "question", "made", "found", "used",
    "Answer", "Question", "The", "A", "is", "you", "your", "would", "should", "most", "likely",
    "place", "thing", "people", "water", "house", "store", "city", "animal", "food", "work"};

// Gemma's built-in vocabulary, SentencePiece-style as in Gemma 3's GGUF files: <pad> <eos>
// <bos> <unk>, the chat markers, the 256 byte-fallback pieces, the printable ASCII characters
// and "▁", then the words above with and without "▁", each prefix a piece (scores rank longer
// pieces first, so merges build words left to right).
Vocab BuiltinSpmVocab() {
  Vocab v;
  v.model = VocabModel::kSpm;
  v.pre = "default";
  v.add_space_prefix = false;
  std::map<std::string, int> index;
  auto add = [&](const std::string& t, TokenType type, float score) {
    if (index.count(t)) return index[t];
    index[t] = static_cast<int>(v.tokens.size());
    v.tokens.push_back(t);
    v.types.push_back(type);
    v.scores.push_back(score);
    return index[t];
  };
  v.pad_id = add("<pad>", TokenType::kControl, 0);
  v.eos_id = add("<eos>", TokenType::kControl, 0);
  v.bos_id = add("<bos>", TokenType::kControl, 0);
  v.unk_id = add("<unk>", TokenType::kUnknown, 0);
  add("<start_of_turn>", TokenType::kControl, 0);
  v.eot_id = add("<end_of_turn>", TokenType::kControl, 0);
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    add(hex, TokenType::kByte, 0);
  }
  add("\xE2\x96\x81", TokenType::kNormal, -1000);
  for (char ch = 33; ch < 127; ++ch) add(std::string(1, ch), TokenType::kNormal, -1000);
  for (const char* w : kWords) {
    for (const std::string& word : {std::string(w), "\xE2\x96\x81" + std::string(w)}) {
      const size_t first = word[0] == '\xE2' ? 3 : 1;
      for (size_t len = first + 1; len <= word.size(); ++len) {
        add(word.substr(0, len), TokenType::kNormal, -static_cast<float>(1000 - len));
      }
    }
  }
  v.add_bos = true;
  v.lstrip.assign(v.tokens.size(), 0);
  v.rstrip.assign(v.tokens.size(), 0);
  return v;
}

// The built-in vocabulary: the 256 byte-level characters, merges that spell a few hundred
// common English words, the architecture's special tokens, then reserved tokens up to n_vocab.
Vocab BuiltinVocab(const std::string& arch) {
  if (arch == "gemma3") return BuiltinSpmVocab();
  Vocab v;
  v.model = VocabModel::kBpe;
  v.pre = arch == "llama" ? "llama-bpe" : "qwen2";
  v.ignore_merges = arch == "llama";
  std::map<std::string, int> index;
  auto add = [&](const std::string& t, TokenType type) {
    if (index.count(t)) return index[t];
    index[t] = static_cast<int>(v.tokens.size());
    v.tokens.push_back(t);
    v.types.push_back(type);
    return index[t];
  };
  for (int b = 0; b < 256; ++b) add(ByteToBpeChar(static_cast<uint8_t>(b)), TokenType::kNormal);
  for (const char* w : kWords) {
    for (const std::string& word : {std::string(w), "\xC4\xA0" + std::string(w)}) {  // "Ġ" prefix
      // Merge left to right: ((Ġ t) h) e ...
      size_t pos = 0;
      char32_t cp;
      std::vector<std::string> chars;
      while (pos < word.size()) {
        const size_t start = pos;
        DecodeUtf8(word, &pos, &cp);
        chars.push_back(word.substr(start, pos - start));
      }
      std::string acc = chars[0];
      for (size_t i = 1; i < chars.size(); ++i) {
        const std::string merged = acc + chars[i];
        if (!index.count(merged)) {
          v.merges.emplace_back(acc, chars[i]);
          add(merged, TokenType::kNormal);
        }
        acc = merged;
      }
    }
  }
  if (arch == "llama") {
    v.bos_id = add("<|begin_of_text|>", TokenType::kControl);
    v.eos_id = add("<|end_of_text|>", TokenType::kControl);
    add("<|start_header_id|>", TokenType::kControl);
    add("<|end_header_id|>", TokenType::kControl);
    v.eot_id = add("<|eot_id|>", TokenType::kControl);
    v.add_bos = true;
  } else {
    v.bos_id = add("<|endoftext|>", TokenType::kControl);
    add("<|im_start|>", TokenType::kControl);
    v.eos_id = add("<|im_end|>", TokenType::kControl);
    v.eot_id = v.eos_id;
    v.add_bos = false;
  }
  v.lstrip.assign(v.tokens.size(), 0);
  v.rstrip.assign(v.tokens.size(), 0);
  return v;
}

constexpr const char* kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";
// Qwen3's generation prompt: with enable_thinking false, an empty think block (as its template).
constexpr const char* kQwen3Chat =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}";
constexpr const char* kLlama3Chat =
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}";
constexpr const char* kGemmaChat =
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == "
    "'assistant' else message['role'] %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | "
    "trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<start_of_turn>model\\n' }}{% endif %}";

const char* ChatTemplateFor(const std::string& arch) {
  if (arch == "llama") return kLlama3Chat;
  if (arch == "gemma3") return kGemmaChat;
  if (arch == "qwen3") return kQwen3Chat;
  return kChatMl;
}

}  // namespace

std::vector<std::string> RandomModelPresets() {
  std::vector<std::string> out;
  for (const Preset& p : kPresets) out.push_back(p.name);
  return out;
}

std::vector<RandomModelType> RandomModelTypes() {
  std::vector<RandomModelType> out;
  for (const FileType& f : FileTypes()) out.push_back({std::string(f.name), std::string(f.help), f.mix});
  return out;
}

Status WriteRandomModel(const RandomModelOptions& opts, const std::string& path,
                        const std::function<void(size_t, size_t)>& progress) {
  const Preset* p = nullptr;
  for (const Preset& q : kPresets) {
    if (opts.preset == q.name) p = &q;
  }
  if (!p) {
    std::string names;
    for (const auto& n : RandomModelPresets()) names += (names.empty() ? "" : ", ") + n;
    return Status::Error("unknown preset '" + opts.preset + "' (known: " + names + ")");
  }
  const std::string arch = opts.arch.empty() ? p->arch : opts.arch;
  if (arch != "qwen2" && arch != "llama" && arch != "qwen3" && arch != "gemma3") {
    return Status::Error("unknown architecture '" + arch + "' (qwen2, llama, qwen3 or gemma3)");
  }
  if (!p->any_arch && arch != p->arch) {  // the tiny presets take any
    return Status::Error("preset '" + opts.preset + "' is a " + p->arch + " model, not " + arch);
  }
  const FileType* ft = FindFileType(opts.type);
  if (!ft) {
    std::string names;
    for (const FileType& f : FileTypes()) names += (names.empty() ? "" : ", ") + std::string(f.name);
    return Status::Error("unknown type '" + opts.type + "' (known: " + names + ")");
  }

  // Tokenizer, and the chat template that comes with it (else the built-in one of the arch).
  Vocab vocab;
  std::string chat_template;
  if (opts.tokenizer_path.empty()) {
    vocab = BuiltinVocab(arch);
  } else if (opts.tokenizer_path.size() > 5 &&
             opts.tokenizer_path.compare(opts.tokenizer_path.size() - 5, 5, ".gguf") == 0) {
    auto f = GgufFile::Open(opts.tokenizer_path);
    if (!f.ok()) return f.status();
    auto v = VocabFromGguf(*f);
    if (!v.ok()) return v.status().WithPrefix("'" + opts.tokenizer_path + "'");
    vocab = std::move(v).value();
    if (auto t = f->GetString(gguf_keys::kTokChatTemplate); t.ok()) chat_template = *t;
  } else {
    auto v = VocabFromHfFile(opts.tokenizer_path);
    if (!v.ok()) return v.status();
    vocab = std::move(v).value();
    auto t = ChatTemplateBesideTokenizerJson(opts.tokenizer_path);  // tokenizer_config.json
    if (!t.ok()) return t.status();
    chat_template = std::move(t).value();
  }
  // Added tokens past the model's vocabulary size (Gemma 3's tokenizer.json adds an image
  // token after its 262144) are left out, as llama.cpp's converter does.
  auto is_named = [&](int32_t id) {
    return id == vocab.bos_id || id == vocab.eos_id || id == vocab.eot_id || id == vocab.pad_id || id == vocab.unk_id;
  };
  while (!opts.tokenizer_path.empty() && vocab.size() > p->n_vocab && !is_named(vocab.size() - 1) &&
         (vocab.types.back() == TokenType::kControl || vocab.types.back() == TokenType::kUserDefined)) {
    vocab.tokens.pop_back();
    vocab.types.pop_back();
    vocab.lstrip.pop_back();
    vocab.rstrip.pop_back();
    if (!vocab.scores.empty()) vocab.scores.pop_back();
  }
  const int64_t n_vocab = std::max<int64_t>(p->n_vocab, vocab.size());
  while (vocab.size() < n_vocab) {
    vocab.tokens.push_back("<|reserved_" + std::to_string(vocab.size()) + "|>");
    vocab.types.push_back(TokenType::kUnused);
    vocab.lstrip.push_back(0);
    vocab.rstrip.push_back(0);
    if (!vocab.scores.empty()) vocab.scores.push_back(-1e9f);
  }

  const int64_t E = p->n_embd, H = p->n_heads, KVH = p->n_kv_heads, F = p->n_ff;
  const int64_t hd = p->head_dim > 0 ? p->head_dim : E / H;
  GgufWriter w;
  w.Set(gguf_keys::kArchitecture, GgufValue::Str(arch));
  w.Set(gguf_keys::kName, GgufValue::Str("random " + opts.preset + " (" + opts.type +
                                         (opts.pure ? " pure" : "") + ", seed " +
                                         std::to_string(opts.seed) + ")"));
  w.Set(gguf_keys::kFileType, GgufValue::U32(ft->llama_ftype));
  if (GgmlTraits(ft->base).quantized) w.Set("general.quantization_version", GgufValue::U32(2));
  auto ak = [&](const char* key) { return gguf_keys::ArchKey(arch, key); };
  w.Set(ak(gguf_keys::kContextLength), GgufValue::U32(static_cast<uint32_t>(p->n_ctx)));
  w.Set(ak(gguf_keys::kEmbeddingLength), GgufValue::U32(static_cast<uint32_t>(E)));
  w.Set(ak(gguf_keys::kBlockCount), GgufValue::U32(static_cast<uint32_t>(p->n_layers)));
  w.Set(ak(gguf_keys::kFeedForwardLength), GgufValue::U32(static_cast<uint32_t>(F)));
  w.Set(ak(gguf_keys::kHeadCount), GgufValue::U32(static_cast<uint32_t>(H)));
  w.Set(ak(gguf_keys::kHeadCountKv), GgufValue::U32(static_cast<uint32_t>(KVH)));
  w.Set(ak(gguf_keys::kRmsEps), GgufValue::F32(static_cast<float>(p->rms_eps)));
  w.Set(ak(gguf_keys::kRopeFreqBase), GgufValue::F32(static_cast<float>(p->rope_base)));
  if (opts.yarn_factor > 0) {
    if (!(opts.yarn_factor >= 1 && opts.yarn_factor <= 1024) || opts.yarn_orig_ctx < 1 || opts.yarn_orig_ctx > (1 << 24)) {
      return Status::Error("YaRN needs a factor in 1..1024 and an original context in 1..2^24");
    }
    w.Set(ak("rope.scaling.type"), GgufValue::Str("yarn"));
    w.Set(ak("rope.scaling.factor"), GgufValue::F32(static_cast<float>(opts.yarn_factor)));
    w.Set(ak("rope.scaling.original_context_length"), GgufValue::U32(static_cast<uint32_t>(opts.yarn_orig_ctx)));
  }
  if (arch == "llama") {
    w.Set(ak(gguf_keys::kRopeDimensionCount), GgufValue::U32(static_cast<uint32_t>(hd)));
    w.Set(ak(gguf_keys::kVocabSize), GgufValue::U32(static_cast<uint32_t>(n_vocab)));
  }
  if (arch == "qwen3" || arch == "gemma3") {  // as llama.cpp's converter writes them
    w.Set(ak("attention.key_length"), GgufValue::U32(static_cast<uint32_t>(hd)));
    w.Set(ak("attention.value_length"), GgufValue::U32(static_cast<uint32_t>(hd)));
  }
  if (arch == "gemma3") {
    const int64_t window = p->sliding_window > 0 ? p->sliding_window : 512;
    w.Set(ak("attention.sliding_window"), GgufValue::U32(static_cast<uint32_t>(window)));
  }
  VocabToGguf(vocab, &w);
  if (chat_template.empty()) chat_template = ChatTemplateFor(arch);
  w.Set(gguf_keys::kTokChatTemplate, GgufValue::Str(chat_template));

  // Tensor types: as llama-quantize would choose them for this file type (quant_mix.h).
  const int n_layers = static_cast<int>(p->n_layers);
  auto type_for = [&](TensorRole role, int64_t n_cols, int64_t layer = 0) {
    return TensorTypeFor(*ft, {role, n_cols, static_cast<int>(layer), n_layers, p->tied}, opts.pure);
  };
  const uint64_t seed = opts.seed;
  auto add = [&](const std::string& name, std::vector<int64_t> dims, GgmlType type, double sigma,
                 double mean) -> Status {
    return w.AddTensorLazy(name, type, dims, [=](std::span<uint8_t> out) -> Status {
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      const int64_t row = dims[0];
      Rng rng{SeedFor(seed, name)};
      std::vector<float> buf(row);
      const size_t row_bytes = out.size() / (n / row);
      for (int64_t r = 0; r < n / row; ++r) {
        rng.Normals(buf.data(), row, sigma, mean);
        TLR_RETURN_IF_ERROR(Quantize(type, buf.data(), out.data() + r * row_bytes, row));
      }
      return Status::Ok();
    });
  };
  const double s_emb = 2.5 / std::sqrt(static_cast<double>(E));
  TLR_RETURN_IF_ERROR(add(gguf_keys::kTokenEmbd, {E, n_vocab}, type_for(TensorRole::kTokenEmbd, E), s_emb, 0));
  for (int64_t l = 0; l < p->n_layers; ++l) {
    auto n = [&](const char* s) { return gguf_keys::BlockTensor(static_cast<int>(l), s); };
    const double se = 1.0 / std::sqrt(static_cast<double>(E)), sf = 1.0 / std::sqrt(static_cast<double>(F));
    const double sq = 1.0 / std::sqrt(static_cast<double>(H * hd));
    TLR_RETURN_IF_ERROR(add(n("attn_norm.weight"), {E}, GgmlType::kF32, 0.1, 1.0));
    TLR_RETURN_IF_ERROR(add(n("attn_q.weight"), {E, H * hd}, type_for(TensorRole::kAttnQ, E, l), se, 0));
    TLR_RETURN_IF_ERROR(add(n("attn_k.weight"), {E, KVH * hd}, type_for(TensorRole::kAttnK, E, l), se, 0));
    TLR_RETURN_IF_ERROR(add(n("attn_v.weight"), {E, KVH * hd}, type_for(TensorRole::kAttnV, E, l), se, 0));
    if (arch == "qwen2") {
      TLR_RETURN_IF_ERROR(add(n("attn_q.bias"), {H * hd}, GgmlType::kF32, 0.1, 0));
      TLR_RETURN_IF_ERROR(add(n("attn_k.bias"), {KVH * hd}, GgmlType::kF32, 0.1, 0));
      TLR_RETURN_IF_ERROR(add(n("attn_v.bias"), {KVH * hd}, GgmlType::kF32, 0.1, 0));
    }
    if (arch == "qwen3" || arch == "gemma3") {
      TLR_RETURN_IF_ERROR(add(n("attn_q_norm.weight"), {hd}, GgmlType::kF32, 0.1, 1.0));
      TLR_RETURN_IF_ERROR(add(n("attn_k_norm.weight"), {hd}, GgmlType::kF32, 0.1, 1.0));
    }
    TLR_RETURN_IF_ERROR(add(n("attn_output.weight"), {H * hd, E}, type_for(TensorRole::kAttnOutput, H * hd, l), sq, 0));
    if (arch == "gemma3") {  // stored as llama.cpp's converter stores them: 1 + Gemma's weight
      TLR_RETURN_IF_ERROR(add(n("post_attention_norm.weight"), {E}, GgmlType::kF32, 0.1, 1.0));
      TLR_RETURN_IF_ERROR(add(n("post_ffw_norm.weight"), {E}, GgmlType::kF32, 0.1, 1.0));
    }
    TLR_RETURN_IF_ERROR(add(n("ffn_norm.weight"), {E}, GgmlType::kF32, 0.1, 1.0));
    TLR_RETURN_IF_ERROR(add(n("ffn_gate.weight"), {E, F}, type_for(TensorRole::kFfnGate, E, l), se, 0));
    TLR_RETURN_IF_ERROR(add(n("ffn_up.weight"), {E, F}, type_for(TensorRole::kFfnUp, E, l), se, 0));
    TLR_RETURN_IF_ERROR(add(n("ffn_down.weight"), {F, E}, type_for(TensorRole::kFfnDown, F, l), sf, 0));
  }
  TLR_RETURN_IF_ERROR(add(gguf_keys::kOutputNorm, {E}, GgmlType::kF32, 0.1, 1.0));
  if (!p->tied) TLR_RETURN_IF_ERROR(add(gguf_keys::kOutput, {E, n_vocab}, type_for(TensorRole::kOutput, E), s_emb, 0));
  if (p->llama3_rope) {
    // Llama 3.1/3.2 rope scaling (factor 32, low 1, high 4, original context 8192), as
    // llama.cpp's converter stores it.
    const double factor = 32, low = 1, high = 4, old_ctx = 8192;
    std::vector<float> f(hd / 2);
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double freq = 1.0 / std::pow(p->rope_base, 2.0 * i / hd);
      const double wavelen = 2 * M_PI / freq;
      if (wavelen < old_ctx / high) f[i] = 1;
      else if (wavelen > old_ctx / low) f[i] = static_cast<float>(factor);
      else {
        const double smooth = (old_ctx / wavelen - low) / (high - low);
        f[i] = static_cast<float>(1.0 / ((1 - smooth) / factor + smooth));
      }
    }
    TLR_RETURN_IF_ERROR(w.AddTensorF32("rope_freqs.weight", {hd / 2}, f));
  }
  return w.WriteFile(path, progress);
}

}  // namespace tlr
