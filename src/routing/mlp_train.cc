// Router network training by hand-written backpropagation (see mlp_train.h). Matrix products
// go through the ops layer's F32 MatMul (SIMD, threaded); everything else is plain loops over
// small vectors.
#include "routing/mlp_train.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ops/matmul.h"
#include "routing/train_math.h"

namespace tlr {

namespace {

constexpr float kBnEps = 1e-5f;
constexpr float kBnMomentum = 0.1f;

using train::Gemm;
using train::Next;
using train::Param;
using train::Transpose;
using train::Uniform;

// The network: linear layers; with BatchNorm + dropout after layer 0 when `bn`.
class Net {
 public:
  Net(const std::vector<int64_t>& widths, bool bn, float dropout, uint64_t seed)
      : widths_(widths), bn_(bn), dropout_(dropout), rng_(seed) {
    for (size_t i = 0; i + 1 < widths.size(); ++i) {
      Param w, b;
      w.Init(widths[i] * widths[i + 1], true);
      b.Init(widths[i + 1], false);
      const float bound = 1.0f / std::sqrt(static_cast<float>(widths[i]));
      for (float& x : w.v) x = (2 * Uniform(&rng_) - 1) * bound;
      for (float& x : b.v) x = (2 * Uniform(&rng_) - 1) * bound;
      w_.push_back(std::move(w));
      b_.push_back(std::move(b));
    }
    if (bn_) {
      gamma_.Init(widths[1], false);
      beta_.Init(widths[1], false);
      std::fill(gamma_.v.begin(), gamma_.v.end(), 1.0f);
      run_mean_.assign(widths[1], 0.0f);
      run_var_.assign(widths[1], 1.0f);
    }
  }

  size_t n_layers() const { return w_.size(); }

  // Forward over n rows of x; returns output logits [n]. Training mode uses batch statistics
  // and dropout and keeps what backward needs.
  const std::vector<float>& Forward(const float* x, int64_t n, bool train, ThreadPool* pool) {
    x_ = x;
    n_ = n;
    acts_.resize(n_layers() + 1);
    const float* in = x;
    for (size_t i = 0; i < n_layers(); ++i) {
      const int64_t din = widths_[i], dout = widths_[i + 1];
      std::vector<float>& z = acts_[i + 1];
      z.resize(n * dout);
      Gemm(in, n, din, w_[i].v.data(), dout, z.data(), &mm_, pool);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t j = 0; j < dout; ++j) z[t * dout + j] += b_[i].v[j];
      }
      std::vector<float>& a = z;  // activated in place
      if (i == 0 && bn_) BatchNorm(&a, n, dout, train);
      if (i + 1 < n_layers()) {
        for (float& v : a) v = std::max(v, 0.0f);
        if (i == 0 && bn_ && train && dropout_ > 0) {
          mask_.resize(a.size());
          const float keep = 1.0f - dropout_;
          for (size_t k = 0; k < a.size(); ++k) {
            mask_[k] = Uniform(&rng_) < keep ? 1.0f / keep : 0.0f;
            a[k] *= mask_[k];
          }
        }
      }
      in = a.data();
    }
    return acts_.back();
  }

