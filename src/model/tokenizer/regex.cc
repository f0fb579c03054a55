// A backtracking Unicode regex engine for pre-tokenizer patterns (model layer). See regex.h.
// The pattern is parsed into a tree, compiled into a small program (set tests, splits, jumps,
// counted single-set loops, sub-programs for lookahead and atomic groups) and run by a
// backtracking machine over code points.
#include "model/tokenizer/regex.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "util/unicode.h"
#include "util/utf8.h"

namespace tlr {
namespace {

// A set of code points: ranges, category bits and properties, negated as a whole. ASCII is
// answered from a bitmap.
struct CharSet {
  std::vector<std::pair<char32_t, char32_t>> ranges;
  uint32_t categories = 0;              // \p{..}: category bits
  std::vector<uint32_t> not_categories;  // one per \P{..}
  bool white_space = false, not_white_space = false, alphabetic = false, not_alphabetic = false;
  bool word = false, not_word = false;
  bool negated = false, icase = false;
  std::array<uint64_t, 2> ascii{};

  bool HasRaw(char32_t c) const {
    for (const auto& [a, b] : ranges) {
      if (c >= a && c <= b) return true;
    }
    if (categories || !not_categories.empty()) {
      const uint32_t bit = 1u << unicode::GetCategory(c);
      if (categories & bit) return true;
      for (uint32_t m : not_categories) {
        if (!(m & bit)) return true;
      }
    }
    if (white_space || not_white_space) {
      const bool ws = unicode::IsWhiteSpace(c);
      if ((white_space && ws) || (not_white_space && !ws)) return true;
    }
    if (alphabetic || not_alphabetic) {
      const bool al = unicode::IsAlphabetic(c);
      if ((alphabetic && al) || (not_alphabetic && !al)) return true;
    }
    if (word || not_word) {
      const bool w = IsWord(c);
      if ((word && w) || (not_word && !w)) return true;
    }
    return false;
  }
  static bool IsWord(char32_t c) {
    const uint32_t bit = 1u << unicode::GetCategory(c);
    return unicode::IsAlphabetic(c) || (bit & (unicode::kMarks | unicode::Bit(unicode::kNd) | unicode::Bit(unicode::kPc))) ||
           c == 0x200C || c == 0x200D;
  }
  bool HasFolded(char32_t c) const {
    if (HasRaw(c)) return true;
    if (!icase) return false;
    char32_t variants[8];
    const size_t n = unicode::CaseVariants(c, variants);
    for (size_t k = 0; k < n; ++k) {
      if (variants[k] != c && HasRaw(variants[k])) return true;
    }
    return false;
  }
  void Finish() {
    for (char32_t c = 0; c < 128; ++c) {
      if (HasFolded(c) != negated) ascii[c >> 6] |= uint64_t{1} << (c & 63);
    }
  }
  bool Has(char32_t c) const {
    if (c < 128) return (ascii[c >> 6] >> (c & 63)) & 1;
    return HasFolded(c) != negated;
  }
};

struct Node {
  enum Kind { kSet, kSeq, kAlt, kRepeat, kLook, kAtomic, kBegin, kEnd } kind = kSeq;
  Node() = default;
  explicit Node(Kind k) : kind(k) {}
  int set = -1;
  std::vector<Node> kids;
  int min = 0, max = -1;  // repeat bounds; max -1: unbounded
  bool greedy = true, possessive = false, negative = false;
};

bool Nullable(const Node& n) {
  switch (n.kind) {
    case Node::kSet: return false;
    case Node::kSeq:
      return std::all_of(n.kids.begin(), n.kids.end(), Nullable);
    case Node::kAlt:
      return std::any_of(n.kids.begin(), n.kids.end(), Nullable);
    case Node::kRepeat: return n.min == 0 || Nullable(n.kids[0]);
    case Node::kAtomic: return Nullable(n.kids[0]);
    default: return true;  // lookahead and anchors consume nothing
  }
}

class Parser {
 public:
  Parser(std::string_view p, std::vector<CharSet>* sets) : p_(p), sets_(sets) {}

