// Model forward pass (model label): golden logits and hidden states from the PyTorch
// reference (src/model/testdata, made by tools/reference/make_fixtures.sh), greedy
// continuations, KV-cache consistency (prefill+decode == longer prefill, truncate+redo ==
// never went further, batched sequences == separate ones), quantized vs dequantized weights,
// and clear errors for bad models and requests.
#include "model/model.h"
#include "util/temp_dir.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "model/gguf/gguf_writer.h"
#include "model/load_check.h"
#include "model/random_model.h"
#include "model/sampler.h"
#include "ops/thread_pool.h"
#include "quant/quantize.h"
#include "util/mapped_file.h"
#include "util/test_support.h"

namespace tlr {
namespace {

namespace fs = std::filesystem;

// One directory per test process, removed at exit.
fs::path TestDir() {
  static tlr::TempDir dir("tlr_model_test");
  return dir.path();
}

std::string MakeTiny(const std::string& arch, const std::string& type, uint64_t seed = 7,
                     const std::string& preset = "tiny") {
  const std::string path =
      (TestDir() / (preset + "-" + arch + "-" + type + "-" + std::to_string(seed) + ".gguf")).string();
  if (!fs::exists(path)) {
    RandomModelOptions o;
    o.preset = preset;
    o.arch = arch;
    o.type = type;
    o.seed = seed;
    EXPECT_TRUE(WriteRandomModel(o, path).ok());
  }
  return path;
}

std::unique_ptr<Model> LoadOrDie(const std::string& path) {
  auto m = Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m).value() : nullptr;
}

struct Errors {
  double max_abs = 0, nmse = 0;
};
Errors Compare(const std::vector<float>& got, const std::vector<double>& want) {
  double se = 0, ss = 0;
  Errors e;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = got[i] - want[i];
    e.max_abs = std::max(e.max_abs, std::fabs(d));
    se += d * d;
    ss += want[i] * want[i];
  }
  e.nmse = se / std::max(ss, 1e-300);
  return e;
}

std::vector<int32_t> Greedy(const Model& m, ThreadPool* pool, std::vector<int32_t> prompt, int n,
                            GgmlType kv = GgmlType::kF16) {
  auto cache = m.NewCache(256, kv);
  EXPECT_TRUE(cache.ok());
  ForwardContext ctx(pool);
  std::vector<float> logits(m.config().n_vocab);
  SequenceInput in{&*cache, prompt, OutputRows::kLast, logits.data(), nullptr};
  EXPECT_TRUE(m.Forward({&in, 1}, &ctx).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = ArgMax(logits.data(), m.config().n_vocab);
    out.push_back(t);
    SequenceInput step{&*cache, {&out.back(), 1}, OutputRows::kLast, logits.data(), nullptr};
    EXPECT_TRUE(m.Forward({&step, 1}, &ctx).ok());
  }
  return out;
}

// Error bounds against a reference: normalized MSE, and max abs error relative to the
// largest logit.
struct Bounds {
  double nmse, max_rel;
};

// The bounds with keys and values stored as `kv` instead of f32: the storage rounding, which
// no arithmetic can undo, dominates the float32 rounding. f16 rounds each stored value by up
// to u = 2^-11 relative (uniformly: mean square u^2 / 3); the logits inherit about that
// (measured nmse 0.13-0.64 u^2, max abs error 0.65-0.9 u of the largest logit): bounded by
// nmse 4 u^2 = 9.5e-7 and max abs 4 u = 2e-3. q8_0 rounds each value by up to half a step of
// its block's scale amax / 127: for Gaussian-like blocks (amax ~ 2.5 sigma) a relative mean
// square of 2.5^2 / (127^2 * 12) = 3e-5 (measured on the demo LLM: nmse 1.5e-5 on logits,
// 2.1e-5 on hidden states, max abs 0.54% of the largest logit): bounded by nmse 1e-4 and
// max abs 2%.
Bounds ForKvType(Bounds f32_bounds, GgmlType kv) {
  const double u = std::ldexp(1.0, -11);
  switch (kv) {
    case GgmlType::kF16:
      return {std::max(f32_bounds.nmse, 4 * u * u), std::max(f32_bounds.max_rel, 4 * u)};
    case GgmlType::kQ8_0:
      return {std::max(f32_bounds.nmse, 1e-4), std::max(f32_bounds.max_rel, 2e-2)};
    default:
      return f32_bounds;
  }
}

