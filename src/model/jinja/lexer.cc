// Jinja lexer with Hugging Face's whitespace settings (model layer). See lexer.h.
#include "model/jinja/lexer.h"

#include <cctype>
#include <cstring>

#include "model/jinja/value.h"

namespace tlr::jinja {
namespace {

bool IsWs(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

int CountLines(const std::string& s, size_t from, size_t to) {
  int n = 0;
  for (size_t i = from; i < to && i < s.size(); ++i) n += s[i] == '\n';
  return n;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {
    // keep_trailing_newline is off: one trailing newline of the template is dropped.
    if (!s_.empty() && s_.back() == '\n') s_.pop_back();
  }

  std::vector<Piece> Run() {
    std::vector<Piece> out;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      size_t open = FindOpen(pos);
      std::string text = s_.substr(pos, open - pos);
      const int text_line = line_;
      if (open == s_.size()) {
        Push(&out, std::move(text), text_line);
        break;
      }
      const char kind = s_[open + 1];  // '{', '%' or '#'
      const char sign = open + 2 < s_.size() ? s_[open + 2] : '\0';
      if (sign == '-') {
        while (!text.empty() && IsWs(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: spaces and tabs from the start of the line up to a block or comment tag.
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (l_pos > 0 || line_starting) {
          bool all_ws = l_pos < text.size();
          for (size_t i = l_pos; i < text.size(); ++i) all_ws = all_ws && IsWs(text[i]);
          if (all_ws) text.resize(l_pos);
        }
      }
      Push(&out, std::move(text), text_line);
      line_ += CountLines(s_, pos, open);
      pos = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      const int tag_line = line_;
      size_t end;  // first byte after the closing delimiter
      bool strip_after = false;
      if (kind == '#') {
        const size_t c = s_.find("#}", pos);
        if (c == std::string::npos) throw Error{"comment is never closed ('#}')", tag_line};
        strip_after = c > pos && s_[c - 1] == '-';
        const bool keep = c > pos && s_[c - 1] == '+';
        end = c + 2;
        line_ += CountLines(s_, pos, end);
        pos = end;
        line_starting = Trail(&pos, strip_after, !keep && !strip_after);
        continue;
      }
      Piece p;
      p.kind = kind == '{' ? Piece::Kind::kExpr : Piece::Kind::kStmt;
      p.line = tag_line;
      bool keep = false;
      pos = Tokens(pos, kind == '{' ? '}' : '%', &p.tokens, &strip_after, &keep);
      out.push_back(std::move(p));
      line_starting = Trail(&pos, strip_after, kind == '%' && !keep && !strip_after);
    }
    return out;
  }

 private:
  size_t FindOpen(size_t pos) const {
    for (size_t i = pos; i + 1 < s_.size(); ++i) {
      if (s_[i] == '{' && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return s_.size();
  }

  static void Push(std::vector<Piece>* out, std::string text, int line) {
    if (text.empty()) return;
    Piece p;
    p.text = std::move(text);
    p.line = line;
    out->push_back(std::move(p));
  }

  // After a closing delimiter: "-" eats all whitespace, trim_blocks one newline. Returns
  // whether what was consumed ends with a newline (Jinja's line_starting for lstrip_blocks).
  bool Trail(size_t* pos, bool strip_all, bool trim_newline) {
    const size_t start = *pos;
    if (strip_all) {
      while (*pos < s_.size() && IsWs(s_[*pos])) ++*pos;
    } else if (trim_newline && *pos < s_.size() && s_[*pos] == '\n') {
      ++*pos;
    }
    line_ += CountLines(s_, start, *pos);
    return *pos > start && s_[*pos - 1] == '\n';
  }

  // Tokens of one tag up to its closing "}}" or "%}" (outside brackets). Returns the position
  // after the delimiter.
  size_t Tokens(size_t pos, char close, std::vector<Token>* toks, bool* strip_after, bool* keep) {
    int depth = 0;
    const int start_line = line_;
    while (true) {
      while (pos < s_.size() && IsWs(s_[pos])) {
        line_ += s_[pos] == '\n';
        ++pos;
      }
      if (pos >= s_.size()) {
        throw Error{std::string("tag is never closed ('") + close + "}')", start_line};
      }
      auto at = [&](const char* lit) { return s_.compare(pos, std::strlen(lit), lit) == 0; };
      const std::string end2{close, '}'};
      if (depth == 0) {
        for (const char* prefix : {"-", "+", ""}) {
          if (at((prefix + end2).c_str()) && !(prefix[0] == '+' && close == '}')) {
            *strip_after = prefix[0] == '-';
            *keep = prefix[0] == '+';
            Token t;
            t.line = line_;
            toks->push_back(t);
            return pos + end2.size() + std::strlen(prefix);
          }
        }
      }
      Token t;
      t.line = line_;
      const char c = s_[pos];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        const size_t b = pos;
        while (pos < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos])) || s_[pos] == '_')) ++pos;
        t.type = Token::Type::kName;
        t.text = s_.substr(b, pos - b);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        pos = Number(pos, &t);
      } else if (c == '\'' || c == '"') {
        pos = String(pos, &t);
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "(", ")", "[",
                                     "]", "{", "}", ",", ".", ":", "|", "=", "<", ">"};
        const char* found = nullptr;
        for (const char* op : kOps) {
          if (at(op)) {
            found = op;
            break;
          }
        }
        if (!found) throw Error{std::string("unexpected character '") + c + "'", line_};
        t.type = Token::Type::kOp;
        t.text = found;
        pos += t.text.size();
        if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
        if ((t.text == ")" || t.text == "]" || t.text == "}") && depth > 0) --depth;
      }
      toks->push_back(std::move(t));
    }
  }

