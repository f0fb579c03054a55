// Kernel-level decode benchmark (ops layer; a benchmark, not a test): one token's matrix-vector
// product through MatMul on a thread pool, per weight type, cycling over enough copies of the
// matrix that every call streams its weights from memory as a decode step does. Prints the
// weight bytes read per second and their share of a plain read pass over the same memory on
// the same pool, in alternating rounds (ReadPassGbps; the host's bandwidth drifts by tens of
// percent), so a kernel's distance from the memory roofline shows without the rest of the
// forward pass (norms, attention, the gaps between parallel loops).
//
//   matmul_bench [-t THREADS] [--shape ROWSxCOLS] [--seconds S] [--stream-mib N]
//                [--prefetch auto|first|every|both] [--simd TARGET] [--tokens N]
//                [--float-streams 1|4|both] [TYPE...]
//
// --float-streams 1|4|both sets SetFloatDecodeStreams (matmul.h) for F32/F16/BF16 decode;
// both alternates the two in rounds like --prefetch both (an A/B in one run).
//
// --tokens N (N > 1) measures prefill instead: one copy of the matrix times N tokens, repeated,
// reported as multiply-add throughput (GFLOP/s, 2 per weight per token) and tokens per second
// through this one matrix; the weights stay in the caches as far as they fit, as in prefill.
//
// --simd runs the kernels of one compiled Highway target (AVX2, AVX3, AVX3_DL, ...; default the
// best this CPU runs): e.g. the AVX2 kernels' compute ceiling on an AVX-512 host.
// --prefetch sets the kernels' WeightPrefetch (matmul.h; auto: what this CPU gets); both runs
// each type with first-line and every-line prefetch in alternating rounds (an A/B in one run).
//
// --stream-mib N cycles over N MiB instead of 512 (at least two copies of the matrix): with a
// small N the weights stay in the caches and the kernel's compute ceiling shows instead.
//
// TYPE as llama.cpp names it (q8_0, q4_K, iq4_xs, f16, ...); default: every type MatMul runs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/bandwidth.h"
#include "ops/matmul.h"
#include "ops/thread_pool.h"
#include "quant/ggml_type.h"
#include "quant/quantize.h"

namespace tlr {
namespace {

struct Options {
  size_t stream_bytes = size_t{512} << 20;  // far beyond any cache
  int threads = 2;
  int64_t rows = 4864, cols = 896;  // the 0.5B model's FFN gate / up
  double seconds = 2.0;
  std::vector<GgmlType> types;
  std::string prefetch = "auto";
  std::string streams = "auto";
  std::string simd;
  int64_t tokens = 1;
};

bool ParseArgs(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "-t" && has_value) {
      o->threads = std::atoi(argv[++i]);
    } else if (a == "--shape" && has_value) {
      if (std::sscanf(argv[++i], "%ldx%ld", &o->rows, &o->cols) != 2) return false;
    } else if (a == "--prefetch" && has_value) {
      o->prefetch = argv[++i];
      if (o->prefetch != "auto" && o->prefetch != "first" && o->prefetch != "every" && o->prefetch != "both") {
        std::fprintf(stderr, "matmul_bench: --prefetch takes auto, first, every or both, not '%s'\n", o->prefetch.c_str());
        return false;
      }
    } else if (a == "--float-streams" && has_value) {
      o->streams = argv[++i];
      if (o->streams != "1" && o->streams != "4" && o->streams != "both") {
        std::fprintf(stderr, "matmul_bench: --float-streams takes 1, 4 or both, not '%s'\n", o->streams.c_str());
        return false;
      }
    } else if (a == "--simd" && has_value) {
      o->simd = argv[++i];
    } else if (a == "--stream-mib" && has_value) {
      o->stream_bytes = static_cast<size_t>(std::max(0.0, std::atof(argv[++i])) * 1048576);
    } else if (a == "--tokens" && has_value) {
      o->tokens = std::atol(argv[++i]);
    } else if (a == "--seconds" && has_value) {
      o->seconds = std::atof(argv[++i]);
    } else if (a == "-h" || a == "--help") {
      return false;
    } else {
      bool found = false;
      for (const GgmlTypeTraits& t : AllGgmlTypes()) {
        if (strcasecmp(std::string(t.name).c_str(), a.c_str()) == 0) {
          o->types.push_back(t.type);
          found = true;
        }
      }
      if (!found) {
        std::fprintf(stderr, "matmul_bench: unknown argument or type '%s'\n", a.c_str());
        return false;
      }
    }
  }
  return o->threads >= 1 && o->rows >= 1 && o->cols >= 1 && o->seconds > 0 && o->tokens >= 1;
}

