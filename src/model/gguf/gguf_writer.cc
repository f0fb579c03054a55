// GGUF writer (model layer). See gguf_reader.cc for the layout.
#include "model/gguf/gguf_writer.h"

#include <cstring>

#include "model/gguf/gguf_reader.h"
#include "util/mapped_file.h"

namespace tlr {
namespace {

// GGML_MAX_NAME in ggml is 64 including the terminating NUL.
constexpr size_t kMaxTensorNameForInterop = 63;

class ByteSink {
 public:
  template <typename T>
  void Put(T x) {
    const size_t n = out_.size();
    out_.resize(n + sizeof(T));
    std::memcpy(out_.data() + n, &x, sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<uint64_t>(s.size());
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void PutValue(const GgufValue& v) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            PutString(x);
          } else if constexpr (std::is_same_v<T, GgufArray>) {
            Put<uint32_t>(static_cast<uint32_t>(x.elem_type));
            Put<uint64_t>(x.items.size());
            for (const auto& item : x.items) PutValue(item);
          } else if constexpr (std::is_same_v<T, bool>) {
            Put<uint8_t>(x ? 1 : 0);
          } else {
            Put<T>(x);
          }
        },
        v.v);
  }
  void PadTo(uint64_t alignment) {
    while (out_.size() % alignment != 0) out_.push_back(0);
  }
  std::vector<uint8_t>& bytes() { return out_; }

 private:
  std::vector<uint8_t> out_;
};

// Arrays must be homogeneous: every item of the declared element type.
Status CheckArray(const std::string& key, const GgufArray& a) {
  for (const auto& item : a.items) {
    if (item.type() != a.elem_type) {
      return Status::Error("metadata '" + key + "': array declared " +
                           std::string(GgufTypeName(a.elem_type)) + " holds a " +
                           std::string(GgufTypeName(item.type())));
    }
    if (item.type() == GgufType::kArray) {
      TLR_RETURN_IF_ERROR(CheckArray(key, std::get<GgufArray>(item.v)));
    }
  }
  return Status::Ok();
}

}  // namespace

void GgufWriter::Set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  kv_.emplace_back(key, std::move(value));
}

Status GgufWriter::CheckNewTensor(const std::string& name, GgmlType type,
                                  const std::vector<int64_t>& dims, uint64_t* n_bytes) const {
  if (name.empty() || name.size() > kMaxTensorNameForInterop) {
    return Status::Error("tensor name '" + name + "' must be 1.." +
                         std::to_string(kMaxTensorNameForInterop) + " bytes");
  }
  for (const auto& t : tensors_) {
    if (t.name == name) return Status::Error("duplicate tensor name '" + name + "'");
  }
  if (dims.empty() || dims.size() > static_cast<size_t>(kGgufMaxDims)) {
    return Status::Error("tensor '" + name + "': needs 1.." + std::to_string(kGgufMaxDims) + " dims");
  }
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d < 1) return Status::Error("tensor '" + name + "': dimension " + std::to_string(d) + " < 1");
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) {
      return Status::Error("tensor '" + name + "': element count overflows");
    }
  }
  auto bytes = GgmlTensorBytes(type, static_cast<uint64_t>(dims[0]), n);
  if (!bytes.ok()) return bytes.status().WithPrefix("tensor '" + name + "'");
  *n_bytes = *bytes;
  return Status::Ok();
}

Status GgufWriter::AddTensor(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                             std::span<const uint8_t> data) {
  uint64_t n_bytes;
  TLR_RETURN_IF_ERROR(CheckNewTensor(name, type, dims, &n_bytes));
  if (n_bytes != data.size()) {
    return Status::Error("tensor '" + name + "': " + std::to_string(data.size()) +
                         " bytes given, its shape and type need " + std::to_string(n_bytes));
  }
  tensors_.push_back({name, type, std::move(dims), n_bytes, {data.begin(), data.end()}, nullptr});
  return Status::Ok();
}

