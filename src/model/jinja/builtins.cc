// Filters, tests, methods and globals of the Jinja interpreter (model layer). See builtins.h.
#include "model/jinja/builtins.h"

#include <algorithm>
#include <cmath>

#include "util/unicode.h"

namespace tlr::jinja {

[[noreturn]] void Fail(const std::string& msg, int line) { throw Error{msg, line}; }

void NoUndefined(const Value& v, int line) {
  if (v.IsUndefined()) Fail("'" + (v.AsString().empty() ? std::string("value") : v.AsString()) + "' is undefined", line);
}

namespace {

const Value& Arg(const CallArgs& a, size_t i, const char* name, const Value& fallback) {
  if (i < a.pos.size()) return a.pos[i];
  const Value* k = a.Kw(name);
  return k ? *k : fallback;
}

void MaxArgs(const CallArgs& a, size_t n, const std::string& what, int line) {
  if (a.pos.size() > n) Fail(what + " takes at most " + std::to_string(n) + " argument(s)", line);
}

const std::string& StrArg(const CallArgs& a, size_t i, const char* name, const std::string& what, int line) {
  static const Value kNone = Value::None();
  const Value& v = Arg(a, i, name, kNone);
  if (!v.IsString()) Fail(what + ": argument '" + name + "' must be a string, got " + v.TypeName(), line);
  return v.AsString();
}

std::vector<uint32_t> CodePoints(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) out.push_back(NextCodePoint(s, &i));
  return out;
}

// Python str.strip / lstrip / rstrip; chars none: whitespace.
std::string PyStrip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::vector<size_t> starts = CodePointStarts(s);
  const std::vector<uint32_t> set = chars.IsString() ? CodePoints(chars.AsString()) : std::vector<uint32_t>{};
  auto strip = [&](size_t k) {
    size_t i = starts[k];
    const uint32_t cp = NextCodePoint(s, &i);
    return chars.IsString() ? std::find(set.begin(), set.end(), cp) != set.end() : IsPySpace(cp);
  };
  size_t b = 0, e = starts.size();
  while (left && b < e && strip(b)) ++b;
  while (right && e > b && strip(e - 1)) --e;
  const size_t from = b < starts.size() ? starts[b] : s.size();
  const size_t to = e < starts.size() ? starts[e] : s.size();
  return s.substr(from, to - from);
}

Value PySplit(const std::string& s, const Value& sep, int64_t maxsplit, int line) {
  std::vector<Value> out;
  if (sep.IsNone() || sep.IsUndefined()) {
    size_t i = 0;
    const auto space_at = [&](size_t p, size_t* next) {
      size_t q = p;
      const bool sp = IsPySpace(NextCodePoint(s, &q));
      *next = q;
      return sp;
    };
    while (i < s.size()) {
      size_t next;
      while (i < s.size() && space_at(i, &next)) i = next;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.emplace_back(PyStrip(s.substr(i), Value::None(), false, true));
        break;
      }
      const size_t b = i;
      while (i < s.size() && !space_at(i, &next)) i = next;
      out.emplace_back(s.substr(b, i - b));
    }
    return Value::List(std::move(out));
  }
  if (!sep.IsString()) Fail(std::string("split: separator must be a string, got ") + sep.TypeName(), line);
  const std::string& d = sep.AsString();
  if (d.empty()) Fail("split: empty separator", line);
  size_t b = 0;
  while (true) {
    const size_t p = (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) ? std::string::npos : s.find(d, b);
    if (p == std::string::npos) {
      out.emplace_back(s.substr(b));
      break;
    }
    out.emplace_back(s.substr(b, p - b));
    b = p + d.size();
  }
  return Value::List(std::move(out));
}

