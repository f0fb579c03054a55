// CommonsenseQA-style rows, prompts and answer extraction (see qa.h).
#include "routing/qa.h"

#include <cctype>
#include <nlohmann/json.hpp>

#include "model/chat_messages.h"
#include "util/mapped_file.h"
#include "util/utf8.h"

namespace tlr {

namespace {

using nlohmann::json;

Expected<std::string> StringField(const json& j, const char* key, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return Status::Error(std::string("missing field '") + key + "'");
    return std::string();
  }
  if (!it->is_string()) return Status::Error(std::string("field '") + key + "' is not a string");
  return it->get<std::string>();
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool IsWordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Whether `needle` occurs in `hay` with no word character right before or after it.
bool ContainsWords(std::string_view hay, std::string_view needle) {
  if (needle.empty()) return false;
  for (size_t p = hay.find(needle); p != std::string_view::npos; p = hay.find(needle, p + 1)) {
    const bool left = p == 0 || !IsWordChar(hay[p - 1]);
    const size_t end = p + needle.size();
    const bool right = end == hay.size() || !IsWordChar(hay[end]);
    if (left && right) return true;
  }
  return false;
}

// A choice label stated at `s` (after optional spaces): "(C)" anywhere, or a bare "C" that
// ends the sentence ("C", "C.", "C)", "C,", "C\n"). A capital followed by a word is not a
// label: "Answer: A zinthar is ..." starts a sentence.
std::optional<std::string> LetterAt(std::string_view s, const QaRow& row) {
  s = Trim(s);
  bool paren = false;
  if (!s.empty() && s.front() == '(') {
    s.remove_prefix(1);
    paren = true;
  }
  if (s.empty()) return std::nullopt;
  if (paren) {
    if (s.size() < 2 || s[1] != ')') return std::nullopt;
  } else if (s.size() > 1 && std::string_view(".),;:\n\r").find(s[1]) == std::string_view::npos) {
    return std::nullopt;
  }
  for (const std::string& l : row.labels) {
    if (l.size() == 1 && s[0] == l[0]) return l;
  }
  return std::nullopt;
}

// The choice whose text is exactly the words right after `cue` (up to '.', ',' or a newline).
std::optional<std::string> TextAfter(std::string_view lower_answer, std::string_view lower_cue,
                                     const QaRow& row) {
  for (size_t p = lower_answer.find(lower_cue); p != std::string_view::npos;
       p = lower_answer.find(lower_cue, p + 1)) {
    std::string_view head = lower_answer.substr(p + lower_cue.size());
    head = Trim(head.substr(0, head.find_first_of(".,\n")));
    for (size_t i = 0; i < row.texts.size(); ++i) {
      if (head == AsciiLower(Trim(row.texts[i]))) return row.labels[i];
    }
  }
  return std::nullopt;
}

}  // namespace

Expected<QaRow> ParseQaRow(std::string_view line) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Error("not valid JSON");
  if (!j.is_object()) return Status::Error("not a JSON object");
  QaRow row;
  auto id = StringField(j, "id", false);
  if (!id.ok()) return id.status();
  row.id = *id;
  auto key = StringField(j, "answerKey", false);
  if (!key.ok()) return key.status();
  row.answer_key = *key;
  auto ref = StringField(j, "reference", false);
  if (!ref.ok()) return ref.status();
  row.reference = *ref;
  auto context = StringField(j, "context", false);
  if (!context.ok()) return context.status();
  row.context = *context;
  if (auto m = j.find("messages"); m != j.end()) {  // a chat row
    auto msgs = ParseChatMessages(*m);
    if (!msgs.ok()) return msgs.status();
    row.messages = std::move(msgs).value();
    if (!j.contains("question")) return row;  // no grader
  }
  auto q = j.find("question");
  if (q == j.end()) return Status::Error("missing field 'question' (or 'messages' for a chat row)");
  const json* choices = nullptr;
  if (q->is_string()) {  // Hugging Face flattened schema
    row.question = q->get<std::string>();
    auto c = StringField(j, "question_concept", false);
    if (!c.ok()) return c.status();
    row.question_concept = *c;
    auto ch = j.find("choices");
    if (ch == j.end() || !ch->is_object()) return Status::Error("missing object field 'choices'");
    const auto lab = ch->find("label"), txt = ch->find("text");
    if (lab == ch->end() || txt == ch->end() || !lab->is_array() || !txt->is_array() ||
        lab->size() != txt->size()) {
      return Status::Error("'choices' needs arrays 'label' and 'text' of equal length");
    }
    for (size_t i = 0; i < lab->size(); ++i) {
      if (!(*lab)[i].is_string() || !(*txt)[i].is_string()) {
        return Status::Error("'choices' entries must be strings");
      }
      row.labels.push_back((*lab)[i].get<std::string>());
      row.texts.push_back((*txt)[i].get<std::string>());
    }
  } else if (q->is_object()) {  // original nested schema
    auto stem = StringField(*q, "stem", true);
    if (!stem.ok()) return stem.status().WithPrefix("question");
    row.question = *stem;
    auto c = StringField(*q, "question_concept", false);
    if (!c.ok()) return c.status().WithPrefix("question");
    row.question_concept = *c;
    auto ch = q->find("choices");
    if (ch == q->end() || !ch->is_array()) return Status::Error("missing array 'question.choices'");
    choices = &*ch;
    for (const json& c2 : *choices) {
      if (!c2.is_object()) return Status::Error("'question.choices' entries must be objects");
      auto l = StringField(c2, "label", true), t = StringField(c2, "text", true);
      if (!l.ok()) return l.status().WithPrefix("question.choices");
      if (!t.ok()) return t.status().WithPrefix("question.choices");
      row.labels.push_back(*l);
      row.texts.push_back(*t);
    }
  } else {
    return Status::Error("field 'question' must be a string or an object");
  }
  if (row.labels.size() < 2) return Status::Error("a question needs at least two choices");
  if (!row.answer_key.empty()) {
    bool found = false;
    for (const auto& l : row.labels) found |= l == row.answer_key;
    if (!found) return Status::Error("answerKey '" + row.answer_key + "' is not a choice label");
  }
  return row;
}

