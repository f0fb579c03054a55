// Training R2R's router network by hand-written backpropagation (see r2r_train.h). The layers and
// their PyTorch names are r2r_net.h's; the forward pass here is batched (rows of positions) and
// keeps what the backward pass needs.
#include "routing/r2r_train.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <string>

#include "routing/train_math.h"

namespace tlr {

// Named, not anonymous: the routing library builds as unity units, beside mlp_train.cc's own Net.
namespace r2rt {

using train::Gemm;
using train::Next;
using train::Param;
using train::Transpose;
using train::Uniform;

constexpr double kLnEps = 1e-5;

// What the matrix products need between calls.
struct Work {
  MatMulInput mm;
  std::vector<float> t1, t2;
  ThreadPool* pool = nullptr;
};

// A Linear layer, weight [out, in], initialized as PyTorch does (uniform in +-1/sqrt(in)).
struct Lin {
  int64_t in = 0, out = 0;
  Param w, b;
  void Init(int64_t n_in, int64_t n_out, uint64_t* rng) {
    in = n_in;
    out = n_out;
    w.Init(static_cast<size_t>(in * out), true);
    b.Init(static_cast<size_t>(out), false);
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));
    for (float& x : w.v) x = (2 * Uniform(rng) - 1) * bound;
    for (float& x : b.v) x = (2 * Uniform(rng) - 1) * bound;
  }
  // y [n, out] = x [n, in] W^T + b.
  void Forward(const float* x, int64_t n, std::vector<float>* y, Work* k) {
    y->resize(static_cast<size_t>(n * out));
    Gemm(x, n, in, w.v.data(), out, y->data(), &k->mm, k->pool);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < out; ++j) (*y)[t * out + j] += b.v[j];
    }
  }
  // The parameters' gradients from dy [n, out] and the forward's input x; dx [n, in] unless null.
  void Backward(const float* x, const std::vector<float>& dy, int64_t n, std::vector<float>* dx, Work* k) {
    Transpose(dy.data(), n, out, &k->t1);
    Transpose(x, n, in, &k->t2);
    Gemm(k->t1.data(), out, n, k->t2.data(), in, w.g.data(), &k->mm, k->pool);
    std::fill(b.g.begin(), b.g.end(), 0.0f);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < out; ++j) b.g[j] += dy[t * out + j];
    }
    if (!dx) return;
    Transpose(w.v.data(), out, in, &k->t1);
    dx->resize(static_cast<size_t>(n * in));
    Gemm(dy.data(), n, out, k->t1.data(), in, dx->data(), &k->mm, k->pool);
  }
  void Step(float lr, int step) {
    w.AdamStep(lr, 0.0f, step);
    b.AdamStep(lr, 0.0f, step);
  }
};

// LayerNorm over rows of `dim`, weight 1 and bias 0 at first.
struct Ln {
  int64_t dim = 0;
  Param w, b;
  std::vector<float> xhat, inv;  // of the last forward pass, per element and per row
  void Init(int64_t d) {
    dim = d;
    w.Init(static_cast<size_t>(d), false);
    b.Init(static_cast<size_t>(d), false);
    std::fill(w.v.begin(), w.v.end(), 1.0f);
  }
  void Forward(const float* x, int64_t n, std::vector<float>* y) {
    y->resize(static_cast<size_t>(n * dim));
    xhat.resize(static_cast<size_t>(n * dim));
    inv.resize(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      const float* r = x + t * dim;
      double mean = 0, var = 0;
      for (int64_t j = 0; j < dim; ++j) mean += r[j];
      mean /= static_cast<double>(dim);
      for (int64_t j = 0; j < dim; ++j) var += (r[j] - mean) * (r[j] - mean);
      const double is = 1.0 / std::sqrt(var / static_cast<double>(dim) + kLnEps);
      inv[t] = static_cast<float>(is);
      for (int64_t j = 0; j < dim; ++j) {
        const float h = static_cast<float>((r[j] - mean) * is);
        xhat[t * dim + j] = h;
        (*y)[t * dim + j] = h * w.v[j] + b.v[j];
      }
    }
  }
  // The parameters' gradients from dy; dx (the input's) unless null.
  void Backward(const std::vector<float>& dy, int64_t n, std::vector<float>* dx) {
    std::fill(w.g.begin(), w.g.end(), 0.0f);
    std::fill(b.g.begin(), b.g.end(), 0.0f);
    if (dx) dx->resize(static_cast<size_t>(n * dim));
    for (int64_t t = 0; t < n; ++t) {
      double sd = 0, sdx = 0;
      for (int64_t j = 0; j < dim; ++j) {
        const size_t k = t * dim + j;
        w.g[j] += dy[k] * xhat[k];
        b.g[j] += dy[k];
        const double dh = static_cast<double>(dy[k]) * w.v[j];
        sd += dh;
        sdx += dh * xhat[k];
      }
      if (!dx) continue;
      for (int64_t j = 0; j < dim; ++j) {
        const size_t k = t * dim + j;
        const double dh = static_cast<double>(dy[k]) * w.v[j];
        (*dx)[k] = static_cast<float>(inv[t] * (dh - sd / dim - xhat[k] * sdx / dim));
      }
    }
  }
  void Step(float lr, int step) {
    w.AdamStep(lr, 0.0f, step);
    b.AdamStep(lr, 0.0f, step);
  }
};

