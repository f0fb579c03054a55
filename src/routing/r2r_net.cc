// R2R's router network: shape checks and the forward pass (see r2r_net.h).
#include "routing/r2r_net.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "quant/quantize.h"

namespace tlr {

namespace {

std::string Shape(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// Bytes of one row of a matrix held as `type` (the caller checked the row length fits it).
size_t RowBytes(GgmlType type, int64_t n) {
  auto b = GgmlTensorBytes(type, static_cast<uint64_t>(n), static_cast<uint64_t>(n));
  return b.ok() ? static_cast<size_t>(*b) : 0;
}

// Whether `rows` rows of `cols` values held as `type` dequantize to finite numbers (f16 and
// q8_0's f16 scales end at 65504).
bool RowsFinite(GgmlType type, const uint8_t* data, int64_t rows, int64_t cols) {
  std::vector<float> row(static_cast<size_t>(cols));
  const size_t rb = RowBytes(type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    if (!Dequantize(type, data + static_cast<size_t>(r) * rb, row.data(), cols).ok()) return false;
    for (float x : row) {
      if (!std::isfinite(x)) return false;
    }
  }
  return true;
}

// y[o] = b[o] + sum_i W[o][i] x[i] on the matrix kernels of W's type.
void Linear(const R2rNet::Tensor& w, const R2rNet::Tensor& b, const float* x, float* y, MatMulInput* mm,
            ThreadPool* pool) {
  const int64_t n_out = w.shape[0], n_in = w.shape[1];
  const uint8_t* data = w.type == GgmlType::kF32 ? reinterpret_cast<const uint8_t*>(w.v.data()) : w.q.data();
  const WeightView view{w.type, data, n_out, n_in, RowBytes(w.type, n_in)};
  mm->Prepare(w.type, x, 1, n_in, n_in, pool);
  MatMul(view, *mm, y, n_out, pool);
  for (int64_t o = 0; o < n_out; ++o) y[o] += b.v[static_cast<size_t>(o)];
}

void LayerNorm(const R2rNet::Tensor& w, const R2rNet::Tensor& b, const float* x, int64_t n, float* y) {
  double mean = 0, var = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<double>(n);
  const double inv = 1.0 / std::sqrt(var + 1e-5);
  for (int64_t i = 0; i < n; ++i) {
    y[i] = static_cast<float>((x[i] - mean) * inv * w.v[static_cast<size_t>(i)] + b.v[static_cast<size_t>(i)]);
  }
}

}  // namespace

Expected<R2rNet> R2rNet::FromParams(std::map<std::string, Tensor> params) {
  R2rNet net;
  net.params = std::move(params);
  std::set<std::string> used;
  auto get = [&](const std::string& name, std::vector<int64_t> want) -> Expected<const Tensor*> {
    auto it = net.params.find(name);
    if (it == net.params.end()) return Status::Error("R2R router: tensor '" + name + "' is missing");
    const Tensor& t = it->second;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (t.shape != want) {
      return Status::Error("R2R router: '" + name + "' has shape " + Shape(t.shape) + ", want " + Shape(want));
    }
    if (std::any_of(want.begin(), want.end(), [](int64_t d) { return d < 1; })) {
      return Status::Error("R2R router: '" + name + "' has shape " + Shape(t.shape) + ": every dimension must be 1 or more");
    }
    const std::string bad_value = "R2R router: '" + name + "' holds a NaN or infinite value";
    if (t.type == GgmlType::kF32) {
      if (static_cast<int64_t>(t.v.size()) != n || !t.q.empty()) {
        return Status::Error("R2R router: '" + name + "' holds " + std::to_string(t.v.size()) + " values for shape " +
                             Shape(t.shape));
      }
      for (float x : t.v) {
        if (!std::isfinite(x)) return Status::Error(bad_value);
      }
    } else {
      if (t.type != GgmlType::kF16 && t.type != GgmlType::kQ8_0) {
        return Status::Error("R2R router: '" + name + "' must be f32, f16 or q8_0");
      }
      if (want.size() != 2) return Status::Error("R2R router: '" + name + "' is a vector and must be f32");
      auto bytes = GgmlTensorBytes(t.type, static_cast<uint64_t>(want[1]), static_cast<uint64_t>(n));
      if (!bytes.ok()) return Status::Error("R2R router: '" + name + "': " + bytes.status().message());
      if (t.q.size() != *bytes || !t.v.empty()) {
        return Status::Error("R2R router: '" + name + "' holds " + std::to_string(t.q.size()) + " bytes, want " +
                             std::to_string(*bytes) + " for " + Shape(t.shape) + " in " +
                             std::string(GgmlTraits(t.type).name));
      }
      if (!RowsFinite(t.type, t.q.data(), want[0], want[1])) return Status::Error(bad_value);
    }
    used.insert(name);
    return &t;
  };
  auto dims = [&](const std::string& name) -> std::vector<int64_t> {
    auto it = net.params.find(name);
    return it == net.params.end() ? std::vector<int64_t>{} : it->second.shape;
  };
  if (net.params.count("backbone.position_embedding")) {
    return Status::Error("R2R router: position embeddings (use_position_embedding) are not supported");
  }
  const auto lp = dims("logits_projection.weight");
  if (lp.size() != 2) return Status::Error("R2R router: 'logits_projection.weight' is missing or not a matrix");
  net.hidden = lp[0];
  net.topk = lp[1];
  const auto cp = dims("combined_projection.weight");
  if (cp.size() != 2 || cp[1] <= 2 * net.hidden) {
    return Status::Error("R2R router: 'combined_projection.weight' must be [D, 2 x " + std::to_string(net.hidden) +
                         " + embedding size], got " + Shape(cp));
  }
  net.embed = cp[1] - 2 * net.hidden;
  const int64_t d0 = cp[0];
  const auto te = dims("token_embeddings.weight");
  if (te.size() != 2 || te[1] != net.embed) {
    return Status::Error("R2R router: 'token_embeddings.weight' must be [vocabulary, " + std::to_string(net.embed) +
                         "] (the SLM's input embedding), got " + Shape(te));
  }
  net.vocab = te[0];
  if (net.topk < 1 || net.topk > net.vocab) return Status::Error("R2R router: the top-K logits must be 1..vocabulary");
  for (auto r : {get("logits_projection.weight", {net.hidden, net.topk}), get("logits_projection.bias", {net.hidden}),
                 get("combined_projection.weight", {d0, 2 * net.hidden + net.embed}),
                 get("combined_projection.bias", {d0}), get("token_embeddings.weight", {net.vocab, net.embed}),
                 get("backbone.input_projection.weight", {d0, d0}), get("backbone.input_projection.bias", {d0})}) {
    if (!r.ok()) return r.status();
  }
  net.normalize_input = net.params.count("layer_norm_hidden_states.weight") > 0;
  if (net.normalize_input) {
    for (auto r : {get("layer_norm_hidden_states.weight", {net.hidden}), get("layer_norm_hidden_states.bias", {net.hidden}),
                   get("layer_norm_token.weight", {net.embed}), get("layer_norm_token.bias", {net.embed})}) {
      if (!r.ok()) return r.status();
    }
  }
  int64_t width = d0;
  for (int i = 0;; ++i) {
    const std::string p = "backbone.blocks." + std::to_string(i) + ".";
    if (!net.params.count(p + "layer_norm.weight")) break;
    const auto up = dims(p + "mlp.0.weight"), down = dims(p + "mlp.3.weight");
    if (up.size() != 2 || down.size() != 2) return Status::Error("R2R router: block " + std::to_string(i) + " has no MLP");
    const int64_t wide = up[0], out = down[0];
    for (auto r : {get(p + "layer_norm.weight", {width}), get(p + "layer_norm.bias", {width}),
                   get(p + "mlp.0.weight", {wide, width}), get(p + "mlp.0.bias", {wide}),
                   get(p + "mlp.3.weight", {out, wide}), get(p + "mlp.3.bias", {out})}) {
      if (!r.ok()) return r.status();
    }
    if (out != width) {
      for (auto r : {get(p + "dim_change.weight", {out, width}), get(p + "dim_change.bias", {out})}) {
        if (!r.ok()) return r.status();
      }
    }
    width = out;
    net.n_blocks = i + 1;
  }
  if (net.n_blocks == 0) return Status::Error("R2R router: no backbone blocks (backbone.blocks.0.*)");
  for (auto r : {get("backbone.output_layer.0.weight", {width}), get("backbone.output_layer.0.bias", {width}),
                 get("backbone.output_layer.1.weight", {1, width}), get("backbone.output_layer.1.bias", {1})}) {
    if (!r.ok()) return r.status();
  }
  for (const auto& [name, t] : net.params) {
    if (!used.count(name)) return Status::Error("R2R router: unexpected tensor '" + name + "' (not read by the network)");
  }
  // The tensors the forward pass reads, looked up once.
  auto pair = [&](const std::string& prefix) -> Pair {
    auto w = net.params.find(prefix + "weight"), b = net.params.find(prefix + "bias");
    if (w == net.params.end()) return {};
    return {&w->second, &b->second};
  };
  net.embedding_ = &net.params.at("token_embeddings.weight");
  if (net.normalize_input) {
    net.norm_hidden_ = pair("layer_norm_hidden_states.");
    net.norm_token_ = pair("layer_norm_token.");
  }
  net.logits_projection_ = pair("logits_projection.");
  net.combined_ = pair("combined_projection.");
  net.input_projection_ = pair("backbone.input_projection.");
  net.widest_ = std::max<int64_t>(2 * net.hidden + net.embed, d0);
  for (int i = 0; i < net.n_blocks; ++i) {
    const std::string p = "backbone.blocks." + std::to_string(i) + ".";
    Block b{pair(p + "layer_norm."), pair(p + "mlp.0."), pair(p + "mlp.3."), pair(p + "dim_change.")};
    net.widest_ = std::max(net.widest_, b.up.w->shape[0]);
    net.blocks_.push_back(b);
  }
  net.out_norm_ = pair("backbone.output_layer.0.");
  net.out_ = pair("backbone.output_layer.1.");
  return net;
}

float R2rNet::Logit(const float* hidden_in, int32_t token, const float* top_logits, R2rScratch* scratch,
                    ThreadPool* pool) const {
  const int64_t widest = widest_;
  std::vector<float>& s = scratch->buf;
  MatMulInput* mm = &scratch->mm;
  s.resize(static_cast<size_t>(4 * widest + topk));
  float* in = s.data();                 // [h, e, logits features]
  float* a = in + widest;               // activations
  float* b = a + widest;
  float* c = b + widest;
  float* l = c + widest;                // the top-K logits
  float* h = in;
  float* e = in + hidden;
  std::copy_n(hidden_in, hidden, h);
  if (embedding_->type == GgmlType::kF32) {
    std::copy_n(embedding_->v.data() + static_cast<int64_t>(token) * embed, embed, e);
  } else {  // checked at load: the row dequantizes
    (void)Dequantize(embedding_->type, embedding_->q.data() + static_cast<size_t>(token) * RowBytes(embedding_->type, embed),
                     e, embed);
  }
  std::copy_n(top_logits, topk, l);
  if (normalize_input) {
    LayerNorm(*norm_hidden_.w, *norm_hidden_.b, h, hidden, a);
    std::copy(a, a + hidden, h);
    LayerNorm(*norm_token_.w, *norm_token_.b, e, embed, a);
    std::copy(a, a + embed, e);
    const float mx = *std::max_element(l, l + topk);
    double sum = 0;
    for (int64_t i = 0; i < topk; ++i) sum += std::exp(static_cast<double>(l[i]) - mx);
    for (int64_t i = 0; i < topk; ++i) l[i] = static_cast<float>(std::exp(static_cast<double>(l[i]) - mx) / sum);
  }
  Linear(*logits_projection_.w, *logits_projection_.b, l, in + hidden + embed, mm, pool);
  Linear(*combined_.w, *combined_.b, in, a, mm, pool);
  Linear(*input_projection_.w, *input_projection_.b, a, b, mm, pool);
  int64_t width = combined_.w->shape[0];
  float* x = b;
  float* y = a;
  for (const Block& blk : blocks_) {
    const int64_t out = blk.down.w->shape[0];
    LayerNorm(*blk.norm.w, *blk.norm.b, x, width, y);
    Linear(*blk.up.w, *blk.up.b, y, c, mm, pool);
    for (int64_t k = 0; k < blk.up.w->shape[0]; ++k) {
      const double u = c[k];
      c[k] = static_cast<float>(0.5 * u * (1.0 + std::erf(u / std::sqrt(2.0))));
    }
    Linear(*blk.down.w, *blk.down.b, c, y, mm, pool);
    if (blk.dim_change.w) {
      Linear(*blk.dim_change.w, *blk.dim_change.b, x, c, mm, pool);
      for (int64_t k = 0; k < out; ++k) y[k] += c[k];
    } else {
      for (int64_t k = 0; k < out; ++k) y[k] += x[k];
    }
    std::swap(x, y);
    width = out;
  }
  LayerNorm(*out_norm_.w, *out_norm_.b, x, width, y);
  float logit = 0;
  Linear(*out_.w, *out_.b, y, &logit, mm, pool);
  return logit;
}

int64_t R2rNet::n_params() const {
  int64_t n = 0;
  for (const auto& [name, t] : params) {
    if (name == "token_embeddings.weight") continue;
    int64_t e = 1;
    for (int64_t d : t.shape) e *= d;
    n += e;
  }
  return n;
}

Status R2rNet::StoreMatricesAs(GgmlType type) {
  if (type != GgmlType::kF32 && type != GgmlType::kF16 && type != GgmlType::kQ8_0) {
    return Status::Error("R2R router weights must be f32, f16 or q8_0");
  }
  for (const auto& [name, t] : params) {
    if (t.type != GgmlType::kF32) return Status::Error("R2R router: '" + name + "' is already held as " +
                                                       std::string(GgmlTraits(t.type).name));
  }
  if (type == GgmlType::kF32) return Status::Ok();
  // Every matrix converted first, then swapped in: on an error the network is left as it was.
  std::map<std::string, std::pair<GgmlType, std::vector<uint8_t>>> held;
  for (const auto& [name, t] : params) {
    if (t.shape.size() != 2) continue;
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const GgmlType ty = RouterMatrixType(type, cols);
    const size_t rb = RowBytes(ty, cols);
    std::vector<uint8_t> q(rb * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      TLR_RETURN_IF_ERROR(Quantize(ty, t.v.data() + r * cols, q.data() + static_cast<size_t>(r) * rb, cols));
    }
    if (!RowsFinite(ty, q.data(), rows, cols)) {  // a weight past f16's range would become infinite
      return Status::Error("R2R router: '" + name + "' has values beyond " + std::string(GgmlTraits(ty).name) +
                           "'s range (store it as f32)");
    }
    held[name] = {ty, std::move(q)};
  }
  for (auto& [name, h] : held) {
    Tensor& t = params.at(name);
    t.type = h.first;
    t.q = std::move(h.second);
    t.v = std::vector<float>();  // free the f32 copy
  }
  return Status::Ok();
}

GgmlType R2rNet::matrix_type() const {
  auto it = params.find("backbone.input_projection.weight");
  return it == params.end() ? GgmlType::kF32 : it->second.type;
}

void TopLogits(const float* logits, int64_t n, int64_t k, float* out, int32_t* argmax, std::vector<int32_t>* scratch) {
  std::vector<int32_t> local;
  std::vector<int32_t>& idx = scratch ? *scratch : local;
  idx.resize(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, n);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (int64_t i = 0; i < k; ++i) out[i] = logits[idx[static_cast<size_t>(i)]];
  if (argmax) *argmax = n > 0 ? idx[0] : 0;
}

}  // namespace tlr