// Runs the golden file's tokens through `model` with a `kv` cache and checks logits and hidden
// states (NMSE below b.nmse, logits' max abs error below b.max_rel of the largest logit) and
// the greedy continuation; returns that continuation.
std::vector<int32_t> ExpectMatchesGolden(const Model& model, const std::string& golden_path, const std::string& what,
                                         GgmlType kv, Bounds b, ThreadPool* pool) {
  const double nmse = b.nmse, max_rel = b.max_rel;
  auto text = ReadFileToString(golden_path);
  EXPECT_TRUE(text.ok()) << text.status().message();
  if (!text.ok()) return {};
  const auto g = nlohmann::json::parse(*text);
  const std::vector<int32_t> tokens = g["tokens"];
  const int64_t T = tokens.size(), V = model.config().n_vocab, E = model.config().n_embd;
  std::vector<float> logits(T * V), hidden(T * E);
  auto cache = model.NewCache(T + 8, kv);
  EXPECT_TRUE(cache.ok());
  ForwardContext ctx(pool);
  SequenceInput in{&*cache, tokens, OutputRows::kAll, logits.data(), hidden.data()};
  EXPECT_TRUE(model.Forward({&in, 1}, &ctx).ok());
  std::vector<double> want_l, want_h;
  for (const auto& row : g["logits"]) for (double v : row) want_l.push_back(v);
  for (const auto& row : g["hidden"]) for (double v : row) want_h.push_back(v);
  EXPECT_EQ(want_l.size(), logits.size()) << what;
  EXPECT_EQ(want_h.size(), hidden.size()) << what;
  if (want_l.size() != logits.size() || want_h.size() != hidden.size()) return {};
  double scale = 0;
  for (double v : want_l) scale = std::max(scale, std::fabs(v));
  const Errors el = Compare(logits, want_l), eh = Compare(hidden, want_h);
  std::printf("[ golden   ] %s: logits max abs %.2e (scale %.2f) nmse %.2e; hidden max abs %.2e nmse %.2e\n",
              what.c_str(), el.max_abs, scale, el.nmse, eh.max_abs, eh.nmse);
  EXPECT_LT(el.nmse, nmse) << what;
  EXPECT_LT(el.max_abs, max_rel * scale) << what;
  EXPECT_LT(eh.nmse, nmse) << what;
  const std::vector<int32_t> want_greedy = g["greedy"];
  const auto got = Greedy(model, pool, tokens, static_cast<int>(want_greedy.size()), kv);
  EXPECT_EQ(got, want_greedy) << what << ": greedy continuation differs";
  return got;
}

// Tolerances against the float64 reference: with an f32 KV cache the engine computes in
// float32 (weights exactly as stored, f16 widened exactly), so errors are float32 rounding
// accumulated over two layers (measured: nmse ~1e-13, max abs ~3e-6 on logits of scale ~10):
// normalized MSE below 1e-10 and max abs error below 2e-5 of the largest logit. The default
// f16 cache adds its storage rounding (ForKvType). (The tiny models' head dimension, 16, has
// no q8_0 cache.)
// qwen3 and gemma3 run on their own tiny presets (head dim 32, wider than n_embd / n_heads;
// gemma3 with five sliding-window layers of window 5 and a global one, so the 12-token prompt
// and its continuation reach past the window).
TEST(ModelGolden, MatchesPyTorchReference) {
  ThreadPool pool(2);
  for (const std::string arch : {"qwen2", "llama", "qwen3", "gemma3"}) {
    const std::string preset = arch == "qwen3" || arch == "gemma3" ? "tiny-" + arch : "tiny";
    std::vector<int32_t> greedy_f32;
    for (const std::string type : {"f32", "f16"}) {
      auto model = LoadOrDie(MakeTiny(arch, type, 7, preset));
      ASSERT_TRUE(model);
      for (GgmlType kv : {GgmlType::kF32, GgmlType::kF16}) {
        const std::string what = arch + " " + type + " kv " + std::string(GgmlTraits(kv).name);
        const auto got = ExpectMatchesGolden(
            *model, std::string(TLR_SOURCE_DIR) + "/src/model/testdata/tiny-" + arch + "-" + type + ".golden.json",
            what, kv, ForKvType({1e-10, 2e-5}, kv), &pool);
        if (greedy_f32.empty()) greedy_f32 = got;
        else EXPECT_EQ(got, greedy_f32) << what << ": greedy continuation differs from f32 weights' with f32 KV";
      }
    }
  }
}

