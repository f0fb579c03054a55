// Routers: built-in confidences, the GGUF format round trip, compatibility checks.
#include "routing/router.h"
#include "routing/r2r_net.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <utility>

#include "model/gguf/gguf_reader.h"
#include "model/gguf/gguf_writer.h"
#include "model/model.h"
#include "model/random_model.h"
#include "quant/quantize.h"
#include "util/temp_dir.h"

namespace tlr {
namespace {

std::vector<DenseLayer> RandomLayers(const std::vector<int64_t>& widths, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  std::vector<DenseLayer> ls;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    DenseLayer l;
    l.n_in = widths[i];
    l.n_out = widths[i + 1];
    for (int64_t k = 0; k < l.n_in * l.n_out; ++k) l.w.push_back(nd(rng));
    for (int64_t k = 0; k < l.n_out; ++k) l.b.push_back(nd(rng));
    ls.push_back(std::move(l));
  }
  return ls;
}

// The MLP evaluated directly in double precision.
float Reference(const std::vector<DenseLayer>& ls, std::vector<double> x, bool colm) {
  for (size_t i = 0; i < ls.size(); ++i) {
    std::vector<double> y(ls[i].n_out);
    for (int64_t o = 0; o < ls[i].n_out; ++o) {
      double s = ls[i].b[o];
      for (int64_t c = 0; c < ls[i].n_in; ++c) s += ls[i].w[o * ls[i].n_in + c] * x[c];
      y[o] = (i + 1 < ls.size()) ? std::max(s, 0.0) : s;
    }
    x = y;
  }
  const double p = 1 / (1 + std::exp(-x[0]));
  return static_cast<float>(colm ? 1 - p : p);
}

TEST(Router, BuiltinConfidences) {
  std::vector<float> flat(100, 0.0f), peaked(100, 0.0f);
  peaked[7] = 30.0f;
  EXPECT_NEAR(MaxProbConfidence(flat.data(), 100), 0.01f, 1e-6);
  EXPECT_NEAR(MaxProbConfidence(peaked.data(), 100), 1.0f, 1e-6);
  EXPECT_NEAR(EntropyConfidence(flat.data(), 100), 0.0f, 1e-5);
  EXPECT_NEAR(EntropyConfidence(peaked.data(), 100), 1.0f, 1e-5);
  auto r = Router::Builtin(RouterKind::kRandom, 3);
  ASSERT_TRUE(r.ok());
  auto r2 = Router::Builtin(RouterKind::kRandom, 3);
  double sum = 0;
  std::vector<float> state(100, 0.0f);
  for (int i = 0; i < 1000; ++i) {
    state[i % 100] += 0.25f;  // a new SLM state
    const float c = r->Confidence(nullptr, state.data(), 100, nullptr);
    ASSERT_GE(c, 0.0f);
    ASSERT_LT(c, 1.0f);
    ASSERT_EQ(c, r2->Confidence(nullptr, state.data(), 100, nullptr));  // seeded
    ASSERT_EQ(c, r->Confidence(nullptr, state.data(), 100, nullptr));  // a function of the state
    sum += c;
  }
  EXPECT_NEAR(sum / 1000, 0.5, 0.05);
  auto other_seed = Router::Builtin(RouterKind::kRandom, 4);
  EXPECT_NE(other_seed->Confidence(nullptr, state.data(), 100, nullptr), r->Confidence(nullptr, state.data(), 100, nullptr));
  EXPECT_FALSE(Router::Builtin(RouterKind::kCiter).ok());
  EXPECT_FALSE(ParseRouterKind("mlp").ok());
}

TEST(Router, CiterMatchesReferenceAndRoundTripsThroughGguf) {
  TempDir dir;
  const int64_t h = 64;
  auto layers = RandomLayers({h, 2 * h, h, 1}, 5);
  RouterInfo info;
  info.kind = RouterKind::kCiter;
  info.slm_fingerprint = "0123456789abcdef";
  info.threshold = 0.61f;
  info.training_summary = R"({"auroc": 0.9})";
  auto r = Router::FromLayers(info, layers);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->n_params(), h * 2 * h + 2 * h + 2 * h * h + h + h + 1);
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  std::vector<float> x(4 * h);
  for (float& v : x) v = nd(rng);
  float out[4];
  r->ConfidenceBatch(x.data(), 4, out, nullptr);
  for (int t = 0; t < 4; ++t) {
    EXPECT_NEAR(out[t], Reference(layers, std::vector<double>(x.begin() + t * h, x.begin() + (t + 1) * h), false), 1e-5);
    EXPECT_EQ(out[t], r->Confidence(x.data() + t * h, nullptr, 0, nullptr));
  }
  ASSERT_TRUE(r->Save(dir.File("r.gguf")).ok());
  auto back = Router::Load(dir.File("r.gguf"));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->kind(), RouterKind::kCiter);
  EXPECT_EQ(back->info().slm_fingerprint, "0123456789abcdef");
  EXPECT_FLOAT_EQ(back->info().threshold, 0.61f);
  EXPECT_EQ(back->info().training_summary, R"({"auroc": 0.9})");
  float out2[4];
  back->ConfidenceBatch(x.data(), 4, out2, nullptr);
  for (int t = 0; t < 4; ++t) EXPECT_EQ(out[t], out2[t]);

  // Quantized weights: close to the float result.
  auto q = Router::FromLayers(info, layers, GgmlType::kQ8_0);
  ASSERT_TRUE(q.ok());
  ASSERT_TRUE(q->Save(dir.File("q.gguf")).ok());
  auto qb = Router::Load(dir.File("q.gguf"));
  ASSERT_TRUE(qb.ok()) << qb.status().message();
  EXPECT_EQ(qb->weight_type(), GgmlType::kQ8_0);
  qb->ConfidenceBatch(x.data(), 4, out2, nullptr);
  for (int t = 0; t < 4; ++t) EXPECT_NEAR(out[t], out2[t], 0.03);

  // q8_0 with a hidden size that is not a multiple of 32: the first and third layers keep f16,
  // the second is q8_0, and the file loads as that router (it loaded as an all-f16 one).
  const int64_t h16 = 48;
  auto mixed = Router::FromLayers(info, RandomLayers({h16, 2 * h16, h16, 1}, 6), GgmlType::kQ8_0);
  ASSERT_TRUE(mixed.ok()) << mixed.status().message();
  auto mixed_bytes = mixed->ToBytes();
  ASSERT_TRUE(mixed_bytes.ok());
  auto mixed_file = GgufFile::FromBytes(*mixed_bytes);
  ASSERT_TRUE(mixed_file.ok());
  std::vector<GgmlType> stored;
  for (int i = 0; i < 3; ++i) stored.push_back(mixed_file->FindTensor("router.layer." + std::to_string(i) + ".weight")->type);
  EXPECT_EQ(stored, (std::vector<GgmlType>{GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kF16}));
  auto mixed_back = Router::FromGguf(*mixed_file, "mixed.gguf");
  ASSERT_TRUE(mixed_back.ok()) << mixed_back.status().message();
  EXPECT_EQ(mixed_back->weight_type(), GgmlType::kQ8_0);
  auto mixed_again = mixed_back->ToBytes();
  ASSERT_TRUE(mixed_again.ok());
  EXPECT_EQ(*mixed_again, *mixed_bytes);
  std::vector<float> xm(static_cast<size_t>(h16));
  for (float& v : xm) v = nd(rng);
  EXPECT_EQ(mixed->Confidence(xm.data(), nullptr, 0, nullptr), mixed_back->Confidence(xm.data(), nullptr, 0, nullptr));
}

