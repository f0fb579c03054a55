// GGUF reader (model layer). File layout (all little-endian):
//   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv x { string key | u32 value_type | value }
//   n_tensors x { string name | u32 n_dims | u64 dims[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment | tensor data (each tensor at data_start + offset)
// where string = u64 length + bytes, and array = u32 elem_type + u64 count + elements.
#include "model/gguf/gguf_reader.h"

#include <cstdio>
#include <cstring>

#include "model/gguf/gguf_keys.h"
#include "util/utf8.h"

namespace tlr {

// Bounds-checked little-endian cursor over the file bytes. Every read either succeeds
// inside the buffer or returns an error naming `what` and the offset.
class GgufParser {
 public:
  GgufParser(std::span<const uint8_t> bytes, const GgufLimits& limits)
      : bytes_(bytes), limits_(limits) {}

  Status Parse(GgufFile* f);

 private:
  Status Fail(const std::string& what, uint64_t at) const {
    return Status::Error("offset " + std::to_string(at) + ": " + what);
  }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  Status Read(const std::string& what, T* out) {
    if (remaining() < sizeof(T)) {
      return Fail(what + ": file ends (needs " + std::to_string(sizeof(T)) + " bytes, " +
                      std::to_string(remaining()) + " left)",
                  pos_);
    }
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }

  Status ReadString(const std::string& what, uint64_t max_len, std::string* out) {
    const uint64_t at = pos_;
    uint64_t len;
    TLR_RETURN_IF_ERROR(Read(what + " length", &len));
    if (len > max_len) {
      return Fail(what + ": length " + std::to_string(len) + " exceeds the limit " +
                      std::to_string(max_len),
                  at);
    }
    if (len > remaining()) {
      return Fail(what + ": length " + std::to_string(len) + " runs past the end of the file (" +
                      std::to_string(remaining()) + " bytes left)",
                  at);
    }
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return Status::Ok();
  }

  Status ReadValue(const std::string& what, GgufType type, int depth, GgufValue* out);
  Status ReadArray(const std::string& what, int depth, GgufArray* out);

