// Model loading and the forward pass (model layer). The pass reads top to bottom:
//   embed (x sqrt(n_embd): gemma3) -> per layer [rms norm -> q,k,v (+bias: qwen2) -> per-head
//   q,k rms norm (qwen3, gemma3) -> rope -> cache -> attention (sliding window on gemma3's
//   local layers) -> o (-> rms norm: gemma3) -> add -> rms norm -> gate, up -> swiglu (gelu:
//   gemma3) -> down (-> rms norm: gemma3) -> add] -> final norm -> LM head (soft cap if set).
#include "model/model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/gguf/gguf_keys.h"
#include "model/packed_gguf.h"
#include "ops/matmul.h"
#include "ops/nn.h"
#include "ops/thread_pool.h"
#include "quant/quantize.h"
#include "util/hash.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

namespace tlr {

namespace k = gguf_keys;

ForwardContext::ForwardContext(ThreadPool* pool) : pool_(pool) {
  if (!pool_) {
    own_pool_ = std::make_unique<ThreadPool>(1);
    pool_ = own_pool_.get();
  }
}
ForwardContext::~ForwardContext() = default;

Expected<std::unique_ptr<Model>> Model::Load(const std::string& path, const Options& opts) {
  if (Status simd = CheckSimdSupport(); !simd.ok()) return simd;
  std::unique_ptr<Model> m(new Model());
  // A packed file's weights are used from its mapping: at a 2 MiB boundary, advised for huge
  // pages, as the weight cache's.
  const bool huge = LooksPacked(path);
  auto f = GgufFile::Open(path, {}, huge);
  if (!f.ok()) return f.status();
  auto packed = ReadPackedInfo(*f);
  if (!packed.ok()) return packed.status().WithPrefix("'" + path + "'");
  if (packed->has_value() && !huge) {  // general.architecture was not the first key
    f = GgufFile::Open(path, {}, /*huge=*/true);
    if (!f.ok()) return f.status();
  }
  m->file_ = std::move(f).value();
  auto cfg = ModelConfig::FromGguf(m->file_);
  if (!cfg.ok()) return cfg.status().WithPrefix("'" + path + "'");
  m->config_ = *cfg;
  TokenizerOptions topts;
  topts.pre_override = opts.pre_override;
  auto tok = Tokenizer::FromGguf(m->file_, topts);
  if (!tok.ok()) return tok.status().WithPrefix("'" + path + "' tokenizer");
  m->tokenizer_ = std::make_unique<Tokenizer>(std::move(tok).value());
  Status s = m->Bind();
  if (!s.ok()) return s.WithPrefix("'" + path + "'");
  s = CheckKvType(opts.kv_type, m->config_.head_dim);
  if (!s.ok()) return s.WithPrefix("'" + path + "'");
  m->kv_type_ = opts.kv_type;
  // (A packed file carries its source's fingerprint: MapPacked takes it from there.)
  if (!packed->has_value()) m->fingerprint_ = m->ComputeFingerprint();
  if (packed->has_value()) {
    s = m->MapPacked(path, **packed, opts.pre_override);
    if (!s.ok()) return s.WithPrefix("'" + path + "', a packed model (tlr convert), is refused");
    // What reading the header brought into memory leaves the resident set; the weights stay.
    m->file_.ReleaseHeader();
  } else if (opts.repack) {
    m->Repack(path, opts.weight_cache, opts.on_progress);
    // The matrices now come from the weight cache (or copies), the metadata has been parsed:
    // what reading the header, the tokenizer and the fingerprint's samples brought into memory
    // (~30 MiB for a Qwen2.5-0.5B file) leaves the resident set. The few pages still read (norms,
    // embedding rows) come back from the page cache on first use.
    m->file_.ReleaseResident();
  }
  return m;
}

uint64_t Model::ComputeFingerprint() const {
  const ModelConfig& c = config_;
  uint64_t h = Fnv1a(kFnvOffset, c.arch_name);
  for (int64_t v : {c.n_vocab, c.n_embd, c.n_layers, c.n_heads, c.n_kv_heads, c.n_ff}) {
    h = Fnv1a(h, &v, sizeof(v));
  }
  const uint64_t tok = tokenizer_->Fingerprint();
  h = Fnv1a(h, &tok, sizeof(tok));
  for (const GgufTensorInfo& t : file_.tensors()) {
    h = Fnv1a(h, t.name);
    const int32_t type = static_cast<int32_t>(t.type);
    h = Fnv1a(h, &type, sizeof(type));
    h = Fnv1a(h, t.dims.data(), t.dims.size() * sizeof(int64_t));
    const size_t n = std::min<uint64_t>(t.n_bytes, 256);
    h = Fnv1a(h, t.data, n);
    h = Fnv1a(h, t.data + t.n_bytes - n, n);
  }
  return h;
}

std::string Model::fingerprint_hex() const {
  char buf[17];
  return std::string(HexU64(fingerprint_, buf));
}

Expected<WeightView> Model::Matrix(const std::string& name, int64_t n_cols, int64_t n_rows) {
  const GgufTensorInfo* t = file_.FindTensor(name);
  if (!t) return Status::Error("tensor '" + name + "' is missing");
  if (t->dims.size() != 2 || t->dims[0] != n_cols || t->dims[1] != n_rows) {
    return Status::Error("tensor '" + name + "' has shape " + t->ShapeString() + ", expected [" +
                         std::to_string(n_cols) + ", " + std::to_string(n_rows) + "]");
  }
  if (!MatMulSupports(t->type)) {
    std::string supported;
    for (const auto& tr : AllGgmlTypes()) {
      if (MatMulSupports(tr.type)) supported += (supported.empty() ? "" : ", ") + std::string(tr.name);
    }
    return Status::Error("tensor '" + name + "' has type " + std::string(GgmlTraits(t->type).name) +
                         ", which has no kernel (supported: " + supported + ")");
  }
  return WeightView{t->type, t->data, n_rows, n_cols, static_cast<size_t>(t->n_bytes / n_rows)};
}

Expected<const float*> Model::FloatVector(const std::string& name, int64_t n, bool required) {
  const GgufTensorInfo* t = file_.FindTensor(name);
  if (!t) {
    if (required) return Status::Error("tensor '" + name + "' is missing");
    return static_cast<const float*>(nullptr);
  }
  if (static_cast<int64_t>(t->n_elements) != n || t->dims[0] != n) {
    return Status::Error("tensor '" + name + "' has shape " + t->ShapeString() + ", expected [" +
                         std::to_string(n) + "]");
  }
  if (t->type == GgmlType::kF32) return reinterpret_cast<const float*>(t->data);
  if (!CanDequantize(t->type)) {
    return Status::Error("tensor '" + name + "' has unsupported type " +
                         std::string(GgmlTraits(t->type).name));
  }
  auto buf = std::make_unique<float[]>(n);
  TLR_RETURN_IF_ERROR(Dequantize(t->type, t->data, buf.get(), n));
  notes_.push_back("converted " + name + " (" + std::string(GgmlTraits(t->type).name) + ") to f32");
  owned_.push_back(std::move(buf));
  return static_cast<const float*>(owned_.back().get());
}

Status Model::Bind() {
  const ModelConfig& c = config_;
  const GgufTensorInfo* emb = file_.FindTensor(k::kTokenEmbd);
  if (!emb) return Status::Error("tensor 'token_embd.weight' is missing");
  if (emb->dims.size() != 2 || emb->dims[0] != c.n_embd) {
    return Status::Error("tensor 'token_embd.weight' has shape " + emb->ShapeString() +
                         ", expected [" + std::to_string(c.n_embd) + ", n_vocab]");
  }
  if (!CanDequantize(emb->type)) {
    return Status::Error("tensor 'token_embd.weight' has unsupported type " +
                         std::string(GgmlTraits(emb->type).name));
  }
  config_.n_vocab = emb->dims[1];
  if (tokenizer_->n_vocab() > config_.n_vocab) {
    return Status::Error("the tokenizer has " + std::to_string(tokenizer_->n_vocab()) +
                         " tokens but the embedding only " + std::to_string(config_.n_vocab));
  }
  embd_ = {emb->type, emb->data, config_.n_vocab, c.n_embd,
           static_cast<size_t>(emb->n_bytes / config_.n_vocab)};
  if (file_.FindTensor(k::kOutput)) {
    auto out = Matrix(k::kOutput, c.n_embd, config_.n_vocab);
    if (!out.ok()) return out.status();
    output_ = *out;
  } else {
    if (!MatMulSupports(emb->type)) {
      return Status::Error("no output.weight and token_embd.weight's type has no kernel");
    }
    output_ = embd_;
    tied_ = true;
    notes_.push_back("output.weight absent: the LM head is the (tied) token embedding");
  }
  auto on = FloatVector(k::kOutputNorm, c.n_embd, true);
  if (!on.ok()) return on.status();
  output_norm_ = *on;

  layers_.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    Layer& L = layers_[l];
    auto name = [&](const char* s) { return k::BlockTensor(static_cast<int>(l), s); };
    struct M {
      const char* n;
      int64_t cols, rows;
      WeightView* dst;
    } mats[] = {
        {"attn_q.weight", c.n_embd, c.q_dim(), &L.q},     {"attn_k.weight", c.n_embd, c.kv_dim(), &L.k},
        {"attn_v.weight", c.n_embd, c.kv_dim(), &L.v},    {"attn_output.weight", c.q_dim(), c.n_embd, &L.o},
        {"ffn_gate.weight", c.n_embd, c.n_ff, &L.gate},   {"ffn_up.weight", c.n_embd, c.n_ff, &L.up},
        {"ffn_down.weight", c.n_ff, c.n_embd, &L.down},
    };
    for (const M& mt : mats) {
      auto w = Matrix(name(mt.n), mt.cols, mt.rows);
      if (!w.ok()) return w.status();
      *mt.dst = *w;
    }
    struct V {
      const char* n;
      int64_t len;
      bool required;
      const float** dst;
    } vecs[] = {
        {"attn_norm.weight", c.n_embd, true, &L.attn_norm},
        {"ffn_norm.weight", c.n_embd, true, &L.ffn_norm},
        {"attn_q.bias", c.q_dim(), c.attn_bias, &L.bq},
        {"attn_k.bias", c.kv_dim(), c.attn_bias, &L.bk},
        {"attn_v.bias", c.kv_dim(), c.attn_bias, &L.bv},
        {"attn_q_norm.weight", c.head_dim, c.qk_norm, &L.q_norm},
        {"attn_k_norm.weight", c.head_dim, c.qk_norm, &L.k_norm},
        {"post_attention_norm.weight", c.n_embd, c.post_norms, &L.attn_post_norm},
        {"post_ffw_norm.weight", c.n_embd, c.post_norms, &L.ffn_post_norm},
    };
    for (const V& vt : vecs) {
      auto p = FloatVector(name(vt.n), vt.len, vt.required);
      if (!p.ok()) return p.status();
      *vt.dst = *p;
    }
  }