// A residual block: x + W2 GELU(W1 LN(x)), or dim_change(x) + ... when the width changes.
struct Block {
  Ln norm;
  Lin up, down, dim_change;
  bool changes = false;
  std::vector<float> x, a, u, g;  // the forward pass's input, LN(x), W1 LN(x), GELU of it
};

double GeluGrad(double u) {
  return 0.5 * (1.0 + std::erf(u / std::sqrt(2.0))) + u * std::exp(-0.5 * u * u) / 2.5066282746310002;  // sqrt(2 pi)
}

class Net {
 public:
  Net(int64_t hidden, int64_t embed, int64_t topk, const R2rTrainOptions& o)
      : h_(hidden), e_(embed), k_(topk), normalize_(o.normalize_input), rng_(o.seed * 6364136223846793005ull + 1) {
    if (normalize_) {
      norm_hidden_.Init(h_);
      norm_token_.Init(e_);
    }
    logits_projection_.Init(k_, h_, &rng_);
    const int64_t d0 = o.dims[0];
    combined_.Init(2 * h_ + e_, d0, &rng_);
    input_projection_.Init(d0, d0, &rng_);
    std::vector<int64_t> widths = o.dims;
    widths.push_back(o.dims.back());
    blocks_.resize(o.dims.size());
    for (size_t i = 0; i < blocks_.size(); ++i) {
      Block& b = blocks_[i];
      const int64_t din = widths[i], dout = widths[i + 1];
      b.norm.Init(din);
      b.up.Init(din, din * o.expansion, &rng_);
      b.down.Init(din * o.expansion, dout, &rng_);
      b.changes = din != dout;
      if (b.changes) b.dim_change.Init(din, dout, &rng_);
    }
    out_norm_.Init(widths.back());
    out_.Init(widths.back(), 1, &rng_);
  }