// A NaN threshold or NaN/inf weights would load and then never route (or route always):
// refused at load with a message naming what is wrong.
TEST(Router, RefusesNonFiniteThresholdAndWeights) {
  TempDir dir;
  RouterInfo info;
  info.kind = RouterKind::kCiter;
  info.threshold = std::nanf("");
  auto r = Router::FromLayers(info, RandomLayers({8, 4, 4, 1}, 3));
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_TRUE(r->Save(dir.File("nan_threshold.gguf")).ok());
  auto loaded = Router::Load(dir.File("nan_threshold.gguf"));
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("threshold is not a finite number"), std::string::npos)
      << loaded.status().message();
  {  // an f64 threshold finite as a double, infinite as the float it becomes
    info.threshold = 0.5f;
    auto good = Router::FromLayers(info, RandomLayers({8, 4, 4, 1}, 3));
    ASSERT_TRUE(good.ok());
    auto file = GgufFile::FromBytes(*good->ToBytes());
    ASSERT_TRUE(file.ok());
    GgufWriter w;
    for (const auto& [k, v] : file->metadata()) w.Set(k, k == "tlr-router.threshold" ? GgufValue(1e300) : v);
    for (const auto& t : file->tensors()) ASSERT_TRUE(w.AddTensor(t.name, t.type, t.dims, {t.data, t.n_bytes}).ok());
    auto f64 = GgufFile::FromBytes(*w.ToBytes());
    ASSERT_TRUE(f64.ok());
    auto back = Router::FromGguf(*f64, "f64.gguf");
    ASSERT_FALSE(back.ok());
    EXPECT_NE(back.status().message().find("threshold is not a finite number"), std::string::npos)
        << back.status().message();
  }

  for (float bad : {std::nanf(""), INFINITY}) {
    info.threshold = 0.5f;
    // Refused when the router is made (an imported state_dict with a NaN made a router whose
    // saved file did not load)...
    auto layers = RandomLayers({8, 4, 4, 1}, 3);
    const float good = layers[1].w[2];
    layers[1].w[2] = bad;
    auto w = Router::FromLayers(info, layers);
    ASSERT_FALSE(w.ok());
    EXPECT_NE(w.status().message().find("router layer 1 has a weight or bias that is NaN or infinite"), std::string::npos)
        << w.status().message();
    // ...and when a file holds one: the value patched into a good router's bytes.
    layers[1].w[2] = good;
    auto ok = Router::FromLayers(info, layers);
    ASSERT_TRUE(ok.ok()) << ok.status().message();
    auto bytes = ok->ToBytes();
    ASSERT_TRUE(bytes.ok()) << bytes.status().message();
    uint8_t from[4], to[4];
    std::memcpy(from, &good, 4);
    std::memcpy(to, &bad, 4);
    auto at = std::search(bytes->begin(), bytes->end(), from, from + 4);
    ASSERT_NE(at, bytes->end());
    ASSERT_EQ(std::search(at + 1, bytes->end(), from, from + 4), bytes->end()) << "the weight's bytes are not unique";
    std::copy(to, to + 4, at);
    auto file = GgufFile::FromBytes(*bytes);
    ASSERT_TRUE(file.ok()) << file.status().message();
    auto back = Router::FromGguf(*file, "patched.gguf");
    ASSERT_FALSE(back.ok());
    EXPECT_NE(back.status().message().find("router 'patched.gguf': router layer 1 has a weight or bias that is NaN or infinite"),
              std::string::npos)
        << back.status().message();
  }
  // A weight past f16's range is refused when the router is made, not written as infinity.
  auto layers = RandomLayers({8, 4, 4, 1}, 3);
  layers[1].w[2] = 1e5f;
  auto big = Router::FromLayers(info, layers, GgmlType::kF16);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("layer 1 has weights beyond f16's range"), std::string::npos)
      << big.status().message();
  EXPECT_TRUE(Router::FromLayers(info, layers, GgmlType::kF32).ok());
}

