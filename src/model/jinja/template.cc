// The evaluator of the Jinja interpreter for chat templates (model layer). See template.h.
// Walks the syntax tree of ast.h over a chain of scopes (a for body and a macro call each get
// their own, as in Jinja, which is why templates carry state out of loops in a namespace()).
#include "model/jinja/template.h"

#include <cmath>
#include <exception>
#include <map>

#include "model/jinja/ast.h"
#include "model/jinja/builtins.h"

namespace tlr::jinja {
namespace {

constexpr size_t kMaxOutput = size_t{16} << 20;  // bytes a render may produce
constexpr int64_t kMaxIterations = 300000;        // loop iterations per render
constexpr int kMaxCallDepth = 32;                 // nested macro calls

struct Scope {
  std::map<std::string, Value> vars;
  const Scope* parent = nullptr;
};

enum class Flow { kNormal, kBreak, kContinue };

template <typename Op>
int64_t CheckedInt(Op op, int64_t x, int64_t y, int line) {
  int64_t r = 0;
  if (op(x, y, &r)) Fail("integer overflow", line);
  return r;
}

Value Arith(const std::string& op, const Value& a, const Value& b, int line) {
  NoUndefined(a, line);
  NoUndefined(b, line);
  if (a.IsNumber() && b.IsNumber()) {
    const bool ints = !a.IsFloat() && !b.IsFloat();
    const int64_t x = a.AsInt(), y = b.AsInt();
    const double p = a.AsDouble(), q = b.AsDouble();
    const auto add = [](int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); };
    const auto sub = [](int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); };
    const auto mul = [](int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); };
    if (op == "+") return ints ? Value(CheckedInt(add, x, y, line)) : Value(p + q);
    if (op == "-") return ints ? Value(CheckedInt(sub, x, y, line)) : Value(p - q);
    if (op == "*") return ints ? Value(CheckedInt(mul, x, y, line)) : Value(p * q);
    if (q == 0 && (op == "/" || op == "//" || op == "%")) Fail("division by zero", line);
    if (op == "/") return Value(p / q);
    if (op == "//") {
      if (!ints) return Value(std::floor(p / q));
      if (x == INT64_MIN && y == -1) Fail("integer overflow", line);
      return Value(x / y - ((x % y != 0) && ((x < 0) != (y < 0)) ? 1 : 0));
    }
    if (op == "%") {
      if (!ints) return Value(p - q * std::floor(p / q));
      if (y == -1) return Value(int64_t{0});
      const int64_t m = x % y;
      return Value(m != 0 && ((m < 0) != (y < 0)) ? m + y : m);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        int64_t acc = 1;
        for (int64_t i = 0; i < y; ++i) {
          if (__builtin_mul_overflow(acc, x, &acc)) Fail("integer overflow", line);
          if (acc == 0 || acc == 1) break;
        }
        return Value(acc);
      }
      return Value(std::pow(p, q));
    }
  }
  if (op == "+" && a.IsString() && b.IsString()) {
    CheckStringSize(a.AsString().size() + b.AsString().size(), line);
    SpendBytes(a.AsString().size() + b.AsString().size(), line);
    return Value(a.AsString() + b.AsString());
  }
  if (op == "+" && a.IsList() && b.IsList()) {
    CheckListSize(a.AsList().size() + b.AsList().size(), line);
    SpendItems(a.AsList().size() + b.AsList().size(), line);
    std::vector<Value> out = a.AsList();
    out.insert(out.end(), b.AsList().begin(), b.AsList().end());
    return Value::List(std::move(out));
  }
  if (op == "*" && (a.IsString() || a.IsList()) && (b.IsInt() || b.IsBool())) {
    const int64_t n = std::max<int64_t>(0, b.AsInt());
    const size_t unit = a.IsString() ? a.AsString().size() : a.AsList().size();
    if (unit > 0 && static_cast<uint64_t>(n) > kMaxOutput / unit) Fail("repetition too large", line);
    if (a.IsString()) {
      SpendBytes(unit * static_cast<size_t>(n), line);
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += a.AsString();
      return Value(std::move(out));
    }
    SpendItems(unit * static_cast<size_t>(n), line);
    std::vector<Value> out;
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), a.AsList().begin(), a.AsList().end());
    return Value::List(std::move(out));
  }
  if (op == "%" && a.IsString()) Fail("unsupported string formatting with '%'", line);
  Fail("unsupported operand types for " + op + ": " + a.TypeName() + " and " + b.TypeName(), line);
}

