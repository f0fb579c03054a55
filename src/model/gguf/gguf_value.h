// GGUF metadata values (model layer): the 13 value types of the GGUF spec, arrays of any of
// them including arrays of strings and nested arrays. Plain value types; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tlr {

// Numbering is the file format's (gguf_metadata_value_type).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
constexpr uint32_t kGgufTypeCount = 13;

std::string_view GgufTypeName(GgufType t);

struct GgufValue;

// An array's elements all have `elem_type`; for nested arrays each element is itself a
// GgufArray (with its own element type).
struct GgufArray {
  GgufType elem_type = GgufType::kUint8;
  std::vector<GgufValue> items;
  bool operator==(const GgufArray&) const;
};

struct GgufValue {
  // Alternative index == GgufType value, so type() is just index().
  using Storage = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float,
                               bool, std::string, GgufArray, uint64_t, int64_t, double>;
  Storage v;

  GgufValue() = default;
  template <typename T>
  explicit GgufValue(T x) : v(std::move(x)) {}
  explicit GgufValue(const char* s) : v(std::string(s)) {}  // not bool
  GgufType type() const { return static_cast<GgufType>(v.index()); }
  bool operator==(const GgufValue& o) const { return v == o.v; }

  // Convenience constructors for the common kinds.
  static GgufValue Str(std::string s) { return GgufValue(std::move(s)); }
  static GgufValue U32(uint32_t x) { return GgufValue(x); }
  static GgufValue F32(float x) { return GgufValue(x); }
  static GgufValue StrArray(const std::vector<std::string>& xs);
  static GgufValue F32Array(const std::vector<float>& xs);
  static GgufValue I32Array(const std::vector<int32_t>& xs);

  // Short human-readable rendering; arrays show at most `max_items` elements.
  std::string ToString(size_t max_items = 8) const;
};

inline bool GgufArray::operator==(const GgufArray& o) const {
  return elem_type == o.elem_type && items == o.items;
}

}  // namespace tlr