  std::span<const uint8_t> bytes_;
  const GgufLimits& limits_;
  uint64_t pos_ = 0;
};

namespace {
// Smallest encoded size of one element of `t` (used to bound counts by the bytes left).
uint64_t MinEncodedSize(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

std::string Printable(const std::string& s) {
  std::string out = SanitizeUtf8(s.substr(0, 80));
  if (s.size() > 80) out += "...";
  return out;
}
}  // namespace

Status GgufParser::ReadValue(const std::string& what, GgufType type, int depth,
                             GgufValue* out) {
  switch (type) {
#define TLR_GGUF_SCALAR(TAG, CTYPE)            \
  case GgufType::TAG: {                        \
    CTYPE x;                                   \
    TLR_RETURN_IF_ERROR(Read(what, &x));       \
    out->v.emplace<CTYPE>(x);                  \
    return Status::Ok();                       \
  }
    TLR_GGUF_SCALAR(kUint8, uint8_t)
    TLR_GGUF_SCALAR(kInt8, int8_t)
    TLR_GGUF_SCALAR(kUint16, uint16_t)
    TLR_GGUF_SCALAR(kInt16, int16_t)
    TLR_GGUF_SCALAR(kUint32, uint32_t)
    TLR_GGUF_SCALAR(kInt32, int32_t)
    TLR_GGUF_SCALAR(kFloat32, float)
    TLR_GGUF_SCALAR(kUint64, uint64_t)
    TLR_GGUF_SCALAR(kInt64, int64_t)
    TLR_GGUF_SCALAR(kFloat64, double)
#undef TLR_GGUF_SCALAR
    case GgufType::kBool: {
      const uint64_t at = pos_;
      uint8_t b;
      TLR_RETURN_IF_ERROR(Read(what, &b));
      if (b > 1) return Fail(what + ": bool value " + std::to_string(b) + " is not 0 or 1", at);
      out->v.emplace<bool>(b != 0);
      return Status::Ok();
    }
    case GgufType::kString: {
      std::string s;
      TLR_RETURN_IF_ERROR(ReadString(what, limits_.max_string_length, &s));
      out->v.emplace<std::string>(std::move(s));
      return Status::Ok();
    }
    case GgufType::kArray: {
      GgufArray a;
      TLR_RETURN_IF_ERROR(ReadArray(what, depth + 1, &a));
      out->v.emplace<GgufArray>(std::move(a));
      return Status::Ok();
    }
  }
  return Fail(what + ": unknown value type", pos_);
}

Status GgufParser::ReadArray(const std::string& what, int depth, GgufArray* out) {
  const uint64_t at = pos_;
  if (depth > limits_.max_array_depth) {
    return Fail(what + ": arrays nested deeper than " + std::to_string(limits_.max_array_depth),
                at);
  }
  uint32_t raw_type;
  TLR_RETURN_IF_ERROR(Read(what + " array element type", &raw_type));
  if (raw_type >= kGgufTypeCount) {
    return Fail(what + ": unknown array element type " + std::to_string(raw_type), at);
  }
  const auto elem = static_cast<GgufType>(raw_type);
  const uint64_t count_at = pos_;
  uint64_t count;
  TLR_RETURN_IF_ERROR(Read(what + " array count", &count));
  if (count > limits_.max_array_items) {
    return Fail(what + ": array count " + std::to_string(count) + " exceeds the limit " +
                    std::to_string(limits_.max_array_items),
                count_at);
  }
  if (count > remaining() / MinEncodedSize(elem)) {
    return Fail(what + ": array of " + std::to_string(count) + " " +
                    std::string(GgufTypeName(elem)) + " items cannot fit in the " +
                    std::to_string(remaining()) + " bytes left",
                count_at);
  }
  out->elem_type = elem;
  out->items.resize(count);
  for (uint64_t i = 0; i < count; ++i) {
    // Build the element name lazily: only errors need it.
    const uint64_t before = pos_;
    Status s = ReadValue(what, elem, depth, &out->items[i]);
    if (!s.ok()) {
      return Status::Error(s.message() + " (array element " + std::to_string(i) + " at offset " +
                           std::to_string(before) + ")");
    }
  }
  return Status::Ok();
}

Status GgufParser::Parse(GgufFile* f) {
  uint32_t magic;
  TLR_RETURN_IF_ERROR(Read("magic", &magic));
  if (magic != kGgufMagic) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "bad magic 0x%08x (a GGUF file starts with \"GGUF\")", magic);
    return Fail(buf, 0);
  }
  uint32_t version;
  TLR_RETURN_IF_ERROR(Read("version", &version));
  if (version == 1) return Fail("GGUF version 1 is not supported (only 2 and 3)", 4);
  if (version == 0x02000000 || version == 0x03000000) {
    return Fail("big-endian GGUF files are not supported", 4);
  }
  if (version != 2 && version != 3) {
    return Fail("unsupported GGUF version " + std::to_string(version) + " (supported: 2, 3)", 4);
  }
  f->version_ = version;

  uint64_t n_tensors, n_kv;
  TLR_RETURN_IF_ERROR(Read("tensor count", &n_tensors));
  TLR_RETURN_IF_ERROR(Read("metadata count", &n_kv));
  if (n_tensors > limits_.max_tensors || n_tensors > remaining() / 33) {
    return Fail("tensor count " + std::to_string(n_tensors) + " is absurd for a file of " +
                    std::to_string(bytes_.size()) + " bytes",
                8);
  }
  if (n_kv > limits_.max_kv || n_kv > remaining() / 13) {
    return Fail("metadata count " + std::to_string(n_kv) + " is absurd for a file of " +
                    std::to_string(bytes_.size()) + " bytes",
                16);
  }

