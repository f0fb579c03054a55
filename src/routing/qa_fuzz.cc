// libFuzzer target for question sets and answer grading (routing layer, fuzz label): the first
// line of the input is a JSONL row as `--data` files hold them (every schema ParseQaRow reads),
// the rest a model's answer to it, which can be anything a model (or a server) sends. Any row
// must parse or fail with a message; a row that parses must render its prompts, and an answer's
// extracted choice must be one of the row's labels.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "routing/qa.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string_view line = input.substr(0, newline);
  const std::string_view answer = newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1);
  auto row = tlr::ParseQaRow(line);
  if (!row.ok()) {
    if (row.status().message().empty()) std::abort();  // an error says what was wrong
    return 0;
  }
  if (row->labels.size() != row->texts.size()) std::abort();
  const size_t rendered = tlr::QaPrompt(*row).size() + tlr::QaInstructPrompt(*row).size();
  const auto choice = tlr::ExtractChoice(answer, *row);
  if (choice && std::find(row->labels.begin(), row->labels.end(), *choice) == row->labels.end()) {
    std::fprintf(stderr, "qa_fuzz: extracted '%s', not one of the row's labels\n", choice->c_str());
    std::abort();
  }
  return rendered == SIZE_MAX;
}
