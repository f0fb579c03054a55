// Tokenizer facade (model layer): construction, special-token partitioning, decode and
// streaming decode. The two model algorithms live in bpe.cc and spm.cc.
#include "model/tokenizer/tokenizer.h"

#include <algorithm>

#include "model/gguf/gguf_reader.h"
#include "util/hash.h"
#include "util/unicode.h"
#include "util/utf8.h"

namespace tlr {

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

namespace {
bool IsMatchedInText(TokenType t, bool parse_special) {
  if (t == TokenType::kUserDefined) return true;
  return parse_special && (t == TokenType::kControl || t == TokenType::kUnknown);
}

bool IsWhitespaceByte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
}  // namespace

Expected<Tokenizer> Tokenizer::FromVocab(Vocab vocab, const TokenizerOptions& opts) {
  TLR_RETURN_IF_ERROR(vocab.Validate());
  Tokenizer t;
  if (!opts.pre_override.empty()) {
    vocab.pre = opts.pre_override;
    vocab.pre_regex.clear();
  }
  t.vocab_ = std::move(vocab);
  const Vocab& v = t.vocab_;
  const int32_t n = v.size();
  t.index_.reserve(n);
  for (int32_t i = 0; i < n; ++i) t.index_.emplace(v.tokens[i], i);  // first id wins

  if (v.model == VocabModel::kBpe) {
    std::vector<std::string> patterns = v.pre_regex;
    if (patterns.empty()) {
      auto p = PreTokenizerPatterns(v.pre);
      if (!p.ok()) return p.status();
      patterns = *p;
    }
    auto splitter = RegexSplitter::Create(patterns);
    if (!splitter.ok()) return splitter.status();
    t.splitter_ = std::make_unique<RegexSplitter>(std::move(splitter).value());
    t.merges_.reserve(v.merges.size());
    for (size_t r = 0; r < v.merges.size(); ++r) {
      const int32_t a = t.Find(v.merges[r].first);
      const int32_t b = t.Find(v.merges[r].second);
      const int32_t m = t.Find(v.merges[r].first + v.merges[r].second);
      if (a < 0 || b < 0 || m < 0) continue;  // a merge into nothing can never apply
      const uint64_t key = (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
      t.merges_.emplace(key, std::make_pair(static_cast<int32_t>(r), m));  // lowest rank wins
    }
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const int32_t id = t.Find(name);
    t.byte_token_[b] = (id >= 0 && v.types[id] == TokenType::kByte) ? id : -1;
  }
  for (int32_t i = 0; i < n; ++i) {
    const TokenType ty = v.types[i];
    if ((ty == TokenType::kControl || ty == TokenType::kUserDefined || ty == TokenType::kUnknown) &&
        !v.tokens[i].empty()) {
      t.special_.push_back(i);
    }
  }
  std::stable_sort(t.special_.begin(), t.special_.end(), [&](int32_t a, int32_t b) {
    return v.tokens[a].size() > v.tokens[b].size();
  });
  if (!t.special_.empty()) t.restart_margin_ = std::max<size_t>(16, v.tokens[t.special_.front()].size() + 8);
  for (int32_t id : t.special_) {
    const auto at = static_cast<size_t>(id);
    t.strips_ = t.strips_ || (at < v.lstrip.size() && v.lstrip[at]) || (at < v.rstrip.size() && v.rstrip[at]);
  }

  // Ends of generation as llama.cpp's vocabulary loader finds them: the ids the file names
  // (each FIM kind by its texts when the file names none), then the texts that end a turn.
  for (int32_t id : {v.eos_id, v.eot_id, v.eom_id}) {
    if (id >= 0) t.eog_.push_back(id);
  }
  const std::pair<int32_t, std::vector<const char*>> fims[] = {
      {v.fim_pad_id, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>"}},
      {v.fim_rep_id, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
      {v.fim_sep_id, {"<|file_sep|>"}}};
  for (const auto& [id, texts] : fims) {
    if (id >= 0) {
      t.eog_.push_back(id);
      continue;
    }
    for (const char* text : texts) {
      if (const int32_t found = t.Find(text); found >= 0) {
        t.eog_.push_back(found);
        break;
      }
    }
  }
  static const char* const kEndTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                                          "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
                                          "<|end_of_text|>", "<end_of_utterance>"};
  for (const char* text : kEndTexts) {
    if (const int32_t id = t.Find(text); id >= 0) t.eog_.push_back(id);
  }
  std::sort(t.eog_.begin(), t.eog_.end());
  t.eog_.erase(std::unique(t.eog_.begin(), t.eog_.end()), t.eog_.end());

  uint64_t h = kFnvOffset;
  h = Fnv1a(h, v.model == VocabModel::kBpe ? "bpe" : "spm");
  h = Fnv1a(h, v.pre);
  for (const auto& r : v.pre_regex) h = Fnv1a(h, r);
  for (int32_t i = 0; i < n; ++i) {
    h = Fnv1a(h, v.tokens[i]);
    h = Fnv1a(h, std::string(1, static_cast<char>(v.types[i])));
  }
  for (const auto& [a, b] : v.merges) h = Fnv1a(Fnv1a(h, a), b);
  t.fingerprint_ = h;
  return t;
}

Expected<Tokenizer> Tokenizer::FromGguf(const GgufFile& file, const TokenizerOptions& opts) {
  auto v = VocabFromGguf(file);
  if (!v.ok()) return v.status();
  return FromVocab(std::move(v).value(), opts);
}

Expected<Tokenizer> Tokenizer::FromHfJsonFile(const std::string& path,
                                              const TokenizerOptions& opts) {
  auto v = VocabFromHfFile(path);
  if (!v.ok()) return v.status();
  return FromVocab(std::move(v).value(), opts);
}

int32_t Tokenizer::Find(std::string_view text) const {
  auto it = index_.find(std::string(text));
  return it == index_.end() ? -1 : it->second;
}

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return std::binary_search(eog_.begin(), eog_.end(), id);
}

std::vector<Tokenizer::Fragment> Tokenizer::PartitionSpecial(std::string_view text,
                                                             bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({0, text.size(), -1});
  for (int32_t id : special_) {
    if (!IsMatchedInText(vocab_.types[id], parse_special)) continue;
    const std::string& st = vocab_.tokens[id];
    std::vector<Fragment> next;
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.begin;
      while (pos < f.end) {
        const size_t hit = text.substr(0, f.end).find(st, pos);
        if (hit == std::string_view::npos) break;
        if (hit > pos) next.push_back({pos, hit, -1});
        next.push_back({hit, hit + st.size(), id});
        pos = hit + st.size();
      }
      if (pos < f.end) next.push_back({pos, f.end, -1});
    }
    frags = std::move(next);
  }
  // Added tokens marked lstrip/rstrip swallow the whitespace beside them.
  for (size_t i = 0; i < frags.size(); ++i) {
    if (frags[i].token < 0) continue;
    const int32_t id = frags[i].token;
    if (vocab_.lstrip[id] && i > 0 && frags[i - 1].token < 0) {
      Fragment& p = frags[i - 1];
      while (p.end > p.begin && IsWhitespaceByte(text[p.end - 1])) --p.end;
    }
    if (vocab_.rstrip[id] && i + 1 < frags.size() && frags[i + 1].token < 0) {
      Fragment& q = frags[i + 1];
      while (q.begin < q.end && IsWhitespaceByte(text[q.begin])) ++q.begin;
    }
  }
  std::erase_if(frags, [](const Fragment& f) { return f.token < 0 && f.begin == f.end; });
  return frags;
}

std::string Tokenizer::Normalize(std::string_view text) const {
  if (!vocab_.normalize_nfc) return std::string(text);
  return unicode::NfcUtf8(text);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos) out.push_back(vocab_.bos_id);
  EncodeText(text, parse_special, /*at_start=*/true, /*normalize=*/true, &out);
  if (add_special && vocab_.add_eos) out.push_back(vocab_.eos_id);
  return out;
}