// Quantized weights vs the same weights dequantized to F32 (same engine): the only difference
// is the on-the-fly Q8 quantization of activations. Every file type: tiny's rows of 64 make
// the K-quants fall back; tiny256's rows of 256 and 512 keep them (and the mixes' rules).
TEST(ModelQuantized, MatchesDequantizedWeights) {
  ThreadPool pool(2);
  const std::vector<int32_t> tokens = {5, 17, 260, 300, 42, 99, 7, 311};
  std::vector<std::pair<std::string, std::string>> files = {{"tiny", "q8_0"}, {"tiny", "q4_0"}, {"tiny", "q4_k"},
                                                            {"tiny", "q3_k_m"}, {"tiny", "iq4_xs"}};
  for (const auto& t : RandomModelTypes()) {
    if (t.name != "f32" && t.name != "f16" && t.name != "q4_k") files.emplace_back("tiny256", t.name);
  }
  for (const auto& [preset, type] : files) {
    SCOPED_TRACE(preset + " " + type);
    const std::string qpath = MakeTiny("qwen2", type, 7, preset);
    auto qf = GgufFile::Open(qpath);
    ASSERT_TRUE(qf.ok());
    if (preset == "tiny256" && type.find("_k_") == std::string::npos && type != "q4_k") {
      // A single type: its matrices really are of that type (no fallback on rows of 256).
      bool found = false;
      for (const auto& t : qf->tensors()) {
        std::string name(GgmlTraits(t.type).name);
        for (auto& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        found |= name == type;
      }
      EXPECT_TRUE(found);
    }
    GgufWriter w;
    for (const auto& [k, v] : qf->metadata()) w.Set(k, v);
    for (const auto& t : qf->tensors()) {
      std::vector<float> f(t.n_elements);
      ASSERT_TRUE(Dequantize(t.type, t.data, f.data(), t.n_elements).ok());
      ASSERT_TRUE(w.AddTensorF32(t.name, t.dims, f).ok());
    }
    const std::string fpath = (TestDir() / ("dequant-" + preset + "-" + type + ".gguf")).string();
    ASSERT_TRUE(w.WriteFile(fpath).ok());
    auto qm = LoadOrDie(qpath);
    auto fm = LoadOrDie(fpath);
    ASSERT_TRUE(qm && fm);
    const int64_t V = qm->config().n_vocab;
    std::vector<float> lq(tokens.size() * V), lf(tokens.size() * V);
    for (auto [m, out] : {std::pair{qm.get(), &lq}, std::pair{fm.get(), &lf}}) {
      auto cache = m->NewCache(64);
      ForwardContext ctx(&pool);
      SequenceInput in{&*cache, tokens, OutputRows::kAll, out->data(), nullptr};
      ASSERT_TRUE(m->Forward({&in, 1}, &ctx).ok());
    }
    std::vector<double> want(lf.begin(), lf.end());
    const Errors e = Compare(lq, want);
    std::printf("[ quant    ] %-7s %-6s vs dequantized f32: logits nmse %.2e, max abs %.2e\n", preset.c_str(),
                type.c_str(), e.nmse, e.max_abs);
    EXPECT_LT(e.nmse, 1e-3) << type;
  }
}

// KV-cache consistency for every KV type, on the tiny llama (head dim 16: f32 and f16 caches)
// and the demo LLM (head dim 32: q8_0 too). Batch invariance is exact: a position's logits are
// bit-identical whether it is decoded alone, prefilled in a batch, computed after a truncation
// or in a fork, next to other sequences, or with another number of threads.
struct CacheCase {
  std::string model;  // "tiny-llama", "tiny-gemma3" or "demo-llm"
  GgmlType kv;
};

class ModelCache : public ::testing::TestWithParam<CacheCase> {
 protected:
  void SetUp() override {
    const std::string& name = GetParam().model;
    model_ = LoadOrDie(name == "tiny-llama"    ? MakeTiny("llama", "q8_0")
                       : name == "tiny-gemma3" ? MakeTiny("gemma3", "q8_0", 7, "tiny-gemma3")
                                               : kDemo + "llm.gguf");
    ASSERT_TRUE(model_);
  }
  Expected<KvCache> NewCache(int64_t n_ctx) { return model_->NewCache(n_ctx, GetParam().kv); }
  std::vector<float> Run(KvCache* cache, std::vector<int32_t> tokens, OutputRows rows = OutputRows::kLast,
                         ThreadPool* pool = nullptr) {
    const int64_t V = model_->config().n_vocab;
    std::vector<float> logits((rows == OutputRows::kAll ? tokens.size() : 1) * V);
    ForwardContext ctx(pool ? pool : &pool_);
    SequenceInput in{cache, tokens, rows, logits.data(), nullptr};
    Status s = model_->Forward({&in, 1}, &ctx);
    EXPECT_TRUE(s.ok()) << s.message();
    return logits;
  }
  // Bit-identical.
  static void ExpectSame(const std::vector<float>& a, const std::vector<float>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
  }
  ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
};

TEST_P(ModelCache, PrefillThenDecodeEqualsLongerPrefill) {
  const std::vector<int32_t> p = {3, 260, 300, 42, 99, 7, 311, 12, 400};
  auto a = NewCache(64), b = NewCache(64);
  std::vector<int32_t> head(p.begin(), p.end() - 1);
  Run(&*a, head);
  const auto decoded = Run(&*a, {p.back()});
  const auto prefilled = Run(&*b, p);
  ExpectSame(decoded, prefilled);
  EXPECT_EQ(a->size(), b->size());
}

TEST_P(ModelCache, TruncateThenRedoEqualsNeverWentFurther) {
  auto a = NewCache(64), b = NewCache(64);
  Run(&*a, {3, 260, 300, 42});
  Run(&*a, {99, 7, 311});  // went further ...
  a->Truncate(4);          // ... and rolled back
  const auto redo = Run(&*a, {12, 400});
  Run(&*b, {3, 260, 300, 42});
  const auto straight = Run(&*b, {12, 400});
  ExpectSame(redo, straight);
  // A fork continues like the original.
  KvCache fork = b->Fork(6);
  ExpectSame(Run(&fork, {5}), Run(&*b, {5}));
}

// Past several key tiles (16 positions) and attention chunks (64): every position of a
// 150-token prefill equals the same position decoded one token at a time after a 70-token
// prefill, in a fork taken mid-tile, in a copy, and with 1 or 3 threads.
TEST_P(ModelCache, LongContextIsBatchAndThreadInvariant) {
  const int64_t V = model_->config().n_vocab, n = 150, head = 70;
  std::vector<int32_t> tokens(n);
  uint64_t st = 99;
  for (auto& t : tokens) {
    st = st * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((st >> 33) % static_cast<uint64_t>(V));
  }
  auto full = NewCache(256);
  const auto all = Run(&*full, tokens, OutputRows::kAll);
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    auto c = NewCache(256);
    ExpectSame(Run(&*c, tokens, OutputRows::kAll, &pool), all);
  }
  auto a = NewCache(256);
  Run(&*a, std::vector<int32_t>(tokens.begin(), tokens.begin() + head));
  KvCache fork = a->Fork(head - 3);  // mid-tile
  KvCache copy = *a;
  for (int64_t j = head - 3; j < head; ++j) Run(&fork, {tokens[j]});
  for (int64_t j = head; j < n; ++j) {
    const std::vector<float> want(all.begin() + j * V, all.begin() + (j + 1) * V);
    ExpectSame(Run(&*a, {tokens[j]}), want);
    ExpectSame(Run(&fork, {tokens[j]}), want);
    ExpectSame(Run(&copy, {tokens[j]}), want);
  }
}