std::string PyReplace(const std::string& s, const std::string& from, const std::string& to, int64_t count,
                      int line) {
  // At most one insertion per character boundary (from empty) or per match.
  const size_t most = from.empty() ? s.size() + 1 : s.size() / from.size();
  const size_t inserts = count < 0 ? most : std::min(most, static_cast<size_t>(count));
  if (to.size() > from.size()) CheckStringSize(s.size() + inserts * (to.size() - from.size()), line);
  SpendBytes(s.size() + (to.size() > from.size() ? inserts * (to.size() - from.size()) : 0), line);
  std::string out;
  if (from.empty()) {
    const std::vector<size_t> starts = CodePointStarts(s);
    int64_t n = 0;
    for (size_t k = 0; k <= starts.size(); ++k) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (k < starts.size()) out += s.substr(starts[k], (k + 1 < starts.size() ? starts[k + 1] : s.size()) - starts[k]);
    }
    return out;
  }
  size_t b = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t p = s.find(from, b);
    if (p == std::string::npos) break;
    out += s.substr(b, p - b) + to;
    b = p + from.size();
  }
  return out + s.substr(b);
}

std::string CaseMap(const std::string& s, bool upper) {
  return upper ? unicode::ToUpperUtf8(s) : unicode::ToLowerUtf8(s);
}

// Python str.title / str.capitalize (cased letters approximated by the full case mappings).
std::string Title(const std::string& s, bool only_first) {
  std::string out;
  bool prev_cased = false;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    const size_t b = i;
    NextCodePoint(s, &i);
    const std::string ch = s.substr(b, i - b);
    const std::string up = CaseMap(ch, true), low = CaseMap(ch, false);
    const bool cased = up != low || up != ch;
    if (only_first) {
      out += first ? up : low;
    } else {
      out += cased ? (prev_cased ? low : up) : ch;
    }
    prev_cased = cased;
    first = false;
  }
  return out;
}

// Jinja's title filter (not str.title): each run between separators [-\s({\[<]+ gets its
// first character upper-cased and the rest lower-cased.
std::string JinjaTitle(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < s.size();) {
    const size_t b = i;
    const uint32_t cp = NextCodePoint(s, &i);
    const std::string ch = s.substr(b, i - b);
    const bool sep = IsPySpace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    out += sep ? ch : CaseMap(ch, word_start);
    word_start = sep;
  }
  return out;
}

int64_t ToInt(const Value& v, const std::string& what, int line) {
  if (!v.IsInt() && !v.IsBool()) Fail(what + " must be an integer, got " + v.TypeName(), line);
  return v.AsInt();
}

int Compare(const Value& a, const Value& b, int line) {
  if (a.IsNumber() && b.IsNumber()) return a.AsDouble() < b.AsDouble() ? -1 : a.AsDouble() > b.AsDouble() ? 1 : 0;
  if (a.IsString() && b.IsString()) return a.AsString().compare(b.AsString()) < 0 ? -1 : a.AsString() == b.AsString() ? 0 : 1;
  Fail(std::string("cannot compare ") + a.TypeName() + " with " + b.TypeName(), line);
}

Value SortKey(const Value& v, const Value& attribute, bool case_sensitive, int line) {
  Value k = attribute.IsString() ? GetAttr(v, attribute.AsString(), line) : v;
  if (!case_sensitive && k.IsString()) return Value(CaseMap(k.AsString(), false));
  return k;
}

}  // namespace

Value GetAttr(const Value& obj, const std::string& name, int line) {
  if (obj.IsUndefined()) {
    Fail("cannot read attribute '" + name + "' of undefined value" +
             (obj.AsString().empty() ? std::string() : " '" + obj.AsString() + "'"),
         line);
  }
  if (obj.IsMapping()) {
    if (const Value* v = obj.AsDict().Find(name)) return *v;
  }
  return Value::Undefined(name);
}

