// Lexer of the Jinja interpreter for chat templates (model layer, see template.h): splits a
// template into text, {{ expression }} and {% statement %} pieces, applying whitespace
// control exactly as Jinja does with Hugging Face's settings (trim_blocks and lstrip_blocks
// on, keep_trailing_newline off, {%- -%} / {{- -}} / {%+ stripping), and splits each tag
// into tokens. Throws jinja::Error (caught at the Template API).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tlr::jinja {

struct Token {
  enum class Type { kName, kString, kInt, kFloat, kOp, kEnd };
  Type type = Type::kEnd;
  std::string text;  // name, operator, or the unescaped string literal
  int64_t i = 0;
  double d = 0;
  int line = 0;
};

struct Piece {
  enum class Kind { kText, kExpr, kStmt };
  Kind kind = Kind::kText;
  std::string text;           // kText
  std::vector<Token> tokens;  // kExpr / kStmt, ending with a kEnd token
  int line = 0;
};

std::vector<Piece> Lex(const std::string& source);

}  // namespace tlr::jinja
