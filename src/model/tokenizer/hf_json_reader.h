// Reads a Hugging Face tokenizer.json in one pass (model layer; vocab.cc turns it into a Vocab).
// Nearly all of such a file is model.vocab (a token -> id object) and model.merges (an array):
// Gemma 3's has 262k tokens and 514k merges in 33 MB. Those two are streamed straight into
// vectors; everything else (pre-tokenizer, normalizer, added tokens, post-processor, the model's
// other fields) becomes a JSON document as before. Building a document of the whole file (a
// std::map node per token, a JSON array per merge) took ~80% of loading Gemma 3's tokenizer.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/status.h"

namespace tlr {

struct HfTokenizerJson {
  // The whole file but for model.vocab when it is an object and model.merges when it is an
  // array (any other shape of those stays here, for the caller to refuse).
  nlohmann::json doc;
  // model.vocab was an object: its entries in file order; an entry whose value is not an
  // integer (or is past int64) has id -1.
  bool vocab_streamed = false;
  std::vector<std::pair<std::string, int64_t>> vocab;
  // model.merges was an array: each merge as its two parts ("a b" split at its first space
  // after the first byte, or ["a", "b"]); merges_error describes the first entry of another shape.
  bool merges_streamed = false;
  std::vector<std::pair<std::string, std::string>> merges;
  std::string merges_error;
};

// Fails only on text that is not JSON ("tokenizer.json is not valid JSON"); shapes are the
// caller's to check.
Expected<HfTokenizerJson> ReadHfTokenizerJson(std::string_view text);

}  // namespace tlr