  Expected<Node> ParseAll() {
    Node n = ParseAlt(false);
    if (!err_.empty()) return Status::Error(err_);
    if (i_ < p_.size()) return Status::Error(Where("unbalanced ')'"));
    return n;
  }

 private:
  std::string Where(const std::string& what) const {
    return "pre-tokenizer regex: " + what + " at offset " + std::to_string(i_) + " of " + std::string(p_);
  }
  bool Fail(const std::string& what) {
    if (err_.empty()) err_ = Where(what);
    return false;
  }
  bool More() const { return i_ < p_.size() && err_.empty(); }
  char Peek() const { return p_[i_]; }
  char32_t NextChar() {
    char32_t c;
    DecodeUtf8(p_, &i_, &c);
    return c;
  }

  Node ParseAlt(bool icase) {
    Node alt{Node::kAlt};
    alt.kids.push_back(ParseSeq(&icase));
    while (More() && Peek() == '|') {
      ++i_;
      alt.kids.push_back(ParseSeq(&icase));
    }
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  Node ParseSeq(bool* icase) {
    Node seq{Node::kSeq};
    while (More() && Peek() != '|' && Peek() != ')') {
      if (p_.compare(i_, 4, "(?i)") == 0) {
        i_ += 4;
        *icase = true;
        continue;
      }
      Node atom;
      if (!ParseAtom(*icase, &atom)) break;
      ParseQuantifier(&atom);
      seq.kids.push_back(std::move(atom));
    }
    if (seq.kids.size() == 1) return std::move(seq.kids[0]);
    return seq;
  }

  bool ParseNumber(int* out) {
    const size_t start = i_;
    int v = 0;
    while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9' && v < 100000) v = v * 10 + (p_[i_++] - '0');
    *out = v;
    return i_ > start;
  }

  void ParseQuantifier(Node* atom) {
    bool quantified = false;
    while (More()) {
      int min, max;
      const char c = Peek();
      if (c == '*') {
        min = 0, max = -1, ++i_;
      } else if (c == '+') {
        min = 1, max = -1, ++i_;
      } else if (c == '?') {
        min = 0, max = 1, ++i_;
      } else if (c == '{') {
        const size_t save = i_++;
        if (!ParseNumber(&min)) {
          i_ = save;  // a literal '{', as ICU reads it
          return;
        }
        max = min;
        if (More() && Peek() == ',') {
          ++i_;
          if (!ParseNumber(&max)) max = -1;
        }
        if (!More() || Peek() != '}') {
          Fail("unterminated {n,m}");
          return;
        }
        ++i_;
        if (max >= 0 && max < min) {
          Fail("{n,m} with m < n");
          return;
        }
        if (min > 1000 || max > 1000) {
          Fail("a repeat count above 1000");
          return;
        }
      } else {
        return;
      }
      if (quantified) {  // a{1}{1}{1}... would nest without limit (and ICU refuses it too)
        Fail("a quantifier after a quantifier (put the first in a group)");
        return;
      }
      quantified = true;
      Node rep{Node::kRepeat};
      rep.min = min, rep.max = max;
      if (More() && Peek() == '?') {
        rep.greedy = false, ++i_;
      } else if (More() && Peek() == '+') {
        rep.possessive = true, ++i_;
      }
      if (max < 0 && Nullable(*atom)) {
        Fail("an unbounded repeat of something that can match empty text (not supported)");
        return;
      }
      rep.kids.push_back(std::move(*atom));
      *atom = std::move(rep);
    }
  }

  int AddSet(CharSet s, bool icase) {
    s.icase = icase;
    s.Finish();
    sets_->push_back(std::move(s));
    return static_cast<int>(sets_->size()) - 1;
  }

  Node SetNode(int set) {
    Node n{Node::kSet};
    n.set = set;
    return n;
  }

  bool ParseAtom(bool icase, Node* out) {
    const char c = Peek();
    if (c == '(') {
      if (++depth_ > 100) return Fail("groups nested more than 100 deep");
      ++i_;
      Node::Kind kind = Node::kSeq;
      bool negative = false, group_icase = icase;
      if (More() && Peek() == '?') {
        ++i_;
        if (p_.compare(i_, 1, ":") == 0) {
          i_ += 1;
        } else if (p_.compare(i_, 2, "i:") == 0) {
          i_ += 2, group_icase = true;
        } else if (p_.compare(i_, 1, "=") == 0 || p_.compare(i_, 1, "!") == 0) {
          negative = p_[i_] == '!', kind = Node::kLook, i_ += 1;
        } else if (p_.compare(i_, 1, ">") == 0) {
          kind = Node::kAtomic, i_ += 1;
        } else if (p_.compare(i_, 1, "<") == 0) {
          return Fail("lookbehind (?<...) is not supported");
        } else {
          return Fail("unsupported group (?" + std::string(p_.substr(i_, 1)) + "...)");
        }
      }
      Node inner = ParseAlt(group_icase);
      if (!err_.empty()) return false;
      if (!More() || Peek() != ')') return Fail("missing ')'");
      ++i_;
      --depth_;
      if (kind == Node::kSeq) {
        *out = std::move(inner);
      } else {
        out->kind = kind;
        out->negative = negative;
        out->kids.push_back(std::move(inner));
      }
      return true;
    }
    if (c == ')' || c == '*' || c == '+' || c == '?') return Fail(std::string("nothing to repeat before '") + c + "'");
    if (c == '^' || c == '$') {
      ++i_;
      out->kind = c == '^' ? Node::kBegin : Node::kEnd;
      return true;
    }
    CharSet s;
    if (c == '[') {
      if (!ParseClass(&s)) return false;
    } else if (c == '.') {
      ++i_;
      s.negated = true;
      for (char32_t t : {0x0A, 0x0B, 0x0C, 0x0D, 0x85, 0x2028, 0x2029}) s.ranges.emplace_back(t, t);
    } else if (c == '\\') {
      char32_t lit;
      if (!ParseEscape(&s, &lit)) return false;
      if (lit != kNoChar) s.ranges.emplace_back(lit, lit);
    } else {
      const char32_t lit = NextChar();
      s.ranges.emplace_back(lit, lit);
    }
    *out = SetNode(AddSet(std::move(s), icase));
    return true;
  }

  static constexpr char32_t kNoChar = 0xFFFFFFFF;

  bool InRange(char32_t c) { return c <= 0x10FFFF || Fail("a code point above U+10FFFF"); }

  bool ParseHex(size_t digits, char32_t* out) {
    char32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      if (i_ >= p_.size() || !isxdigit(static_cast<unsigned char>(p_[i_]))) return Fail("bad hexadecimal escape");
      const char h = p_[i_++];
      v = v * 16 + (h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    *out = v;
    return true;
  }

  // After a backslash: a class escape (added to `s`, *lit = kNoChar) or one character (*lit).
  bool ParseEscape(CharSet* s, char32_t* lit) {
    ++i_;
    if (i_ >= p_.size()) return Fail("trailing backslash");
    *lit = kNoChar;
    const char e = p_[i_++];
    switch (e) {
      case 's': s->white_space = true; return true;
      case 'S': s->not_white_space = true; return true;
      case 'd': s->categories |= unicode::Bit(unicode::kNd); return true;
      case 'D': s->not_categories.push_back(unicode::Bit(unicode::kNd)); return true;
      case 'w': s->word = true; return true;
      case 'W': s->not_word = true; return true;
      case 'n': *lit = '\n'; return true;
      case 'r': *lit = '\r'; return true;
      case 't': *lit = '\t'; return true;
      case 'f': *lit = '\f'; return true;
      case 'v': *lit = '\v'; return true;
      case 'e': *lit = 0x1B; return true;
      case 'a': *lit = 0x07; return true;
      case 'u': return ParseHex(4, lit);
      case 'U': return ParseHex(8, lit) && InRange(*lit);
      case 'x':
        if (i_ < p_.size() && p_[i_] == '{') {
          const size_t close = p_.find('}', i_);
          if (close == std::string_view::npos || close == i_ + 1 || close - i_ - 1 > 6) return Fail("bad \\x{...}");
          ++i_;
          if (!ParseHex(close - i_, lit) || !InRange(*lit)) return false;
          ++i_;
          return true;
        }
        return ParseHex(2, lit);
      case 'p':
      case 'P': {
        std::string name;
        if (i_ < p_.size() && p_[i_] == '{') {
          const size_t close = p_.find('}', i_);
          if (close == std::string_view::npos) return Fail("unterminated \\p{");
          name = std::string(p_.substr(i_ + 1, close - i_ - 1));
          i_ = close + 1;
        } else if (i_ < p_.size()) {
          name = std::string(1, p_[i_++]);
        }
        bool neg = e == 'P';
        if (!name.empty() && name[0] == '^') neg = !neg, name.erase(0, 1);
        for (const char* prefix : {"gc=", "General_Category="}) {
          if (name.rfind(prefix, 0) == 0) name.erase(0, strlen(prefix));
        }
        if (name == "White_Space" || name == "WSpace" || name == "space") {
          (neg ? s->not_white_space : s->white_space) = true;
        } else if (name == "Alphabetic" || name == "Alpha") {
          (neg ? s->not_alphabetic : s->alphabetic) = true;
        } else if (const uint32_t mask = unicode::CategoryMask(name)) {
          if (neg) {
            s->not_categories.push_back(mask);
          } else {
            s->categories |= mask;
          }
        } else {
          return Fail("unsupported property \\p{" + name + "}");
        }
        return true;
      }
      default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
          return Fail(std::string("unsupported escape \\") + e);
        }
        --i_;
        *lit = NextChar();
        return true;
    }
  }

  bool ParseClass(CharSet* s) {
    ++i_;  // '['
    if (More() && Peek() == '^') s->negated = true, ++i_;
    bool first = true;
    while (true) {
      if (i_ >= p_.size()) return Fail("missing ']'");
      const char c = Peek();
      if (c == ']' && !first) {
        ++i_;
        return true;
      }
      first = false;
      if (c == '[') return Fail("nested classes and set operations are not supported");
      char32_t lo;
      if (c == '\\') {
        if (!ParseEscape(s, &lo)) return false;
        if (lo == kNoChar) continue;
      } else {
        lo = NextChar();
      }
      char32_t hi = lo;
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        if (Peek() == '\\') {
          CharSet dummy;
          if (!ParseEscape(&dummy, &hi)) return false;
          if (hi == kNoChar) return Fail("a class escape cannot end a range");
        } else {
          hi = NextChar();
        }
        if (hi < lo) return Fail("a range out of order");
      }
      s->ranges.emplace_back(lo, hi);
    }
  }