  // Metadata.
  f->kv_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = pos_;
    const std::string idx = "metadata entry " + std::to_string(i);
    std::string key;
    TLR_RETURN_IF_ERROR(ReadString(idx + " key", limits_.max_key_length, &key));
    if (key.empty()) return Fail(idx + ": empty key", at);
    if (!IsValidUtf8(key)) return Fail(idx + ": key is not valid UTF-8", at);
    if (f->kv_index_.count(key)) return Fail("duplicate metadata key '" + Printable(key) + "'", at);
    const uint64_t type_at = pos_;
    uint32_t raw_type;
    TLR_RETURN_IF_ERROR(Read("type of '" + key + "'", &raw_type));
    if (raw_type >= kGgufTypeCount) {
      return Fail("metadata '" + key + "': unknown value type " + std::to_string(raw_type),
                  type_at);
    }
    GgufValue v;
    TLR_RETURN_IF_ERROR(ReadValue("metadata '" + key + "'", static_cast<GgufType>(raw_type), 0, &v));
    f->kv_index_.emplace(key, f->kv_.size());
    f->kv_.emplace_back(std::move(key), std::move(v));
  }

  // Alignment.
  if (const GgufValue* a = f->Find("general.alignment")) {
    if (a->type() != GgufType::kUint32) {
      return Fail("general.alignment must be u32, not " + std::string(GgufTypeName(a->type())),
                  0);
    }
    const uint32_t al = std::get<uint32_t>(a->v);
    if (al == 0 || (al & (al - 1)) != 0 || al > 65536) {
      return Fail("general.alignment " + std::to_string(al) +
                      " is not a power of two between 1 and 65536",
                  0);
    }
    f->alignment_ = al;
  }

  // Tensor infos.
  f->tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = pos_;
    GgufTensorInfo t;
    TLR_RETURN_IF_ERROR(
        ReadString("tensor " + std::to_string(i) + " name", limits_.max_name_length, &t.name));
    const std::string tn = "tensor '" + Printable(t.name) + "'";
    if (t.name.empty()) return Fail("tensor " + std::to_string(i) + ": empty name", at);
    if (!IsValidUtf8(t.name)) return Fail("tensor " + std::to_string(i) + ": name is not valid UTF-8", at);
    if (f->tensor_index_.count(t.name)) return Fail("duplicate " + tn, at);
    const uint64_t dims_at = pos_;
    uint32_t n_dims;
    TLR_RETURN_IF_ERROR(Read(tn + " n_dims", &n_dims));
    if (n_dims < 1 || n_dims > kGgufMaxDims) {
      return Fail(tn + ": n_dims " + std::to_string(n_dims) + " is outside 1.." +
                      std::to_string(kGgufMaxDims),
                  dims_at);
    }
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t d_at = pos_;
      int64_t dim;
      TLR_RETURN_IF_ERROR(Read(tn + " dim " + std::to_string(d), &dim));
      if (dim < 1 || dim > limits_.max_dim) {
        return Fail(tn + ": dimension " + std::to_string(d) + " = " + std::to_string(dim) +
                        " is outside 1.." + std::to_string(limits_.max_dim),
                    d_at);
      }
      if (__builtin_mul_overflow(n_el, static_cast<uint64_t>(dim), &n_el) ||
          n_el > static_cast<uint64_t>(INT64_MAX)) {
        return Fail(tn + ": element count overflows", d_at);
      }
      t.dims.push_back(dim);
    }
    t.n_elements = n_el;
    const uint64_t type_at = pos_;
    uint32_t raw_type;
    TLR_RETURN_IF_ERROR(Read(tn + " type", &raw_type));
    auto traits = FindGgmlType(raw_type);
    if (!traits) {
      if (const std::string_view unread = UnreadGgmlTypeName(raw_type); !unread.empty()) {
        return Fail(tn + ": type " + std::string(unread) + " (ggml type " + std::to_string(raw_type) +
                        ") is not one TLR reads: a file of the same model in another quantization loads "
                        "(Q4_K_M, Q5_K_M, Q6_K, Q8_0, IQ4_XS, IQ4_NL, F16, BF16)",
                    type_at);
      }
      return Fail(tn + ": unknown tensor type id " + std::to_string(raw_type), type_at);
    }
    t.type = traits->type;
    auto bytes = GgmlTensorBytes(t.type, static_cast<uint64_t>(t.dims[0]), n_el);
    if (!bytes.ok()) return Fail(tn + ": " + bytes.status().message(), type_at);
    t.n_bytes = *bytes;
    const uint64_t off_at = pos_;
    TLR_RETURN_IF_ERROR(Read(tn + " offset", &t.offset));
    if (t.offset % f->alignment_ != 0) {
      return Fail(tn + ": data offset " + std::to_string(t.offset) +
                      " is not a multiple of the alignment " + std::to_string(f->alignment_),
                  off_at);
    }
    f->tensor_index_.emplace(t.name, f->tensors_.size());
    f->tensors_.push_back(std::move(t));
  }

  // Data section: starts at the next multiple of the alignment (or at the end of the file
  // when there are no tensors).
  uint64_t data = pos_;
  const uint64_t pad = (f->alignment_ - data % f->alignment_) % f->alignment_;
  data += pad;
  if (n_tensors == 0) data = pos_;  // no data section: nothing to align
  if (data > bytes_.size()) return Fail("data section starts past the end of the file", pos_);
  f->data_offset_ = data;
  f->data_bytes_ = bytes_.size() - data;
  for (auto& t : f->tensors_) {
    uint64_t start, end;
    if (__builtin_add_overflow(data, t.offset, &start) ||
        __builtin_add_overflow(start, t.n_bytes, &end) || end > bytes_.size()) {
      return Fail("tensor '" + Printable(t.name) + "': data [" + std::to_string(t.offset) + ", +" +
                      std::to_string(t.n_bytes) + ") runs past the end of the file (" +
                      std::to_string(bytes_.size()) + " bytes)",
                  data);
    }
    t.file_offset = start;
    t.data = bytes_.data() + start;
  }
  return Status::Ok();
}