TEST(Router, ColmIsOneMinusDeferProbability) {
  const int64_t h = 32;
  auto layers = RandomLayers({h, 1}, 8);
  RouterInfo info;
  info.kind = RouterKind::kColm;
  auto r = Router::FromLayers(info, layers);
  ASSERT_TRUE(r.ok());
  std::vector<float> x(h, 0.5f);
  EXPECT_NEAR(r->Confidence(x.data(), nullptr, 0, nullptr),
              Reference(layers, std::vector<double>(x.begin(), x.end()), true), 1e-5);
  // Shapes are checked.
  info.kind = RouterKind::kCiter;
  EXPECT_FALSE(Router::FromLayers(info, layers).ok());
  auto bad = RandomLayers({h, 2 * h, h, 1}, 1);
  bad[2] = RandomLayers({h + 1, 1}, 2)[0];  // takes h + 1 inputs after a layer giving h
  EXPECT_FALSE(Router::FromLayers(info, bad).ok());
}

TEST(Router, RefusesAnotherSlmAndBadFiles) {
  TempDir dir;
  RandomModelOptions o;
  o.preset = "tiny";
  o.type = "f32";
  ASSERT_TRUE(WriteRandomModel(o, dir.File("a.gguf")).ok());
  o.seed = 2;
  ASSERT_TRUE(WriteRandomModel(o, dir.File("b.gguf")).ok());
  auto a = Model::Load(dir.File("a.gguf"));
  auto b = Model::Load(dir.File("b.gguf"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)->fingerprint(), (*b)->fingerprint());
  const int64_t h = (*a)->config().n_embd;
  RouterInfo info;
  info.kind = RouterKind::kCiter;
  info.slm_fingerprint = (*a)->fingerprint_hex();
  auto r = Router::FromLayers(info, RandomLayers({h, 2 * h, h, 1}, 2));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->CheckCompatible(**a).ok());
  Status s = r->CheckCompatible(**b);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("trained for SLM"), std::string::npos) << s.message();
  RouterInfo colm;
  colm.kind = RouterKind::kColm;
  auto wrong_dim = Router::FromLayers(colm, RandomLayers({h + 32, 1}, 2));
  ASSERT_TRUE(wrong_dim.ok());
  EXPECT_FALSE(wrong_dim->CheckCompatible(**a).ok());

  // A model file is not a router; a truncated router is an error, not a crash.
  auto not_router = Router::Load(dir.File("a.gguf"));
  ASSERT_FALSE(not_router.ok());
  EXPECT_NE(not_router.status().message().find("tlr-router"), std::string::npos);
  ASSERT_TRUE(r->Save(dir.File("r.gguf")).ok());
  std::filesystem::resize_file(dir.File("r.gguf"), 200);
  EXPECT_FALSE(Router::Load(dir.File("r.gguf")).ok());
  EXPECT_FALSE(Router::LoadOrBuiltin("no-such-router.gguf").ok());
  EXPECT_TRUE(Router::LoadOrBuiltin("entropy").ok());
}

}  // namespace
}  // namespace tlr