class Evaluator {
 public:
  explicit Evaluator(const Dict& variables) {
    for (auto& [k, v] : DefaultGlobals().items) globals_.vars[k] = v;
    for (const auto& [k, v] : variables.items) globals_.vars[k] = v;
    root_.parent = &globals_;
    cur_ = &root_;
  }

  std::string Run(const Body& body) {
    std::string out;
    out_ = &out;
    if (ExecBody(body) != Flow::kNormal) Fail("'break' or 'continue' outside a loop", 0);
    return out;
  }

 private:
  void Emit(const std::string& s) {
    if (out_->size() + s.size() > kMaxOutput) Fail("the rendered prompt exceeds 16 MiB", 0);
    *out_ += s;
  }

  Value Lookup(const std::string& name) const {
    for (const Scope* s = cur_; s; s = s->parent) {
      if (auto it = s->vars.find(name); it != s->vars.end()) return it->second;
    }
    return Value::Undefined(name);
  }

  void Bind(Scope* scope, const std::vector<std::string>& targets, const Value& v, int line) {
    if (targets.size() == 1) {
      scope->vars[targets[0]] = v;
      return;
    }
    if (!v.IsList() || v.AsList().size() != targets.size()) {
      Fail("cannot unpack a " + std::string(v.TypeName()) + " into " + std::to_string(targets.size()) + " variables", line);
    }
    for (size_t i = 0; i < targets.size(); ++i) scope->vars[targets[i]] = v.AsList()[i];
  }

  Flow ExecBody(const Body& body) {
    for (const auto& s : body) {
      const Flow f = Exec(*s);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow Exec(const Stmt& s) {
    switch (s.kind) {
      case Stmt::Kind::kText: Emit(s.text); break;
      case Stmt::Kind::kOutput: Emit(Eval(*s.expr).Str()); break;
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < s.conds.size(); ++i) {
          if (Eval(*s.conds[i]).Truthy()) return ExecBody(s.bodies[i]);
        }
        return ExecBody(s.else_body);
      case Stmt::Kind::kFor: For(s); break;
      case Stmt::Kind::kSet: Set(s); break;
      case Stmt::Kind::kMacro: {
        const Stmt* m = &s;
        cur_->vars[s.text] = Value::Func(s.text, [this, m](const CallArgs& a, int line) { return CallMacro(*m, a, line); });
        break;
      }
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
      case Stmt::Kind::kBlock: return ExecBody(s.body);
    }
    return Flow::kNormal;
  }

  void Set(const Stmt& s) {
    Value v;
    if (s.expr) {
      v = Eval(*s.expr);
    } else {
      std::string buf;
      std::string* saved = out_;
      out_ = &buf;
      ExecBody(s.body);
      out_ = saved;
      v = Value(std::move(buf));
    }
    if (s.attr.empty()) {
      Bind(cur_, s.targets, v, s.line);
      return;
    }
    Value target = Lookup(s.targets[0]);
    if (target.kind() != Value::Kind::kNamespace) {
      Fail("cannot set attribute '" + s.attr + "' of '" + s.targets[0] + "' (a " + target.TypeName() +
               ", not a namespace())",
           s.line);
    }
    if (v.HoldsNamespace()) Fail("a namespace attribute cannot hold a namespace", s.line);
    if (v.depth() + 1 > Value::kMaxNesting) Fail("values nested more than 100 deep", s.line);
    target.MutableNamespace().Set(s.attr, std::move(v));
  }

  void For(const Stmt& s) {
    std::vector<Value> items = Iterate(Eval(*s.expr), s.line);
    Scope* const outer = cur_;
    if (s.cond) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        Scope tmp;
        tmp.parent = outer;
        Bind(&tmp, s.targets, item, s.line);
        cur_ = &tmp;
        const bool keep = Eval(*s.cond).Truthy();
        cur_ = outer;
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      if (++iterations_ > kMaxIterations) Fail("loops ran more than 300000 iterations", s.line);
      Scope it;
      it.parent = outer;
      Bind(&it, s.targets, items[i], s.line);
      Dict loop;
      loop.Set("index0", Value(i));
      loop.Set("index", Value(i + 1));
      loop.Set("revindex0", Value(n - 1 - i));
      loop.Set("revindex", Value(n - i));
      loop.Set("first", Value(i == 0));
      loop.Set("last", Value(i == n - 1));
      loop.Set("length", Value(n));
      loop.Set("depth", Value(int64_t{1}));
      loop.Set("depth0", Value(int64_t{0}));
      loop.Set("previtem", i > 0 ? items[i - 1] : Value::Undefined("previtem"));
      loop.Set("nextitem", i + 1 < n ? items[i + 1] : Value::Undefined("nextitem"));
      it.vars["loop"] = Value::MakeDict(std::move(loop));
      cur_ = &it;
      const Flow f = ExecBody(s.body);
      cur_ = outer;
      if (f == Flow::kBreak) break;
    }
    if (n == 0) ExecBody(s.else_body);
  }

