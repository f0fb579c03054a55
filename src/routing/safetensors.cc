// safetensors reading and writing (see safetensors.h).
#include "routing/safetensors.h"

#include <algorithm>
#include <cstring>
#include <tuple>
#include <nlohmann/json.hpp>

#include "quant/blocks.h"
#include "util/mapped_file.h"

namespace tlr {

using nlohmann::json;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // as the reference implementation caps it
constexpr uint64_t kMaxElements = 1ull << 40;       // per tensor

}  // namespace

int64_t SafeTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int SafeTensorDtypeSize(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL") return 1;
  return 0;
}

Expected<SafeTensorsFile> ReadSafeTensors(const std::string& path) {
  TLR_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  return ParseSafeTensors(bytes, path);
}

Expected<SafeTensorsFile> ParseSafeTensors(std::string_view bytes, const std::string& name) {
  const std::string where = name.empty() ? "" : name + ": ";
  if (bytes.size() < 8) return Status::Error(where + "too short for a safetensors file");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  if (n > kMaxHeaderBytes || n > bytes.size() - 8) {
    return Status::Error(where + "the header length " + std::to_string(n) + " does not fit the file (" +
                         std::to_string(bytes.size()) + " bytes): not a safetensors file, or a truncated one");
  }
  const json header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n), nullptr, false);
  if (header.is_discarded() || !header.is_object()) return Status::Error(where + "the header is not a JSON object");
  const uint64_t data_start = 8 + n, data_len = bytes.size() - data_start;
  SafeTensorsFile f;
  struct Range {
    uint64_t begin, end;
    SafeTensor* tensor;  // a std::map's elements stay where they are
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return Status::Error(where + "'__metadata__' is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) return Status::Error(where + "metadata '" + m.key() + "' is not a string");
        f.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string t = "tensor '" + it.key() + "'";
    const json& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
        !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
        e["data_offsets"].size() != 2) {
      return Status::Error(where + t + " needs dtype, shape and data_offsets [begin, end]");
    }
    SafeTensor st;
    st.dtype = e["dtype"].get<std::string>();
    const int size = SafeTensorDtypeSize(st.dtype);
    if (size == 0) return Status::Error(where + t + " has an unknown dtype '" + st.dtype + "'");
    uint64_t count = 1;
    for (const json& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > kMaxElements) {
        return Status::Error(where + t + " has a shape entry that is not a size");
      }
      const uint64_t size_d = d.get<uint64_t>();
      st.shape.push_back(static_cast<int64_t>(size_d));
      // Checked before multiplying: two entries of 2^40 would wrap around to 0 elements.
      if (size_d != 0 && count > kMaxElements / size_d) return Status::Error(where + t + " is too large");
      count *= size_d;
    }
    const json& off = e["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) {
      return Status::Error(where + t + ": data_offsets must be byte offsets");
    }
    const uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (b > end || end > data_len) {
      return Status::Error(where + t + ": bytes " + std::to_string(b) + ".." + std::to_string(end) +
                           " are outside the data (" + std::to_string(data_len) + " bytes): a truncated file?");
    }
    if (end - b != count * static_cast<uint64_t>(size)) {
      return Status::Error(where + t + ": its shape needs " + std::to_string(count * size) + " bytes of " + st.dtype +
                           ", its range holds " + std::to_string(end - b));
    }
    ranges.push_back({b, end, &f.tensors.emplace(it.key(), std::move(st)).first->second});
  }
  // Checked before any bytes are copied: a small file whose thousands of tensors all name the
  // same range would otherwise take memory quadratic in its size.
  std::sort(ranges.begin(), ranges.end(), [](const Range& x, const Range& y) {
    return std::tie(x.begin, x.end) < std::tie(y.begin, y.end);
  });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) return Status::Error(where + "two tensors share bytes");
  }
  for (const Range& r : ranges) {
    r.tensor->data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_start + r.begin),
                          bytes.begin() + static_cast<std::ptrdiff_t>(data_start + r.end));
  }
  return f;
}

Status WriteSafeTensors(const std::string& path, const SafeTensorsFile& file) {
  TLR_ASSIGN_OR_RETURN(std::vector<uint8_t> out, SafeTensorsBytes(file));
  return WriteFileAtomic(path, out);
}

Expected<std::vector<uint8_t>> SafeTensorsBytes(const SafeTensorsFile& file) {
  json header = json::object();
  uint64_t off = 0;
  for (const auto& [name, t] : file.tensors) {
    const int size = SafeTensorDtypeSize(t.dtype);
    if (size == 0) return Status::Error("tensor '" + name + "' has an unknown dtype '" + t.dtype + "'");
    if (static_cast<uint64_t>(t.elements()) * static_cast<uint64_t>(size) != t.data.size()) {
      return Status::Error("tensor '" + name + "': its shape and its bytes disagree");
    }
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {off, off + t.data.size()}}};
    off += t.data.size();
  }
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the reference writes it
  std::vector<uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
  out.insert(out.end(), h.begin(), h.end());
  for (const auto& [name, t] : file.tensors) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

Expected<std::vector<float>> SafeTensorFloats(const std::string& name, const SafeTensor& t) {
  const int64_t n = t.elements();
  std::vector<float> v(static_cast<size_t>(n));
  const uint8_t* p = t.data.data();
  if (t.dtype == "F32") {
    std::memcpy(v.data(), p, static_cast<size_t>(n) * 4);
  } else if (t.dtype == "F64") {
    for (int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      v[static_cast<size_t>(i)] = static_cast<float>(d);
    }
  } else if (t.dtype == "F16" || t.dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      v[static_cast<size_t>(i)] = t.dtype == "F16" ? F16ToF32(h) : Bf16ToF32(h);
    }
  } else {
    return Status::Error("tensor '" + name + "' is " + t.dtype + ", not floating point");
  }
  return v;
}

namespace {
template <typename T>
SafeTensor Make(const char* dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  SafeTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}
}  // namespace

SafeTensor MakeF32Tensor(std::vector<int64_t> shape, const std::vector<float>& values) { return Make("F32", std::move(shape), values); }
SafeTensor MakeI32Tensor(std::vector<int64_t> shape, const std::vector<int32_t>& values) { return Make("I32", std::move(shape), values); }
SafeTensor MakeU8Tensor(std::vector<int64_t> shape, const std::vector<uint8_t>& values) { return Make("U8", std::move(shape), values); }

}  // namespace tlr