  size_t Number(size_t pos, Token* t) {
    const size_t b = pos;
    auto digits = [&] {
      while (pos < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos])) || s_[pos] == '_')) ++pos;
    };
    digits();
    bool is_float = false;
    if (pos + 1 < s_.size() && s_[pos] == '.' && std::isdigit(static_cast<unsigned char>(s_[pos + 1]))) {
      is_float = true;
      ++pos;
      digits();
    }
    if (pos < s_.size() && (s_[pos] == 'e' || s_[pos] == 'E')) {
      size_t q = pos + 1;
      if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
      if (q < s_.size() && std::isdigit(static_cast<unsigned char>(s_[q]))) {
        is_float = true;
        pos = q;
        digits();
      }
    }
    std::string text;
    for (size_t i = b; i < pos; ++i) {
      if (s_[i] != '_') text += s_[i];
    }
    if (is_float) {
      t->type = Token::Type::kFloat;
      t->d = std::strtod(text.c_str(), nullptr);
    } else {
      t->type = Token::Type::kInt;
      if (text.size() > 18) throw Error{"integer literal " + text + " is too large", line_};
      t->i = std::stoll(text);
    }
    return pos;
  }

  size_t String(size_t pos, Token* t) {
    const char q = s_[pos++];
    std::string out;
    while (true) {
      if (pos >= s_.size()) throw Error{"string literal is never closed", t->line};
      const char c = s_[pos++];
      if (c == q) break;
      line_ += c == '\n';
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos >= s_.size()) throw Error{"string literal is never closed", t->line};
      const char e = s_[pos++];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'u':
        case 'x': {
          const int n = e == 'u' ? 4 : 2;
          if (pos + n > s_.size()) throw Error{"bad escape in string literal", line_};
          const uint32_t cp = static_cast<uint32_t>(std::stoul(s_.substr(pos, n), nullptr, 16));
          pos += n;
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xc0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3f));
          } else {
            out += static_cast<char>(0xe0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
            out += static_cast<char>(0x80 | (cp & 0x3f));
          }
          break;
        }
        default:  // Python keeps unknown escapes as written
          out += '\\';
          out += e;
      }
    }
    t->type = Token::Type::kString;
    t->text = std::move(out);
    return pos;
  }

  std::string s_;
  int line_ = 1;
};

}  // namespace

std::vector<Piece> Lex(const std::string& source) { return Lexer(source).Run(); }

}  // namespace tlr::jinja