  std::string_view p_;
  size_t i_ = 0;
  int depth_ = 0;
  std::vector<CharSet>* sets_;
  std::string err_;
};

bool IsLineTerminator(char32_t c) {
  return (c >= 0x0A && c <= 0x0D) || c == 0x85 || c == 0x2028 || c == 0x2029;
}

enum Op : uint8_t { kSet, kSplit, kJmp, kMatch, kRepeatSet, kLook, kAtomic, kBegin, kEnd };

struct Inst {
  Op op;
  bool flag = false;  // kSplit: unused; kRepeatSet: greedy; kLook: negative
  int x = 0, y = 0;   // kSet/kRepeatSet: set; kSplit: first, second; kJmp: target; kLook/kAtomic: sub, after
  int min = 0, max = -1;
};

}  // namespace

struct UnicodeRegex::Program {
  std::vector<CharSet> sets;
  std::vector<Inst> code;
  // A set every match must start with (the program's first instruction consumes a character
  // of it), or -1: Find skips the positions where it cannot start.
  int first_set = -1;

  int Emit(Inst i) {
    code.push_back(i);
    return static_cast<int>(code.size()) - 1;
  }

  Status Gen(const Node& n) {
    if (code.size() > 100000) return Status::Error("pre-tokenizer regex: the compiled pattern is too large");
    switch (n.kind) {
      case Node::kSet: Emit({kSet, false, n.set}); break;
      case Node::kBegin: Emit({kBegin}); break;
      case Node::kEnd: Emit({kEnd}); break;
      case Node::kSeq:
        for (const Node& k : n.kids) {
          if (Status s = Gen(k); !s.ok()) return s;
        }
        break;
      case Node::kAlt: {
        std::vector<int> jumps;
        for (size_t i = 0; i < n.kids.size(); ++i) {
          const bool last = i + 1 == n.kids.size();
          const int split = last ? -1 : Emit({kSplit});
          if (split >= 0) code[split].x = split + 1;
          if (Status s = Gen(n.kids[i]); !s.ok()) return s;
          if (!last) {
            jumps.push_back(Emit({kJmp}));
            code[split].y = static_cast<int>(code.size());
          }
        }
        for (int j : jumps) code[j].x = static_cast<int>(code.size());
        break;
      }
      case Node::kLook:
      case Node::kAtomic: {
        const int at = Emit({n.kind == Node::kLook ? kLook : kAtomic, n.negative});
        code[at].x = at + 1;
        if (Status s = Gen(n.kids[0]); !s.ok()) return s;
        Emit({kMatch});
        code[at].y = static_cast<int>(code.size());
        break;
      }
      case Node::kRepeat: {
        const Node& kid = n.kids[0];
        if (n.possessive) {
          Node inner = n;
          inner.possessive = false;
          Node atomic{Node::kAtomic};
          atomic.kids.push_back(std::move(inner));
          return Gen(atomic);
        }
        if (kid.kind == Node::kSet) {
          Inst r{kRepeatSet, n.greedy, kid.set};
          r.min = n.min, r.max = n.max;
          Emit(r);
          break;
        }
        for (int i = 0; i < n.min; ++i) {
          if (Status s = Gen(kid); !s.ok()) return s;
        }
        if (n.max < 0) {  // kid*
          const int split = Emit({kSplit});
          if (Status s = Gen(kid); !s.ok()) return s;
          Emit({kJmp, false, split});
          Branch(split, split + 1, static_cast<int>(code.size()), n.greedy);
        } else {  // (kid (kid ...)?)?
          std::vector<int> splits;
          for (int i = n.min; i < n.max; ++i) {
            splits.push_back(Emit({kSplit}));
            if (Status s = Gen(kid); !s.ok()) return s;
          }
          for (int sp : splits) Branch(sp, sp + 1, static_cast<int>(code.size()), n.greedy);
        }
        break;
      }
    }
    return Status::Ok();
  }