  // Backward from dL/d(output logit) [n]; accumulates gradients (overwrites them).
  void Backward(const std::vector<float>& dout_last, ThreadPool* pool) {
    const int64_t n = n_;
    std::vector<float> d = dout_last;  // gradient w.r.t. layer i's post-activation output
    for (size_t ii = n_layers(); ii-- > 0;) {
      const int64_t din = widths_[ii], dout = widths_[ii + 1];
      // Through the activation of layer ii (ReLU, dropout, BatchNorm) back to its linear output.
      if (ii + 1 < n_layers()) {
        const std::vector<float>& a = acts_[ii + 1];
        for (size_t k = 0; k < d.size(); ++k) {
          if (a[k] <= 0) d[k] = 0;  // ReLU (dropped units have a == 0 too)
          else if (ii == 0 && bn_ && dropout_ > 0 && !mask_.empty()) d[k] *= mask_[k];
        }
        if (ii == 0 && bn_) BatchNormBackward(&d, n, dout);
      }
      // Linear: dW = d^T x_in, db = sum d, dx = d W.
      const float* in = ii == 0 ? x_ : acts_[ii].data();
      Transpose(d.data(), n, dout, &t1_);
      Transpose(in, n, din, &t2_);
      Gemm(t1_.data(), dout, n, t2_.data(), din, w_[ii].g.data(), &mm_, pool);
      std::fill(b_[ii].g.begin(), b_[ii].g.end(), 0.0f);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t j = 0; j < dout; ++j) b_[ii].g[j] += d[t * dout + j];
      }
      if (ii > 0) {
        Transpose(w_[ii].v.data(), dout, din, &t1_);
        std::vector<float> dx(n * din);
        Gemm(d.data(), n, dout, t1_.data(), din, dx.data(), &mm_, pool);
        d.swap(dx);
      }
    }
  }

  void AdamStep(float lr, float wd, int step) {
    for (auto& p : w_) p.AdamStep(lr, wd, step);
    for (auto& p : b_) p.AdamStep(lr, wd, step);
    if (bn_) gamma_.AdamStep(lr, wd, step), beta_.AdamStep(lr, wd, step);
  }

  // Dense layers for inference, BatchNorm folded into layer 0: with s = gamma / sqrt(var + eps),
  // W0' = s * W0 (per output row), b0' = s * (b0 - mean) + beta.
  std::vector<DenseLayer> Export() const {
    std::vector<DenseLayer> out;
    for (size_t i = 0; i < n_layers(); ++i) {
      DenseLayer l;
      l.n_in = widths_[i];
      l.n_out = widths_[i + 1];
      l.w = w_[i].v;
      l.b = b_[i].v;
      l.relu = i + 1 < n_layers();
      if (i == 0 && bn_) {
        for (int64_t j = 0; j < l.n_out; ++j) {
          const float s = gamma_.v[j] / std::sqrt(run_var_[j] + kBnEps);
          for (int64_t c = 0; c < l.n_in; ++c) l.w[j * l.n_in + c] *= s;
          l.b[j] = s * (l.b[j] - run_mean_[j]) + beta_.v[j];
        }
      }
      out.push_back(std::move(l));
    }
    return out;
  }

 private:
  void BatchNorm(std::vector<float>* a, int64_t n, int64_t dim, bool train) {
    mean_.assign(dim, 0.0f);
    invstd_.assign(dim, 0.0f);
    if (train) {
      std::vector<double> sum(dim, 0.0), sq(dim, 0.0);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t j = 0; j < dim; ++j) sum[j] += (*a)[t * dim + j];
      }
      for (int64_t j = 0; j < dim; ++j) mean_[j] = static_cast<float>(sum[j] / n);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t j = 0; j < dim; ++j) {
          const double dv = (*a)[t * dim + j] - mean_[j];
          sq[j] += dv * dv;
        }
      }
      for (int64_t j = 0; j < dim; ++j) {
        const float var = static_cast<float>(sq[j] / n);
        invstd_[j] = 1.0f / std::sqrt(var + kBnEps);
        const float unbiased = n > 1 ? var * n / (n - 1) : var;
        run_mean_[j] = (1 - kBnMomentum) * run_mean_[j] + kBnMomentum * mean_[j];
        run_var_[j] = (1 - kBnMomentum) * run_var_[j] + kBnMomentum * unbiased;
      }
    } else {
      for (int64_t j = 0; j < dim; ++j) {
        mean_[j] = run_mean_[j];
        invstd_[j] = 1.0f / std::sqrt(run_var_[j] + kBnEps);
      }
    }
    xhat_.resize(a->size());
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < dim; ++j) {
        const size_t k = t * dim + j;
        xhat_[k] = ((*a)[k] - mean_[j]) * invstd_[j];
        (*a)[k] = gamma_.v[j] * xhat_[k] + beta_.v[j];
      }
    }
  }

  // d: gradient w.r.t. the BatchNorm output -> gradient w.r.t. its input (batch statistics).
  void BatchNormBackward(std::vector<float>* d, int64_t n, int64_t dim) {
    std::vector<double> sd(dim, 0.0), sdx(dim, 0.0);
    std::fill(gamma_.g.begin(), gamma_.g.end(), 0.0f);
    std::fill(beta_.g.begin(), beta_.g.end(), 0.0f);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < dim; ++j) {
        const size_t k = t * dim + j;
        gamma_.g[j] += (*d)[k] * xhat_[k];
        beta_.g[j] += (*d)[k];
        const double dxhat = (*d)[k] * gamma_.v[j];
        sd[j] += dxhat;
        sdx[j] += dxhat * xhat_[k];
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < dim; ++j) {
        const size_t k = t * dim + j;
        const double dxhat = (*d)[k] * gamma_.v[j];
        (*d)[k] = static_cast<float>(invstd_[j] / n * (n * dxhat - sd[j] - xhat_[k] * sdx[j]));
      }
    }
  }

  std::vector<int64_t> widths_;
  bool bn_;
  float dropout_;
  uint64_t rng_;
  std::vector<Param> w_, b_;
  Param gamma_, beta_;
  std::vector<float> run_mean_, run_var_, mean_, invstd_, xhat_, mask_;
  const float* x_ = nullptr;
  int64_t n_ = 0;
  std::vector<std::vector<float>> acts_;
  std::vector<float> t1_, t2_;
  MatMulInput mm_;
};

