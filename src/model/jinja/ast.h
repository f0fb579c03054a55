// Syntax tree of the Jinja interpreter for chat templates (model layer, see template.h):
// expressions and statements as the parser builds them and the evaluator walks them. Plain
// data, immutable after parsing, so one parsed template may be rendered from many threads.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/jinja/lexer.h"
#include "model/jinja/value.h"

namespace tlr::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,   // value
    kName,      // name
    kAttr,      // args[0].name
    kIndex,     // args[0][args[1]]
    kSlice,     // args[0][args[1]:args[2]:args[3]] (null parts omitted)
    kCall,      // args[0](args[1..], kwargs)
    kFilter,    // args[0] | name(args[1..], kwargs)
    kTest,      // args[0] is [not: negate] name(args[1..])
    kUnary,     // op args[0]: "-", "+", "not"
    kBinary,    // args[0] op args[1]: + - * / // % ** ~ and or
    kCompare,   // args[0] ops[0] args[1] ops[1] args[2] ...: == != < <= > >= in notin
    kCond,      // args[0] if args[1] else args[2] (args[2] may be null)
    kList,      // [args...]
    kTuple,     // (args...)
    kDict,      // {keys[i]: args[i]}
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  Value value;
  std::string name;  // variable, attribute, filter, test or operator
  bool negate = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  std::vector<ExprPtr> keys;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conds[i] -> bodies[i]; else_body
    kFor,       // for targets in expr [if cond] body [else else_body]
    kSet,       // set targets = expr, or set target.attr = expr, or {% set target %}body{% endset %}
    kMacro,     // macro name(params = defaults) body
    kBreak,
    kContinue,
    kBlock,     // a transparent body ({% generation %})
  };
  Kind kind = Kind::kText;
  int line = 0;
  std::string text;
  ExprPtr expr, cond;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body, else_body;
  std::vector<std::string> targets;
  std::string attr;                   // kSet on a namespace attribute
  std::vector<std::string> params;    // kMacro
  std::vector<ExprPtr> defaults;      // kMacro, null where a parameter has no default
};

// Parses lexed pieces into a statement list. Throws Error naming the construct and line.
Body Parse(const std::vector<Piece>& pieces);

}  // namespace tlr::jinja
