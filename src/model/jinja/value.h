// Values of the Jinja interpreter that renders chat templates (model layer, see template.h).
//
// A Value is what a Jinja expression evaluates to, with Python's semantics because that is
// what Hugging Face's apply_chat_template runs: undefined, none, bool, int, float, string,
// list, dict (insertion-ordered, string keys), namespace (a dict whose attributes `set` may
// assign) and callables (macros, namespace(), raise_exception...). Lists and dicts are shared
// and never mutated once built (the sandbox Hugging Face uses forbids it too), except a
// namespace's attributes. Not thread-safe to mutate; a Value tree built for one render is used
// by that render only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tlr::jinja {

class Value;

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  const Value* Kw(const std::string& name) const;
};

// Errors inside the interpreter travel as this exception and leave it as a Status at the
// Template API (template.h); nothing throws across that API.
struct Error {
  std::string message;
  int line = 0;  // 1-based template line, 0 when not known yet
};

using Function = std::function<Value(const CallArgs&, int line)>;

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* Find(const std::string& key) const;
  void Set(const std::string& key, Value v);
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() = default;  // undefined
  static Value Undefined(std::string name = "");
  static Value None();
  Value(bool b);                 // NOLINT: implicit like Python literals
  Value(int64_t i);              // NOLINT
  Value(int i) : Value(static_cast<int64_t>(i)) {}  // NOLINT
  Value(double d);               // NOLINT
  Value(std::string s);          // NOLINT
  Value(const char* s) : Value(std::string(s)) {}  // NOLINT
  static Value List(std::vector<Value> items);
  static Value MakeDict(Dict d);
  static Value Namespace(Dict d);
  static Value Func(std::string name, Function f);

  Kind kind() const { return kind_; }
  bool IsUndefined() const { return kind_ == Kind::kUndefined; }
  bool IsNone() const { return kind_ == Kind::kNone; }
  bool IsBool() const { return kind_ == Kind::kBool; }
  bool IsInt() const { return kind_ == Kind::kInt; }
  bool IsFloat() const { return kind_ == Kind::kFloat; }
  bool IsNumber() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool IsString() const { return kind_ == Kind::kString; }
  bool IsList() const { return kind_ == Kind::kList; }
  bool IsMapping() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }
  bool IsFunction() const { return kind_ == Kind::kFunction; }

  bool AsBool() const { return b_; }
  int64_t AsInt() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  double AsDouble() const { return kind_ == Kind::kFloat ? d_ : static_cast<double>(AsInt()); }
  const std::string& AsString() const { return s_; }   // string text; undefined: its name
  const std::vector<Value>& AsList() const { return *list_; }
  const Dict& AsDict() const { return *dict_; }
  Dict& MutableNamespace() { return *dict_; }
  const Function& AsFunction() const { return *fn_; }
  // Nesting depth of lists and dicts (a scalar is 0). Building a value deeper than
  // kMaxNesting throws Error, so printing, comparing and freeing values never recurse far.
  int depth() const { return depth_; }
  static constexpr int kMaxNesting = 100;
  // Whether a namespace is inside (namespaces may not hold one: no reference cycles).
  bool HoldsNamespace() const;

  // Python's bool(x) (undefined is false).
  bool Truthy() const;
  // Python's str(x), which is also what {{ x }} prints (undefined prints nothing).
  std::string Str() const;
  // Python's repr(x) (how str() shows strings inside lists and dicts).
  std::string Repr() const;
  // Python's ==.
  bool Equals(const Value& other) const;
  // A name for messages: "string", "list", "dict", ...
  const char* TypeName() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int depth_ = 0;
  int64_t i_ = 0;
  double d_ = 0;
  std::string s_;
  std::shared_ptr<const std::vector<Value>> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<const Function> fn_;
};

// Python's json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort_keys) as Hugging
// Face's tojson filter calls it; indent < 0 means None. Throws Error on values JSON lacks.
std::string ToJson(const Value& v, int indent, bool sort_keys);
// Python's repr of a float ("1.0", "0.1", "1e+16").
std::string FloatRepr(double d);

// UTF-8 helpers with Python's code-point semantics.
std::vector<size_t> CodePointStarts(const std::string& s);  // byte offset of each code point
bool IsPySpace(uint32_t cp);                                // str.isspace()
// Decodes the code point at s[i] (invalid bytes decode as themselves) and advances i.
uint32_t NextCodePoint(const std::string& s, size_t* i);

}  // namespace tlr::jinja