std::vector<int32_t> Tokenizer::EncodeExact(std::string_view text, bool at_start, bool parse_special) const {
  std::vector<int32_t> out;
  EncodeText(text, parse_special, at_start, /*normalize=*/false, &out);
  return out;
}

std::vector<int32_t> Tokenizer::EncodeExact(std::string_view text, bool at_start, bool parse_special,
                                            std::vector<size_t>* restarts) const {
  std::vector<int32_t> out;
  const bool resumable = restarts && vocab_.model == VocabModel::kBpe && !strips_;
  EncodeText(text, parse_special, at_start, /*normalize=*/false, &out, resumable ? restarts : nullptr);
  return out;
}

void Tokenizer::EncodeText(std::string_view text, bool parse_special, bool at_start, bool normalize,
                           std::vector<int32_t>* out_ids, std::vector<size_t>* restarts) const {
  std::vector<int32_t>& out = *out_ids;
  const std::vector<Fragment> frags = PartitionSpecial(text, parse_special);
  if (vocab_.model == VocabModel::kBpe) {
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        if (restarts) restarts->push_back(f.begin);
      } else if (normalize) {
        EncodeBpe(Normalize(text.substr(f.begin, f.end - f.begin)), &out);
      } else {
        EncodeBpe(text.substr(f.begin, f.end - f.begin), &out, restarts, f.begin);
      }
    }
  } else {
    bool prev_special = at_start;  // the dummy prefix goes before the first text fragment
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      std::string escaped;
      if (vocab_.add_space_prefix && prev_special) escaped = "\xE2\x96\x81";
      for (char c : text.substr(f.begin, f.end - f.begin)) {
        if (c == ' ') escaped += "\xE2\x96\x81";
        else escaped += c;
      }
      EncodeSpm(escaped, &out);
      prev_special = false;
    }
  }
}