// Huge pages (the default: 2 MiB-aligned storage) and on-demand pages hold the same cache;
// forks and copies keep the kind of memory they came from.
TEST_P(ModelCache, HugePageAndOnDemandCachesAgree) {
  const ModelConfig& c = model_->config();
  // At least two huge pages' worth, so that the huge-page storage is really aligned for them.
  const int64_t n_ctx = static_cast<int64_t>((uint64_t{4} << 20) / KvCache::BytesPerPosition(c, GetParam().kv)) + 16;
  auto huge = KvCache::Create(c, n_ctx, GetParam().kv);
  auto small = KvCache::Create(c, n_ctx, GetParam().kv, KvMemory::kOnDemand);
  ASSERT_TRUE(huge.ok() && small.ok());
  EXPECT_EQ(huge->memory(), KvMemory::kHugePages);
  EXPECT_EQ(small->memory(), KvMemory::kOnDemand);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(huge->K(0, 0).data) % (uintptr_t{2} << 20), 0u);
  const std::vector<int32_t> p = {3, 260, 300, 42, 99, 7, 311, 12, 400, 5, 17};
  ExpectSame(Run(&*huge, p, OutputRows::kAll), Run(&*small, p, OutputRows::kAll));
  KvCache fork = huge->Fork(7), small_fork = small->Fork(7), copy = *small;
  EXPECT_EQ(fork.memory(), KvMemory::kHugePages);
  EXPECT_EQ(small_fork.memory(), KvMemory::kOnDemand);
  EXPECT_EQ(copy.memory(), KvMemory::kOnDemand);
  ExpectSame(Run(&fork, {8, 9}), Run(&small_fork, {8, 9}));
  ExpectSame(Run(&copy, {8}), Run(&*huge, {8}));
}