namespace {
Expected<GgufFile> ParseInto(GgufFile f, std::span<const uint8_t> bytes, const GgufLimits& limits) {
  GgufParser p(bytes, limits);
  Status s = p.Parse(&f);
  if (!s.ok()) return s;
  return f;
}
}  // namespace

namespace {
Expected<GgufFile> OpenOne(const std::string& path, const GgufLimits& limits, bool huge,
                           std::shared_ptr<MappedFile>* map) {
  auto m = MappedFile::Open(path, huge);
  if (!m.ok()) return m.status();
  GgufFile f;
  *map = std::make_shared<MappedFile>(std::move(m).value());
  auto bytes = (*map)->bytes();
  auto r = ParseInto(std::move(f), bytes, limits);
  if (!r.ok()) return r.status().WithPrefix("gguf '" + path + "'");
  return r;
}

// "-00002-of-00005.gguf": the end of shard `no` (from 0) of `count`'s file name.
std::string ShardSuffix(uint64_t no, uint64_t count) {
  char b[64];
  std::snprintf(b, sizeof b, "-%05llu-of-%05llu.gguf", static_cast<unsigned long long>(no + 1),
                static_cast<unsigned long long>(count));
  return b;
}
}  // namespace

Expected<GgufFile> GgufFile::Open(const std::string& path, const GgufLimits& limits, bool huge) {
  auto r = OpenOneFile(path, limits, huge);
  if (!r.ok()) return r.status();
  if (r->Find(gguf_keys::kSplitCount)) TLR_RETURN_IF_ERROR(r->OpenShards(path, limits, huge));
  return r;
}

Expected<GgufFile> GgufFile::OpenOneFile(const std::string& path, const GgufLimits& limits, bool huge) {
  std::shared_ptr<MappedFile> map;
  auto r = OpenOne(path, limits, huge, &map);
  if (!r.ok()) return r.status();
  r->map_ = std::move(map);
  r->bytes_ = r->map_->bytes();
  return r;
}

// The first shard is parsed; this checks its split keys and opens the others beside it.
Status GgufFile::OpenShards(const std::string& path, const GgufLimits& limits, bool huge) {
  namespace k = gguf_keys;
  const std::string what = "gguf '" + path + "'";
  auto count = GetUint(k::kSplitCount);
  if (!count.ok()) return count.status().WithPrefix(what);
  if (*count > 65535) return Status::Error(what + ": split.count " + std::to_string(*count) + " is over 65535");
  uint64_t no = 0;
  if (Find(k::kSplitNo)) {
    auto n = GetUint(k::kSplitNo);
    if (!n.ok()) return n.status().WithPrefix(what);
    no = *n;
  }
  if (*count <= 1 && no == 0) return Status::Ok();  // one file in all
  if (no >= *count) {
    return Status::Error(what + ": split.no " + std::to_string(no) + " is not below split.count " + std::to_string(*count));
  }
  if (no != 0) {
    const std::string end = ShardSuffix(no, *count);
    std::string first = path.ends_with(end) ? "'" + path.substr(0, path.size() - end.size()) + ShardSuffix(0, *count) + "'"
                                            : "the first shard (split.no 0)";
    return Status::Error(what + " is shard " + std::to_string(no + 1) + " of " + std::to_string(*count) +
                         " of a split model: open its first shard, " + first + ", which brings the others");
  }
  const std::string end = ShardSuffix(0, *count);
  if (!path.ends_with(end)) {
    return Status::Error(what + " is the first of " + std::to_string(*count) +
                         " shards of a split model, but its name does not end in '" + end +
                         "', so the others cannot be found (keep the names gguf-split gave them)");
  }
  const std::string prefix = path.substr(0, path.size() - end.size());
  shard_paths_ = {path};
  for (uint64_t i = 1; i < *count; ++i) {
    const std::string shard_path = prefix + ShardSuffix(i, *count);
    const std::string shard_what = "shard " + std::to_string(i + 1) + " of " + std::to_string(*count) + ", '" + shard_path + "'";
    std::shared_ptr<MappedFile> map;
    auto s = OpenOne(shard_path, limits, huge, &map);
    if (!s.ok()) return s.status().WithPrefix(what + " is split: " + shard_what);
    auto s_no = s->GetUint(k::kSplitNo);
    auto s_count = s->GetUint(k::kSplitCount);
    if (!s_no.ok() || !s_count.ok() || *s_no != i || *s_count != *count) {
      return Status::Error(what + " is split: " + shard_what + " is not that shard (its split.no/split.count say " +
                           (s_no.ok() ? std::to_string(*s_no + 1) : std::string("?")) + " of " +
                           (s_count.ok() ? std::to_string(*s_count) : std::string("?")) + ")");
    }
    for (GgufTensorInfo& t : s->tensors_) {
      if (tensor_index_.count(t.name)) {
        return Status::Error(what + " is split: tensor '" + t.name + "' is in " + shard_what + " and in shard " +
                             std::to_string(tensors_[tensor_index_[t.name]].shard + 1));
      }
      if (tensors_.size() >= limits.max_tensors) return Status::Error(what + " is split: more than " + std::to_string(limits.max_tensors) + " tensors");
      t.shard = static_cast<uint32_t>(i);
      tensor_index_.emplace(t.name, tensors_.size());
      tensors_.push_back(std::move(t));
    }
    data_bytes_ += s->data_bytes_;
    shard_maps_.push_back(std::move(map));
    shard_paths_.push_back(shard_path);
  }
  if (Find(k::kSplitTensorsCount)) {
    auto n = GetUint(k::kSplitTensorsCount);
    if (!n.ok()) return n.status().WithPrefix(what);
    if (*n != tensors_.size()) {
      return Status::Error(what + " is split: its shards hold " + std::to_string(tensors_.size()) +
                           " tensors, split.tensors.count says " + std::to_string(*n));
    }
  }
  return Status::Ok();
}