  void Branch(int split, int body, int after, bool greedy) {
    code[split].x = greedy ? body : after;
    code[split].y = greedy ? after : body;
  }

  struct Frame {
    int pc;
    int kind;  // 0: resume at pc, pos; 1: greedy repeat giving back; 2: lazy repeat taking more
    size_t pos, lim;
  };

  // Runs from `pc` at `pos`; on a match sets *end and returns true. Frames above `base` are its
  // own. `budget` counts down the steps one Find may take (a pathological pattern from a
  // tokenizer.json backtracks exponentially): at zero every attempt fails.
  bool Run(const char32_t* t, size_t begin, size_t end, int pc, size_t pos, size_t* match_end,
           std::vector<Frame>& stack, int64_t& budget) const {
    const size_t base = stack.size();
    for (;;) {
      if (--budget < 0) {
        stack.resize(base);
        return false;
      }
      const Inst& in = code[pc];
      bool ok = true;
      switch (in.op) {
        case kSet:
          if (pos < end && sets[in.x].Has(t[pos])) {
            ++pos, ++pc;
          } else {
            ok = false;
          }
          break;
        case kSplit:
          stack.push_back({in.y, 0, pos, 0});
          pc = in.x;
          break;
        case kJmp: pc = in.x; break;
        case kMatch:
          *match_end = pos;
          stack.resize(base);
          return true;
        case kBegin:
          ok = pos == begin;
          ++pc;
          break;
        case kEnd:  // as ICU's: at the end, or before a line terminator that ends the text
          ok = pos == end || (pos + 1 == end && IsLineTerminator(t[pos])) ||
               (pos + 2 == end && t[pos] == '\r' && t[pos + 1] == '\n');
          ++pc;
          break;
        case kRepeatSet: {
          const CharSet& s = sets[in.x];
          const size_t limit = in.max < 0 ? end : std::min(end, pos + static_cast<size_t>(in.max));
          size_t k = pos;
          const size_t need = pos + static_cast<size_t>(in.min);
          if (in.flag) {
            while (k < limit && s.Has(t[k])) ++k;
            if (k < need) {
              ok = false;
              break;
            }
            if (k > need) stack.push_back({pc + 1, 1, k, need});
          } else {
            while (k < need && k < limit && s.Has(t[k])) ++k;
            if (k < need) {
              ok = false;
              break;
            }
            if (k < limit) stack.push_back({pc + 1, 2, k, limit});
          }
          pos = k;
          ++pc;
          break;
        }
        case kLook:
        case kAtomic: {
          size_t sub_end;
          const bool found = Run(t, begin, end, in.x, pos, &sub_end, stack, budget);
          if (in.op == kLook) {
            ok = found != in.flag;
          } else if ((ok = found)) {
            pos = sub_end;
          }
          pc = in.y;
          break;
        }
      }
      if (ok) continue;
      // Backtrack.
      for (;;) {
        if (stack.size() == base) return false;
        Frame& f = stack.back();
        if (f.kind == 0) {
          pc = f.pc, pos = f.pos;
          stack.pop_back();
          break;
        }
        if (f.kind == 1) {  // give back one character
          pos = --f.pos;
          pc = f.pc;
          if (f.pos == f.lim) stack.pop_back();
          break;
        }
        // Lazy: take one more character if the set allows it.
        const CharSet& s = sets[code[f.pc - 1].x];
        if (f.pos < f.lim && s.Has(t[f.pos])) {
          pos = ++f.pos;
          pc = f.pc;
          if (f.pos == f.lim) stack.pop_back();
          break;
        }
        stack.pop_back();
      }
    }
  }
};

UnicodeRegex::UnicodeRegex() = default;
UnicodeRegex::~UnicodeRegex() = default;
UnicodeRegex::UnicodeRegex(UnicodeRegex&&) noexcept = default;
UnicodeRegex& UnicodeRegex::operator=(UnicodeRegex&&) noexcept = default;

Expected<UnicodeRegex> UnicodeRegex::Compile(std::string_view pattern) {
  UnicodeRegex r;
  r.prog_ = std::make_unique<Program>();
  Parser parser(pattern, &r.prog_->sets);
  Expected<Node> tree = parser.ParseAll();
  if (!tree.ok()) return tree.status();
  if (Status s = r.prog_->Gen(tree.value()); !s.ok()) return s;
  r.prog_->Emit({kMatch});
  const Inst& first = r.prog_->code[0];
  if (first.op == kSet || (first.op == kRepeatSet && first.min >= 1)) r.prog_->first_set = first.x;
  return r;
}

int64_t UnicodeRegex::StepBudget(size_t n) { return 64 * static_cast<int64_t>(n) + (1 << 20); }

bool UnicodeRegex::Find(const char32_t* text, size_t begin, size_t end, size_t from, size_t* match_begin,
                        size_t* match_end, int64_t* shared_budget) const {
  thread_local std::vector<Program::Frame> stack;
  int64_t own_budget = StepBudget(end - begin);
  int64_t& budget = shared_budget ? *shared_budget : own_budget;
  for (size_t s = from; s <= end; ++s) {
    stack.clear();
    if (prog_->first_set >= 0) {
      const CharSet& f = prog_->sets[prog_->first_set];
      while (s < end && !f.Has(text[s])) ++s;
      if (s == end) return false;  // a match needs at least one character
    }
    if (budget < 0) return false;
    if (prog_->Run(text, begin, end, 0, s, match_end, stack, budget)) {
      *match_begin = s;
      return true;
    }
  }
  return false;
}

}  // namespace tlr
