// Routers: kinds, the GGUF format, and inference (see router.h).
#include "routing/router.h"

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "model/gguf/gguf_reader.h"
#include "model/gguf/gguf_writer.h"
#include "model/model.h"
#include "quant/quantize.h"
#include "routing/mlp_train.h"
#include "routing/r2r_net.h"

namespace tlr {

namespace {

constexpr const char* kArch = "tlr-router";
constexpr const char* kKeyKind = "tlr-router.kind";
constexpr const char* kKeyInputDim = "tlr-router.input_dim";
constexpr const char* kKeyFingerprint = "tlr-router.slm_fingerprint";
constexpr const char* kKeySlmName = "tlr-router.slm_name";
constexpr const char* kKeyThreshold = "tlr-router.threshold";
constexpr const char* kKeySummary = "tlr-router.training_summary";
constexpr const char* kKeyLayers = "tlr-router.layer_count";
constexpr const char* kR2rPrefix = "router.r2r.";

std::string LayerTensor(size_t i, const char* what) {
  return "router.layer." + std::to_string(i) + "." + what;
}

// SplitMix64: the random router's generator.
uint64_t NextRandom(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Status CheckShapes(RouterKind kind, const std::vector<DenseLayer>& layers) {
  const size_t want = kind == RouterKind::kCiter ? 3 : 1;
  if (layers.size() != want) {
    return Status::Error(std::string(RouterKindName(kind)) + " router needs " +
                         std::to_string(want) + " layers, got " + std::to_string(layers.size()));
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const DenseLayer& l = layers[i];
    if (l.n_in <= 0 || l.n_out <= 0 || l.w.size() != static_cast<size_t>(l.n_in * l.n_out) ||
        l.b.size() != static_cast<size_t>(l.n_out)) {
      return Status::Error("router layer " + std::to_string(i) + " has inconsistent sizes");
    }
    for (const std::vector<float>* v : {&l.w, &l.b}) {
      if (!std::all_of(v->begin(), v->end(), [](float x) { return std::isfinite(x); })) {
        return Status::Error("router layer " + std::to_string(i) + " has a weight or bias that is NaN or infinite");
      }
    }
    if (i > 0 && l.n_in != layers[i - 1].n_out) {
      return Status::Error("router layer " + std::to_string(i) + " takes " +
                           std::to_string(l.n_in) + " inputs but the previous layer gives " +
                           std::to_string(layers[i - 1].n_out));
    }
  }
  if (layers.back().n_out != 1) return Status::Error("the router's last layer must have one output");
  return Status::Ok();
}

}  // namespace

struct Router::Compiled {
  struct L {
    std::vector<uint8_t> bytes;
    WeightView view;
  };
  std::vector<L> layers;
  MatMulInput in;
  std::vector<float> a, b;  // activations, ping-pong
};

Router::Router() = default;
Router::~Router() = default;
Router::Router(Router&&) noexcept = default;
Router& Router::operator=(Router&&) noexcept = default;

std::string_view RouterKindName(RouterKind kind) {
  switch (kind) {
    case RouterKind::kCiter: return "citer";
    case RouterKind::kColm: return "colm";
    case RouterKind::kMaxProb: return "maxprob";
    case RouterKind::kEntropy: return "entropy";
    case RouterKind::kRandom: return "random";
    case RouterKind::kR2r: return "r2r";
  }
  return "?";
}

Expected<RouterKind> ParseRouterKind(std::string_view name) {
  for (RouterKind k : {RouterKind::kCiter, RouterKind::kColm, RouterKind::kMaxProb,
                       RouterKind::kEntropy, RouterKind::kRandom, RouterKind::kR2r}) {
    if (name == RouterKindName(k)) return k;
  }
  return Status::Error("unknown router kind '" + std::string(name) +
                       "' (citer, colm, maxprob, entropy, random, r2r)");
}

bool RouterIsLearned(RouterKind kind) {
  return kind == RouterKind::kCiter || kind == RouterKind::kColm || kind == RouterKind::kR2r;
}

Expected<Router> Router::Builtin(RouterKind kind, uint64_t seed) {
  if (RouterIsLearned(kind)) {
    return Status::Error(std::string(RouterKindName(kind)) +
                         " is a learned router: give a router file (tlr router train makes one)");
  }
  Router r;
  r.info_.kind = kind;
  r.info_.threshold = kind == RouterKind::kRandom ? 0.1f : 0.5f;
  r.seed_ = seed;
  return r;
}

Expected<Router> Router::FromR2r(RouterInfo info, R2rNet net) {
  info.kind = RouterKind::kR2r;
  info.input_dim = net.hidden;
  Router r;
  r.info_ = std::move(info);
  r.type_ = net.matrix_type();
  r.r2r_ = std::make_shared<const R2rNet>(std::move(net));
  return r;
}

Expected<Router> Router::FromLayers(RouterInfo info, std::vector<DenseLayer> layers, GgmlType type) {
  if (info.kind == RouterKind::kR2r) return Status::Error("an r2r router is made from its network (FromR2r)");
  if (!RouterIsLearned(info.kind)) {
    return Status::Error(std::string(RouterKindName(info.kind)) + " routers have no layers");
  }
  TLR_RETURN_IF_ERROR(CheckShapes(info.kind, layers));
  if (type != GgmlType::kF32 && type != GgmlType::kF16 && type != GgmlType::kQ8_0) {
    return Status::Error("router weights must be f32, f16 or q8_0");
  }
  info.input_dim = layers.front().n_in;
  for (size_t i = 0; i + 1 < layers.size(); ++i) layers[i].relu = true;
  layers.back().relu = false;
  Router r;
  r.info_ = std::move(info);
  r.layers_ = std::move(layers);
  r.type_ = type;
  TLR_RETURN_IF_ERROR(r.Compile());
  return r;
}

Status Router::Compile() {
  compiled_ = std::make_unique<Compiled>();
  for (const DenseLayer& l : layers_) {
    const GgmlType t = RouterMatrixType(type_, l.n_in);
    auto row_bytes = GgmlTensorBytes(t, l.n_in, l.n_in);
    if (!row_bytes.ok()) return row_bytes.status();
    Compiled::L c;
    c.bytes.resize(*row_bytes * l.n_out);
    std::vector<float> back(static_cast<size_t>(l.n_in));
    for (int64_t r = 0; r < l.n_out; ++r) {
      uint8_t* row = c.bytes.data() + r * *row_bytes;
      TLR_RETURN_IF_ERROR(Quantize(t, l.w.data() + r * l.n_in, row, l.n_in));
      // f16 (and q8_0's f16 scales) end at 65504: a larger weight would become infinite.
      if (t == GgmlType::kF32) continue;
      TLR_RETURN_IF_ERROR(Dequantize(t, row, back.data(), l.n_in));
      for (float x : back) {
        if (!std::isfinite(x)) {
          return Status::Error("router layer " + std::to_string(compiled_->layers.size()) +
                               " has weights beyond " + std::string(GgmlTraits(t).name) +
                               "'s range or not finite (store it as f32)");
        }
      }
    }
    c.view = {t, nullptr, l.n_out, l.n_in, static_cast<size_t>(*row_bytes)};
    compiled_->layers.push_back(std::move(c));
  }
  for (auto& c : compiled_->layers) c.view.data = c.bytes.data();
  return Status::Ok();
}

int64_t Router::n_params() const {
  if (r2r_) return r2r_->n_params();
  int64_t n = 0;
  for (const DenseLayer& l : layers_) n += l.n_in * l.n_out + l.n_out;
  return n;
}

Expected<Router> Router::Load(const std::string& path) {
  auto f = GgufFile::Open(path);
  if (!f.ok()) return f.status();
  return FromGguf(*f, path);
}

Expected<Router> Router::FromGguf(const GgufFile& file, const std::string& path) {
  auto pre = [&](const Status& s) { return s.WithPrefix("router '" + path + "'"); };
  auto arch = file.GetString("general.architecture");
  if (!arch.ok()) return pre(arch.status());
  if (*arch != kArch) {
    return pre(Status::Error("general.architecture is '" + *arch + "', not '" + kArch +
                             "' (is this a model file rather than a router?)"));
  }
  auto kind_name = file.GetString(kKeyKind);
  if (!kind_name.ok()) return pre(kind_name.status());
  auto kind = ParseRouterKind(*kind_name);
  if (!kind.ok()) return pre(kind.status());
  RouterInfo info;
  info.kind = *kind;
  if (auto v = file.GetString(kKeyFingerprint); v.ok()) info.slm_fingerprint = *v;
  if (auto v = file.GetString(kKeySlmName); v.ok()) info.slm_name = *v;
  if (auto v = file.GetString(kKeySummary); v.ok()) info.training_summary = *v;
  if (auto v = file.GetFloat(kKeyThreshold); v.ok()) {
    // A NaN threshold would load and then never route (every comparison with it is false); an
    // f64 one is checked as the float it becomes (1e300 is infinite there).
    info.threshold = static_cast<float>(*v);
    if (!std::isfinite(info.threshold)) return pre(Status::Error(std::string(kKeyThreshold) + " is not a finite number"));
  }
  if (!RouterIsLearned(info.kind)) {
    auto r = Builtin(info.kind);
    if (!r.ok()) return pre(r.status());
    r->info_ = info;
    return r;
  }
  if (info.kind == RouterKind::kR2r) {
    std::map<std::string, R2rNet::Tensor> params;
    uint64_t copied = 0;  // GGUF lets tensors share bytes: a small file could name gigabytes
    for (const GgufTensorInfo& t : file.tensors()) {
      if (t.name.rfind(kR2rPrefix, 0) != 0) continue;
      copied += t.n_bytes;
      if (copied > file.file_size()) return pre(Status::Error("its tensors share bytes (they add up to more than the file)"));
      if (t.type != GgmlType::kF32 && !(t.dims.size() == 2 && (t.type == GgmlType::kF16 || t.type == GgmlType::kQ8_0))) {
        return pre(Status::Error(t.name + " must be f32 (a matrix: f32, f16 or q8_0), not " +
                                 std::string(GgmlTraits(t.type).name)));
      }
      R2rNet::Tensor p;
      int64_t n = 1;
      for (size_t d = t.dims.size(); d-- > 0;) {  // GGUF lists the fastest dimension first
        p.shape.push_back(t.dims[d]);
        n *= t.dims[d];
      }
      if (n <= 0 || n > (int64_t{1} << 31)) return pre(Status::Error(t.name + " has an implausible size"));
      p.type = t.type;
      if (t.type == GgmlType::kF32) {
        p.v.resize(static_cast<size_t>(n));
        std::memcpy(p.v.data(), t.data, p.v.size() * sizeof(float));
      } else {  // the reader checked the row length against the type's blocks and the bytes against the file
        p.q.assign(t.data, t.data + t.n_bytes);
      }
      params[t.name.substr(std::strlen(kR2rPrefix))] = std::move(p);
    }
    auto net = R2rNet::FromParams(std::move(params));
    if (!net.ok()) return pre(net.status());
    auto dim = file.GetUint(kKeyInputDim);
    if (!dim.ok()) return pre(dim.status());
    if (static_cast<int64_t>(*dim) != net->hidden) return pre(Status::Error("input_dim does not match the network"));
    auto r = FromR2r(std::move(info), std::move(net).value());
    if (!r.ok()) return pre(r.status());
    return r;
  }
  auto n_layers = file.GetUint(kKeyLayers);
  if (!n_layers.ok()) return pre(n_layers.status());
  if (*n_layers < 1 || *n_layers > 8) return pre(Status::Error("layer_count out of range"));
  std::vector<DenseLayer> layers;
  std::vector<GgmlType> stored;
  for (size_t i = 0; i < *n_layers; ++i) {
    const GgufTensorInfo* w = file.FindTensor(LayerTensor(i, "weight"));
    const GgufTensorInfo* b = file.FindTensor(LayerTensor(i, "bias"));
    if (!w || !b) return pre(Status::Error("tensor " + LayerTensor(i, w ? "bias" : "weight") + " is missing"));
    if (w->dims.size() != 2 || b->dims.size() != 1 || b->dims[0] != w->dims[1]) {
      return pre(Status::Error("layer " + std::to_string(i) + " has shapes " + w->ShapeString() +
                               " and " + b->ShapeString()));
    }
    if (w->type != GgmlType::kF32 && w->type != GgmlType::kF16 && w->type != GgmlType::kQ8_0) {
      return pre(Status::Error(LayerTensor(i, "weight") + " must be f32, f16 or q8_0"));
    }
    if (b->type != GgmlType::kF32) return pre(Status::Error(LayerTensor(i, "bias") + " must be f32"));
    stored.push_back(w->type);
    DenseLayer l;
    l.n_in = w->dims[0];
    l.n_out = w->dims[1];
    if (l.n_in > (1 << 20) || l.n_out > (1 << 20)) return pre(Status::Error("layer too large"));
    l.w.resize(l.n_in * l.n_out);
    l.b.resize(l.n_out);
    TLR_RETURN_IF_ERROR(pre(Dequantize(w->type, w->data, l.w.data(), l.n_in * l.n_out)));
    std::memcpy(l.b.data(), b->data, l.n_out * sizeof(float));
    layers.push_back(std::move(l));
  }
  // The router's weight type as Save wrote it: q8_0 when any layer is, and then every layer as
  // RouterMatrixType stores it (a file that mixes types otherwise would be compiled into another router).
  const GgmlType type = std::count(stored.begin(), stored.end(), GgmlType::kQ8_0) ? GgmlType::kQ8_0 : stored.front();
  for (size_t i = 0; i < layers.size(); ++i) {
    if (stored[i] != RouterMatrixType(type, layers[i].n_in)) {
      return pre(Status::Error(LayerTensor(i, "weight") + " is " + std::string(GgmlTraits(stored[i]).name) + " in a router of " +
                               std::string(GgmlTraits(type).name) + " weights (a router stores every layer in one type, f16 for " +
                               "q8_0 layers whose rows are not a multiple of 32)"));
    }
  }
  auto dim = file.GetUint(kKeyInputDim);
  if (!dim.ok()) return pre(dim.status());
  if (static_cast<int64_t>(*dim) != layers.front().n_in) {
    return pre(Status::Error("input_dim " + std::to_string(*dim) + " does not match the first layer (" +
                             std::to_string(layers.front().n_in) + ")"));
  }
  auto r = FromLayers(std::move(info), std::move(layers), type);
  if (!r.ok()) return pre(r.status());
  return r;
}

Expected<Router> Router::LoadOrBuiltin(const std::string& path_or_kind, uint64_t seed) {
  auto kind = ParseRouterKind(path_or_kind);
  if (kind.ok() && !RouterIsLearned(*kind)) return Builtin(*kind, seed);
  auto r = Load(path_or_kind);
  if (r.ok()) {
    r->seed_ = seed;
    return r;
  }
  std::error_code ec;
  if (!std::filesystem::exists(path_or_kind, ec)) {
    // Not a file (nor a memory file): say what the name can be; a learned kind's name is no
    // router by itself.
    return Status::Error((kind.ok() ? "router '" + path_or_kind + "': a " + path_or_kind +
                                          " router is a trained file (tlr router train)"
                                    : r.status().message()) +
                         "; the built-in routers are maxprob, entropy and random");
  }
  return r;
}

Status Router::Save(const std::string& path) const {
  GgufWriter w;
  TLR_RETURN_IF_ERROR(Describe(&w));
  return w.WriteFile(path);
}

Expected<std::vector<uint8_t>> Router::ToBytes() const {
  GgufWriter w;
  TLR_RETURN_IF_ERROR(Describe(&w));
  return w.ToBytes();
}

Status Router::Describe(GgufWriter* writer) const {
  GgufWriter& w = *writer;
  w.Set("general.architecture", GgufValue::Str(kArch));
  w.Set("general.name", GgufValue::Str("tlr router (" + std::string(RouterKindName(info_.kind)) + ")"));
  w.Set(kKeyKind, GgufValue::Str(std::string(RouterKindName(info_.kind))));
  w.Set(kKeyInputDim, GgufValue::U32(static_cast<uint32_t>(info_.input_dim)));
  w.Set(kKeyFingerprint, GgufValue::Str(info_.slm_fingerprint));
  w.Set(kKeySlmName, GgufValue::Str(info_.slm_name));
  w.Set(kKeyThreshold, GgufValue::F32(info_.threshold));
  w.Set(kKeySummary, GgufValue::Str(info_.training_summary.empty() ? "{}" : info_.training_summary));
  w.Set(kKeyLayers, GgufValue::U32(static_cast<uint32_t>(layers_.size())));
  if (r2r_) {
    for (const auto& [name, t] : r2r_->params) {
      std::vector<int64_t> dims(t.shape.rbegin(), t.shape.rend());
      if (t.type == GgmlType::kF32) {
        TLR_RETURN_IF_ERROR(w.AddTensorF32(kR2rPrefix + name, dims, t.v));
      } else {
        TLR_RETURN_IF_ERROR(w.AddTensor(kR2rPrefix + name, t.type, dims, t.q));
      }
    }
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    const DenseLayer& l = layers_[i];
    const auto& c = compiled_->layers[i];
    TLR_RETURN_IF_ERROR(w.AddTensor(LayerTensor(i, "weight"), c.view.type, {l.n_in, l.n_out}, c.bytes));
    TLR_RETURN_IF_ERROR(w.AddTensorF32(LayerTensor(i, "bias"), {l.n_out}, l.b));
  }
  return Status::Ok();
}

Status Router::CheckCompatible(const Model& slm) const {
  if (!RouterIsLearned(info_.kind)) return Status::Ok();
  if (info_.input_dim != slm.config().n_embd) {
    return Status::Error("the router reads hidden states of size " + std::to_string(info_.input_dim) +
                         " but the SLM's are " + std::to_string(slm.config().n_embd) +
                         ": it was trained for another model");
  }
  if (r2r_ && r2r_->vocab != slm.config().n_vocab) {
    return Status::Error("the router's token embedding has " + std::to_string(r2r_->vocab) + " rows but the SLM's "
                         "vocabulary " + std::to_string(slm.config().n_vocab) + " tokens: it was made for another model");
  }
  if (!info_.slm_fingerprint.empty() && info_.slm_fingerprint != slm.fingerprint_hex()) {
    return Status::Error("the router was trained for SLM " + info_.slm_fingerprint +
                         (info_.slm_name.empty() ? "" : " (" + info_.slm_name + ")") +
                         ", not this one (" + slm.fingerprint_hex() +
                         "); train one for it with `tlr router train`");
  }
  return Status::Ok();
}

void Router::ConfidenceBatch(const float* hidden, int64_t n, float* out, ThreadPool* pool) {
  if (r2r_) {
    std::fill(out, out + n, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  Compiled& c = *compiled_;
  const float* x = hidden;
  int64_t width = info_.input_dim;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const DenseLayer& l = layers_[i];
    std::vector<float>& y = (i % 2 == 0) ? c.a : c.b;
    y.resize(static_cast<size_t>(n * l.n_out));
    c.in.Prepare(c.layers[i].view.type, x, n, width, width, pool);
    MatMul(c.layers[i].view, c.in, y.data(), l.n_out, pool);
    for (int64_t t = 0; t < n; ++t) {
      float* row = y.data() + t * l.n_out;
      for (int64_t j = 0; j < l.n_out; ++j) {
        row[j] += l.b[j];
        if (l.relu && row[j] < 0) row[j] = 0;
      }
    }
    x = y.data();
    width = l.n_out;
  }
  for (int64_t t = 0; t < n; ++t) {
    const float p = Sigmoid(x[t]);
    // citer's output is P(SLM fine); colm's is P(defer).
    out[t] = info_.kind == RouterKind::kColm ? 1.0f - p : p;
  }
}

float Router::Confidence(const float* hidden, const float* logits, int64_t n_vocab, ThreadPool* pool) {
  switch (info_.kind) {
    case RouterKind::kMaxProb: return MaxProbConfidence(logits, n_vocab);
    case RouterKind::kEntropy: return EntropyConfidence(logits, n_vocab);
    case RouterKind::kRandom: {
      // A pure function of the SLM's state (its logits) and the seed: the same position gets
      // the same draw however often or in whatever order it is asked (the decoder's speculative
      // pipeline evaluates positions that are later discarded).
      uint64_t h = seed_ ^ 0x6a09e667f3bcc909ull;
      for (int64_t i = 0; i < n_vocab && logits; ++i) {
        uint32_t bits;
        std::memcpy(&bits, logits + i, sizeof bits);
        h = (h ^ bits) * 0x100000001b3ull;
      }
      uint64_t s = h;
      return static_cast<float>((NextRandom(&s) >> 11) * (1.0 / 9007199254740992.0));
    }
    case RouterKind::kCiter:
    case RouterKind::kColm: {
      float out = 0;
      ConfidenceBatch(hidden, 1, &out, pool);
      return out;
    }
    case RouterKind::kR2r: {
      r2r_top_.resize(static_cast<size_t>(r2r_->topk));
      int32_t token = 0;
      TopLogits(logits, n_vocab, r2r_->topk, r2r_top_.data(), &token, &r2r_index_);
      if (token >= r2r_->vocab) return 0.0f;  // not this router's vocabulary (CheckCompatible refuses it)
      return 1.0f - Sigmoid(r2r_->Logit(hidden, token, r2r_top_.data(), &r2r_scratch_, pool));
    }
  }
  return 0;
}

std::vector<DenseLayer> RandomRouterLayers(RouterKind kind, int64_t dim, uint64_t seed) {
  const std::vector<int64_t> widths = kind == RouterKind::kCiter ? std::vector<int64_t>{dim, 2 * dim, dim, 1}
                                                                 : std::vector<int64_t>{dim, 1};
  std::vector<DenseLayer> layers;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    DenseLayer l;
    l.n_in = widths[i];
    l.n_out = widths[i + 1];
    const double bound = 1.0 / std::sqrt(static_cast<double>(l.n_in));
    auto draw = [&]() {
      return static_cast<float>((2.0 * ((NextRandom(&seed) >> 11) * (1.0 / 9007199254740992.0)) - 1.0) * bound);
    };
    l.w.resize(l.n_in * l.n_out);
    for (float& v : l.w) v = draw();
    l.b.resize(l.n_out);
    for (float& v : l.b) v = draw();
    layers.push_back(std::move(l));
  }
  return layers;
}

float MaxProbConfidence(const float* logits, int64_t n) {
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  return static_cast<float>(1.0 / sum);
}

float EntropyConfidence(const float* logits, int64_t n) {
  if (n < 2) return 1.0f;
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0, dot = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double z = logits[i] - mx, e = std::exp(z);
    sum += e;
    dot += e * z;
  }
  // H = log(sum) - E[z]
  const double h = std::log(sum) - dot / sum;
  return static_cast<float>(std::clamp(1.0 - h / std::log(static_cast<double>(n)), 0.0, 1.0));
}

}  // namespace tlr
