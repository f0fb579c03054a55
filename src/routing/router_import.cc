// A router from a PyTorch state_dict (see router_import.h).
#include "routing/router_import.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

namespace tlr {

namespace {

// Keys compared with runs of digits as numbers ("layers.10" after "layers.9").
bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) ++i2;
      while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) ++j2;
      const std::string na = a.substr(i, i2 - i), nb = b.substr(j, j2 - j);
      const std::string ta = na.substr(std::min(na.find_first_not_of('0'), na.size())),
                        tb = nb.substr(std::min(nb.find_first_not_of('0'), nb.size()));
      if (ta.size() != tb.size()) return ta.size() < tb.size();
      if (ta != tb) return ta < tb;
      i = i2;
      j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

struct Found {
  std::string prefix;  // "net.0." (with its dot) or ""
  bool batchnorm = false;
};

}  // namespace

Expected<std::vector<DenseLayer>> RouterLayersFromStateDict(const SafeTensorsFile& f, const RouterImportOptions& opts,
                                                            RouterKind* kind) {
  // The modules, in state_dict order.
  std::vector<Found> mods;
  std::vector<std::string> keys;
  for (const auto& [k, t] : f.tensors) keys.push_back(k);
  std::sort(keys.begin(), keys.end(), NaturalLess);
  std::map<std::string, bool> seen;
  for (const std::string& k : keys) {
    const size_t dot = k.rfind('.');
    const std::string prefix = dot == std::string::npos ? "" : k.substr(0, dot + 1);
    const std::string leaf = dot == std::string::npos ? k : k.substr(dot + 1);
    if (seen.count(prefix)) continue;
    if (leaf == "running_mean" || leaf == "running_var" || leaf == "num_batches_tracked" ||
        f.tensors.count(prefix + "running_mean")) {
      seen[prefix] = true;
      mods.push_back({prefix, true});
    } else if (leaf == "weight" && f.tensors.at(k).shape.size() == 2) {
      seen[prefix] = true;
      mods.push_back({prefix, false});
    }
  }
  auto floats = [&](const std::string& name, int64_t want) -> Expected<std::vector<float>> {
    const SafeTensor& t = f.tensors.at(name);
    if (t.elements() != want) {
      return Status::Error("'" + name + "' has " + std::to_string(t.elements()) + " values, " + std::to_string(want) +
                           " expected");
    }
    return SafeTensorFloats(name, t);
  };
  std::vector<DenseLayer> layers;
  for (const Found& m : mods) {
    if (!m.batchnorm) {
      const SafeTensor& w = f.tensors.at(m.prefix + "weight");
      DenseLayer l;
      l.n_out = w.shape[0];
      l.n_in = w.shape[1];
      if (l.n_out < 1 || l.n_in < 1) return Status::Error("'" + m.prefix + "weight' is empty");
      TLR_ASSIGN_OR_RETURN(l.w, floats(m.prefix + "weight", l.n_in * l.n_out));
      if (f.tensors.count(m.prefix + "bias")) {
        TLR_ASSIGN_OR_RETURN(l.b, floats(m.prefix + "bias", l.n_out));
      } else {
        l.b.assign(static_cast<size_t>(l.n_out), 0.0f);
      }
      layers.push_back(std::move(l));
      continue;
    }
    // BatchNorm1d after the linear layer before it: y = g (x - mean) / sqrt(var + eps) + beta.
    if (layers.empty()) return Status::Error("BatchNorm '" + m.prefix + "' comes before any linear layer");
    DenseLayer& l = layers.back();
    const int64_t n = l.n_out;
    if (!f.tensors.count(m.prefix + "running_mean") || !f.tensors.count(m.prefix + "running_var")) {
      return Status::Error("BatchNorm '" + m.prefix + "' needs running_mean and running_var");
    }
    TLR_ASSIGN_OR_RETURN(std::vector<float> mean, floats(m.prefix + "running_mean", n));
    TLR_ASSIGN_OR_RETURN(std::vector<float> var, floats(m.prefix + "running_var", n));
    std::vector<float> gamma(static_cast<size_t>(n), 1.0f), beta(static_cast<size_t>(n), 0.0f);
    if (f.tensors.count(m.prefix + "weight")) {
      TLR_ASSIGN_OR_RETURN(gamma, floats(m.prefix + "weight", n));
    }
    if (f.tensors.count(m.prefix + "bias")) {
      TLR_ASSIGN_OR_RETURN(beta, floats(m.prefix + "bias", n));
    }
    for (int64_t j = 0; j < n; ++j) {
      if (!(var[j] >= 0)) return Status::Error("BatchNorm '" + m.prefix + "' has a negative running variance");
      const float s = gamma[j] / std::sqrt(var[j] + opts.bn_eps);
      for (int64_t c = 0; c < l.n_in; ++c) l.w[j * l.n_in + c] *= s;
      l.b[j] = s * (l.b[j] - mean[j]) + beta[j];
    }
  }
  if (layers.empty()) return Status::Error("no linear layers (2-D '.weight' tensors) in the state_dict");
  const RouterKind k = opts.kind ? *opts.kind : layers.size() == 3 ? RouterKind::kCiter : RouterKind::kColm;
  const size_t want = k == RouterKind::kCiter ? 3 : 1;
  if (k != RouterKind::kCiter && k != RouterKind::kColm) return Status::Error("only citer and colm routers are imported");
  if (layers.size() != want) {
    return Status::Error("the state_dict has " + std::to_string(layers.size()) + " linear layers; a " +
                         std::string(RouterKindName(k)) + " router has " + std::to_string(want));
  }
  if (layers.front().n_in != opts.hidden_size) {
    return Status::Error("the first layer reads " + std::to_string(layers.front().n_in) + " values; the SLM's hidden state has " +
                         std::to_string(opts.hidden_size));
  }
  for (size_t i = 1; i < layers.size(); ++i) {
    if (layers[i].n_in != layers[i - 1].n_out) {
      return Status::Error("layer " + std::to_string(i) + " reads " + std::to_string(layers[i].n_in) +
                           " values; the layer before writes " + std::to_string(layers[i - 1].n_out));
    }
  }
  if (layers.back().n_out != 1) return Status::Error("the last layer writes " + std::to_string(layers.back().n_out) + " values, not 1");
  if (k == RouterKind::kCiter && (layers[0].n_out != 2 * opts.hidden_size || layers[1].n_out != opts.hidden_size)) {
    return Status::Error("a citer router is h -> 2h -> h -> 1 (h = " + std::to_string(opts.hidden_size) + "), this one is " +
                         std::to_string(layers[0].n_in) + " -> " + std::to_string(layers[0].n_out) + " -> " +
                         std::to_string(layers[1].n_out) + " -> 1");
  }
  for (size_t i = 0; i < layers.size(); ++i) layers[i].relu = i + 1 < layers.size();
  // A colm router stores P(defer) (router.h): a network giving P(keep) is negated for it, as a
  // citer network giving P(route) is (sigmoid(-x) = 1 - sigmoid(x)).
  if ((k == RouterKind::kColm) != opts.invert) {
    for (float& w : layers.back().w) w = -w;
    for (float& b : layers.back().b) b = -b;
  }
  for (const DenseLayer& l : layers) {
    for (float w : l.w) {
      if (!std::isfinite(w)) return Status::Error("the weights are not all finite");
    }
  }
  *kind = k;
  return layers;
}

}  // namespace tlr
