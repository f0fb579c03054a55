// Jinja values with Python semantics (model layer). See value.h.
#include "model/jinja/value.h"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstdio>

namespace tlr::jinja {

const Value* CallArgs::Kw(const std::string& name) const {
  for (const auto& [k, v] : kw) {
    if (k == name) return &v;
  }
  return nullptr;
}

const Value* Dict::Find(const std::string& key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::Set(const std::string& key, Value v) {
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

Value Value::Undefined(std::string name) {
  Value v;
  v.s_ = std::move(name);
  return v;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value::Value(bool b) : kind_(Kind::kBool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double d) : kind_(Kind::kFloat), d_(d) {}
Value::Value(std::string s) : kind_(Kind::kString), s_(std::move(s)) {}
namespace {
int Deeper(int depth) {
  if (depth + 1 > Value::kMaxNesting) throw Error{"values nested more than 100 deep"};
  return depth + 1;
}
}  // namespace

bool Value::HoldsNamespace() const {
  if (kind_ == Kind::kNamespace) return true;
  if (kind_ == Kind::kList) {
    for (const Value& x : *list_) {
      if (x.HoldsNamespace()) return true;
    }
  } else if (kind_ == Kind::kDict) {
    for (const auto& kv : dict_->items) {
      if (kv.second.HoldsNamespace()) return true;
    }
  }
  return false;
}

Value Value::List(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  for (const Value& x : items) v.depth_ = std::max(v.depth_, Deeper(x.depth_));
  v.list_ = std::make_shared<const std::vector<Value>>(std::move(items));
  return v;
}
Value Value::MakeDict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  for (const auto& kv : d.items) v.depth_ = std::max(v.depth_, Deeper(kv.second.depth_));
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::Namespace(Dict d) {
  Value v = MakeDict(std::move(d));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::Func(std::string name, Function f) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.s_ = std::move(name);
  v.fn_ = std::make_shared<const Function>(std::move(f));
  return v;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return d_ != 0;
    case Kind::kString: return !s_.empty();
    case Kind::kList: return !list_->empty();
    case Kind::kDict: return !dict_->items.empty();
    default: return true;
  }
}

const char* Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kFunction: return "function";
  }
  return "?";
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's layout: positional for exponents in [-4, 16).
  // (The fewest digits that read back as d: what std::to_chars gives, which the browser build's
  // libc++ lacks for doubles.)
  char buf[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*e", digits - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string sci(buf);
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  std::string mant = sci.substr(0, e);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return neg ? "-" + out : out;
}

namespace {
std::string StrRepr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == q) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}
}  // namespace

std::string Value::Str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return b_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return FloatRepr(d_);
    case Kind::kString: return s_;
    case Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < list_->size(); ++i) out += (i ? ", " : "") + (*list_)[i].Repr();
      return out + "]";
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      std::string out = kind_ == Kind::kNamespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        out += (i ? ", " : "") + StrRepr(dict_->items[i].first) + ": " + dict_->items[i].second.Repr();
      }
      return out + (kind_ == Kind::kNamespace ? "}>" : "}");
    }
    case Kind::kFunction: return "<function " + s_ + ">";
  }
  return "";
}

std::string Value::Repr() const { return kind_ == Kind::kString ? StrRepr(s_) : Str(); }

bool Value::Equals(const Value& o) const {
  if (IsNumber() && o.IsNumber()) {
    if (IsFloat() || o.IsFloat()) return AsDouble() == o.AsDouble();
    return AsInt() == o.AsInt();
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return s_ == o.s_;
    case Kind::kList:
      if (list_->size() != o.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i) {
        if (!(*list_)[i].Equals((*o.list_)[i])) return false;
      }
      return true;
    case Kind::kDict: {
      if (dict_->items.size() != o.dict_->items.size()) return false;
      for (const auto& [k, v] : dict_->items) {
        const Value* w = o.dict_->Find(k);
        if (!w || !v.Equals(*w)) return false;
      }
      return true;
    }
    default: return dict_ == o.dict_ && fn_ == o.fn_;
  }
}

namespace {
void JsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          *out += b;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

void JsonValue(const Value& v, int indent, bool sort_keys, int depth, std::string* out) {
  if (depth > 256) throw Error{"tojson: value nested too deeply"};
  const auto newline = [&](int d) {
    if (indent >= 0) *out += "\n" + std::string(static_cast<size_t>(indent) * d, ' ');
  };
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (v.kind()) {
    case Value::Kind::kNone: *out += "null"; return;
    case Value::Kind::kBool: *out += v.AsBool() ? "true" : "false"; return;
    case Value::Kind::kInt: *out += std::to_string(v.AsInt()); return;
    case Value::Kind::kFloat: {
      const double d = v.AsDouble();
      *out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : FloatRepr(d);
      return;
    }
    case Value::Kind::kString: JsonString(v.AsString(), out); return;
    case Value::Kind::kList: {
      const auto& l = v.AsList();
      if (l.empty()) {
        *out += "[]";
        return;
      }
      *out += '[';
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) *out += item_sep;
        newline(depth + 1);
        JsonValue(l[i], indent, sort_keys, depth + 1, out);
      }
      newline(depth);
      *out += ']';
      return;
    }
    case Value::Kind::kDict: {
      auto items = v.AsDict().items;
      if (items.empty()) {
        *out += "{}";
        return;
      }
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      *out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) *out += item_sep;
        newline(depth + 1);
        JsonString(items[i].first, out);
        *out += ": ";
        JsonValue(items[i].second, indent, sort_keys, depth + 1, out);
      }
      newline(depth);
      *out += '}';
      return;
    }
    default: throw Error{std::string("tojson: a ") + v.TypeName() + " value is not JSON serializable"};
  }
}
}  // namespace

std::string ToJson(const Value& v, int indent, bool sort_keys) {
  std::string out;
  JsonValue(v, indent, sort_keys, 0, &out);
  return out;
}

uint32_t NextCodePoint(const std::string& s, size_t* i) {
  const auto c = static_cast<unsigned char>(s[*i]);
  const int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
  if (n <= 0 || *i + static_cast<size_t>(n) >= s.size()) {
    ++*i;  // ASCII, or a byte that starts no complete sequence: one code point of its own
    return c;
  }
  uint32_t cp = c & (0x3f >> n);
  for (int k = 1; k <= n; ++k) {
    const auto cc = static_cast<unsigned char>(s[*i + k]);
    if ((cc & 0xc0) != 0x80) {
      ++*i;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3f);
  }
  *i += n + 1;
  return cp;
}

std::vector<size_t> CodePointStarts(const std::string& s) {
  std::vector<size_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    out.push_back(i);
    NextCodePoint(s, &i);
  }
  return out;
}

bool IsPySpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

}  // namespace tlr::jinja