namespace tlr {
namespace {

// An R2R-layout network of small random weights (r2r_net.h's names and shapes).
std::map<std::string, R2rNet::Tensor> RandomR2rParams(int64_t h, int64_t v, int64_t k, bool normalize, uint64_t seed,
                                                      int64_t d0 = 16, int64_t d1 = 12) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> nd(0.0f, 0.3f);
  std::map<std::string, R2rNet::Tensor> p;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float base = 0.0f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    R2rNet::Tensor t{shape, std::vector<float>(static_cast<size_t>(n))};
    for (float& x : t.v) x = base + nd(rng);
    p[name] = std::move(t);
  };
  add("token_embeddings.weight", {v, h});
  add("logits_projection.weight", {h, k});
  add("logits_projection.bias", {h});
  add("combined_projection.weight", {d0, 3 * h});
  add("combined_projection.bias", {d0});
  add("backbone.input_projection.weight", {d0, d0});
  add("backbone.input_projection.bias", {d0});
  const int64_t widths[] = {d0, d1, d1};
  for (int i = 0; i < 2; ++i) {
    const std::string b = "backbone.blocks." + std::to_string(i) + ".";
    add(b + "layer_norm.weight", {widths[i]}, 1.0f);
    add(b + "layer_norm.bias", {widths[i]});
    add(b + "mlp.0.weight", {2 * widths[i], widths[i]});
    add(b + "mlp.0.bias", {2 * widths[i]});
    add(b + "mlp.3.weight", {widths[i + 1], 2 * widths[i]});
    add(b + "mlp.3.bias", {widths[i + 1]});
    if (widths[i] != widths[i + 1]) {
      add(b + "dim_change.weight", {widths[i + 1], widths[i]});
      add(b + "dim_change.bias", {widths[i + 1]});
    }
  }
  add("backbone.output_layer.0.weight", {d1}, 1.0f);
  add("backbone.output_layer.0.bias", {d1});
  add("backbone.output_layer.1.weight", {1, d1});
  add("backbone.output_layer.1.bias", {1});
  if (normalize) {
    add("layer_norm_hidden_states.weight", {h}, 1.0f);
    add("layer_norm_hidden_states.bias", {h});
    add("layer_norm_token.weight", {h}, 1.0f);
    add("layer_norm_token.bias", {h});
  }
  return p;
}