Expected<std::vector<QaRow>> LoadQaJsonl(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  std::vector<QaRow> rows;
  std::string_view rest = *text;
  for (int line_no = 1; !rest.empty(); ++line_no) {
    const size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (Trim(line).empty()) continue;
    auto row = ParseQaRow(line);
    if (!row.ok()) {
      return row.status().WithPrefix("'" + path + "' line " + std::to_string(line_no));
    }
    rows.push_back(std::move(row).value());
  }
  if (rows.empty()) return Status::Error("'" + path + "' has no questions");
  return rows;
}

Status RequireGradable(const std::vector<QaRow>& rows, const std::string& path) {
  size_t missing = 0, first = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i].gradable() && missing++ == 0) first = i;
  }
  if (missing == 0) return Status::Ok();
  const QaRow& r = rows[first];
  return Status::Error("'" + path + "': " + std::to_string(missing) + " of " + std::to_string(rows.size()) +
                       " questions cannot be graded (no answerKey" + (r.labels.size() < 2 ? " or choices" : "") +
                       "; the first is question " + std::to_string(first + 1) + (r.id.empty() ? "" : ", id " + r.id) +
                       "): accuracy needs each question's answer");
}

std::string QaPrompt(const QaRow& row) {
  std::string p = row.context.empty() ? std::string() : row.context + "\n\n";
  p += "Question: " + row.question + "\n";
  for (size_t i = 0; i < row.labels.size(); ++i) p += row.labels[i] + ". " + row.texts[i] + "\n";
  return p;
}

std::string QaInstructPrompt(const QaRow& row) {
  return QaPrompt(row) + "Answer with the letter of the correct choice, then explain briefly.";
}

std::optional<std::string> ExtractChoice(std::string_view answer, const QaRow& row) {
  // 1. A stated letter.
  for (std::string_view cue : {"answer is", "Answer is", "Answer:", "answer:"}) {
    for (size_t p = answer.find(cue); p != std::string_view::npos; p = answer.find(cue, p + 1)) {
      if (auto l = LetterAt(answer.substr(p + cue.size()), row)) return l;
    }
  }
  for (size_t p = answer.find('('); p != std::string_view::npos; p = answer.find('(', p + 1)) {
    if (auto l = LetterAt(answer.substr(p, 3), row)) return l;
  }
  // 2. The choice text right after "answer is", else after "Answer:".
  const std::string lower = AsciiLower(answer);
  if (auto l = TextAfter(lower, "answer is", row)) return l;
  if (auto l = TextAfter(lower, "answer:", row)) return l;
  // 3. Exactly one choice's text anywhere.
  std::optional<std::string> hit;
  for (size_t i = 0; i < row.texts.size(); ++i) {
    if (ContainsWords(lower, AsciiLower(Trim(row.texts[i])))) {
      if (hit) return std::nullopt;
      hit = row.labels[i];
    }
  }
  return hit;
}

}  // namespace tlr