struct Result {
  bool ok = false;  // false: the type cannot be made at this shape
  double kernel_gbps = 0, probe_gbps = 0, ratio = 0;  // medians over the rounds
  int rounds = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// A decode setting under test: the quantized kernels' prefetch and the float kernels' streams.
struct Mode {
  WeightPrefetch prefetch;
  int streams;
};

// Weights streamed by single-token MatMuls of `type`, against paired read probes.
// With two modes the rounds alternate between them (a probe before each kernel pass); one
// Result per mode.
std::vector<Result> StreamType(GgmlType type, const Options& o, const std::vector<Mode>& modes,
                               ThreadPool* pool) {
  const GgmlTypeTraits& tr = GgmlTraits(type);
  if (o.cols % tr.block_size != 0 || !CanQuantize(type)) return std::vector<Result>(modes.size());
  const size_t row_bytes = static_cast<size_t>(o.cols / tr.block_size) * tr.type_size;
  const size_t matrix_bytes = row_bytes * static_cast<size_t>(o.rows);
  const int copies = static_cast<int>(std::max<size_t>(2, o.stream_bytes / matrix_bytes));
  // Rows drawn at random from a few quantized random rows: quantizing every row would take
  // long, and identical pages must not occur (the host may merge them, and then the "stream"
  // comes from a cache).
  constexpr int kDistinct = 61;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> f(o.cols);
  std::vector<uint8_t> rows(kDistinct * row_bytes), gguf(matrix_bytes);
  for (int k = 0; k < kDistinct; ++k) {
    for (float& v : f) v = normal(rng);
    if (!Quantize(type, f.data(), rows.data() + k * row_bytes, o.cols).ok()) return std::vector<Result>(modes.size());
  }
  std::vector<uint8_t> data(matrix_bytes * copies);
  WeightView w{type, gguf.data(), o.rows, o.cols, row_bytes};
  for (int c = 0; c < copies; ++c) {
    for (int64_t r = 0; r < o.rows; ++r) {
      std::memcpy(gguf.data() + r * row_bytes, rows.data() + (rng() % kDistinct) * row_bytes, row_bytes);
    }
    uint8_t* dst = data.data() + c * matrix_bytes;
    if (CanRepack(type)) RepackMatrix(w, dst);
    else std::memcpy(dst, gguf.data(), matrix_bytes);
  }
  std::vector<float> x(o.cols), y(o.rows);
  for (float& v : x) v = normal(rng);
  MatMulInput in;
  // Rounds of one probe pass over the same bytes, then one pass of the kernel over every copy:
  // the host's bandwidth drifts, so each kernel pass is judged against its neighbouring probe.
  const size_t m = modes.size();
  std::vector<std::vector<double>> kernel(m), probe(m), ratio(m);
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < o.seconds ||
         kernel[0].size() < 5) {
    for (size_t k = 0; k < m; ++k) {
      SetWeightPrefetch(modes[k].prefetch);
      SetFloatDecodeStreams(modes[k].streams);
      probe[k].push_back(ReadPassGbps(pool, data.data(), data.size()));
      const auto t0 = std::chrono::steady_clock::now();
      for (int c = 0; c < copies; ++c) {
        WeightView wc{type, data.data() + c * matrix_bytes, o.rows, o.cols, row_bytes};
        wc.repacked = CanRepack(type);
        in.Prepare(type, x.data(), 1, o.cols, o.cols, pool);
        MatMul(wc, in, y.data(), o.rows, pool);
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      kernel[k].push_back(static_cast<double>(data.size()) / s / 1e9);
      ratio[k].push_back(kernel[k].back() / probe[k].back());
    }
  }
  std::vector<Result> res(m);
  for (size_t k = 0; k < m; ++k) {
    res[k].ok = true;
    res[k].kernel_gbps = Median(kernel[k]);
    res[k].probe_gbps = Median(probe[k]);
    res[k].ratio = Median(ratio[k]);
    res[k].rounds = static_cast<int>(kernel[k].size());
  }
  return res;
}

// Prefill: one matrix of `type` times o.tokens tokens, GFLOP/s per pass; median over passes.
bool PrefillType(GgmlType type, const Options& o, ThreadPool* pool, double* gflops, int* passes) {
  const GgmlTypeTraits& tr = GgmlTraits(type);
  if (o.cols % tr.block_size != 0 || !CanQuantize(type)) return false;
  const size_t row_bytes = static_cast<size_t>(o.cols / tr.block_size) * tr.type_size;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> f(o.cols);
  std::vector<uint8_t> gguf(row_bytes * o.rows), data(row_bytes * o.rows);
  for (int64_t r = 0; r < o.rows; ++r) {
    for (float& v : f) v = normal(rng);
    if (!Quantize(type, f.data(), gguf.data() + r * row_bytes, o.cols).ok()) return false;
  }
  WeightView w{type, gguf.data(), o.rows, o.cols, row_bytes};
  if (CanRepack(type)) RepackMatrix(w, data.data());
  else data = gguf;
  WeightView wc{type, data.data(), o.rows, o.cols, row_bytes};
  wc.repacked = CanRepack(type);
  std::vector<float> x(static_cast<size_t>(o.cols * o.tokens)), y(static_cast<size_t>(o.rows * o.tokens));
  for (float& v : x) v = normal(rng);
  MatMulInput in;
  std::vector<double> rates;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < o.seconds ||
         rates.size() < 5) {
    const auto t0 = std::chrono::steady_clock::now();
    in.Prepare(type, x.data(), o.tokens, o.cols, o.cols, pool);
    MatMul(wc, in, y.data(), o.rows, pool);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(2.0 * static_cast<double>(o.rows * o.cols * o.tokens) / s / 1e9);
  }
  *gflops = Median(rates);
  *passes = static_cast<int>(rates.size());
  return true;
}

}  // namespace
}  // namespace tlr