Value GetItem(const Value& obj, const Value& key, int line) {
  if (obj.IsUndefined()) {
    Fail("cannot index undefined value" + (obj.AsString().empty() ? std::string() : " '" + obj.AsString() + "'"), line);
  }
  if (obj.IsMapping() && key.IsString()) return GetAttr(obj, key.AsString(), line);
  if ((obj.IsList() || obj.IsString()) && (key.IsInt() || key.IsBool())) {
    int64_t i = key.AsInt();
    if (obj.IsList()) {
      const int64_t n = static_cast<int64_t>(obj.AsList().size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? obj.AsList()[i] : Value::Undefined();
    }
    const std::vector<size_t> starts = CodePointStarts(obj.AsString());
    const int64_t n = static_cast<int64_t>(starts.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::Undefined();
    const size_t e = i + 1 < n ? starts[i + 1] : obj.AsString().size();
    return Value(obj.AsString().substr(starts[i], e - starts[i]));
  }
  return Value::Undefined(key.IsString() ? key.AsString() : "");
}

Value Slice(const Value& obj, const Value& start, const Value& stop, const Value& step, int line) {
  NoUndefined(obj, line);
  if (!obj.IsList() && !obj.IsString()) Fail(std::string("cannot slice a ") + obj.TypeName(), line);
  const std::vector<size_t> starts = obj.IsString() ? CodePointStarts(obj.AsString()) : std::vector<size_t>{};
  const int64_t n = obj.IsList() ? static_cast<int64_t>(obj.AsList().size()) : static_cast<int64_t>(starts.size());
  const auto given = [](const Value& v) { return !v.IsNone() && !v.IsUndefined(); };
  const int64_t st = given(step) ? ToInt(step, "slice step", line) : 1;
  if (st == 0) Fail("slice step cannot be zero", line);
  auto bound = [&](const Value& v, int64_t dflt) {
    if (!given(v)) return dflt;
    int64_t i = ToInt(v, "slice index", line);
    if (i < 0) i += n;
    return st > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = bound(start, st > 0 ? 0 : n - 1), e = bound(stop, st > 0 ? n : -1);
  std::vector<Value> items;
  std::string text;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.IsList()) {
      items.push_back(obj.AsList()[i]);
    } else {
      const size_t end = i + 1 < n ? starts[i + 1] : obj.AsString().size();
      text += obj.AsString().substr(starts[i], end - starts[i]);
    }
  }
  if (obj.IsList()) SpendItems(items.size(), line);
  return obj.IsList() ? Value::List(std::move(items)) : Value(std::move(text));
}

namespace {
// Items left to iterate in the render running on this thread (see ResetIterationBudget).
thread_local int64_t g_items_left = kMaxIteratedItems;
thread_local int64_t g_bytes_left = kMaxBuiltBytes;
void Spend(size_t items, int line) {
  g_items_left -= static_cast<int64_t>(items);
  if (g_items_left < 0) {
    Fail("the template iterated over more than " + std::to_string(kMaxIteratedItems) + " items", line);
  }
}
}  // namespace

void ResetIterationBudget() {
  g_items_left = kMaxIteratedItems;
  g_bytes_left = kMaxBuiltBytes;
}

void CheckStringSize(size_t bytes, int line) {
  if (bytes > kMaxStringBytes) Fail("a string longer than 16 MiB", line);
}
void SpendBytes(size_t bytes, int line) {
  g_bytes_left -= static_cast<int64_t>(bytes);
  if (g_bytes_left < 0) Fail("the template built more than 64 MiB of strings", line);
}
void SpendItems(size_t items, int line) {
  g_items_left -= static_cast<int64_t>(items);
  if (g_items_left < 0) {
    Fail("the template iterated over or built more than " + std::to_string(kMaxIteratedItems) + " list items", line);
  }
}
void CheckListSize(size_t items, int line) {
  if (items > kMaxListItems) Fail("a list longer than " + std::to_string(kMaxListItems) + " items", line);
}

std::vector<Value> Iterate(const Value& v, int line) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: Spend(v.AsList().size(), line); return v.AsList();
    case Value::Kind::kDict: {
      Spend(v.AsDict().items.size(), line);
      std::vector<Value> keys;
      for (const auto& kv : v.AsDict().items) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.AsString();
      Spend(s.size(), line);  // bytes: at least the characters, known before any is made
      for (size_t i = 0; i < s.size();) {
        const size_t b = i;
        NextCodePoint(s, &i);
        chars.emplace_back(s.substr(b, i - b));
      }
      return chars;
    }
    default: Fail(std::string("a ") + v.TypeName() + " value is not iterable", line);
  }
}

