// Question sets (routing layer): CommonsenseQA-style JSONL in the Hugging Face flattened schema
// ({id, question, question_concept, choices: {label: [...], text: [...]}, answerKey}) or the
// original nested one ({id, question: {stem, question_concept?, choices: [{label, text}]},
// answerKey}); and, for router training, chat rows in the OpenAI fine-tuning format
// ({"messages": [{role, content}, ...]}, optionally with the CommonsenseQA fields that make its
// answer gradable). The prompt a model answers, and the extraction of the chosen choice from an
// answer. Router training grades rollouts with it; evaluation grades answers.
//
// Answer extraction, in order:
//   1. a stated letter: "answer is C", "Answer: C.", "Answer: (C)", "(C)" (a bare letter must
//      end its sentence: in "Answer: A zinthar is ..." the A is not a label);
//   2. the words right after "answer is" (else "Answer:") up to the first '.', ',' or newline
//      equal one choice's text (case-insensitive): "Answer: A zinthar is found in the marsh.
//      So the answer is marsh.", "Answer: marsh.";
//   3. exactly one choice's text occurs in the answer as whole words.
// Anything else is not well formed (no single choice can be extracted).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/chat.h"
#include "util/status.h"

namespace tlr {

struct QaRow {
  std::string id;
  std::string question;
  std::string question_concept;
  std::vector<std::string> labels;  // "A".."E"
  std::vector<std::string> texts;   // same length as labels
  std::string answer_key;           // one of labels ("" when the set has no answers)
  // Optional reference completion (a TLR extension: field "reference"): router training uses
  // it instead of the LLM's own answer.
  std::string reference;
  // Optional text before the question (a TLR extension: field "context"; a shared document, a
  // system prompt's worth of text): the prompt starts with it.
  std::string context;
  // A chat row: the conversation (its assistant messages are the references router training
  // labels). Question and choices are then optional; with them and an answerKey the answer can
  // be graded.
  std::vector<ChatMessage> messages;
  bool gradable() const { return !answer_key.empty() && labels.size() >= 2; }
};

// Parses one JSON line (any of the schemas). Errors say which field is missing or malformed.
Expected<QaRow> ParseQaRow(std::string_view json_line);
// Reads a JSONL file; blank lines are skipped; errors name the file and line number.
Expected<std::vector<QaRow>> LoadQaJsonl(const std::string& path);
// For what grades answers (eval, calibration): an error naming the first row without an
// answerKey (or choices), e.g. CommonsenseQA's test split, whose answers are not public.
Status RequireGradable(const std::vector<QaRow>& rows, const std::string& path);

// The prompt: "Question: ...\nA. text\n...\nE. text\n" (the demo pair's training format, as
// tools/worldgen/worldgen.py writes it), after the row's context and a blank line if it has one.
std::string QaPrompt(const QaRow& row);
// For instruct models (sent as the user message of their chat template): the same question
// and choices, then "Answer with the letter of the correct choice, then explain briefly."
std::string QaInstructPrompt(const QaRow& row);

// The label chosen by `answer` (the model's completion after the prompt), or nullopt when no
// single choice can be extracted.
std::optional<std::string> ExtractChoice(std::string_view answer, const QaRow& row);

}  // namespace tlr
