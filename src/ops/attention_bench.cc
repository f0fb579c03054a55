// Attention benchmark (ops layer; a benchmark, not a test): one decode step's attention over
// a KV cache of DEPTH positions, every layer and KV head, on a thread pool split over KV heads
// as the forward pass splits it. Prints milliseconds per token, the floating-point rate of the
// scores and values (2 * 2 * heads * depth * head_dim per layer) and the KV bytes read per
// second, so a change to the kernel shows without the matrix products around it.
//
//   attention_bench [-t THREADS] [--depth N] [--kv-type f32|f16|q8_0] [--heads H] [--kv-heads K]
//                   [--head-dim D] [--layers L] [--seconds S] [--no-flush] [--small-pages]
//
// Each timed step starts with the cache out of the CPU caches (a pass over 256 MiB before it,
// untimed), as in a decode step where the weights stream through between layers; --no-flush
// leaves it in (the kernel's compute ceiling). The cache is in huge pages where the OS gives
// them, as KvCache's is by default; --small-pages keeps it in 4 KiB pages (KvMemory::kOnDemand,
// the server's sessions).
//
// Defaults: the qwen2.5-0.5b shape (14 heads, 2 KV heads, head_dim 64, 24 layers), depth 2000,
// f16, 2 threads.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/nn.h"
#include "ops/thread_pool.h"
#include "quant/ggml_type.h"
#include "util/huge_pages.h"

namespace tlr {
namespace {

struct Options {
  int threads = 2;
  int64_t depth = 2000, heads = 14, kv_heads = 2, head_dim = 64, layers = 24;
  GgmlType type = GgmlType::kF16;
  double seconds = 2.0;
  bool flush = true;
  bool huge = true;
};

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-flush" || a == "--small-pages") {
      (a == "--small-pages" ? o->huge : o->flush) = false;
      continue;
    }
    if (a == "-h" || a == "--help" || i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (a == "-t") o->threads = std::atoi(v);
    else if (a == "--depth") o->depth = std::atol(v);
    else if (a == "--heads") o->heads = std::atol(v);
    else if (a == "--kv-heads") o->kv_heads = std::atol(v);
    else if (a == "--head-dim") o->head_dim = std::atol(v);
    else if (a == "--layers") o->layers = std::atol(v);
    else if (a == "--seconds") o->seconds = std::atof(v);
    else if (a == "--kv-type") {
      const std::string t = v;
      if (t == "f32") o->type = GgmlType::kF32;
      else if (t == "f16") o->type = GgmlType::kF16;
      else if (t == "q8_0") o->type = GgmlType::kQ8_0;
      else return false;
    } else {
      return false;
    }
  }
  return o->threads >= 1 && o->depth >= 1 && o->heads >= 1 && o->kv_heads >= 1 && o->heads % o->kv_heads == 0 &&
         o->head_dim >= 1 && o->layers >= 1 && o->seconds > 0;
}

int Run(const Options& o) {
  if (Status st = CheckKvType(o.type, o.head_dim); !st.ok()) {
    std::fprintf(stderr, "attention_bench: %s\n", st.message().c_str());
    return 1;
  }
  const int64_t hd = o.head_dim, group = o.heads / o.kv_heads;
  const size_t row = KvRowBytes(o.type, hd);
  const int64_t tiles = (o.depth + kKeyTile - 1) / kKeyTile;
  const size_t head_bytes = static_cast<size_t>(tiles * kKeyTile) * row;
  const int64_t n_caches = o.layers * o.kv_heads;
  // The caches in huge pages unless --small-pages, as KvCache allocates them.
  const size_t total = head_bytes * n_caches;
  PageBuffer keys = o.huge ? AllocateHugePages(total) : AllocateSmallPages(total);
  PageBuffer values = o.huge ? AllocateHugePages(total) : AllocateSmallPages(total);
  std::memset(keys.get(), 0, total);
  std::memset(values.get(), 0, total);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(hd);
  for (int64_t c = 0; c < n_caches; ++c) {
    for (int64_t j = 0; j < o.depth; ++j) {
      for (float& f : x) f = nd(rng);
      StoreKey(o.type, keys.get() + c * head_bytes, row, hd, j, x.data());
      for (float& f : x) f = nd(rng);
      StoreValue(o.type, values.get() + c * head_bytes, row, hd, j, x.data());
    }
  }
  std::vector<float> q(o.heads * hd), out(o.heads * hd);
  for (float& f : q) f = nd(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ThreadPool pool(o.threads);
  auto step = [&] {
    for (int64_t l = 0; l < o.layers; ++l) {
      pool.ParallelFor(o.kv_heads, 1, [&](int64_t b, int64_t e, int) {
        for (int64_t h = b; h < e; ++h) {
          const size_t off = static_cast<size_t>(l * o.kv_heads + h) * head_bytes;
          Attention(q.data() + h * group * hd, group, KvView{o.type, keys.get() + off, row},
                    KvView{o.type, values.get() + off, row}, o.depth, hd, scale, out.data() + h * group * hd);
        }
      });
    }
  };
  // Between steps (untimed) a pass over 256 MiB pushes the cache out of the CPU caches, as
  // the weights' pass does in a real decode step.
  std::vector<uint8_t> flush(size_t{256} << 20, 1);
  uint64_t sink = 0;
  step();
  using Clock = std::chrono::steady_clock;
  std::vector<double> ms;
  const auto t_end = Clock::now() + std::chrono::duration<double>(o.seconds);
  while (Clock::now() < t_end || ms.size() < 5) {
    if (o.flush) {
      for (size_t i = 0; i < flush.size(); i += 64) sink += flush[i];
    }
    const auto t0 = Clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  const double flops = 4.0 * o.heads * o.depth * hd * o.layers;
  const double kv_bytes = 2.0 * static_cast<double>(o.depth) * row * n_caches;
  std::printf("%s depth %ld, %ld heads / %ld KV heads x %ld, %ld layers, %d threads: %.3f ms per token "
              "(min %.3f), %.1f GFLOP/s, KV %.1f MB at %.1f GB/s\n",
              std::string(GgmlTraits(o.type).name).c_str(), o.depth, o.heads, o.kv_heads, hd, o.layers, o.threads, med, ms.front(),
              flops / med * 1e-6, kv_bytes * 1e-6, kv_bytes / med * 1e-6);
  return sink == 1 ? 1 : 0;  // (keeps the flush)
}

}  // namespace
}  // namespace tlr

int main(int argc, char** argv) {
  tlr::Options o;
  if (!tlr::ParseArgs(argc, argv, &o)) {
    std::fprintf(stderr,
                 "usage: attention_bench [-t THREADS] [--depth N] [--kv-type f32|f16|q8_0] [--heads H] "
                 "[--kv-heads K] [--head-dim D] [--layers L] [--seconds S] [--no-flush] [--small-pages]\n");
    return 2;
  }
  return tlr::Run(o);
}