// Weighted BCE of logits z against targets; fills dz (d loss / d z) when non-null.
double Loss(const std::vector<float>& z, const uint8_t* target, const double w[2], int64_t n,
            std::vector<float>* dz) {
  double loss = 0, wsum = 0;
  for (int64_t t = 0; t < n; ++t) wsum += w[target[t]];
  if (dz) dz->resize(n);
  for (int64_t t = 0; t < n; ++t) {
    const double y = target[t], zt = z[t];
    // log(1 + exp(-|z|)) form, stable for large |z|.
    const double l = std::max(zt, 0.0) - zt * y + std::log1p(std::exp(-std::abs(zt)));
    loss += w[target[t]] * l;
    if (dz) (*dz)[t] = static_cast<float>(w[target[t]] * (Sigmoid(z[t]) - y) / wsum);
  }
  return loss / wsum;
}

}  // namespace

double Auroc(std::span<const float> score_in, std::span<const uint8_t> label) {
  const size_t n = score_in.size();
  // A NaN (a network that diverged) ranks lowest: it neither breaks the sort nor the tie loop.
  std::vector<float> score(score_in.begin(), score_in.end());
  for (float& v : score) {
    if (std::isnan(v)) v = -std::numeric_limits<float>::infinity();
  }
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return score[a] < score[b]; });
  double pos = 0, neg = 0, rank_sum = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && score[idx[j]] == score[idx[i]]) ++j;
    const double avg_rank = (i + 1 + j) / 2.0;  // ranks i+1..j, ties share the mean
    for (size_t k = i; k < j; ++k) {
      if (label[idx[k]]) {
        rank_sum += avg_rank;
        pos += 1;
      } else {
        neg += 1;
      }
    }
    i = j;
  }
  if (pos == 0 || neg == 0) return 0.5;
  return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