  Value CallMacro(const Stmt& m, const CallArgs& a, int line) {
    if (depth_ >= kMaxCallDepth) Fail("macro calls nested deeper than 32", line);
    if (a.pos.size() > m.params.size()) {
      Fail("macro '" + m.text + "' takes " + std::to_string(m.params.size()) + " arguments, got " +
               std::to_string(a.pos.size()),
           line);
    }
    for (const auto& [k, v] : a.kw) {
      if (std::find(m.params.begin(), m.params.end(), k) == m.params.end()) {
        Fail("macro '" + m.text + "' has no parameter '" + k + "'", line);
      }
    }
    Scope scope;
    scope.parent = &root_;
    Scope* const saved_scope = cur_;
    std::string* const saved_out = out_;
    cur_ = &scope;
    for (size_t i = 0; i < m.params.size(); ++i) {
      const Value* kw = a.Kw(m.params[i]);
      scope.vars[m.params[i]] = i < a.pos.size() ? a.pos[i]
                                : kw              ? *kw
                                : m.defaults[i]   ? Eval(*m.defaults[i])
                                                  : Value::Undefined(m.params[i]);
    }
    std::string buf;
    out_ = &buf;
    ++depth_;
    ExecBody(m.body);
    --depth_;
    cur_ = saved_scope;
    out_ = saved_out;
    return Value(std::move(buf));
  }