  // Output logits ("critical") of n positions: hidden states [n, H], tokens [n], top logits [n, K].
  const std::vector<float>& Forward(const float* h, const int32_t* tok, const float* top, int64_t n,
                                    const std::vector<float>& emb, Work* w) {
    n_ = n;
    ein_.resize(static_cast<size_t>(n * e_));
    for (int64_t t = 0; t < n; ++t) std::copy_n(emb.data() + static_cast<int64_t>(tok[t]) * e_, e_, ein_.data() + t * e_);
    lin_.assign(top, top + n * k_);
    if (normalize_) {
      norm_hidden_.Forward(h, n, &hin_);
      std::vector<float> e;
      norm_token_.Forward(ein_.data(), n, &e);
      ein_.swap(e);
      for (int64_t t = 0; t < n; ++t) {
        float* l = lin_.data() + t * k_;
        const float mx = *std::max_element(l, l + k_);
        double sum = 0;
        for (int64_t i = 0; i < k_; ++i) sum += (l[i] = std::exp(l[i] - mx));
        for (int64_t i = 0; i < k_; ++i) l[i] = static_cast<float>(l[i] / sum);
      }
    } else {
      hin_.assign(h, h + n * h_);
    }
    logits_projection_.Forward(lin_.data(), n, &p_, w);
    const int64_t c = 2 * h_ + e_;
    c_.resize(static_cast<size_t>(n * c));
    for (int64_t t = 0; t < n; ++t) {
      float* row = c_.data() + t * c;
      std::copy_n(hin_.data() + t * h_, h_, row);
      std::copy_n(ein_.data() + t * e_, e_, row + h_);
      std::copy_n(p_.data() + t * h_, h_, row + h_ + e_);
    }
    combined_.Forward(c_.data(), n, &x0_, w);
    std::vector<float> x;
    input_projection_.Forward(x0_.data(), n, &x, w);
    for (Block& b : blocks_) {
      b.x = std::move(x);
      b.norm.Forward(b.x.data(), n, &b.a);
      b.up.Forward(b.a.data(), n, &b.u, w);
      b.g.resize(b.u.size());
      for (size_t k = 0; k < b.u.size(); ++k) b.g[k] = static_cast<float>(0.5 * b.u[k] * (1.0 + std::erf(b.u[k] / std::sqrt(2.0))));
      std::vector<float> y;
      b.down.Forward(b.g.data(), n, &y, w);
      if (b.changes) {
        std::vector<float> r;
        b.dim_change.Forward(b.x.data(), n, &r, w);
        for (size_t k = 0; k < y.size(); ++k) y[k] += r[k];
      } else {
        for (size_t k = 0; k < y.size(); ++k) y[k] += b.x[k];
      }
      x = std::move(y);
    }
    xl_ = std::move(x);
    out_norm_.Forward(xl_.data(), n, &o_);
    out_.Forward(o_.data(), n, &z_, w);
    return z_;
  }

  // Gradients of every trained parameter from d loss / d logit [n].
  void Backward(const std::vector<float>& dz, Work* w) {
    const int64_t n = n_;
    std::vector<float> d, dx;
    out_.Backward(o_.data(), dz, n, &d, w);
    out_norm_.Backward(d, n, &dx);
    d.swap(dx);  // d loss / d (the last block's output)
    for (size_t i = blocks_.size(); i-- > 0;) {
      Block& b = blocks_[i];
      std::vector<float> dg, du, da, dres;
      b.down.Backward(b.g.data(), d, n, &dg, w);
      du.resize(dg.size());
      for (size_t k = 0; k < dg.size(); ++k) du[k] = static_cast<float>(dg[k] * GeluGrad(b.u[k]));
      b.up.Backward(b.a.data(), du, n, &da, w);
      b.norm.Backward(da, n, &dx);
      if (b.changes) {
        b.dim_change.Backward(b.x.data(), d, n, &dres, w);
        for (size_t k = 0; k < dx.size(); ++k) dx[k] += dres[k];
      } else {
        for (size_t k = 0; k < dx.size(); ++k) dx[k] += d[k];
      }
      d.swap(dx);
    }
    input_projection_.Backward(x0_.data(), d, n, &dx, w);
    std::vector<float> dc;
    combined_.Backward(c_.data(), dx, n, &dc, w);
    const int64_t c = 2 * h_ + e_;
    std::vector<float> dp(static_cast<size_t>(n * h_));
    for (int64_t t = 0; t < n; ++t) std::copy_n(dc.data() + t * c + h_ + e_, h_, dp.data() + t * h_);
    logits_projection_.Backward(lin_.data(), dp, n, nullptr, w);
    if (normalize_) {  // the inputs' LayerNorms learn; the inputs themselves do not
      std::vector<float> dh(static_cast<size_t>(n * h_)), de(static_cast<size_t>(n * e_));
      for (int64_t t = 0; t < n; ++t) {
        std::copy_n(dc.data() + t * c, h_, dh.data() + t * h_);
        std::copy_n(dc.data() + t * c + h_, e_, de.data() + t * e_);
      }
      norm_hidden_.Backward(dh, n, nullptr);
      norm_token_.Backward(de, n, nullptr);
    }
  }