std::string Tokenizer::Piece(int32_t id, bool render_special) const {
  if (!IsValidId(id)) return "";
  const std::string& text = vocab_.tokens[id];
  switch (vocab_.types[id]) {
    case TokenType::kControl:
      return render_special ? text : "";
    case TokenType::kUnknown:
      if (render_special) return text;
      return vocab_.model == VocabModel::kSpm ? "\xE2\x96\x85" : "";
    case TokenType::kUserDefined:
      // SentencePiece: added pieces such as Gemma's whitespace runs ("▁▁") are escaped like
      // the others (Hugging Face's and llama.cpp's decoders unescape them too).
      if (vocab_.model != VocabModel::kSpm) return text;
      break;
    case TokenType::kByte:
      if (text.size() == 6 && text.rfind("<0x", 0) == 0) {
        return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
      }
      return text;
    default:
      break;
  }
  std::string out;
  if (vocab_.model == VocabModel::kSpm) {
    size_t pos = 0;
    while (pos < text.size()) {
      if (text.compare(pos, 3, "\xE2\x96\x81") == 0) {
        out += ' ';
        pos += 3;
      } else {
        out += text[pos++];
      }
    }
    return out;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    char32_t cp;
    const bool ok = DecodeUtf8(text, &pos, &cp);
    const int b = ok ? BpeCharToByte(cp) : -1;
    if (b >= 0) out += static_cast<char>(b);
    else out.append(text, start, pos - start);  // not a byte-level character: keep as is
  }
  return out;
}

std::string Tokenizer::SequencePiece(int32_t id, bool render_special, bool* at_start) const {
  std::string piece = Piece(id, render_special);
  if (piece.empty() || !*at_start) return piece;
  *at_start = false;
  // SentencePiece's dummy prefix: the space the encoder put before the text goes away.
  if (vocab_.model == VocabModel::kSpm && vocab_.add_space_prefix && piece[0] == ' ' &&
      vocab_.types[id] != TokenType::kControl) {
    piece.erase(0, 1);
  }
  return piece;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  bool at_start = true;
  for (int32_t id : ids) out += SequencePiece(id, render_special, &at_start);
  return out;
}

std::string StreamDecoder::Push(int32_t id) {
  pending_ += tok_.SequencePiece(id, render_special_, &at_start_);
  const size_t n = Utf8CompletePrefix(pending_);
  std::string out = SanitizeUtf8(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out = SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace tlr