TEST_P(ModelCache, BatchedSequencesEqualSeparateRuns) {
  const std::vector<std::vector<int32_t>> prompts = {{3, 260, 300}, {42}, {99, 7, 311, 12, 400, 5}};
  const int64_t V = model_->config().n_vocab, E = model_->config().n_embd;
  std::vector<KvCache> caches;
  for (int i = 0; i < 3; ++i) caches.push_back(*NewCache(64));
  Run(&caches[1], {8, 9});  // one sequence already has history
  std::vector<std::vector<float>> logits(3, std::vector<float>(6 * V)), hidden(3, std::vector<float>(E));
  std::vector<SequenceInput> batch;
  for (int i = 0; i < 3; ++i) {
    batch.push_back({&caches[i], prompts[i], i == 2 ? OutputRows::kAll : OutputRows::kLast,
                     logits[i].data(), hidden[i].data()});
  }
  batch[2].hidden = nullptr;
  ForwardContext ctx(&pool_);
  ASSERT_TRUE(model_->Forward(batch, &ctx).ok());
  for (int i = 0; i < 3; ++i) {
    auto c = NewCache(64);
    if (i == 1) Run(&*c, {8, 9});
    const auto alone = Run(&*c, prompts[i], i == 2 ? OutputRows::kAll : OutputRows::kLast);
    ExpectSame(std::vector<float>(logits[i].begin(), logits[i].begin() + alone.size()), alone);
  }
}

TEST_P(ModelCache, BadRequestsFailWithoutChangingTheCache) {
  auto c = NewCache(8);
  ASSERT_TRUE(c.ok());
  ForwardContext ctx(&pool_);
  std::vector<int32_t> too_long(9, 5);
  SequenceInput in{&*c, too_long, OutputRows::kLast, nullptr, nullptr};
  Status s = model_->Forward({&in, 1}, &ctx);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("exceeds the context of 8"), std::string::npos) << s.message();
  std::vector<int32_t> bad_id = {5, 1 << 20};
  in.tokens = bad_id;
  s = model_->Forward({&in, 1}, &ctx);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos);
  in.tokens = {};
  EXPECT_FALSE(model_->Forward({&in, 1}, &ctx).ok());
  EXPECT_EQ(c->size(), 0);
  EXPECT_FALSE(NewCache(0).ok());
  // A context no machine here can hold: a clear error, not an allocation failure later.
  ModelConfig big = model_->config();
  big.n_layers = 80;
  big.n_kv_heads = 8;
  big.head_dim = 128;
  auto huge = KvCache::Create(big, int64_t{1} << 24, GetParam().kv);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("MiB of memory is available"), std::string::npos)
      << huge.status().message();
}

INSTANTIATE_TEST_SUITE_P(KvTypes, ModelCache,
                         ::testing::Values(CacheCase{"tiny-llama", GgmlType::kF32}, CacheCase{"tiny-llama", GgmlType::kF16},
                                           CacheCase{"demo-llm", GgmlType::kF32}, CacheCase{"demo-llm", GgmlType::kF16},
                                           CacheCase{"demo-llm", GgmlType::kQ8_0},
                                           // Sliding-window layers (window 5) across tiles and chunks.
                                           CacheCase{"tiny-gemma3", GgmlType::kF16},
                                           CacheCase{"tiny-gemma3", GgmlType::kQ8_0}),
                         [](const auto& info) {
                           std::string name = info.param.model + "_" + std::string(GgmlTraits(info.param.kv).name);
                           for (char& ch : name) ch = ch == '-' ? '_' : ch;
                           return name;
                         });

// A KV type the model's head dimension cannot hold fails at load and at cache creation,
// saying what to use instead.
TEST(ModelKvType, UnsuitableTypeIsAClearError) {
  const std::string tiny = MakeTiny("llama", "q8_0");  // head dim 16
  Model::Options o;
  o.kv_type = GgmlType::kQ8_0;
  auto m = Model::Load(tiny, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("multiple of 32"), std::string::npos) << m.status().message();
  auto ok = LoadOrDie(tiny);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->kv_type(), GgmlType::kF16);  // the default
  auto c = ok->NewCache(16, GgmlType::kQ8_0);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("use f16"), std::string::npos) << c.status().message();
  EXPECT_FALSE(ok->NewCache(16, GgmlType::kQ4_0).ok());
}

// Writes a copy of `src` with `edit` applied to the tensor list / metadata.
std::string Edited(const std::string& src, const std::string& name,
                   const std::function<void(GgufWriter&, const GgufFile&)>& edit,
                   const std::string& skip_tensor = "") {
  auto f = GgufFile::Open(src);
  EXPECT_TRUE(f.ok());
  GgufWriter w;
  for (const auto& [k, v] : f->metadata()) w.Set(k, v);
  for (const auto& t : f->tensors()) {
    if (t.name == skip_tensor) continue;
    EXPECT_TRUE(w.AddTensor(t.name, t.type, t.dims, {t.data, t.n_bytes}).ok());
  }
  edit(w, *f);
  const std::string out = (TestDir() / (name + ".gguf")).string();
  EXPECT_TRUE(w.WriteFile(out).ok());
  return out;
}

// Loading `path` fails with a message containing `needle`.
void ExpectLoadError(const std::string& path, const std::string& needle) {
  auto m = Model::Load(path);
  ASSERT_FALSE(m.ok()) << path;
  EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
}