Expected<MlpTrainResult> TrainRouterNetwork(const RouterExamples& train, const RouterExamples& val,
                                            const MlpTrainOptions& opts, ThreadPool* pool) {
  if (!RouterIsLearned(opts.kind)) return Status::Error("only citer and colm routers are trained");
  const int64_t dim = train.dim, n = train.size();
  if (dim <= 0 || val.dim != dim) return Status::Error("examples have inconsistent dimensions");
  if (train.x.size() != static_cast<size_t>(n * dim) || val.x.size() != static_cast<size_t>(val.size() * dim)) {
    return Status::Error("examples have inconsistent sizes");
  }
  if (opts.batch < 2 || opts.max_epochs < 1) return Status::Error("batch must be >= 2 and epochs >= 1");
  const bool colm = opts.kind == RouterKind::kColm;
  // Targets: citer predicts "keep" (label), colm predicts "defer" (1 - label).
  auto targets = [&](const RouterExamples& e) {
    std::vector<uint8_t> t(e.label);
    if (colm) for (auto& v : t) v = 1 - v;
    return t;
  };
  const std::vector<uint8_t> ty = targets(train), vy = targets(val);
  int64_t count[2] = {0, 0};
  for (uint8_t v : ty) ++count[v];
  if (count[0] == 0 || count[1] == 0) {
    return Status::Error("the training tokens are all of one class (" + std::to_string(count[1]) +
                         " of " + std::to_string(n) + " positive): nothing to learn");
  }
  // Class balancing: each class carries half the total weight.
  const double w[2] = {n / (2.0 * count[0]), n / (2.0 * count[1])};
  // Inputs standardized per dimension (statistics of the training set), folded into the first
  // layer at export: hidden states have very different scales per dimension (the final norm's
  // weights), which slows and destabilizes training otherwise.
  std::vector<double> mu(dim, 0.0), sd(dim, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < dim; ++c) mu[c] += train.x[i * dim + c];
  }
  for (double& m : mu) m /= n;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < dim; ++c) {
      const double d = train.x[i * dim + c] - mu[c];
      sd[c] += d * d;
    }
  }
  for (double& v : sd) v = std::sqrt(v / n) + 1e-6;
  auto standardize = [&](const std::vector<float>& x) {
    std::vector<float> out(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t c = i % dim;
      out[i] = static_cast<float>((x[i] - mu[c]) / sd[c]);
    }
    return out;
  };
  RouterExamples tr_std = train, va_std = val;
  tr_std.x = standardize(train.x);
  va_std.x = standardize(val.x);
  auto export_layers = [&](const Net& net) {
    std::vector<DenseLayer> layers = net.Export();
    DenseLayer& l0 = layers[0];
    for (int64_t j = 0; j < l0.n_out; ++j) {
      double shift = 0;
      for (int64_t c = 0; c < dim; ++c) {
        float& w = l0.w[j * dim + c];
        w = static_cast<float>(w / sd[c]);
        shift += w * mu[c];
      }
      l0.b[j] = static_cast<float>(l0.b[j] - shift);
    }
    return layers;
  };
  std::vector<int64_t> widths = colm ? std::vector<int64_t>{dim, 1}
                                     : std::vector<int64_t>{dim, 2 * dim, dim, 1};
  Net net(widths, !colm, colm ? 0.0f : opts.dropout, opts.seed);
  uint64_t rng = opts.seed * 7919 + 1;
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::vector<float> xb, dz;
  std::vector<uint8_t> yb;
  MlpTrainResult best;
  double best_val = std::numeric_limits<double>::infinity();
  int since_best = 0, step = 0;
  auto evaluate = [&](const RouterExamples& e, const std::vector<uint8_t>& y, double* loss, double* auc) {
    std::vector<float> z = net.Forward(e.x.data(), e.size(), false, pool);  // standardized
    *loss = Loss(z, y.data(), w, e.size(), nullptr);
    std::vector<float> conf(z.size());
    for (size_t t = 0; t < z.size(); ++t) conf[t] = colm ? 1 - Sigmoid(z[t]) : Sigmoid(z[t]);
    *auc = Auroc(conf, e.label);
  };
  for (int epoch = 1; epoch <= opts.max_epochs; ++epoch) {
    for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[Next(&rng) % (i + 1)]);
    double loss_sum = 0;
    int64_t batches = 0;
    for (int64_t s = 0; s < n; s += opts.batch) {
      const int64_t b = std::min<int64_t>(opts.batch, n - s);
      if (b < 2) break;  // BatchNorm needs two rows
      xb.resize(b * dim);
      yb.resize(b);
      for (int64_t t = 0; t < b; ++t) {
        std::copy_n(tr_std.x.data() + order[s + t] * dim, dim, xb.data() + t * dim);
        yb[t] = ty[order[s + t]];
      }
      const std::vector<float>& z = net.Forward(xb.data(), b, true, pool);
      loss_sum += Loss(z, yb.data(), w, b, &dz);
      ++batches;
      net.Backward(dz, pool);
      net.AdamStep(opts.lr, opts.weight_decay, ++step);
    }
    double vloss = 0, vauc = 0.5;
    if (val.size() > 0) evaluate(va_std, vy, &vloss, &vauc);
    const float tl = static_cast<float>(loss_sum / std::max<int64_t>(1, batches));
    if (opts.on_epoch) opts.on_epoch(epoch, tl, static_cast<float>(vloss), static_cast<float>(vauc));
    best.epochs = epoch;
    if (val.size() == 0 || vloss < best_val - 1e-6) {
      best_val = vloss;
      best.layers = export_layers(net);
      best.best_epoch = epoch;
      best.train_loss = tl;
      best.val_loss = static_cast<float>(vloss);
      best.val_auroc = static_cast<float>(vauc);
      since_best = 0;
    } else if (++since_best >= opts.patience) {
      break;
    }
  }
  return best;
}

}  // namespace tlr