  void Step(float lr, int step) {
    if (normalize_) norm_hidden_.Step(lr, step), norm_token_.Step(lr, step);
    logits_projection_.Step(lr, step);
    combined_.Step(lr, step);
    input_projection_.Step(lr, step);
    for (Block& b : blocks_) {
      b.norm.Step(lr, step);
      b.up.Step(lr, step);
      b.down.Step(lr, step);
      if (b.changes) b.dim_change.Step(lr, step);
    }
    out_norm_.Step(lr, step);
    out_.Step(lr, step);
  }

  // Every trained tensor (for the gradient check).
  std::vector<Param*> Params() {
    std::vector<Param*> ps;
    auto lin = [&](Lin& l) { ps.push_back(&l.w), ps.push_back(&l.b); };
    auto ln = [&](Ln& l) { ps.push_back(&l.w), ps.push_back(&l.b); };
    if (normalize_) ln(norm_hidden_), ln(norm_token_);
    lin(logits_projection_), lin(combined_), lin(input_projection_);
    for (Block& b : blocks_) {
      ln(b.norm), lin(b.up), lin(b.down);
      if (b.changes) lin(b.dim_change);
    }
    ln(out_norm_), lin(out_);
    return ps;
  }

  // Every trained tensor by its PyTorch name (r2r_net.h), the token embedding left out.
  std::map<std::string, R2rNet::Tensor> Export() const {
    std::map<std::string, R2rNet::Tensor> t;
    auto lin = [&](const std::string& name, const Lin& l) {
      t[name + ".weight"] = {{l.out, l.in}, l.w.v};
      t[name + ".bias"] = {{l.out}, l.b.v};
    };
    auto ln = [&](const std::string& name, const Ln& l) {
      t[name + ".weight"] = {{l.dim}, l.w.v};
      t[name + ".bias"] = {{l.dim}, l.b.v};
    };
    if (normalize_) {
      ln("layer_norm_hidden_states", norm_hidden_);
      ln("layer_norm_token", norm_token_);
    }
    lin("logits_projection", logits_projection_);
    lin("combined_projection", combined_);
    lin("backbone.input_projection", input_projection_);
    for (size_t i = 0; i < blocks_.size(); ++i) {
      const std::string p = "backbone.blocks." + std::to_string(i) + ".";
      ln(p + "layer_norm", blocks_[i].norm);
      lin(p + "mlp.0", blocks_[i].up);
      lin(p + "mlp.3", blocks_[i].down);
      if (blocks_[i].changes) lin(p + "dim_change", blocks_[i].dim_change);
    }
    ln("backbone.output_layer.0", out_norm_);
    lin("backbone.output_layer.1", out_);
    return t;
  }

 private:
  int64_t h_, e_, k_;
  bool normalize_;
  uint64_t rng_;
  Ln norm_hidden_, norm_token_, out_norm_;
  Lin logits_projection_, combined_, input_projection_, out_;
  std::vector<Block> blocks_;
  int64_t n_ = 0;
  std::vector<float> hin_, ein_, lin_, p_, c_, x0_, xl_, o_, z_;
};

// Mean BCE of logits z against targets y; d loss / d z into dz unless null.
double Bce(const std::vector<float>& z, const uint8_t* y, int64_t n, std::vector<float>* dz) {
  double loss = 0;
  if (dz) dz->resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    const double zt = z[t];
    loss += std::max(zt, 0.0) - zt * y[t] + std::log1p(std::exp(-std::abs(zt)));
    if (dz) (*dz)[t] = static_cast<float>((Sigmoid(z[t]) - y[t]) / static_cast<double>(n));
  }
  return loss / static_cast<double>(n);
}