  CallArgs Args(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t i = first; i < e.args.size(); ++i) a.pos.push_back(Eval(*e.args[i]));
    for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, Eval(*x));
    return a;
  }

  Value Eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral: return e.value;
      case Expr::Kind::kName: return Lookup(e.name);
      case Expr::Kind::kAttr: return GetAttr(Eval(*e.args[0]), e.name, e.line);
      case Expr::Kind::kIndex: return GetItem(Eval(*e.args[0]), Eval(*e.args[1]), e.line);
      case Expr::Kind::kSlice: {
        const auto part = [&](size_t i) { return e.args[i] ? Eval(*e.args[i]) : Value::None(); };
        return Slice(Eval(*e.args[0]), part(1), part(2), part(3), e.line);
      }
      case Expr::Kind::kCall: {
        const Expr& callee = *e.args[0];
        if (callee.kind == Expr::Kind::kAttr) {
          const Value obj = Eval(*callee.args[0]);
          return CallMethod(obj, callee.name, Args(e, 1), e.line);
        }
        const Value f = Eval(callee);
        if (f.IsFunction()) return f.AsFunction()(Args(e, 1), e.line);
        if (f.IsUndefined()) Fail("unknown function '" + f.AsString() + "'", e.line);
        Fail(std::string("a ") + f.TypeName() + " value is not callable", e.line);
      }
      case Expr::Kind::kFilter: return CallFilter(e.name, Eval(*e.args[0]), Args(e, 1), e.line);
      case Expr::Kind::kTest: return Value(CallTest(e.name, Eval(*e.args[0]), Args(e, 1), e.line) != e.negate);
      case Expr::Kind::kUnary: {
        const Value v = Eval(*e.args[0]);
        if (e.name == "not") return Value(!v.Truthy());
        NoUndefined(v, e.line);
        if (!v.IsNumber()) Fail("unary " + e.name + " of a " + v.TypeName(), e.line);
        if (e.name == "+") return v.IsFloat() ? v : Value(v.AsInt());
        if (v.IsFloat()) return Value(-v.AsDouble());
        if (v.AsInt() == INT64_MIN) Fail("integer overflow", e.line);
        return Value(-v.AsInt());
      }
      case Expr::Kind::kBinary: {
        Value a = Eval(*e.args[0]);
        if (e.name == "and") return a.Truthy() ? Eval(*e.args[1]) : a;
        if (e.name == "or") return a.Truthy() ? a : Eval(*e.args[1]);
        const Value b = Eval(*e.args[1]);
        if (e.name == "~") {
          std::string joined = a.Str();
          const std::string right = b.Str();
          CheckStringSize(joined.size() + right.size(), e.line);
          SpendBytes(joined.size() + right.size(), e.line);
          return Value(joined + right);
        }
        return Arith(e.name, a, b, e.line);
      }
      case Expr::Kind::kCompare: {
        Value left = Eval(*e.args[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = Eval(*e.args[i + 1]);
          const std::string& op = e.ops[i];
          bool r;
          if (op == "==") {
            r = left.Equals(right);
          } else if (op == "!=") {
            r = !left.Equals(right);
          } else if (op == "in" || op == "notin") {
            r = Contains(right, left, e.line) == (op == "in");
          } else {
            NoUndefined(left, e.line);
            NoUndefined(right, e.line);
            r = CallTest(op, left, CallArgs{{right}, {}}, e.line);
          }
          if (!r) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::kCond:
        if (Eval(*e.args[1]).Truthy()) return Eval(*e.args[0]);
        return e.args[2] ? Eval(*e.args[2]) : Value::Undefined();
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        std::vector<Value> items;
        for (const auto& x : e.args) items.push_back(Eval(*x));
        return Value::List(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i < e.keys.size(); ++i) {
          const Value k = Eval(*e.keys[i]);
          if (!k.IsString()) Fail(std::string("dict keys must be strings, got ") + k.TypeName(), e.line);
          d.Set(k.AsString(), Eval(*e.args[i]));
        }
        return Value::MakeDict(std::move(d));
      }
    }
    Fail("internal error: unknown expression", e.line);
  }

  Scope globals_, root_;
  Scope* cur_ = nullptr;
  std::string* out_ = nullptr;
  int64_t iterations_ = 0;
  int depth_ = 0;
};

Status ToStatus(const Error& e) {
  return Status::Error(e.line > 0 ? e.message + " at line " + std::to_string(e.line) : e.message);
}

}  // namespace

Expected<Template> Template::Parse(const std::string& source) {
  try {
    Template t;
    t.body_ = std::make_shared<const Body>(jinja::Parse(Lex(source)));
    return t;
  } catch (const Error& e) {
    return ToStatus(e);
  } catch (const std::exception& e) {
    return Status::Error(std::string("cannot parse the template: ") + e.what());
  }
}

Expected<std::string> Template::Render(const Dict& variables) const {
  try {
    ResetIterationBudget();
    return Evaluator(variables).Run(*body_);
  } catch (const Error& e) {
    return ToStatus(e);
  } catch (const std::exception& e) {
    return Status::Error(std::string("cannot render the template: ") + e.what());
  }
}

}  // namespace tlr::jinja
