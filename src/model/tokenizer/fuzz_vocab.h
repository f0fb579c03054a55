// For the libFuzzer targets (fuzz label only): a vocabulary from ../shared/tokenizer-vectors
// ($TLR_SHARED_DIR overrides the build's path), loaded once in LLVMFuzzerInitialize. Aborts
// with the message when the file is missing or unreadable: a fuzzer cannot run without it.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "model/gguf/gguf_reader.h"
#include "model/tokenizer/tokenizer.h"

namespace tlr {

// name: the part after "ggml-vocab-", e.g. "gpt-2" or "llama-spm".
inline Tokenizer* LoadFuzzVocab(const std::string& name) {
  const char* dir = std::getenv("TLR_SHARED_DIR");
  const std::string path = std::string(dir ? dir : TLR_SHARED_DIR) + "/tokenizer-vectors/ggml-vocab-" + name + ".gguf";
  auto f = GgufFile::Open(path);
  if (!f.ok()) {
    std::fprintf(stderr, "%s\n", f.status().message().c_str());
    std::abort();
  }
  auto t = Tokenizer::FromGguf(*f);
  if (!t.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), t.status().message().c_str());
    std::abort();
  }
  return new Tokenizer(std::move(t).value());
}

}  // namespace tlr
