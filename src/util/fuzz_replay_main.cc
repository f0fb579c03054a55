// The fuzz targets in the regular build (no libFuzzer, any compiler): a main() that runs a
// target's LLVMFuzzerTestOneInput over its seed corpus and over inputs derived from the seeds
// by a fixed-seed mutator (truncations, byte flips, inserted and deleted bytes, boundary
// values, one seed spliced into another), the same inputs on every run. It is the fuzzers'
// regression test in `make test`; coverage-guided fuzzing with sanitizers is `make fuzz-test`
// and `make fuzz` (build-fuzz/, clang). A target that crashes or aborts fails the test; the
// input that did it is written to the working directory first (replay-crash-<target>), so
// `<target> replay-crash-<target>` reproduces it.
//
// usage: <target> [--mutations N] FILE_OR_DIR...   (N derived inputs per seed, default 3000)
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

std::string g_target;
const std::string* g_current = nullptr;

// Writes the input being run when the target crashes (async-signal-safe calls only).
void SaveCrashingInput(int sig) {
  if (g_current != nullptr) {
    char path[512];
    std::snprintf(path, sizeof(path), "replay-crash-%s", g_target.c_str());
    if (FILE* f = std::fopen(path, "wb")) {
      std::fwrite(g_current->data(), 1, g_current->size(), f);
      std::fclose(f);
    }
    static const char kMsg[] = "fuzz replay: the target crashed; the input is in replay-crash-<target>\n";
    (void)!write(2, kMsg, sizeof(kMsg) - 1);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

bool ReadFile(const std::filesystem::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

// One derived input: 1-4 edits of the kinds libFuzzer's mutator makes first.
std::string Mutate(const std::string& seed, const std::vector<std::string>& seeds, std::mt19937_64& rng) {
  std::string s = seed;
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  static const uint8_t kBoundary[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, 0x20, 0x22, 0x7b, 0x7d, 0x5c, 0xc0, 0xef};
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 7) {
      case 0:  // truncate
        s.resize(pick(s.size() + 1));
        break;
      case 1:  // flip a bit
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 2:  // a boundary byte
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(kBoundary[pick(sizeof(kBoundary))]);
        break;
      case 3:  // insert bytes
        s.insert(pick(s.size() + 1), std::string(1 + pick(8), static_cast<char>(kBoundary[pick(sizeof(kBoundary))])));
        break;
      case 4: {  // delete a run
        if (s.empty()) break;
        const size_t at = pick(s.size());
        s.erase(at, 1 + pick(std::min<size_t>(16, s.size() - at)));
        break;
      }
      case 5: {  // a 4-byte value at a random place: 0, -1, large
        if (s.size() < 4) break;
        static const uint32_t kValues[] = {0u, 0xffffffffu, 0x7fffffffu, 0x80000000u, 1u << 20, 255u};
        const uint32_t v = kValues[pick(std::size(kValues))];
        std::memcpy(&s[pick(s.size() - 3)], &v, 4);
        break;
      }
      default: {  // splice: this seed's head, another's tail
        const std::string& other = seeds[pick(seeds.size())];
        const size_t cut = pick(s.size() + 1);
        s = s.substr(0, cut) + other.substr(pick(other.size() + 1));
        break;
      }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  g_target = std::filesystem::path(argv[0]).filename().string();
  int mutations = 3000;
  std::vector<std::filesystem::path> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mutations" && i + 1 < argc) {
      mutations = std::atoi(argv[++i]);
    } else if (arg == "--help" || arg == "-h") {
      std::printf("usage: %s [--mutations N] FILE_OR_DIR...\n", argv[0]);
      return 0;
    } else {
      paths.emplace_back(arg);
    }
  }
  std::vector<std::string> seeds;
  for (const auto& p : paths) {
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& entry : std::filesystem::directory_iterator(p, ec)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());  // the same order, and so the same inputs, everywhere
    } else {
      files.push_back(p);
    }
    for (const auto& f : files) {
      std::string data;
      if (!ReadFile(f, &data)) {
        std::fprintf(stderr, "%s: cannot read %s\n", g_target.c_str(), f.c_str());
        return 2;
      }
      seeds.push_back(std::move(data));
    }
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "%s: no seed inputs (give files or folders)\n", g_target.c_str());
    return 2;
  }
  // Read through a volatile pointer: the weak symbol may or may not be defined.
  int (*volatile init)(int*, char***) = LLVMFuzzerInitialize;
  if (init != nullptr) init(&argc, &argv);
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, SaveCrashingInput);

  std::mt19937_64 rng(0x7e11'f022u);
  size_t runs = 0;
  for (const std::string& seed : seeds) {
    g_current = &seed;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(seed.data()), seed.size());
    ++runs;
    for (int m = 0; m < mutations; ++m) {
      const std::string input = Mutate(seed, seeds, rng);
      g_current = &input;
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
      ++runs;
    }
  }
  g_current = nullptr;
  std::printf("%s: %zu inputs (%zu seeds, %d derived from each), no crash\n", g_target.c_str(), runs, seeds.size(),
              mutations);
  return 0;
}
