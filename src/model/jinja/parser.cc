// Jinja parser for chat templates (model layer): pieces from the lexer -> the syntax tree of
// ast.h, with Jinja's operator precedence (condexpr < or < and < not < comparisons < + - <
// ~ < * / // % < ** < unary; filters, tests, calls, attributes and subscripts bind tightest).
// Any tag or syntax outside the supported subset is an error naming it and its line.
#include <initializer_list>

#include "model/jinja/ast.h"

namespace tlr::jinja {
namespace {

constexpr int kMaxDepth = 120;

class Parser {
 public:
  explicit Parser(const std::vector<Piece>& pieces) : pieces_(pieces) {}

  Body Run() {
    std::string stop;
    return ParseBody({}, "", 0, &stop);
  }

 private:
  // --- statements ---
  Body ParseBody(std::initializer_list<const char*> stops, const std::string& opener, int opener_line,
                 std::string* stopped_at) {
    DepthGuard guard(this);
    Body body;
    while (pi_ < pieces_.size()) {
      const Piece& p = pieces_[pi_++];
      if (p.kind == Piece::Kind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->text = p.text;
        s->line = p.line;
        body.push_back(std::move(s));
        continue;
      }
      toks_ = &p.tokens;
      ti_ = 0;
      if (p.kind == Piece::Kind::kExpr) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = p.line;
        s->expr = ParseExpr();
        ExpectEnd();
        body.push_back(std::move(s));
        continue;
      }
      const Token& t = Next();
      if (t.type != Token::Type::kName) throw Error{"expected a tag name after '{%'", t.line};
      for (const char* stop : stops) {
        if (t.text == stop) {
          *stopped_at = t.text;
          return body;
        }
      }
      body.push_back(ParseStatement(t));
    }
    if (stops.size() > 0) {
      throw Error{"'" + opener + "' is never closed (missing '" + *(stops.end() - 1) + "')", opener_line};
    }
    return body;
  }

  std::unique_ptr<Stmt> ParseStatement(const Token& t) {
    auto s = std::make_unique<Stmt>();
    s->line = t.line;
    std::string stop;
    const std::string& n = t.text;
    if (n == "if") {
      s->kind = Stmt::Kind::kIf;
      s->conds.push_back(ParseExpr());
      ExpectEnd();
      s->bodies.push_back(ParseBody({"elif", "else", "endif"}, "if", t.line, &stop));
      while (stop == "elif") {
        s->conds.push_back(ParseExpr());
        ExpectEnd();
        s->bodies.push_back(ParseBody({"elif", "else", "endif"}, "if", t.line, &stop));
      }
      if (stop == "else") {
        ExpectEnd();
        s->else_body = ParseBody({"endif"}, "if", t.line, &stop);
      }
      ExpectEnd();
    } else if (n == "for") {
      s->kind = Stmt::Kind::kFor;
      do {
        s->targets.push_back(ExpectName("a loop variable"));
      } while (SkipOp(","));
      if (Next().text != "in") throw Error{"expected 'in' in 'for'", t.line};
      s->expr = ParseOr();
      if (SkipName("if")) s->cond = ParseExpr();
      if (Peek().type == Token::Type::kName && Peek().text == "recursive") {
        throw Error{"unsupported loop modifier 'recursive'", t.line};
      }
      ExpectEnd();
      s->body = ParseBody({"else", "endfor"}, "for", t.line, &stop);
      if (stop == "else") {
        ExpectEnd();
        s->else_body = ParseBody({"endfor"}, "for", t.line, &stop);
      }
      ExpectEnd();
    } else if (n == "set") {
      s->kind = Stmt::Kind::kSet;
      s->targets.push_back(ExpectName("a variable name"));
      if (SkipOp(".")) {
        s->attr = ExpectName("an attribute name");
      } else {
        while (SkipOp(",")) s->targets.push_back(ExpectName("a variable name"));
      }
      if (SkipOp("=")) {
        s->expr = ParseTupleOrExpr();
        ExpectEnd();
      } else {
        ExpectEnd();
        s->body = ParseBody({"endset"}, "set", t.line, &stop);
        ExpectEnd();
      }
    } else if (n == "macro") {
      s->kind = Stmt::Kind::kMacro;
      s->text = ExpectName("a macro name");
      ExpectOp("(");
      while (!SkipOp(")")) {
        if (!s->params.empty()) ExpectOp(",");
        if (SkipOp(")")) break;
        s->params.push_back(ExpectName("a parameter name"));
        s->defaults.push_back(SkipOp("=") ? ParseExpr() : nullptr);
      }
      ExpectEnd();
      s->body = ParseBody({"endmacro"}, "macro", t.line, &stop);
      ExpectEnd();
    } else if (n == "break" || n == "continue") {
      s->kind = n == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      ExpectEnd();
    } else if (n == "generation") {
      s->kind = Stmt::Kind::kBlock;
      ExpectEnd();
      s->body = ParseBody({"endgeneration"}, "generation", t.line, &stop);
      ExpectEnd();
    } else if (n == "elif" || n == "else" || n.rfind("end", 0) == 0) {
      throw Error{"unexpected '" + n + "'", t.line};
    } else {
      throw Error{"unsupported tag '" + n + "'", t.line};
    }
    return s;
  }