  // RoPE inverse frequencies, divided by per-dimension factors when the file has them
  // (Llama 3.1+ stores its rope scaling as rope_freqs.weight).
  const int64_t half = c.head_dim / 2;
  inv_freq_.resize(half);
  auto factors = FloatVector("rope_freqs.weight", half, false);
  if (!factors.ok()) return factors.status();
  for (int64_t i = 0; i < half; ++i) {
    inv_freq_[i] = static_cast<float>(std::pow(static_cast<double>(c.rope_base),
                                               -2.0 * static_cast<double>(i) / c.head_dim)) *
                   c.RopeFrequencyScale(i);
    if (*factors) inv_freq_[i] /= (*factors)[i];
  }
  if (*factors) notes_.push_back("rope frequencies scaled by rope_freqs.weight");
  if (c.rope_yarn) {
    char b[160];
    std::snprintf(b, sizeof b, "rope scaled by YaRN: factor %g over an original context of %lld", 1.0 / c.rope_scale,
                  static_cast<long long>(c.yarn_orig_ctx));
    notes_.push_back(b);
  }
  // Sliding-window layers (gemma3) rotate with their own base and no scaling.
  inv_freq_local_.clear();
  if (!c.local_layer.empty()) {
    inv_freq_local_.resize(half);
    for (int64_t i = 0; i < half; ++i) {
      inv_freq_local_[i] = static_cast<float>(
          std::pow(static_cast<double>(c.rope_base_local), -2.0 * static_cast<double>(i) / c.head_dim));
    }
  }
  return Status::Ok();
}

