// The llama.cpp side of scripts/coldstart_bench.py: what `tlr run -m FILE -p PROMPT -n N -t T
// -c CTX` does, through llama.cpp's public C API (llama.h), built against a llama.cpp source
// build (tools/interop/llamacpp_source.sh). Loads the model (memory-mapped, llama.cpp's
// default), evaluates the prompt in one batch, generates N tokens greedily, prints their ids on
// stdout (one line, space-separated) and, with --memory, the resident memory after the last
// token on stderr as JSON (the same /proc/self/status fields `tlr run -v` reports).
// Not part of TLR: a yardstick, compiled only by the benchmark script.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

long StatusKib(const std::string& status, const char* key) {
  const size_t at = status.find(key);
  if (at == std::string::npos) return -1;
  return std::strtol(status.c_str() + at + std::strlen(key), nullptr, 10);
}

void PrintMemory() {
  std::ifstream in("/proc/self/status");
  std::string status((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::fprintf(stderr,
               "{\"resident_bytes\": %ld, \"resident_file_bytes\": %ld, "
               "\"resident_anon_bytes\": %ld, \"peak_resident_bytes\": %ld}\n",
               StatusKib(status, "VmRSS:") * 1024, StatusKib(status, "RssFile:") * 1024,
               StatusKib(status, "RssAnon:") * 1024, StatusKib(status, "VmHWM:") * 1024);
}

void Quiet(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s MODEL PROMPT N_PREDICT THREADS N_CTX [--memory]\n", argv[0]);
    return 2;
  }
  const std::string model_path = argv[1], prompt = argv[2];
  const int n_predict = std::atoi(argv[3]), threads = std::atoi(argv[4]);
  const int n_ctx = std::atoi(argv[5]);
  const bool memory = argc > 6 && std::strcmp(argv[6], "--memory") == 0;

  llama_log_set(Quiet, nullptr);
  ggml_backend_load_all();
  llama_model_params mparams = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(model_path.c_str(), mparams);
  if (!model) {
    std::fprintf(stderr, "cannot load %s\n", model_path.c_str());
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_prompt =
      -llama_tokenize(vocab, prompt.c_str(), (int)prompt.size(), nullptr, 0, true, true);
  std::vector<llama_token> tokens(n_prompt);
  if (llama_tokenize(vocab, prompt.c_str(), (int)prompt.size(), tokens.data(), n_prompt, true,
                     true) < 0) {
    std::fprintf(stderr, "cannot tokenize the prompt\n");
    return 1;
  }
  llama_context_params cparams = llama_context_default_params();
  cparams.n_ctx = n_ctx;
  cparams.n_batch = n_prompt > 512 ? n_prompt : 512;
  cparams.n_threads = threads;
  cparams.n_threads_batch = threads;
  llama_context* ctx = llama_init_from_model(model, cparams);
  if (!ctx) {
    std::fprintf(stderr, "cannot create a context\n");
    return 1;
  }
  llama_sampler* sampler = llama_sampler_chain_init(llama_sampler_chain_default_params());
  llama_sampler_chain_add(sampler, llama_sampler_init_greedy());

  llama_batch batch = llama_batch_get_one(tokens.data(), n_prompt);
  llama_token next = 0;
  for (int i = 0; i < n_predict; ++i) {
    if (llama_decode(ctx, batch) != 0) {
      std::fprintf(stderr, "llama_decode failed\n");
      return 1;
    }
    next = llama_sampler_sample(sampler, ctx, -1);
    std::printf(i ? " %d" : "%d", next);
    std::fflush(stdout);
    batch = llama_batch_get_one(&next, 1);
  }
  std::printf("\n");
  if (memory) PrintMemory();
  llama_sampler_free(sampler);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