  // --- tokens ---
  const Token& Peek() const { return (*toks_)[ti_]; }
  const Token& Next() {
    const Token& t = (*toks_)[ti_];
    if (t.type != Token::Type::kEnd) ++ti_;
    return t;
  }
  bool IsOp(const char* op) const { return Peek().type == Token::Type::kOp && Peek().text == op; }
  bool IsName(const char* name) const { return Peek().type == Token::Type::kName && Peek().text == name; }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    ++ti_;
    return true;
  }
  bool SkipName(const char* name) {
    if (!IsName(name)) return false;
    ++ti_;
    return true;
  }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case Token::Type::kEnd: return "the end of the tag";
      case Token::Type::kString: return "a string";
      case Token::Type::kInt:
      case Token::Type::kFloat: return "a number";
      default: return "'" + t.text + "'";
    }
  }
  void ExpectOp(const char* op) {
    if (!SkipOp(op)) throw Error{std::string("expected '") + op + "', found " + Describe(Peek()), Peek().line};
  }
  std::string ExpectName(const char* what) {
    if (Peek().type != Token::Type::kName) throw Error{std::string("expected ") + what + ", found " + Describe(Peek()), Peek().line};
    return Next().text;
  }
  void ExpectEnd() {
    if (Peek().type != Token::Type::kEnd) throw Error{"unexpected " + Describe(Peek()) + " in tag", Peek().line};
  }

  // --- expressions ---
  ExprPtr Make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  ExprPtr Binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = Make(Expr::Kind::kBinary, a->line);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr ParseTupleOrExpr() {
    ExprPtr first = ParseExpr();
    if (!IsOp(",")) return first;
    auto t = Make(Expr::Kind::kTuple, first->line);
    t->args.push_back(std::move(first));
    while (SkipOp(",")) {
      if (Peek().type == Token::Type::kEnd || IsOp(")")) break;
      t->args.push_back(ParseExpr());
    }
    return t;
  }

  ExprPtr ParseExpr() {
    DepthGuard guard(this);
    ExprPtr e = ParseOr();
    while (SkipName("if")) {
      auto c = Make(Expr::Kind::kCond, e->line);
      c->args.push_back(std::move(e));
      c->args.push_back(ParseOr());
      c->args.push_back(SkipName("else") ? ParseExpr() : nullptr);
      e = std::move(c);
    }
    return e;
  }
  ExprPtr ParseOr() {
    ExprPtr e = ParseAnd();
    while (SkipName("or")) e = Binary("or", std::move(e), ParseAnd());
    return e;
  }
  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (SkipName("and")) e = Binary("and", std::move(e), ParseNot());
    return e;
  }
  ExprPtr ParseNot() {
    if (IsName("not")) {
      const int line = Next().line;
      DepthGuard guard(this);
      auto e = Make(Expr::Kind::kUnary, line);
      e->name = "not";
      e->args.push_back(ParseNot());
      return e;
    }
    return ParseCompare();
  }
  ExprPtr ParseCompare() {
    ExprPtr first = ParseMath1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (Peek().type == Token::Type::kOp &&
          (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">="))) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && ti_ + 1 < toks_->size() && (*toks_)[ti_ + 1].type == Token::Type::kName &&
                 (*toks_)[ti_ + 1].text == "in") {
        ti_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = Make(Expr::Kind::kCompare, first->line);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(ParseMath1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr ParseMath1() {
    ExprPtr e = ParseConcat();
    while (IsOp("+") || IsOp("-")) {
      const std::string op = Next().text;
      e = Binary(op, std::move(e), ParseConcat());
    }
    return e;
  }
  ExprPtr ParseConcat() {
    ExprPtr e = ParseMath2();
    while (SkipOp("~")) e = Binary("~", std::move(e), ParseMath2());
    return e;
  }
  ExprPtr ParseMath2() {
    ExprPtr e = ParsePow();
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const std::string op = Next().text;
      e = Binary(op, std::move(e), ParsePow());
    }
    return e;
  }
  ExprPtr ParsePow() {
    ExprPtr e = ParseUnary(true);
    while (SkipOp("**")) e = Binary("**", std::move(e), ParseUnary(true));
    return e;
  }
  ExprPtr ParseUnary(bool with_filter) {
    DepthGuard guard(this);
    ExprPtr e;
    if (IsOp("-") || IsOp("+")) {
      const Token& t = Next();
      e = Make(Expr::Kind::kUnary, t.line);
      e->name = t.text;
      e->args.push_back(ParseUnary(false));
    } else {
      e = ParsePrimary();
    }
    e = ParsePostfix(std::move(e));
    return with_filter ? ParseFilterExpr(std::move(e)) : std::move(e);
  }
  ExprPtr ParsePrimary() {
    const Token& t = Next();
    ExprPtr e;
    switch (t.type) {
      case Token::Type::kName:
        e = Make(Expr::Kind::kLiteral, t.line);
        if (t.text == "true" || t.text == "True") {
          e->value = Value(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::None();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        return e;
      case Token::Type::kString: {
        std::string s = t.text;
        while (Peek().type == Token::Type::kString) s += Next().text;
        e = Make(Expr::Kind::kLiteral, t.line);
        e->value = Value(std::move(s));
        return e;
      }
      case Token::Type::kInt:
        e = Make(Expr::Kind::kLiteral, t.line);
        e->value = Value(t.i);
        return e;
      case Token::Type::kFloat:
        e = Make(Expr::Kind::kLiteral, t.line);
        e->value = Value(t.d);
        return e;
      case Token::Type::kOp:
        if (t.text == "(") {
          if (SkipOp(")")) return Make(Expr::Kind::kTuple, t.line);
          e = ParseTupleOrExpr();
          ExpectOp(")");
          return e;
        }
        if (t.text == "[") {
          e = Make(Expr::Kind::kList, t.line);
          while (!SkipOp("]")) {
            if (!e->args.empty()) ExpectOp(",");
            if (SkipOp("]")) break;
            e->args.push_back(ParseExpr());
          }
          return e;
        }
        if (t.text == "{") {
          e = Make(Expr::Kind::kDict, t.line);
          while (!SkipOp("}")) {
            if (!e->args.empty()) ExpectOp(",");
            if (SkipOp("}")) break;
            e->keys.push_back(ParseExpr());
            ExpectOp(":");
            e->args.push_back(ParseExpr());
          }
          return e;
        }
        break;
      default: break;
    }
    throw Error{"unexpected " + Describe(t) + " in an expression", t.line};
  }
  ExprPtr ParsePostfix(ExprPtr e) {
    while (true) {
      if (SkipOp(".")) {
        const Token& t = Next();
        if (t.type == Token::Type::kName) {
          auto a = Make(Expr::Kind::kAttr, t.line);
          a->name = t.text;
          a->args.push_back(std::move(e));
          e = std::move(a);
        } else if (t.type == Token::Type::kInt) {
          auto a = Make(Expr::Kind::kIndex, t.line);
          a->args.push_back(std::move(e));
          a->args.push_back(Make(Expr::Kind::kLiteral, t.line));
          a->args.back()->value = Value(t.i);
          e = std::move(a);
        } else {
          throw Error{"expected an attribute name after '.', found " + Describe(t), t.line};
        }
      } else if (IsOp("[")) {
        e = ParseSubscript(std::move(e));
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }
  ExprPtr ParseSubscript(ExprPtr target) {
    const int line = Next().line;
    ExprPtr parts[3];
    int idx = 0;
    bool slice = false;
    while (!SkipOp("]")) {
      if (SkipOp(":")) {
        slice = true;
        if (++idx > 2) throw Error{"too many ':' in a slice", line};
        continue;
      }
      if (parts[idx]) throw Error{"expected ']' in a subscript, found " + Describe(Peek()), Peek().line};
      parts[idx] = ParseExpr();
    }
    auto e = Make(slice ? Expr::Kind::kSlice : Expr::Kind::kIndex, line);
    e->args.push_back(std::move(target));
    if (!slice) {
      if (!parts[0]) throw Error{"empty subscript '[]'", line};
      e->args.push_back(std::move(parts[0]));
    } else {
      for (auto& p : parts) e->args.push_back(std::move(p));
    }
    return e;
  }
  // Call arguments into e->args (after any already there) and e->kwargs.
  void ParseArgs(Expr* e) {
    ExpectOp("(");
    bool first = true;
    while (!SkipOp(")")) {
      if (!first) ExpectOp(",");
      first = false;
      if (SkipOp(")")) break;
      if (IsOp("*") || IsOp("**")) throw Error{"unsupported argument unpacking ('*' / '**')", Peek().line};
      if (Peek().type == Token::Type::kName && ti_ + 1 < toks_->size() && (*toks_)[ti_ + 1].type == Token::Type::kOp &&
          (*toks_)[ti_ + 1].text == "=") {
        std::string name = Next().text;
        Next();
        e->kwargs.emplace_back(std::move(name), ParseExpr());
      } else {
        e->args.push_back(ParseExpr());
      }
    }
  }
  ExprPtr ParseCall(ExprPtr callee) {
    auto e = Make(Expr::Kind::kCall, Peek().line);
    e->args.push_back(std::move(callee));
    ParseArgs(e.get());
    return e;
  }
  ExprPtr ParseFilterExpr(ExprPtr e) {
    while (true) {
      if (SkipOp("|")) {
        auto f = Make(Expr::Kind::kFilter, Peek().line);
        f->name = ExpectName("a filter name");
        while (SkipOp(".")) f->name += "." + ExpectName("a filter name");
        f->args.push_back(std::move(e));
        if (IsOp("(")) ParseArgs(f.get());
        e = std::move(f);
      } else if (IsName("is")) {
        auto t = Make(Expr::Kind::kTest, Next().line);
        t->negate = SkipName("not");
        t->name = ExpectName("a test name");
        t->args.push_back(std::move(e));
        if (IsOp("(")) {
          ParseArgs(t.get());
        } else if ((Peek().type == Token::Type::kName && !IsName("else") && !IsName("or") && !IsName("and") &&
                    !IsName("if") && !IsName("is")) ||
                   Peek().type == Token::Type::kString || Peek().type == Token::Type::kInt ||
                   Peek().type == Token::Type::kFloat || IsOp("[") || IsOp("{")) {
          t->args.push_back(ParsePostfix(ParsePrimary()));
        }
        e = std::move(t);
      } else if (IsOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : p_(p) {
      if (++p_->depth_ > kMaxDepth) throw Error{"template is nested too deeply", 0};
    }
    ~DepthGuard() { --p_->depth_; }
    Parser* p_;
  };

  const std::vector<Piece>& pieces_;
  size_t pi_ = 0;
  const std::vector<Token>* toks_ = nullptr;
  size_t ti_ = 0;
  int depth_ = 0;
};

}  // namespace

Body Parse(const std::vector<Piece>& pieces) { return Parser(pieces).Run(); }

}  // namespace tlr::jinja