Status CheckExamples(const RouterExamples& e, const char* what, int64_t hidden, int64_t topk, int64_t vocab) {
  const std::string w(what);
  const size_t n = static_cast<size_t>(e.size());
  if (e.dim != hidden || e.x.size() != n * static_cast<size_t>(hidden)) return Status::Error(w + " examples: hidden states of the wrong size");
  if (e.topk != topk || e.top_logits.size() != n * static_cast<size_t>(topk) || e.token.size() != n) {
    return Status::Error(w + " examples: top logits or tokens missing (an R2R router reads them)");
  }
  for (int32_t t : e.token) {
    if (t < 0 || t >= vocab) return Status::Error(w + " examples: token " + std::to_string(t) + " outside the vocabulary");
  }
  return Status::Ok();
}

}  // namespace r2rt

double R2rGradientCheck(int64_t hidden, int64_t embed, int64_t topk, int64_t vocab, const R2rTrainOptions& opts) {
  const int64_t n = 5;
  uint64_t rng = opts.seed + 11;
  auto normal = [&] { return 2 * train::Uniform(&rng) - 1; };
  std::vector<float> h(static_cast<size_t>(n * hidden)), top(static_cast<size_t>(n * topk)),
      emb(static_cast<size_t>(vocab * embed));
  for (float& v : h) v = 2 * normal();
  for (float& v : top) v = 3 * normal();
  for (float& v : emb) v = normal();
  std::vector<int32_t> tok(static_cast<size_t>(n));
  std::vector<uint8_t> y(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) tok[t] = static_cast<int32_t>(train::Next(&rng) % vocab), y[t] = static_cast<uint8_t>(t % 2);
  r2rt::Net net(hidden, embed, topk, opts);
  // LayerNorms away from 1 and 0, so their gradients are not trivially what they start as.
  for (train::Param* p : net.Params()) {
    for (float& v : p->v) v += 0.3f * normal();
  }
  r2rt::Work w;
  std::vector<float> dz;
  auto loss = [&](std::vector<float>* grad) {
    return r2rt::Bce(net.Forward(h.data(), tok.data(), top.data(), n, emb, &w), y.data(), n, grad);
  };
  loss(&dz);
  net.Backward(dz, &w);
  double worst = 0;
  for (train::Param* p : net.Params()) {
    const std::vector<float> analytic = p->g;
    for (size_t k = 0; k < p->v.size(); k += 1 + p->v.size() / 16) {  // up to ~16 entries each
      const float keep = p->v[k], eps = 1e-2f;
      p->v[k] = keep + eps;
      const double up = loss(nullptr);
      p->v[k] = keep - eps;
      const double down = loss(nullptr);
      p->v[k] = keep;
      const double numeric = (up - down) / (2.0 * eps);
      worst = std::max(worst, std::abs(numeric - analytic[k]) / std::max(1e-3, std::abs(numeric) + std::abs(analytic[k])));
    }
  }
  return worst;
}