bool Contains(const Value& container, const Value& item, int line) {
  if (container.IsString()) {
    if (!item.IsString()) Fail(std::string("'in <string>' needs a string on the left, got ") + item.TypeName(), line);
    return container.AsString().find(item.AsString()) != std::string::npos;
  }
  if (container.IsMapping()) return item.IsString() && container.AsDict().Find(item.AsString()) != nullptr;
  for (const Value& v : Iterate(container, line)) {
    if (v.Equals(item)) return true;
  }
  return false;
}

bool CallTest(const std::string& name, const Value& v, const CallArgs& a, int line) {
  static const Value kNone = Value::None();
  const Value& arg = Arg(a, 0, "value", kNone);
  if (name == "defined") return !v.IsUndefined();
  if (name == "undefined") return v.IsUndefined();
  if (name == "none") return v.IsNone();
  if (name == "boolean") return v.IsBool();
  if (name == "true") return v.IsBool() && v.AsBool();
  if (name == "false") return v.IsBool() && !v.AsBool();
  if (name == "integer") return v.IsInt();
  if (name == "float") return v.IsFloat();
  if (name == "number") return v.IsNumber();
  if (name == "string") return v.IsString();
  if (name == "mapping") return v.kind() == Value::Kind::kDict;
  if (name == "iterable") return v.IsUndefined() || v.IsString() || v.IsList() || v.kind() == Value::Kind::kDict;
  if (name == "sequence") return v.IsUndefined() || v.IsString() || v.IsList() || v.kind() == Value::Kind::kDict;
  if (name == "callable") return v.IsFunction();
  if (name == "even" || name == "odd") return (ToInt(v, "'" + name + "' test input", line) % 2 != 0) == (name == "odd");
  if (name == "divisibleby") {
    const int64_t d = ToInt(arg, "divisibleby argument", line);
    if (d == 0) Fail("divisibleby 0", line);
    return ToInt(v, "divisibleby input", line) % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return v.Equals(arg);
  if (name == "ne" || name == "!=") return !v.Equals(arg);
  if (name == "lt" || name == "lessthan" || name == "<") return Compare(v, arg, line) < 0;
  if (name == "le" || name == "<=") return Compare(v, arg, line) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return Compare(v, arg, line) > 0;
  if (name == "ge" || name == ">=") return Compare(v, arg, line) >= 0;
  if (name == "in") return Contains(arg, v, line);
  if (name == "sameas") return v.kind() == arg.kind() && (v.IsNone() || v.IsUndefined() || v.Equals(arg));
  if (name == "lower" || name == "upper") return v.IsString() && CaseMap(v.AsString(), name == "upper") == v.AsString();
  Fail("unsupported test '" + name + "'", line);
}

Value CallFilter(const std::string& name, const Value& v, const CallArgs& a, int line) {
  static const Value kNone = Value::None();
  static const Value kFalse = Value(false);
  const std::string what = "filter '" + name + "'";
  if (name == "safe") return v;
  if (name == "default" || name == "d") {
    static const Value kEmpty = Value(std::string());
    const bool boolean = Arg(a, 1, "boolean", kFalse).Truthy();
    return v.IsUndefined() || (boolean && !v.Truthy()) ? Arg(a, 0, "default_value", kEmpty) : v;
  }
  if (name == "length" || name == "count") {
    if (v.IsString()) return Value(static_cast<int64_t>(CodePointStarts(v.AsString()).size()));
    if (v.IsList()) return Value(static_cast<int64_t>(v.AsList().size()));
    if (v.IsMapping()) return Value(static_cast<int64_t>(v.AsDict().items.size()));
    if (v.IsUndefined()) return Value(int64_t{0});
    Fail(std::string("filter 'length' of a ") + v.TypeName(), line);
  }
  if (name == "string") return Value(v.Str());
  if (name == "trim") return Value(PyStrip(v.Str(), Arg(a, 0, "chars", kNone), true, true));
  if (name == "lower" || name == "upper") return Value(CaseMap(v.Str(), name == "upper"));
  if (name == "capitalize") return Value(Title(v.Str(), true));
  if (name == "title") return Value(JinjaTitle(v.Str()));
  if (name == "tojson") {
    const Value& indent = Arg(a, 0, "indent", kNone);
    const int ind = indent.IsNone() ? -1 : static_cast<int>(std::clamp<int64_t>(ToInt(indent, "tojson indent", line), 0, 64));
    try {
      return Value(ToJson(v, ind, Arg(a, 1, "sort_keys", kFalse).Truthy()));
    } catch (Error& e) {
      e.line = line;
      throw;
    }
  }
  if (name == "items") {
    if (v.IsUndefined()) return Value::List({});
    if (!v.IsMapping()) Fail(std::string("filter 'items' of a ") + v.TypeName(), line);
    std::vector<Value> out;
    for (const auto& [k, x] : v.AsDict().items) out.push_back(Value::List({Value(k), x}));
    return Value::List(std::move(out));
  }
  if (name == "list") return Value::List(Iterate(v, line));
  if (name == "first" || name == "last") {
    NoUndefined(v, line);
    const std::vector<Value> items = Iterate(v, line);
    if (items.empty()) return Value::Undefined();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    if (v.IsString()) return Slice(v, kNone, kNone, Value(int64_t{-1}), line);
    std::vector<Value> items = Iterate(v, line);
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "join") {
    static const Value kEmpty = Value(std::string());
    const Value& sep = Arg(a, 0, "d", kEmpty);
    const Value& attr = Arg(a, 1, "attribute", kNone);
    std::string out;
    bool first = true;
    for (const Value& x : Iterate(v, line)) {
      if (!first) out += sep.Str();
      first = false;
      out += (attr.IsString() ? GetAttr(x, attr.AsString(), line) : x).Str();
      CheckStringSize(out.size(), line);
    }
    SpendBytes(out.size(), line);
    return Value(std::move(out));
  }
  if (name == "replace") {
    MaxArgs(a, 3, what, line);
    static const Value kAll = Value(int64_t{-1});
    return Value(PyReplace(v.Str(), StrArg(a, 0, "old", what, line), StrArg(a, 1, "new", what, line),
                           ToInt(Arg(a, 2, "count", kAll), "replace count", line), line));
  }
  if (name == "int") {
    static const Value kZero = Value(int64_t{0});
    if (v.IsBool() || v.IsInt()) return Value(v.AsInt());
    if (v.IsFloat() && std::isfinite(v.AsDouble())) return Value(static_cast<int64_t>(v.AsDouble()));
    if (v.IsString()) {
      const std::string t = PyStrip(v.AsString(), kNone, true, true);
      char* end = nullptr;
      const long long i = std::strtoll(t.c_str(), &end, 10);
      if (!t.empty() && end == t.c_str() + t.size()) return Value(static_cast<int64_t>(i));
    }
    return Arg(a, 0, "default", kZero);
  }
  if (name == "float") {
    if (v.IsNumber()) return Value(v.AsDouble());
    if (v.IsString()) {
      const std::string t = PyStrip(v.AsString(), kNone, true, true);
      char* end = nullptr;
      const double d = std::strtod(t.c_str(), &end);
      if (!t.empty() && end == t.c_str() + t.size()) return Value(d);
    }
    static const Value kZero = Value(0.0);
    return Arg(a, 0, "default", kZero);
  }
  if (name == "abs") {
    if (v.IsFloat()) return Value(std::fabs(v.AsDouble()));
    const int64_t i = ToInt(v, "filter 'abs' input", line);
    return Value(i < 0 ? -i : i);
  }
  if (name == "indent") {
    static const Value kFour = Value(int64_t{4});
    const Value& width = Arg(a, 0, "width", kFour);
    const std::string pad = width.IsString() ? width.AsString() : std::string(ToInt(width, "indent width", line), ' ');
    const bool first = Arg(a, 1, "first", kFalse).Truthy(), blank = Arg(a, 2, "blank", kFalse).Truthy();
    const std::vector<Value> lines = PySplit(v.Str(), Value("\n"), -1, line).AsList();
    std::string out;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string& l = lines[i].AsString();
      if (i) out += "\n";
      if ((i > 0 || first) && (blank || !l.empty())) out += pad;
      out += l;
    }
    return Value(std::move(out));
  }
  if (name == "map") {
    const Value* attr = a.Kw("attribute");
    std::vector<Value> out;
    for (const Value& x : Iterate(v, line)) {
      if (attr) {
        Value r = GetAttr(x, attr->Str(), line);
        const Value* dflt = a.Kw("default");
        out.push_back(r.IsUndefined() && dflt ? *dflt : r);
      } else {
        if (a.pos.empty() || !a.pos[0].IsString()) Fail("filter 'map' needs a filter name or attribute=", line);
        CallArgs rest{std::vector<Value>(a.pos.begin() + 1, a.pos.end()), a.kw};
        out.push_back(CallFilter(a.pos[0].AsString(), x, rest, line));
      }
    }
    return Value::List(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name.size() > 6, keep = name[0] == 's';
    size_t k = 0;
    std::string attr;
    if (by_attr) attr = StrArg(a, k++, "attribute", what, line);
    std::string test;
    if (k < a.pos.size()) test = StrArg(a, k++, "test", what, line);
    CallArgs rest{std::vector<Value>(a.pos.begin() + std::min(k, a.pos.size()), a.pos.end()), {}};
    std::vector<Value> out;
    for (const Value& x : Iterate(v, line)) {
      const Value subject = by_attr ? GetAttr(x, attr, line) : x;
      const bool pass = test.empty() ? subject.Truthy() : CallTest(test, subject, rest, line);
      if (pass == keep) out.push_back(x);
    }
    return Value::List(std::move(out));
  }
  if (name == "unique" || name == "sort") {
    const bool cs = Arg(a, name == "sort" ? 1 : 0, "case_sensitive", kFalse).Truthy();
    const Value& attr = Arg(a, name == "sort" ? 2 : 1, "attribute", kNone);
    std::vector<Value> items = Iterate(v, line), out;
    if (name == "unique") {
      std::vector<Value> seen;
      for (const Value& x : items) {
        const Value key = SortKey(x, attr, cs, line);
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return s.Equals(key); })) {
          seen.push_back(key);
          out.push_back(x);
        }
      }
      return Value::List(std::move(out));
    }
    const bool rev = Arg(a, 0, "reverse", kFalse).Truthy();
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      const int c = Compare(SortKey(x, attr, cs, line), SortKey(y, attr, cs, line), line);
      return rev ? c > 0 : c < 0;
    });
    return Value::List(std::move(items));
  }
  Fail("unsupported filter '" + name + "'", line);
}