TEST(ModelLoad, BadModelsGiveClearErrors) {
  const std::string base = MakeTiny("qwen2", "f32");
  ExpectLoadError(Edited(base, "missing", [](GgufWriter&, const GgufFile&) {}, "blk.1.ffn_up.weight"),
               "tensor 'blk.1.ffn_up.weight' is missing");
  ExpectLoadError(Edited(base, "arch", [](GgufWriter& w, const GgufFile&) {
                 w.Set("general.architecture", GgufValue::Str("mamba"));
               }), "architecture 'mamba' is not supported");
  ExpectLoadError(Edited(base, "shape", [](GgufWriter& w, const GgufFile&) {
                 w.Set("qwen2.feed_forward_length", GgufValue::U32(256));
               }), "has shape [64, 192], expected [64, 256]");
  ExpectLoadError(Edited(base, "q8_1", [](GgufWriter& w, const GgufFile&) {
                 std::vector<uint8_t> d(192 / 32 * 36 * 64);
                 (void)w.AddTensor("blk.0.ffn_down.weight", GgmlType::kQ8_1, {192, 64}, d);
               }, "blk.0.ffn_down.weight"), "has type q8_1, which has no kernel");
  ExpectLoadError(Edited(base, "heads", [](GgufWriter& w, const GgufFile&) {
                 w.Set("qwen2.attention.head_count_kv", GgufValue::U32(3));
               }), "not a multiple of head_count_kv 3");
  ExpectLoadError(Edited(base, "notok", [](GgufWriter& w, const GgufFile&) {
                 w.Set("tokenizer.ggml.model", GgufValue::Str("bert"));
               }), "not supported");
}

// YaRN (rope.scaling.type yarn: Qwen2.5/Qwen3 files made for 128K contexts) computed as Hugging
// Face's _compute_yarn_parameters does: the same model given those frequencies as
// rope_freqs.weight factors and that attention scale as attention.scale has the same logits; the
// model without scaling does not. An unknown scaling type is refused.
TEST(ModelRope, YarnScalesFrequenciesAndAttentionAsHuggingFaceDoes) {
  const std::string base = MakeTiny("qwen2", "f32");
  auto plain = Model::Load(base);
  ASSERT_TRUE(plain.ok());
  const ModelConfig& c = (*plain)->config();
  const double d = static_cast<double>(c.head_dim), theta = c.rope_base, factor = 4, orig = 4096;
  auto corr = [&](double rotations) { return d * std::log(orig / (rotations * 2 * M_PI)) / (2 * std::log(theta)); };
  double low = std::max(std::floor(corr(32)), 0.0), high = std::min(std::ceil(corr(1)), d - 1);
  if (low == high) high += 0.001;
  std::vector<float> freq_factors;
  for (int64_t i = 0; i < c.head_dim / 2; ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1 - ramp;
    const double inv_extrapolated = std::pow(theta, -2.0 * static_cast<double>(i) / d);
    const double inv_interpolated = inv_extrapolated / factor;
    const double inv = inv_interpolated * (1 - extrapolation) + inv_extrapolated * extrapolation;
    freq_factors.push_back(static_cast<float>(inv_extrapolated / inv));
  }
  ASSERT_GT(high, low);
  ASSERT_LT(low, d / 2);  // the ramp falls inside the tiny model's dimensions
  const double attention_factor = 0.1 * std::log(factor) + 1.0;
  const std::string yarn = Edited(base, "yarn", [](GgufWriter& w, const GgufFile&) {
    w.Set("qwen2.rope.scaling.type", GgufValue::Str("yarn"));
    w.Set("qwen2.rope.scaling.factor", GgufValue::F32(4));
    w.Set("qwen2.rope.scaling.original_context_length", GgufValue::U32(4096));
  });
  const std::string as_factors = Edited(base, "yarn-as-factors", [&](GgufWriter& w, const GgufFile&) {
    ASSERT_TRUE(w.AddTensorF32("rope_freqs.weight", {c.head_dim / 2}, freq_factors).ok());
    w.Set("qwen2.attention.scale", GgufValue::F32(static_cast<float>(attention_factor * attention_factor / std::sqrt(d))));
  });
  auto a = Model::Load(yarn);
  auto b = Model::Load(as_factors);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().message() << b.status().message();
  std::string notes;
  for (const auto& n : (*a)->load_notes()) notes += n + "\n";
  EXPECT_NE(notes.find("rope scaled by YaRN: factor 4 over an original context of 4096"), std::string::npos) << notes;
  const std::vector<float> la = PromptLogits(**a), lb = PromptLogits(**b), lp = PromptLogits(**plain);
  ASSERT_EQ(la.size(), lb.size());
  double max_logit = 0, diff_b = 0, diff_plain = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    max_logit = std::max(max_logit, std::fabs(static_cast<double>(lb[i])));
    diff_b = std::max(diff_b, std::fabs(static_cast<double>(la[i]) - lb[i]));
    diff_plain = std::max(diff_plain, std::fabs(static_cast<double>(la[i]) - lp[i]));
  }
  EXPECT_LT(diff_b, 1e-4 * max_logit);
  EXPECT_GT(diff_plain, 1e-2 * max_logit);
  ExpectLoadError(Edited(base, "longrope", [](GgufWriter& w, const GgufFile&) {
                    w.Set("qwen2.rope.scaling.type", GgufValue::Str("longrope"));
                  }), "qwen2.rope.scaling.type 'longrope' is not supported (linear, yarn and none are)");
  // A factor without a type is linear scaling, as llama.cpp reads it; type none scales nothing.
  auto linear = Model::Load(Edited(base, "factor-only", [](GgufWriter& w, const GgufFile&) {
    w.Set("qwen2.rope.scaling.factor", GgufValue::F32(4));
  }));
  auto none = Model::Load(Edited(base, "none", [](GgufWriter& w, const GgufFile&) {
    w.Set("qwen2.rope.scaling.type", GgufValue::Str("none"));
    w.Set("qwen2.rope.scaling.factor", GgufValue::F32(4));
  }));
  ASSERT_TRUE(linear.ok() && none.ok());
  EXPECT_FLOAT_EQ((*linear)->config().rope_scale, 0.25f);
  EXPECT_EQ(PromptLogits(**none), lp);
  // No boost for a factor of 1 or less (Hugging Face's get_mscale); Gemma 3's sliding-window
  // layers rotate unscaled and get no boost either (llama.cpp's frequency scale 1 there).
  auto shrink = Model::Load(Edited(base, "yarn-below-1", [](GgufWriter& w, const GgufFile&) {
    w.Set("qwen2.rope.scaling.type", GgufValue::Str("yarn"));
    w.Set("qwen2.rope.scaling.factor", GgufValue::F32(0.5f));
  }));
  ASSERT_TRUE(shrink.ok());
  EXPECT_FLOAT_EQ((*shrink)->config().attn_scale, c.attn_scale);
  const std::string gemma = MakeTiny("gemma3", "f32");
  auto g = Model::Load(gemma);
  auto gy = Model::Load(Edited(gemma, "gemma3-yarn", [](GgufWriter& w, const GgufFile&) {
    w.Set("gemma3.rope.scaling.type", GgufValue::Str("yarn"));
    w.Set("gemma3.rope.scaling.factor", GgufValue::F32(4));
  }));
  ASSERT_TRUE(g.ok() && gy.ok()) << gy.status().message();
  ASSERT_FALSE((*gy)->config().local_layer.empty());
  EXPECT_FLOAT_EQ((*gy)->config().attn_scale_local, (*g)->config().attn_scale);
  EXPECT_FLOAT_EQ((*gy)->config().attn_scale, static_cast<float>((*g)->config().attn_scale * attention_factor * attention_factor));
}

