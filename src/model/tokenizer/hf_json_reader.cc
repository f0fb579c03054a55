// tokenizer.json in one pass: a SAX handler (nlohmann-json's) that builds the document but for
// model.vocab and model.merges, which go straight into vectors. See hf_json_reader.h.
#include "model/tokenizer/hf_json_reader.h"

namespace tlr {
namespace {

using nlohmann::json;

constexpr char kBadMerge[] = "tokenizer.json merge entry is neither \"a b\" nor [a, b]";

class Reader {
 public:
  explicit Reader(HfTokenizerJson* out) : out_(out) {}

  bool null() { return Scalar(json(nullptr)); }
  bool boolean(bool b) { return Scalar(json(b)); }
  bool number_integer(json::number_integer_t n) {
    if (skip_ == 0 && mode_ == Mode::kVocab) return VocabEntry(n);
    return Scalar(json(n));
  }
  bool number_unsigned(json::number_unsigned_t n) {
    if (skip_ == 0 && mode_ == Mode::kVocab) {
      return VocabEntry(n > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(n));
    }
    return Scalar(json(n));
  }
  bool number_float(json::number_float_t x, const std::string&) { return Scalar(json(x)); }
  bool binary(json::binary_t& b) { return Scalar(json(b)); }
  bool string(std::string& s) {
    if (skip_ > 0) return true;
    switch (mode_) {
      case Mode::kMerges: {
        const size_t sp = s.size() > 1 ? s.find(' ', 1) : std::string::npos;
        if (sp == std::string::npos) {
          MergesError("tokenizer.json merge '" + s + "' has no space");
        } else {
          out_->merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
        }
        return true;
      }
      case Mode::kMergePair:
        if (pair_.size() < 2) pair_.push_back(std::move(s));
        ++pair_items_;
        return true;
      default:
        return Scalar(json(std::move(s)));
    }
  }

  bool key(std::string& k) {
    if (skip_ == 0) key_ = std::move(k);
    return true;
  }

  bool start_object(std::size_t) {
    if (skip_ > 0) {
      ++skip_;
      return true;
    }
    if (StartNested()) return true;
    if (IsModelMember("vocab")) {
      mode_ = Mode::kVocab;
      out_->vocab_streamed = true;
      out_->vocab.clear();
      return true;
    }
    const bool model = stack_.size() == 1 && stack_[0]->is_object() && key_ == "model";
    stack_.push_back(Place(json::object()));
    if (model) {  // a repeated "model" replaces the earlier one, streamed parts too
      model_ = stack_.back();
      out_->vocab_streamed = out_->merges_streamed = false;
      out_->vocab.clear();
      out_->merges.clear();
    }
    return true;
  }
  bool end_object() {
    if (skip_ > 0) {
      --skip_;
    } else if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDocument;
    } else {
      stack_.pop_back();
    }
    return true;
  }

  bool start_array(std::size_t) {
    if (skip_ > 0) {
      ++skip_;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      pair_.clear();
      pair_items_ = 0;
      return true;
    }
    if (StartNested()) return true;
    if (IsModelMember("merges")) {
      mode_ = Mode::kMerges;
      out_->merges_streamed = true;
      out_->merges.clear();
      out_->merges_error.clear();
      return true;
    }
    stack_.push_back(Place(json::array()));
    return true;
  }
  bool end_array() {
    if (skip_ > 0) {
      --skip_;
    } else if (mode_ == Mode::kMergePair) {
      if (pair_items_ == 2 && pair_.size() == 2 && !pair_bad_) {
        out_->merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      } else {
        MergesError(kBadMerge);
      }
      pair_bad_ = false;
      mode_ = Mode::kMerges;
    } else if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDocument;
    } else {
      stack_.pop_back();
    }
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  enum class Mode { kDocument, kVocab, kMerges, kMergePair };

  // A value inside the streamed parts that is not of their shape: counted as such, and what it
  // holds skipped. True when the value was one of those.
  bool StartNested() {
    switch (mode_) {
      case Mode::kVocab:
        VocabEntry(-1);
        break;
      case Mode::kMerges:
        MergesError(kBadMerge);
        break;
      case Mode::kMergePair:
        pair_bad_ = true;
        ++pair_items_;
        break;
      case Mode::kDocument:
        return false;
    }
    ++skip_;
    return true;
  }

  bool Scalar(json v) {
    if (skip_ > 0) return true;
    switch (mode_) {
      case Mode::kVocab:
        return VocabEntry(-1);
      case Mode::kMerges:
        MergesError(kBadMerge);
        return true;
      case Mode::kMergePair:
        pair_bad_ = true;
        ++pair_items_;
        return true;
      case Mode::kDocument:
        Place(std::move(v));
        return true;
    }
    return true;
  }

  bool VocabEntry(int64_t id) {
    out_->vocab.emplace_back(std::move(key_), id);
    key_.clear();
    return true;
  }

  void MergesError(std::string e) {
    if (out_->merges_error.empty()) out_->merges_error = std::move(e);
  }

  bool IsModelMember(const char* name) const {
    return stack_.size() == 2 && stack_[1] == model_ && key_ == name;
  }

  // Puts a value where the document expects the next one: the root, the open array's end or the
  // open object's member named by the last key (a repeated key replaces the value, as in a
  // document parse).
  json* Place(json v) {
    if (stack_.empty()) {
      out_->doc = std::move(v);
      return &out_->doc;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    json& slot = (*top)[key_];
    slot = std::move(v);
    return &slot;
  }

  HfTokenizerJson* out_;
  std::vector<json*> stack_;  // the open containers of the document (each stays put while open)
  json* model_ = nullptr;     // the root's "model" object
  std::string key_;
  Mode mode_ = Mode::kDocument;
  int skip_ = 0;  // depth inside a value that is skipped
  std::vector<std::string> pair_;
  int pair_items_ = 0;
  bool pair_bad_ = false;
};

}  // namespace

Expected<HfTokenizerJson> ReadHfTokenizerJson(std::string_view text) {
  HfTokenizerJson out;
  Reader reader(&out);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &reader);
  } catch (const json::exception&) {
    ok = false;
  }
  if (!ok) return Status::Error("tokenizer.json is not valid JSON");
  return out;
}

}  // namespace tlr