Value CallMethod(const Value& obj, const std::string& name, const CallArgs& a, int line) {
  static const Value kNone = Value::None();
  static const Value kAll = Value(int64_t{-1});
  const std::string what = "method '" + name + "'";
  if (obj.IsString()) {
    const std::string& s = obj.AsString();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      MaxArgs(a, 1, what, line);
      return Value(PyStrip(s, Arg(a, 0, "chars", kNone), name[0] != 'r', name[0] != 'l'));
    }
    if (name == "split") {
      MaxArgs(a, 2, what, line);
      return PySplit(s, Arg(a, 0, "sep", kNone), ToInt(Arg(a, 1, "maxsplit", kAll), "split maxsplit", line), line);
    }
    if (name == "startswith" || name == "endswith") {
      MaxArgs(a, 1, what, line);
      const Value& p = Arg(a, 0, "prefix", kNone);
      std::vector<Value> options = p.IsList() ? p.AsList() : std::vector<Value>{p};
      for (const Value& o : options) {
        if (!o.IsString()) Fail(what + " needs a string, got " + o.TypeName(), line);
        const std::string& x = o.AsString();
        if (x.size() <= s.size() &&
            s.compare(name[0] == 's' ? 0 : s.size() - x.size(), x.size(), x) == 0) {
          return Value(true);
        }
      }
      return Value(false);
    }
    if (name == "upper" || name == "lower") return Value(CaseMap(s, name == "upper"));
    if (name == "title" || name == "capitalize") return Value(Title(s, name == "capitalize"));
    if (name == "replace") {
      MaxArgs(a, 3, what, line);
      return Value(PyReplace(s, StrArg(a, 0, "old", what, line), StrArg(a, 1, "new", what, line),
                             ToInt(Arg(a, 2, "count", kAll), "replace count", line), line));
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const Value& x : Iterate(Arg(a, 0, "iterable", kNone), line)) {
        if (!x.IsString()) Fail("join: items must be strings, got " + std::string(x.TypeName()), line);
        out += (first ? "" : s) + x.AsString();
        first = false;
        CheckStringSize(out.size(), line);
      }
      SpendBytes(out.size(), line);
      return Value(std::move(out));
    }
    if (name == "find" || name == "count") {
      const std::string& sub = StrArg(a, 0, "sub", what, line);
      if (name == "find") {
        const size_t p = s.find(sub);
        if (p == std::string::npos) return Value(int64_t{-1});
        return Value(static_cast<int64_t>(CodePointStarts(s.substr(0, p)).size()));
      }
      if (sub.empty()) return Value(static_cast<int64_t>(CodePointStarts(s).size() + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
  } else if (obj.IsMapping()) {
    const Dict& d = obj.AsDict();
    if (const Value* f = d.Find(name); f && f->IsFunction()) return f->AsFunction()(a, line);
    if (obj.kind() == Value::Kind::kDict) {
      if (name == "items" || name == "keys" || name == "values") {
        std::vector<Value> out;
        for (const auto& [k, x] : d.items) {
          out.push_back(name == "items" ? Value::List({Value(k), x}) : name == "keys" ? Value(k) : x);
        }
        return Value::List(std::move(out));
      }
      if (name == "get") {
        const Value& key = Arg(a, 0, "key", kNone);
        const Value* found = key.IsString() ? d.Find(key.AsString()) : nullptr;
        return found ? *found : Arg(a, 1, "default", kNone);
      }
    }
  } else if (obj.IsUndefined()) {
    NoUndefined(obj, line);
  }
  Fail("unsupported method '" + name + "' on a " + obj.TypeName() + " value", line);
}

Dict DefaultGlobals() {
  Dict g;
  g.Set("range", Value::Func("range", [](const CallArgs& a, int line) {
          if (a.pos.empty() || a.pos.size() > 3) Fail("range() takes 1 to 3 arguments", line);
          int64_t b = 0, e, st = 1;
          if (a.pos.size() == 1) {
            e = ToInt(a.pos[0], "range() argument", line);
          } else {
            b = ToInt(a.pos[0], "range() argument", line);
            e = ToInt(a.pos[1], "range() argument", line);
            if (a.pos.size() == 3) st = ToInt(a.pos[2], "range() step", line);
          }
          if (st == 0) Fail("range() step cannot be zero", line);
          std::vector<Value> out;
          for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
            if (out.size() >= 100000) Fail("range() longer than 100000 items", line);
            out.emplace_back(i);
          }
          return Value::List(std::move(out));
        }));
  const auto make_dict = [](bool ns) {
    return [ns](const CallArgs& a, int line) {
      Dict d;
      if (a.pos.size() > 1) Fail("namespace() / dict() take at most one positional argument", line);
      if (!a.pos.empty()) {
        if (!a.pos[0].IsMapping()) Fail("namespace() / dict() need a mapping", line);
        d = a.pos[0].AsDict();
      }
      for (const auto& [k, v] : a.kw) d.Set(k, v);
      if (ns) {
        for (const auto& kv : d.items) {
          if (kv.second.HoldsNamespace()) Fail("a namespace attribute cannot hold a namespace", line);
        }
      }
      return ns ? Value::Namespace(std::move(d)) : Value::MakeDict(std::move(d));
    };
  };
  g.Set("namespace", Value::Func("namespace", make_dict(true)));
  g.Set("dict", Value::Func("dict", make_dict(false)));
  g.Set("raise_exception", Value::Func("raise_exception", [](const CallArgs& a, int line) -> Value {
          Fail("the template raised an error: " + (a.pos.empty() ? std::string() : a.pos[0].Str()), line);
        }));
  return g;
}

}  // namespace tlr::jinja
