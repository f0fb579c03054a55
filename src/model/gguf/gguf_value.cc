// GGUF metadata values: names and rendering (model layer).
#include "model/gguf/gguf_value.h"

#include <cstdio>

#include "util/utf8.h"

namespace tlr {

std::string_view GgufTypeName(GgufType t) {
  static constexpr std::string_view kNames[kGgufTypeCount] = {
      "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < kGgufTypeCount ? kNames[i] : std::string_view("?");
}

GgufValue GgufValue::StrArray(const std::vector<std::string>& xs) {
  GgufArray a{GgufType::kString, {}};
  a.items.reserve(xs.size());
  for (const auto& x : xs) a.items.emplace_back(x);
  return GgufValue(std::move(a));
}

GgufValue GgufValue::F32Array(const std::vector<float>& xs) {
  GgufArray a{GgufType::kFloat32, {}};
  a.items.reserve(xs.size());
  for (float x : xs) a.items.emplace_back(x);
  return GgufValue(std::move(a));
}

GgufValue GgufValue::I32Array(const std::vector<int32_t>& xs) {
  GgufArray a{GgufType::kInt32, {}};
  a.items.reserve(xs.size());
  for (int32_t x : xs) a.items.emplace_back(x);
  return GgufValue(std::move(a));
}

namespace {
std::string Quote(const std::string& s) {
  // Printable, one line, valid UTF-8: escape control bytes and quotes.
  std::string out = "\"";
  for (char c : SanitizeUtf8(s)) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}
}  // namespace

std::string GgufValue::ToString(size_t max_items) const {
  return std::visit(
      [&](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          return Quote(x);
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          std::string out = "[";
          for (size_t i = 0; i < x.items.size() && i < max_items; ++i) {
            if (i) out += ", ";
            out += x.items[i].ToString(max_items);
          }
          if (x.items.size() > max_items) {
            out += ", ... (" + std::to_string(x.items.size()) + " " +
                   std::string(GgufTypeName(x.elem_type)) + " items)";
          }
          return out + "]";
        } else if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_floating_point_v<T>) {
          char buf[64];
          std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(x));
          return buf;
        } else {
          return std::to_string(x);
        }
      },
      v);
}

}  // namespace tlr