// An R2R router (its PyTorch agreement is router_torch_test's): the scores are a function of the
// hidden state and the logits (the argmax token's embedding, the top-K), it survives a GGUF round
// trip bit for bit, and malformed networks are refused naming the tensor.
TEST(Router, R2rRoundTripsAndRefusesMalformedNetworks) {
  TempDir dir;
  const int64_t h = 8, v = 40, k = 10;
  for (bool normalize : {false, true}) {
    auto net = R2rNet::FromParams(RandomR2rParams(h, v, k, normalize, 5));
    ASSERT_TRUE(net.ok()) << net.status().message();
    EXPECT_EQ(net->normalize_input, normalize);
    EXPECT_EQ(net->n_blocks, 2);
    RouterInfo info;
    info.threshold = 0.7f;
    auto r = Router::FromR2r(info, std::move(net).value());
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->kind(), RouterKind::kR2r);
    ASSERT_TRUE(r->Save(dir.File("r2r.gguf")).ok());
    auto back = Router::Load(dir.File("r2r.gguf"));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->kind(), RouterKind::kR2r);
    EXPECT_EQ(back->info().input_dim, h);
    std::mt19937 rng(3);
    std::normal_distribution<float> nd;
    std::set<float> seen;
    for (int t = 0; t < 20; ++t) {
      std::vector<float> hidden(h), logits(v);
      for (float& x : hidden) x = nd(rng);
      for (float& x : logits) x = 2 * nd(rng);
      const float c = r->Confidence(hidden.data(), logits.data(), v, nullptr);
      EXPECT_GT(c, 0.0f);
      EXPECT_LT(c, 1.0f);
      EXPECT_EQ(back->Confidence(hidden.data(), logits.data(), v, nullptr), c);
      // Only the top-K logits and the argmax matter: lowering a logit outside the top K changes nothing.
      std::vector<float> low = logits;
      const int32_t smallest = static_cast<int32_t>(std::min_element(low.begin(), low.end()) - low.begin());
      low[smallest] -= 5;
      EXPECT_EQ(r->Confidence(hidden.data(), low.data(), v, nullptr), c);
      seen.insert(c);
    }
    EXPECT_GT(seen.size(), 10u);  // it reads its inputs
  }
  auto bad = [&](const std::function<void(std::map<std::string, R2rNet::Tensor>&)>& edit, const std::string& want) {
    auto p = RandomR2rParams(h, v, k, false, 5);
    edit(p);
    auto net = R2rNet::FromParams(std::move(p));
    ASSERT_FALSE(net.ok()) << want;
    EXPECT_NE(net.status().message().find(want), std::string::npos) << net.status().message();
  };
  bad([](auto& p) { p.erase("backbone.blocks.1.mlp.3.bias"); }, "backbone.blocks.1.mlp.3.bias");
  bad([](auto& p) { p["combined_projection.bias"].shape = {3}; }, "combined_projection.bias");
  bad([](auto& p) { p["backbone.position_embedding"] = {{4, 16}, std::vector<float>(64)}; }, "position embeddings");
  bad([](auto& p) { p["extra.weight"] = {{1}, {0.0f}}; }, "unexpected tensor 'extra.weight'");
  bad([](auto& p) { p["logits_projection.bias"].v[0] = NAN; }, "NaN");
  bad([](auto& p) { p.erase("token_embeddings.weight"); }, "token_embeddings.weight");
  bad(  // an MLP 0 wide: it scored, and then its file could not be written (GGUF has no 0-sized dimension)
      [](auto& p) {
        p["backbone.blocks.1.mlp.0.weight"] = {{0, 12}, {}};
        p["backbone.blocks.1.mlp.0.bias"] = {{0}, {}};
        p["backbone.blocks.1.mlp.3.weight"] = {{12, 0}, {}};
      },
      "every dimension must be 1 or more");
}