// qwen3 and gemma3 files with a missing norm tensor, wrong head dimensions or a layer
// pattern TLR does not know: each error names the tensor or key.
TEST(ModelLoad, NewFamiliesBadModelsGiveClearErrors) {
  const std::string qwen3 = MakeTiny("qwen3", "f32", 7, "tiny-qwen3");
  const std::string gemma3 = MakeTiny("gemma3", "f32", 7, "tiny-gemma3");
  ASSERT_TRUE(LoadOrDie(qwen3));
  ASSERT_TRUE(LoadOrDie(gemma3));
  auto none = [](GgufWriter&, const GgufFile&) {};
  ExpectLoadError(Edited(qwen3, "q3_no_qnorm", none, "blk.1.attn_q_norm.weight"),
               "tensor 'blk.1.attn_q_norm.weight' is missing");
  ExpectLoadError(Edited(gemma3, "g3_no_knorm", none, "blk.0.attn_k_norm.weight"),
               "tensor 'blk.0.attn_k_norm.weight' is missing");
  ExpectLoadError(Edited(gemma3, "g3_no_postattn", none, "blk.2.post_attention_norm.weight"),
               "tensor 'blk.2.post_attention_norm.weight' is missing");
  ExpectLoadError(Edited(gemma3, "g3_no_postffw", none, "blk.5.post_ffw_norm.weight"),
               "tensor 'blk.5.post_ffw_norm.weight' is missing");
  // Head dimension: key_length that the tensors do not have, or a different value_length.
  ExpectLoadError(Edited(qwen3, "q3_keylen", [](GgufWriter& w, const GgufFile&) {
                 w.Set("qwen3.attention.key_length", GgufValue::U32(16));
                 w.Set("qwen3.attention.value_length", GgufValue::U32(16));
               }), "tensor 'blk.0.attn_q.weight' has shape [64, 128], expected [64, 64]");
  ExpectLoadError(Edited(qwen3, "q3_vallen", [](GgufWriter& w, const GgufFile&) {
                 w.Set("qwen3.attention.value_length", GgufValue::U32(64));
               }), "qwen3.attention.value_length = 64 differs from qwen3.attention.key_length = 32");
  ExpectLoadError(Edited(gemma3, "g3_odd", [](GgufWriter& w, const GgufFile&) {
                 w.Set("gemma3.attention.key_length", GgufValue::U32(33));
                 w.Set("gemma3.attention.value_length", GgufValue::U32(33));
               }), "gemma3.attention.key_length: head dimension 33 must be even");
  ExpectLoadError(Edited(gemma3, "g3_qnorm_dim", [](GgufWriter& w, const GgufFile&) {
                 (void)w.AddTensorF32("blk.3.attn_q_norm.weight", {16}, std::vector<float>(16, 1.0f));
               }, "blk.3.attn_q_norm.weight"), "tensor 'blk.3.attn_q_norm.weight' has shape [16], expected [32]");
  // Layer patterns: a period of 0, bools of the wrong count, a string, a pattern without window.
  ExpectLoadError(Edited(gemma3, "g3_period0", [](GgufWriter& w, const GgufFile&) {
                 w.Set("gemma3.attention.sliding_window_pattern", GgufValue::U32(0));
               }), "gemma3.attention.sliding_window_pattern is not a layer pattern TLR knows");
  ExpectLoadError(Edited(gemma3, "g3_bools", [](GgufWriter& w, const GgufFile&) {
                 GgufArray a{GgufType::kBool, {GgufValue(true), GgufValue(false)}};
                 w.Set("gemma3.attention.sliding_window_pattern", GgufValue(a));
               }), "expected a period or 6 bools (one per layer)");
  ExpectLoadError(Edited(gemma3, "g3_str", [](GgufWriter& w, const GgufFile&) {
                 w.Set("gemma3.attention.sliding_window_pattern", GgufValue::Str("LLLLLG"));
               }), "gemma3.attention.sliding_window_pattern is not a layer pattern TLR knows");
  ExpectLoadError(Edited(gemma3, "g3_nowindow", [](GgufWriter& w, const GgufFile&) {
                 w.Set("gemma3.attention.sliding_window", GgufValue::U32(0));
                 w.Set("gemma3.attention.sliding_window_pattern", GgufValue::U32(6));
               }), "gemma3.attention.sliding_window_pattern is set but gemma3.attention.sliding_window");
  // The same pattern written out explicitly (five local, one global) loads and computes the
  // same logits as the implicit llama.cpp rule.
  GgufArray explicit_pattern{GgufType::kBool, {}};
  for (int l = 0; l < 6; ++l) explicit_pattern.items.emplace_back(l % 6 < 5);
  auto m1 = LoadOrDie(gemma3);
  auto m2 = LoadOrDie(Edited(gemma3, "g3_explicit", [&](GgufWriter& w, const GgufFile&) {
    w.Set("gemma3.attention.sliding_window_pattern", GgufValue(explicit_pattern));
  }));
  ASSERT_TRUE(m1 && m2);
  EXPECT_EQ(m1->config().local_layer, m2->config().local_layer);
  EXPECT_EQ(m1->config().local_layer, (std::vector<uint8_t>{1, 1, 1, 1, 1, 0}));
}

}  // namespace
}  // namespace tlr

namespace tlr {
namespace {

// The bundled demo pair against the PyTorch networks that were trained (tools/train/golden.py
// reads each GGUF back into tools/train/model.py and runs a test-split question). Both sides
// compute in float32 with different summation orders, so the bounds are looser than the
// float64 reference's above; the greedy continuations must be identical. Every KV type the
// model's head dimension allows (the SLM's, 24, has no q8_0 cache; the LLM's, 32, has).
TEST(ModelGolden, DemoPairMatchesItsPyTorchTraining) {
  ThreadPool pool(2);
  for (const std::string name : {"slm", "llm"}) {
    auto loaded = Model::Load(kDemo + name + ".gguf");
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    for (GgmlType kv : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ8_0}) {
      if (!CheckKvType(kv, (*loaded)->config().head_dim).ok()) continue;
      ExpectMatchesGolden(**loaded, std::string(TLR_SOURCE_DIR) + "/src/model/testdata/demo-" + name + ".golden.json",
                          "demo " + name + " kv " + std::string(GgmlTraits(kv).name), kv, ForKvType({1e-8, 1e-3}, kv),
                          &pool);
    }
  }
}

}  // namespace
}  // namespace tlr