Expected<R2rTrainResult> TrainR2rNetwork(const RouterExamples& train, const RouterExamples& val,
                                         const std::vector<float>& embedding, int64_t vocab,
                                         const R2rTrainOptions& opts, ThreadPool* pool) {
  const int64_t H = train.dim, K = train.topk, n = train.size();
  if (vocab <= 0 || embedding.empty() || embedding.size() % static_cast<size_t>(vocab) != 0) {
    return Status::Error("R2R training: the embedding table is not [vocabulary, embedding size]");
  }
  const int64_t E = static_cast<int64_t>(embedding.size()) / vocab;
  if (H <= 0 || K <= 0) return Status::Error("R2R training: no hidden states or top logits");
  TLR_RETURN_IF_ERROR(r2rt::CheckExamples(train, "training", H, K, vocab));
  if (val.size() > 0) TLR_RETURN_IF_ERROR(r2rt::CheckExamples(val, "held-out", H, K, vocab));
  if (opts.dims.empty() || opts.expansion < 1 || opts.batch < 1 || opts.epochs < 1) {
    return Status::Error("R2R training: dims, expansion, batch and epochs must be positive");
  }
  for (int64_t d : opts.dims) {
    if (d < 1) return Status::Error("R2R training: a backbone width must be positive");
  }
  // R2R's target: 1 = critical (route) = label 0.
  auto critical = [](const RouterExamples& e) {
    std::vector<uint8_t> y(e.label.size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = e.label[i] ? 0 : 1;
    return y;
  };
  const std::vector<uint8_t> ty = critical(train), vy = critical(val);
  const int64_t routes = std::count(ty.begin(), ty.end(), 1);
  if (routes == 0 || routes == n) {
    return Status::Error("the training tokens are all of one class (" + std::to_string(n - routes) + " of " +
                         std::to_string(n) + " kept): nothing to learn");
  }
  r2rt::Net net(H, E, K, opts);
  r2rt::Work work;
  work.pool = pool;
  uint64_t rng = opts.seed * 7919 + 3;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::vector<float> hb, lb, dz;
  std::vector<int32_t> tb;
  std::vector<uint8_t> yb;
  R2rTrainResult out;
  std::map<std::string, R2rNet::Tensor> best;
  double best_auc = -1;
  int step = 0;
  for (int epoch = 1; epoch <= opts.epochs; ++epoch) {
    for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[train::Next(&rng) % (i + 1)]);
    double loss_sum = 0;
    int64_t batches = 0;
    for (int64_t s = 0; s < n; s += opts.batch) {
      const int64_t b = std::min<int64_t>(opts.batch, n - s);
      hb.resize(static_cast<size_t>(b * H));
      lb.resize(static_cast<size_t>(b * K));
      tb.resize(static_cast<size_t>(b));
      yb.resize(static_cast<size_t>(b));
      for (int64_t t = 0; t < b; ++t) {
        const int64_t r = order[s + t];
        std::copy_n(train.x.data() + r * H, H, hb.data() + t * H);
        std::copy_n(train.top_logits.data() + r * K, K, lb.data() + t * K);
        tb[t] = train.token[r];
        yb[t] = ty[r];
      }
      const std::vector<float>& z = net.Forward(hb.data(), tb.data(), lb.data(), b, embedding, &work);
      loss_sum += r2rt::Bce(z, yb.data(), b, &dz);
      ++batches;
      net.Backward(dz, &work);
      net.Step(opts.lr, ++step);
    }
    // Held out: the loss, and AUROC of TLR's confidence (1 - sigmoid) predicting "keep".
    double vloss = 0, vauc = 0.5;
    if (val.size() > 0) {
      std::vector<float> z(static_cast<size_t>(val.size())), conf(z.size());
      for (int64_t s = 0; s < val.size(); s += 1024) {
        const int64_t b = std::min<int64_t>(1024, val.size() - s);
        const std::vector<float>& zb = net.Forward(val.x.data() + s * H, val.token.data() + s,
                                                   val.top_logits.data() + s * K, b, embedding, &work);
        std::copy(zb.begin(), zb.end(), z.begin() + s);
      }
      vloss = r2rt::Bce(z, vy.data(), val.size(), nullptr);
      for (size_t t = 0; t < z.size(); ++t) conf[t] = 1.0f - Sigmoid(z[t]);
      vauc = Auroc(conf, val.label);
    }
    const float tl = static_cast<float>(loss_sum / std::max<int64_t>(1, batches));
    if (!std::isfinite(tl)) {
      return Status::Error("R2R training diverged at epoch " + std::to_string(epoch) + " (loss " + std::to_string(tl) +
                           "): lower the learning rate (--lr)");
    }
    if (opts.on_epoch) opts.on_epoch(epoch, tl, static_cast<float>(vloss), static_cast<float>(vauc));
    out.epochs = epoch;
    if (val.size() > 0 && vauc <= best_auc && opts.patience > 0 && epoch - out.best_epoch >= opts.patience) break;
    if (val.size() == 0 || vauc > best_auc) {
      best_auc = vauc;
      best = net.Export();
      out.best_epoch = epoch;
      out.train_loss = tl;
      out.val_loss = static_cast<float>(vloss);
      out.val_auroc = static_cast<float>(vauc);
    }
  }
  best["token_embeddings.weight"] = {{vocab, E}, embedding};
  TLR_ASSIGN_OR_RETURN(out.net, R2rNet::FromParams(std::move(best)));
  return out;
}

}  // namespace tlr