// An R2R router held as f16 or q8_0 (StoreMatricesAs): scores within quantization error of the
// f32 network's, the file keeps the type and scores bit for bit after a round trip, and held
// weights that do not fit their type or shape are refused naming the tensor.
TEST(Router, R2rStoredAsF16OrQ8_0) {
  TempDir dir;
  const int64_t h = 32, v = 96, k = 64;  // every row a multiple of 32 long (q8_0's blocks)
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> hiddens, logits;
  for (int t = 0; t < 50; ++t) {
    hiddens.emplace_back(h), logits.emplace_back(v);
    for (float& x : hiddens.back()) x = nd(rng);
    for (float& x : logits.back()) x = 2 * nd(rng);
  }
  auto f32 = R2rNet::FromParams(RandomR2rParams(h, v, k, true, 9, 96, 64));
  ASSERT_TRUE(f32.ok()) << f32.status().message();
  auto ref = Router::FromR2r(RouterInfo{}, std::move(f32).value());
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(ref->weight_type(), GgmlType::kF32);
  for (GgmlType type : {GgmlType::kF16, GgmlType::kQ8_0}) {
    SCOPED_TRACE(GgmlTraits(type).name);
    auto net = R2rNet::FromParams(RandomR2rParams(h, v, k, true, 9, 96, 64));
    ASSERT_TRUE(net.ok());
    const int64_t params = net->n_params();
    ASSERT_TRUE(net->StoreMatricesAs(type).ok());
    EXPECT_EQ(net->n_params(), params);
    EXPECT_EQ(net->params.at("backbone.blocks.0.mlp.0.weight").type, type);
    EXPECT_TRUE(net->params.at("backbone.blocks.0.mlp.0.weight").v.empty()) << "the f32 copy is kept";
    EXPECT_EQ(net->params.at("backbone.blocks.0.mlp.0.bias").type, GgmlType::kF32);
    EXPECT_EQ(net->params.at("backbone.output_layer.1.weight").type, type);  // [1, 64]
    EXPECT_EQ(net->params.at("token_embeddings.weight").type, type);
    EXPECT_FALSE(net->StoreMatricesAs(GgmlType::kF16).ok()) << "converted twice";
    auto r = Router::FromR2r(RouterInfo{}, std::move(net).value());
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->weight_type(), type);
    ASSERT_TRUE(r->Save(dir.File("q.gguf")).ok());
    auto back = Router::Load(dir.File("q.gguf"));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(back->weight_type(), type);
    double worst = 0;
    int differ = 0;
    for (size_t t = 0; t < hiddens.size(); ++t) {
      const float c = r->Confidence(hiddens[t].data(), logits[t].data(), v, nullptr);
      const float c32 = ref->Confidence(hiddens[t].data(), logits[t].data(), v, nullptr);
      EXPECT_EQ(back->Confidence(hiddens[t].data(), logits[t].data(), v, nullptr), c);
      worst = std::max(worst, std::fabs(static_cast<double>(c) - c32));
      differ += c != c32;
    }
    EXPECT_LT(worst, type == GgmlType::kF16 ? 2e-3 : 2e-2);
    EXPECT_GT(differ, 10) << "the quantized weights were not used";
  }
  // A matrix whose rows do not fit q8_0's blocks falls back to f16 (the small network: rows of 8,
  // 12, 16 and 24 are f16, block 0's [12 x 32] down projection q8_0), and the mix scores close to f32.
  auto small32 = Router::FromR2r(RouterInfo{}, std::move(R2rNet::FromParams(RandomR2rParams(8, v, 10, false, 5))).value());
  auto small = R2rNet::FromParams(RandomR2rParams(8, v, 10, false, 5));
  ASSERT_TRUE(small.ok() && small32.ok());
  ASSERT_TRUE(small->StoreMatricesAs(GgmlType::kQ8_0).ok());
  EXPECT_EQ(small->params.at("backbone.blocks.1.mlp.0.weight").type, GgmlType::kF16);
  EXPECT_EQ(small->params.at("backbone.blocks.0.mlp.3.weight").type, GgmlType::kQ8_0);
  EXPECT_FALSE(small->StoreMatricesAs(GgmlType::kQ4_0).ok());
  auto mixed = Router::FromR2r(RouterInfo{}, std::move(small).value());
  ASSERT_TRUE(mixed.ok());
  for (size_t t = 0; t < hiddens.size(); ++t) {
    const float* hid = hiddens[t].data();  // the first 8 of 32 values
    EXPECT_NEAR(mixed->Confidence(hid, logits[t].data(), v, nullptr), small32->Confidence(hid, logits[t].data(), v, nullptr),
                2e-2);
  }
  // A weight past f16's range (65504; q8_0's block scale is an f16 of the block's largest / 127)
  // is refused naming the tensor, not stored as infinity.
  for (auto [type, big] : {std::pair{GgmlType::kF16, 1e5f}, std::pair{GgmlType::kQ8_0, 1e7f}}) {
    auto p = RandomR2rParams(h, v, k, false, 9, 96, 64);
    p["backbone.blocks.1.mlp.0.weight"].v[5] = big;
    auto net = R2rNet::FromParams(std::move(p));
    ASSERT_TRUE(net.ok());
    Status st = net->StoreMatricesAs(type);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("'backbone.blocks.1.mlp.0.weight' has values beyond"), std::string::npos) << st.message();
    EXPECT_EQ(net->params.at("backbone.blocks.0.mlp.0.weight").type, GgmlType::kF32) << "half converted";
    EXPECT_TRUE(net->StoreMatricesAs(GgmlType::kF32).ok()) << "left as it was: still f32";
  }
  // Router files whose r2r tensors have a type they cannot have are refused naming the tensor.
  auto write = [&](const std::string& path, const std::string& odd, GgmlType odd_type) {
    auto params = RandomR2rParams(h, v, k, false, 9, 96, 64);
    GgufWriter w;
    w.Set("general.architecture", GgufValue::Str("tlr-router"));
    w.Set("tlr-router.kind", GgufValue::Str("r2r"));
    w.Set("tlr-router.input_dim", GgufValue::U32(static_cast<uint32_t>(h)));
    for (const auto& [name, t] : params) {
      std::vector<int64_t> dims(t.shape.rbegin(), t.shape.rend());
      if (name != odd) {
        ASSERT_TRUE(w.AddTensorF32("router.r2r." + name, dims, t.v).ok());
        continue;
      }
      const size_t bytes = static_cast<size_t>(*GgmlTensorBytes(odd_type, dims[0], t.v.size()));
      std::vector<uint8_t> q(bytes);
      ASSERT_TRUE(Quantize(odd_type, t.v.data(), q.data(), static_cast<int64_t>(t.v.size())).ok());
      ASSERT_TRUE(w.AddTensor("router.r2r." + name, odd_type, dims, q).ok());
    }
    ASSERT_TRUE(w.WriteFile(dir.File(path)).ok());
  };
  write("ok.gguf", "backbone.blocks.0.mlp.0.weight", GgmlType::kQ8_0);
  auto ok = Router::Load(dir.File("ok.gguf"));
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->r2r()->params.at("backbone.blocks.0.mlp.0.weight").type, GgmlType::kQ8_0);
  for (auto [odd, type, want] : {std::tuple{"combined_projection.bias", GgmlType::kF16, "router.r2r.combined_projection.bias must be f32"},
                                 std::tuple{"backbone.blocks.0.mlp.0.weight", GgmlType::kQ4_0,
                                            "router.r2r.backbone.blocks.0.mlp.0.weight must be f32 (a matrix: f32, f16 or q8_0), not q4_0"}}) {
    write("bad.gguf", odd, type);
    auto bad_file = Router::Load(dir.File("bad.gguf"));
    ASSERT_FALSE(bad_file.ok()) << odd;
    EXPECT_NE(bad_file.status().message().find(want), std::string::npos) << bad_file.status().message();
  }
  auto bad = [&](const std::function<void(std::map<std::string, R2rNet::Tensor>&)>& edit, const std::string& want) {
    auto p = RandomR2rParams(h, v, k, false, 9, 96, 64);
    edit(p);
    auto net = R2rNet::FromParams(std::move(p));
    ASSERT_FALSE(net.ok()) << want;
    EXPECT_NE(net.status().message().find(want), std::string::npos) << net.status().message();
  };
  auto held = [](R2rNet::Tensor& t, GgmlType type) {
    const int64_t cols = t.shape.back(), rows = t.v.size() / cols;
    const size_t rb = static_cast<size_t>(*GgmlTensorBytes(type, cols, cols));
    t.q.resize(rb * rows);
    for (int64_t r = 0; r < rows; ++r) ASSERT_TRUE(Quantize(type, t.v.data() + r * cols, t.q.data() + r * rb, cols).ok());
    t.v.clear();
    t.type = type;
  };
  bad([&](auto& p) { held(p["combined_projection.bias"], GgmlType::kF16); }, "'combined_projection.bias' is a vector");
  bad([&](auto& p) {
    held(p["combined_projection.weight"], GgmlType::kQ8_0);
    p["combined_projection.weight"].q.pop_back();
  }, "'combined_projection.weight' holds");
  bad([&](auto& p) {
    auto& t = p["backbone.input_projection.weight"];
    held(t, GgmlType::kF16);
    t.q[0] = 0x00, t.q[1] = 0x7c;  // f16 infinity
  }, "'backbone.input_projection.weight' holds a NaN");
  bad([&](auto& p) {
    held(p["backbone.input_projection.weight"], GgmlType::kQ8_0);
    p["backbone.input_projection.weight"].type = GgmlType::kQ4_0;
  }, "must be f32, f16 or q8_0");
}

}  // namespace
}  // namespace tlr