int main(int argc, char** argv) {
  using namespace tlr;
  Options o;
  if (!ParseArgs(argc, argv, &o)) {
    std::fprintf(stderr, "usage: matmul_bench [-t THREADS] [--shape ROWSxCOLS] [--seconds S] [--stream-mib N]\n"
                 "                    [--prefetch auto|first|every|both] [--simd TARGET] [--tokens N]\n"
                 "                    [--float-streams 1|4|both] [TYPE...]\n");
    return 2;
  }
  if (o.types.empty()) {
    for (const GgmlTypeTraits& t : AllGgmlTypes()) {
      if (MatMulSupports(t.type)) o.types.push_back(t.type);
    }
  }
  if (!o.simd.empty() && !ForceSimdTarget(o.simd)) {
    std::string names;
    for (const std::string& n : CompiledSimdTargets()) names += " " + n;
    std::fprintf(stderr, "matmul_bench: --simd %s is not a target this build runs here (available:%s)\n", o.simd.c_str(),
                 names.c_str());
    return 2;
  }
  std::vector<WeightPrefetch> prefetches{GetWeightPrefetch()};
  if (o.prefetch == "first") prefetches = {WeightPrefetch::kFirstLine};
  if (o.prefetch == "every") prefetches = {WeightPrefetch::kEveryLine};
  if (o.prefetch == "both") prefetches = {WeightPrefetch::kFirstLine, WeightPrefetch::kEveryLine};
  std::vector<int> streams{GetFloatDecodeStreams()};
  if (o.streams == "1") streams = {1};
  if (o.streams == "4") streams = {4};
  if (o.streams == "both") streams = {1, 4};
  std::vector<Mode> modes;
  for (WeightPrefetch p : prefetches) {
    for (int n : streams) modes.push_back({p, n});
  }
  const auto mode_name = [](const Mode& m) {
    return std::string(m.prefetch == WeightPrefetch::kFirstLine ? "first" : "every") + "/" + std::to_string(m.streams);
  };
  ThreadPool pool(o.threads);
  if (o.tokens > 1) {
    std::printf("matrix %ldx%ld times %ld tokens, %d threads, %s kernels; medians over passes\n", o.rows, o.cols,
                o.tokens, o.threads, ActiveSimdTarget().c_str());
    std::printf("%-8s %10s %12s %7s\n", "type", "GFLOP/s", "tokens/s", "passes");
    for (GgmlType t : o.types) {
      double gf = 0;
      int passes = 0;
      const std::string name(GgmlTraits(t).name);
      if (!PrefillType(t, o, &pool, &gf, &passes)) {
        std::printf("%-8s %10s\n", name.c_str(), "n/a (shape)");
        continue;
      }
      std::printf("%-8s %10.1f %12.0f %7d\n", name.c_str(), gf, gf * 1e9 / (2.0 * o.rows * o.cols), passes);
      std::fflush(stdout);
    }
    return 0;
  }
  std::printf("matrix %ldx%ld, %d threads, %s kernels; medians over rounds of a read probe and a kernel pass over the same %zu MiB\n",
              o.rows, o.cols, o.threads, ActiveSimdTarget().c_str(), o.stream_bytes >> 20);
 std::printf("%-8s %-9s %10s %10s %9s %7s\n", "type", "pf/strm", "kernel GB/s", "probe GB/s", "of probe", "rounds");
  for (GgmlType t : o.types) {
    const std::vector<Result> rs = StreamType(t, o, modes, &pool);
    const std::string name(GgmlTraits(t).name);
    for (size_t k = 0; k < modes.size(); ++k) {
      const Result& r = rs[k];
      if (!r.ok) {
        std::printf("%-8s %-9s %10s\n", name.c_str(), mode_name(modes[k]).c_str(), "n/a (shape)");
        continue;
      }
      std::printf("%-8s %-9s %10.1f %10.1f %8.0f%% %7d\n", name.c_str(), mode_name(modes[k]).c_str(), r.kernel_gbps,
                  r.probe_gbps, 100 * r.ratio, r.rounds);
    }
    std::fflush(stdout);
  }
  return 0;
}