std::vector<std::pair<std::string, WeightView*>> Model::KernelMatrices() {
  std::vector<std::pair<std::string, WeightView*>> mats;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& L = layers_[i];
    const char* names[] = {"q", "k", "v", "o", "gate", "up", "down"};
    WeightView* ws[] = {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down};
    for (int j = 0; j < 7; ++j) mats.emplace_back("blk." + std::to_string(i) + "." + names[j], ws[j]);
  }
  mats.emplace_back("output", &output_);
  return mats;
}

std::vector<std::pair<const GgufTensorInfo*, WeightView>> Model::PanelMatrices() const {
  std::map<const uint8_t*, const GgufTensorInfo*> by_data;
  for (const GgufTensorInfo& t : file_.tensors()) by_data[t.data] = &t;
  std::vector<std::pair<const GgufTensorInfo*, WeightView>> out;
  for (const auto& [name, w] : const_cast<Model*>(this)->KernelMatrices()) {
    auto it = by_data.find(w->data);
    if (CanRepack(w->type) && it != by_data.end()) out.emplace_back(it->second, *w);
  }
  return out;
}

Status Model::MapPacked(const std::string& path, const PackedInfo& info, const std::string& pre_override) {
  if (info.layout_version != kRepackLayoutVersion) {
    return Status::Error("packed in weight layout " + std::to_string(info.layout_version) + " by another TLR version (this one uses " +
                         std::to_string(kRepackLayoutVersion) + "): convert the original GGUF again with this version's `tlr convert`");
  }
  // An overridden pre-tokenizer changes the tokenizer's fingerprint: the file's own is hashed.
  uint64_t tok = tokenizer_->Fingerprint();
  if (!pre_override.empty()) {
    TLR_ASSIGN_OR_RETURN(Tokenizer stored, Tokenizer::FromGguf(file_, {}));
    tok = stored.Fingerprint();
  }
  if (PackedStructureHash(file_.metadata(), file_.tensors(), tok) != info.structure) {
    return Status::Error("damaged: its metadata or tensor table is not what was packed (tlr.packed.structure differs)");
  }
  const auto t0 = std::chrono::steady_clock::now();
  TLR_RETURN_IF_ERROR(VerifyPackedTensors(file_, info));
  // Every repacked tensor must be a matrix the kernels read in that layout.
  std::map<const uint8_t*, std::string> by_data;
  for (const GgufTensorInfo& t : file_.tensors()) by_data[t.data] = t.name;
  std::set<std::string> seen;
  for (auto& [name, w] : KernelMatrices()) {
    auto it = by_data.find(w->data);
    if (it == by_data.end() || !info.tensors.count(it->second)) continue;
    if (!CanRepack(w->type)) return Status::Error("damaged: tensor '" + it->second + "' is marked packed but its type has no panel layout");
    w->repacked = true;
    seen.insert(it->second);
  }
  for (const std::string& name : info.tensors) {
    if (!seen.count(name)) return Status::Error("damaged: tensor '" + name + "' is marked packed but is not one of the model's matrices");
  }
  // The writer packs every matrix that has a panel layout: one that is not marked would be read
  // in the wrong layout.
  for (auto& [name, w] : KernelMatrices()) {
    if (CanRepack(w->type) && !w->repacked) {
      auto it = by_data.find(w->data);
      return Status::Error("damaged: matrix '" + (it == by_data.end() ? name : it->second) +
                           "' has a panel layout but is not marked packed (tlr.packed.tensors)");
    }
  }
  fingerprint_ = info.fingerprint;
  packed_ = true;
  char b[200];
  std::snprintf(b, sizeof b, " (%zu matrices in the kernel layout, packed on %s; %.0f MiB checked in %.2f s)", seen.size(),
                info.simd_target.empty() ? "?" : info.simd_target.c_str(), total_weight_bytes() / 1048576.0,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  notes_.push_back("weights mapped straight from the packed file " + path + b + "; no weight cache");
  return Status::Ok();
}

void Model::Repack(const std::string& path, const std::string& cache,
                   const std::function<void(const std::string&)>& on_progress) {
  // The matrices in the kernels' layout, by name.
  std::vector<std::pair<std::string, WeightView*>> mats = KernelMatrices();
  auto is_float = [](const WeightView& w) {
    return w.type == GgmlType::kF32 || w.type == GgmlType::kF16 || w.type == GgmlType::kBF16;
  };
  std::vector<std::pair<std::string, WeightView*>> todo;
  for (auto& [name, w] : mats) {
    if ((CanRepack(w->type) || is_float(*w)) && !w->repacked && w->data != nullptr) todo.emplace_back(name, w);
  }
  if (todo.empty()) return;
  std::map<std::string, uint64_t> need;
  for (auto& [name, w] : todo) need[name] = w->row_bytes * static_cast<uint64_t>(w->n_rows);

  // A cache made before: the weights come straight from its mapping.
  // "off" and "auto" in any case ($TLR_WEIGHT_CACHE=OFF must not make a folder named OFF).
  auto is = [&](const char* word) { return strcasecmp(cache.c_str(), word) == 0; };
  const bool use_cache = !is("off");
  std::string cache_path, why;
  Expected<WeightCacheKey> key = Status::Error("no cache");
  if (use_cache) {
    key = WeightCache::KeyFor(path, fingerprint_, kRepackLayoutVersion, ActiveSimdTarget(), file_.shard_paths());
    cache_path = WeightCache::PathFor(path, fingerprint_, is("auto") ? "" : cache);
    if (key.ok()) {
      const auto t0 = std::chrono::steady_clock::now();
      auto c = WeightCache::Open(cache_path, *key, need);
      if (c.ok()) {
        weight_cache_ = std::make_unique<WeightCache>(std::move(c).value());
        for (auto& [name, w] : todo) w->data = weight_cache_->Data(name, &w->repacked);
        char b[160];
        std::snprintf(b, sizeof b, " (%.0f MiB, checked in %.2f s)", weight_cache_->bytes() / 1048576.0,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        notes_.push_back("weights in the kernel layout from the weight cache " + cache_path + b);
        return;
      }
      std::error_code ec;
      why = std::filesystem::exists(cache_path, ec) ? "the cache there cannot be used (" + c.status().message() + "): rebuilt"
                                                   : "no cache yet";
    } else {
      why = key.status().message();
    }
  }

  const auto t_repack = std::chrono::steady_clock::now();
  uint64_t total = 0;
  for (const auto& [name, n] : need) total += n;
  if (on_progress) {
    char b[200];
    std::snprintf(b, sizeof b, "preparing %.0f MiB of weights for this CPU (%s)...", total / 1048576.0,
                  use_cache ? why.c_str() : "the weight cache is off");
    on_progress(b);
  }
  uint64_t bytes = 0, copied_bytes = 0;
  int count = 0, copied = 0;
  std::vector<WeightCacheMatrix> made;
  for (auto& [name, wp] : todo) {
    WeightView& w = *wp;
    // Float weights keep GGUF's layout but are copied too: from the file mapping's 4 KiB
    // pages decode ran at ~72% of the memory roofline (a TLB miss and a prefetcher stop every
    // 4 KiB), from anonymous memory in huge pages at the kernel's full streaming speed.
    const bool copy_only = is_float(w);
    const size_t n = w.row_bytes * static_cast<size_t>(w.n_rows);
    PageBuffer buf = AllocateHugePages(n);
    if (copy_only) {
      std::memcpy(buf.get(), w.data, n);
    } else {
      RepackMatrix(w, buf.get());
    }
#ifdef MADV_PAGEOUT
    // The GGUF bytes are not read again (a tied embedding reads a few rows, which come back
    // from the file): let the kernel reclaim their pages now, so that the copy does not
    // double the resident size. Only a hint; the contents stay as they are.
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t from = reinterpret_cast<uintptr_t>(w.data);
    const uintptr_t lo = (from + page - 1) / page * page, hi = (from + n) / page * page;
    if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_PAGEOUT);
#endif
    w.data = buf.get();
    w.repacked = !copy_only;
    made.push_back({name, {buf.get(), n}, w.repacked});
    repacked_.push_back(std::move(buf));
    (copy_only ? copied_bytes : bytes) += n;
    ++(copy_only ? copied : count);
  }
  const double repack_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_repack).count();
  char b[96];
  std::snprintf(b, sizeof b, " in %.2f s", repack_s);
  if (count > 0) {
    notes_.push_back("repacked " + std::to_string(count) + " matrices (" +
                     std::to_string(bytes >> 20) + " MiB copied) into the kernel layout" + b);
  }
  if (copied > 0) {
    notes_.push_back("copied " + std::to_string(copied) + " float matrices (" + std::to_string(copied_bytes >> 20) +
                     " MiB) into huge-page memory");
  }
  if (!use_cache || !key.ok()) {
    if (on_progress) on_progress(std::string("done") + b);
    return;
  }
  // Kept for the next load; this one moves to the file's mapping too (clean pages).
  const auto t_write = std::chrono::steady_clock::now();
  Status st = WeightCache::Write(cache_path, *key, made);
  if (st.ok()) {
    auto c = WeightCache::Open(cache_path, *key, need, /*checksums=*/false);  // just written from these bytes
    if (c.ok()) {
      weight_cache_ = std::make_unique<WeightCache>(std::move(c).value());
      for (auto& [name, w] : todo) w->data = weight_cache_->Data(name, &w->repacked);
      repacked_.clear();
      std::snprintf(b, sizeof b, " in %.2f s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_write).count());
      notes_.push_back("wrote the weight cache " + cache_path + b + " (" + why + "); the next load maps it");
      if (on_progress) {
        std::snprintf(b, sizeof b, "%.1f s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t_repack).count());
        on_progress(std::string("done in ") + b + "; kept in " + cache_path + ": the next start maps it");
      }
      return;
    }
    st = c.status();
  }
  notes_.push_back("weight cache not kept (" + st.message() + "): the next load repacks again");
  if (on_progress) on_progress("done; the weight cache could not be kept (" + st.message() + ")");
}

void Model::EmbeddingRow(int32_t token, float* out) const {
  // A tied embedding is read from the LM head's copy (the weight cache's mapping, which the
  // head's product keeps resident anyway), not from the GGUF: a lookup there would bring the
  // page-cache folio around the row into this process, up to 2-4 MiB per token, and over a
  // conversation most of the embedding. Same bytes either way: UnrepackRow restores GGUF's.
  const WeightView& w = tied_ ? output_ : embd_;
  if (!w.repacked) {
    (void)Dequantize(w.type, w.Row(token), out, w.n_cols);
    return;
  }
  thread_local std::vector<uint8_t> blocks;
  if (blocks.size() < w.row_bytes) blocks.resize(w.row_bytes);
  UnrepackRow(w, token, blocks.data());
  (void)Dequantize(w.type, blocks.data(), out, w.n_cols);
}

uint64_t Model::weight_bytes_per_token() const {
  uint64_t b = embd_.row_bytes + output_.row_bytes * output_.n_rows;
  for (const Layer& L : layers_) {
    for (const WeightView* w : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) {
      b += w->row_bytes * w->n_rows;
    }
  }
  return b;
}

namespace {
template <typename T>
T* Grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

void RunMatMul(const WeightView& w, const float* x, int64_t n, int64_t ld, float* y, int64_t ldy,
               MatMulInput& in, ThreadPool* pool) {
  in.Prepare(w.type, x, n, w.n_cols, ld, pool);
  MatMul(w, in, y, ldy, pool);
}

// Matrices sharing one input in one parallel loop when their kernels take the same input
// kind (the usual case); one after the other otherwise. Outputs are [n, rows_i].
template <size_t N>
void RunMatMuls(const std::array<const WeightView*, N>& ws, const float* x, int64_t n, int64_t ld,
                const std::array<float*, N>& ys, MatMulInput& in, ThreadPool* pool) {
  bool same = true;
  for (size_t i = 1; i < N; ++i) same &= MatMulUsesQ8A(ws[i]->type) == MatMulUsesQ8A(ws[0]->type);
  if (!same) {
    for (size_t i = 0; i < N; ++i) RunMatMul(*ws[i], x, n, ld, ys[i], ws[i]->n_rows, in, pool);
    return;
  }
  in.Prepare(ws[0]->type, x, n, ws[0]->n_cols, ld, pool);
  std::array<WeightView, N> views;
  for (size_t i = 0; i < N; ++i) views[i] = *ws[i];
  MatMulFused(views, in, ys, pool);
}
}  // namespace

Status Model::Forward(std::span<SequenceInput> seqs, ForwardContext* ctx) const {
  const ModelConfig& c = config_;
  ThreadPool* pool = ctx->pool_;
  // Validate everything before touching any cache.
  int64_t n = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequenceInput& in = seqs[s];
    if (!in.cache) return Status::Error("sequence " + std::to_string(s) + " has no cache");
    if (in.tokens.empty()) return Status::Error("sequence " + std::to_string(s) + " has no tokens");
    for (size_t j = 0; j < s; ++j) {
      if (seqs[j].cache == in.cache) return Status::Error("a cache appears twice in one batch");
    }
    if (in.cache->n_layers() != c.n_layers || in.cache->n_kv_heads() != c.n_kv_heads ||
        in.cache->head_dim() != c.head_dim) {
      return Status::Error("sequence " + std::to_string(s) + "'s cache was made for another model");
    }
    for (int32_t t : in.tokens) {
      if (t < 0 || t >= c.n_vocab) {
        return Status::Error("token id " + std::to_string(t) + " is outside the vocabulary (0.." +
                             std::to_string(c.n_vocab - 1) + ")");
      }
    }
    const int64_t end = in.cache->size() + static_cast<int64_t>(in.tokens.size());
    if (end > in.cache->n_ctx()) {
      return Status::Error("sequence of " + std::to_string(end) + " tokens exceeds the context of " +
                           std::to_string(in.cache->n_ctx()) + " (prompt too long?)");
    }
    n += static_cast<int64_t>(in.tokens.size());
  }
  if (n == 0) return Status::Error("empty batch");
  for (SequenceInput& in : seqs) {
    TLR_RETURN_IF_ERROR(in.cache->Reserve(in.cache->size() + static_cast<int64_t>(in.tokens.size())));
  }

  const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff, hd = c.head_dim;
  float* x = Grow(ctx->x_, n * E);       // [n, E] residual stream
  float* xn = Grow(ctx->xn_, n * E);     // [n, E] normed input / sublayer output
  float* q = Grow(ctx->q_, n * Q);       // [n, Q]
  float* kk = Grow(ctx->k_, n * KV);     // [n, KV]
  float* vv = Grow(ctx->v_, n * KV);     // [n, KV]
  float* att = Grow(ctx->attn_, n * Q);  // [n, Q]
  float* gate = Grow(ctx->gate_, n * F); // [n, F]
  float* up = Grow(ctx->up_, n * F);     // [n, F]
  // [n, head_dim/2, (cos, sin)], then the same for local layers' frequencies if any.
  const bool has_local = !inv_freq_local_.empty();
  float* rope_cs = Grow(ctx->rope_cs_, (has_local ? 2 : 1) * n * hd);
  float* rope_cs_local = rope_cs + n * hd;
  int32_t* seq_of = Grow(ctx->seq_of_, n);
  int32_t* pos_of = Grow(ctx->pos_of_, n);
  {
    int64_t i = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      for (size_t j = 0; j < seqs[s].tokens.size(); ++j, ++i) {
        seq_of[i] = static_cast<int32_t>(s);
        pos_of[i] = static_cast<int32_t>(seqs[s].cache->size() + static_cast<int64_t>(j));
      }
    }
  }
  auto token_at = [&](int64_t i) {
    const SequenceInput& in = seqs[seq_of[i]];
    return in.tokens[pos_of[i] - in.cache->size()];
  };

  // Embedding rows, and each position's RoPE angles.
  pool->ParallelFor(n, 0, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      EmbeddingRow(token_at(i), x + i * E);
      if (c.embd_scale != 1.0f) {
        for (int64_t e2 = 0; e2 < E; ++e2) x[i * E + e2] *= c.embd_scale;
      }
      RopeAngles(static_cast<float>(pos_of[i]), inv_freq_.data(), hd / 2, rope_cs + i * hd);
      if (has_local) {
        RopeAngles(static_cast<float>(pos_of[i]), inv_freq_local_.data(), hd / 2, rope_cs_local + i * hd);
      }
    }
  });

  const int64_t group = c.n_heads / c.n_kv_heads;
  const bool neox = c.rope_style == RopeStyle::kNeox;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const Layer& L = layers_[l];
    const bool local = c.IsLocal(l);
    const float scale = local ? c.attn_scale_local : c.attn_scale;
    const float* layer_cs = local ? rope_cs_local : rope_cs;
    // Attention: norm, projections, biases, RoPE.
    pool->ParallelFor(n, 0, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) RmsNorm(x + i * E, L.attn_norm, xn + i * E, E, c.rms_eps);
    });
    RunMatMuls<3>({&L.q, &L.k, &L.v}, xn, n, E, {q, kk, vv}, ctx->in_, pool);
    pool->ParallelFor(n, 0, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        float* qi = q + i * Q;
        float* ki = kk + i * KV;
        float* vi = vv + i * KV;
        if (L.bq) AddInPlace(qi, L.bq, Q);
        if (L.bk) AddInPlace(ki, L.bk, KV);
        if (L.bv) AddInPlace(vi, L.bv, KV);
        if (L.q_norm) {
          for (int64_t h = 0; h < c.n_heads; ++h) RmsNorm(qi + h * hd, L.q_norm, qi + h * hd, hd, c.rms_eps);
          for (int64_t h = 0; h < c.n_kv_heads; ++h) RmsNorm(ki + h * hd, L.k_norm, ki + h * hd, hd, c.rms_eps);
        }
        const float* cs = layer_cs + i * hd;
        for (int64_t h = 0; h < c.n_heads; ++h) Rope(qi + h * hd, hd, cs, neox);
        for (int64_t h = 0; h < c.n_kv_heads; ++h) Rope(ki + h * hd, hd, cs, neox);
        seqs[seq_of[i]].cache->Store(l, pos_of[i], ki, vi);
      }
    });
    // Each token's query heads attend, one KV-head group at a time, to its sequence's
    // positions up to its own, read from the cache in its stored type.
    pool->ParallelFor(n * c.n_kv_heads, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t ik = b; ik < e; ++ik) {
        const int64_t i = ik / c.n_kv_heads, kvh = ik % c.n_kv_heads;
        const KvCache* cache = seqs[seq_of[i]].cache;
        const int64_t first = local ? std::max<int64_t>(0, pos_of[i] + 1 - c.sliding_window) : 0;
        Attention(q + i * Q + kvh * group * hd, group, cache->K(l, kvh), cache->V(l, kvh), pos_of[i] + 1, hd,
                  scale, att + i * Q + kvh * group * hd, first);
      }
    });
    RunMatMul(L.o, att, n, Q, xn, E, ctx->in_, pool);
    pool->ParallelFor(n, 0, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        if (L.attn_post_norm) RmsNorm(xn + i * E, L.attn_post_norm, xn + i * E, E, c.rms_eps);
        AddInPlace(x + i * E, xn + i * E, E);
        RmsNorm(x + i * E, L.ffn_norm, xn + i * E, E, c.rms_eps);
      }
    });
    // Feed-forward: SwiGLU (GELU-gated on gemma3).
    RunMatMuls<2>({&L.gate, &L.up}, xn, n, E, {gate, up}, ctx->in_, pool);
    pool->ParallelFor(n, 0, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        if (c.gelu_ffn) GeluGlu(gate + i * F, up + i * F, F);
        else SwiGlu(gate + i * F, up + i * F, F);
      }
    });
    RunMatMul(L.down, gate, n, F, xn, E, ctx->in_, pool);
    pool->ParallelFor(n, 0, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        if (L.ffn_post_norm) RmsNorm(xn + i * E, L.ffn_post_norm, xn + i * E, E, c.rms_eps);
        AddInPlace(x + i * E, xn + i * E, E);
      }
    });
  }
  for (SequenceInput& in : seqs) in.cache->Commit(in.cache->size() + static_cast<int64_t>(in.tokens.size()));

  // Outputs: final norm for the requested rows, then the LM head over just those rows.
  int64_t m = 0;
  bool any_logits = false;
  for (const SequenceInput& in : seqs) {
    if (in.rows == OutputRows::kNone || (!in.logits && !in.hidden)) continue;
    m += in.rows == OutputRows::kAll ? static_cast<int64_t>(in.tokens.size()) : 1;
    any_logits |= in.logits != nullptr;
  }
  if (m == 0) return Status::Ok();
  float* hid = Grow(ctx->out_hidden_, m * E);
  {
    int64_t r = 0, i = 0;
    for (const SequenceInput& in : seqs) {
      const int64_t cnt = static_cast<int64_t>(in.tokens.size());
      if (in.rows != OutputRows::kNone && (in.logits || in.hidden)) {
        const int64_t first = in.rows == OutputRows::kAll ? 0 : cnt - 1;
        for (int64_t j = first; j < cnt; ++j, ++r) {
          RmsNorm(x + (i + j) * E, output_norm_, hid + r * E, E, c.rms_eps);
        }
      }
      i += cnt;
    }
  }
  float* logits = nullptr;
  const int64_t V = c.n_vocab;
  if (any_logits) {
    logits = Grow(ctx->out_logits_, m * V);
    RunMatMul(output_, hid, m, E, logits, V, ctx->in_, pool);
    if (c.final_softcap > 0) {
      const float cap = c.final_softcap;
      for (int64_t j = 0; j < m * V; ++j) logits[j] = cap * std::tanh(logits[j] / cap);
    }
  }
  int64_t r = 0;
  for (SequenceInput& in : seqs) {
    if (in.rows == OutputRows::kNone || (!in.logits && !in.hidden)) continue;
    const int64_t rows = in.rows == OutputRows::kAll ? static_cast<int64_t>(in.tokens.size()) : 1;
    if (in.hidden) std::memcpy(in.hidden, hid + r * E, rows * E * sizeof(float));
    if (in.logits) std::memcpy(in.logits, logits + r * V, rows * V * sizeof(float));
    r += rows;
  }
  return Status::Ok();
}

}  // namespace tlr