Expected<GgufFile> GgufFile::FromBytes(std::span<const uint8_t> bytes, const GgufLimits& limits) {
  GgufFile f;
  f.buffer_ = std::make_shared<std::vector<uint8_t>>(bytes.begin(), bytes.end());
  f.bytes_ = *f.buffer_;
  auto own = f.bytes_;
  auto r = ParseInto(std::move(f), own, limits);
  if (!r.ok()) return r.status().WithPrefix("gguf");
  return r;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
Status Missing(std::string_view key) {
  return Status::Error("GGUF metadata key '" + std::string(key) + "' is missing");
}
Status WrongType(std::string_view key, GgufType got, const char* want) {
  return Status::Error("GGUF metadata key '" + std::string(key) + "' has type " +
                       std::string(GgufTypeName(got)) + ", expected " + want);
}
}  // namespace

Expected<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type() != GgufType::kString) return WrongType(key, v->type(), "str");
  return std::get<std::string>(v->v);
}

Expected<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  return std::visit(
      [&](const auto& x) -> Expected<int64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_same_v<T, uint64_t>) {
            if (x > static_cast<uint64_t>(INT64_MAX)) {
              return Status::Error("GGUF metadata key '" + std::string(key) + "' is out of range");
            }
          }
          return static_cast<int64_t>(x);
        } else {
          return WrongType(key, v->type(), "an integer");
        }
      },
      v->v);
}

Expected<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type() == GgufType::kUint64) return std::get<uint64_t>(v->v);
  auto i = GetInt(key);
  if (!i.ok()) return i.status();
  if (*i < 0) return Status::Error("GGUF metadata key '" + std::string(key) + "' is negative");
  return static_cast<uint64_t>(*i);
}

Expected<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type() == GgufType::kFloat32) return static_cast<double>(std::get<float>(v->v));
  if (v->type() == GgufType::kFloat64) return std::get<double>(v->v);
  auto i = GetInt(key);
  if (i.ok()) return static_cast<double>(*i);
  return WrongType(key, v->type(), "a number");
}

Expected<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type() != GgufType::kBool) return WrongType(key, v->type(), "bool");
  return std::get<bool>(v->v);
}

Expected<const GgufArray*> GgufFile::GetArray(std::string_view key, GgufType elem_type) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(key);
  if (v->type() != GgufType::kArray) return WrongType(key, v->type(), "arr");
  const auto& a = std::get<GgufArray>(v->v);
  if (a.elem_type != elem_type) {
    return Status::Error("GGUF metadata key '" + std::string(key) + "' is an array of " +
                         std::string(GgufTypeName(a.elem_type)) + ", expected " +
                         std::string(GgufTypeName(elem_type)));
  }
  return &a;
}

std::string GgufTensorInfo::ShapeString() const {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

}  // namespace tlr