Status GgufWriter::AddTensorLazy(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                                 Filler fill) {
  uint64_t n_bytes;
  TLR_RETURN_IF_ERROR(CheckNewTensor(name, type, dims, &n_bytes));
  tensors_.push_back({name, type, std::move(dims), n_bytes, {}, std::move(fill)});
  return Status::Ok();
}

Status GgufWriter::AddTensorF32(const std::string& name, std::vector<int64_t> dims,
                                std::span<const float> data) {
  return AddTensor(name, GgmlType::kF32, std::move(dims),
                   {reinterpret_cast<const uint8_t*>(data.data()), data.size_bytes()});
}

Expected<std::vector<uint8_t>> GgufWriter::Header(uint64_t* alignment_out) const {
  uint64_t alignment = kGgufDefaultAlignment;
  for (const auto& [k, v] : kv_) {
    if (v.type() == GgufType::kArray) TLR_RETURN_IF_ERROR(CheckArray(k, std::get<GgufArray>(v.v)));
    if (k == "general.alignment") {
      if (v.type() != GgufType::kUint32) return Status::Error("general.alignment must be u32");
      alignment = std::get<uint32_t>(v.v);
      if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 65536) {
        return Status::Error("general.alignment must be a power of two <= 65536");
      }
    }
  }
  ByteSink sink;
  sink.Put<uint32_t>(kGgufMagic);
  sink.Put<uint32_t>(version_);
  sink.Put<uint64_t>(tensors_.size());
  sink.Put<uint64_t>(kv_.size());
  for (const auto& [k, v] : kv_) {
    sink.PutString(k);
    sink.Put<uint32_t>(static_cast<uint32_t>(v.type()));
    sink.PutValue(v);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    sink.PutString(t.name);
    sink.Put<uint32_t>(static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) sink.Put<int64_t>(d);
    sink.Put<uint32_t>(static_cast<uint32_t>(t.type));
    sink.Put<uint64_t>(offset);
    offset += t.n_bytes;
    offset += (alignment - offset % alignment) % alignment;
  }
  if (!tensors_.empty()) sink.PadTo(alignment);
  *alignment_out = alignment;
  return std::move(sink.bytes());
}

namespace {
// The bytes of one tensor: given, or produced by its filler.
Status TensorBytes(const std::vector<uint8_t>& data, const GgufWriter::Filler& fill,
                   uint64_t n_bytes, const std::string& name, std::vector<uint8_t>* out) {
  if (!fill) {
    out->assign(data.begin(), data.end());
    return Status::Ok();
  }
  out->assign(n_bytes, 0);
  return fill(*out).WithPrefix("tensor '" + name + "'");
}
}  // namespace

Expected<std::vector<uint8_t>> GgufWriter::ToBytes() const {
  uint64_t alignment;
  auto header = Header(&alignment);
  if (!header.ok()) return header.status();
  std::vector<uint8_t> out = std::move(header).value();
  std::vector<uint8_t> buf;
  for (const auto& t : tensors_) {
    TLR_RETURN_IF_ERROR(TensorBytes(t.data, t.fill, t.n_bytes, t.name, &buf));
    out.insert(out.end(), buf.begin(), buf.end());
    while (out.size() % alignment) out.push_back(0);
  }
  return out;
}

Status GgufWriter::WriteFile(const std::string& path,
                             const std::function<void(size_t, size_t)>& progress) const {
  uint64_t alignment;
  auto header = Header(&alignment);
  if (!header.ok()) return header.status();
  AtomicFileWriter out;
  TLR_RETURN_IF_ERROR(out.Open(path));
  TLR_RETURN_IF_ERROR(out.Write(*header));
  std::vector<uint8_t> buf;
  uint64_t written = header->size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const auto& t = tensors_[i];
    TLR_RETURN_IF_ERROR(TensorBytes(t.data, t.fill, t.n_bytes, t.name, &buf));
    const size_t pad = (alignment - (written + buf.size()) % alignment) % alignment;
    buf.resize(buf.size() + pad, 0);
    TLR_RETURN_IF_ERROR(out.Write(buf));
    written += buf.size();
    if (progress) progress(i + 1, tensors_.size());
  }
  return out.Commit();
}

}  // namespace tlr
