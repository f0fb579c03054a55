// The packed GGUF (see packed_gguf.h).
#include "model/packed_gguf.h"

#include <cstring>
#include <map>

#include "model/gguf/gguf_keys.h"
#include "model/gguf/gguf_writer.h"
#include "model/model.h"
#include "model/weight_cache.h"
#include "ops/matmul.h"
#include "util/hash.h"
#include "util/mapped_file.h"

namespace tlr {

namespace {

namespace k = gguf_keys;

constexpr const char* kPrefix = "tlr.packed.";
constexpr const char* kFormatKey = "tlr.packed.format";
constexpr const char* kArchKey = "tlr.packed.architecture";
constexpr const char* kLayoutKey = "tlr.packed.layout_version";
constexpr const char* kSimdKey = "tlr.packed.simd_target";
constexpr const char* kFingerprintKey = "tlr.packed.fingerprint";
constexpr const char* kStructureKey = "tlr.packed.structure";
constexpr const char* kTensorsKey = "tlr.packed.tensors";
constexpr const char* kChecksumsKey = "tlr.packed.checksums";
constexpr const char* kSourceAlignmentKey = "tlr.packed.source_alignment";

bool IsPackedKey(const std::string& key) { return key.rfind(kPrefix, 0) == 0; }

uint64_t HashValue(uint64_t h, const GgufValue& v) {
  const uint32_t type = static_cast<uint32_t>(v.type());
  h = Fnv1a(h, &type, sizeof type);
  return std::visit(
      [&](const auto& x) -> uint64_t {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          const uint64_t n = x.size();
          return Fnv1a(Fnv1a(h, &n, sizeof n), x);
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          const uint32_t et = static_cast<uint32_t>(x.elem_type);
          const uint64_t n = x.items.size();
          uint64_t g = Fnv1a(Fnv1a(h, &et, sizeof et), &n, sizeof n);
          for (const GgufValue& item : x.items) g = HashValue(g, item);
          return g;
        } else {
          return Fnv1a(h, &x, sizeof x);
        }
      },
      v.v);
}

Expected<uint64_t> ParseHex(const std::string& s) {
  if (s.empty() || s.size() > 16) return Status::Error("'" + s + "' is not a 64-bit hex value");
  uint64_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return Status::Error("'" + s + "' is not a 64-bit hex value");
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

std::string Hex(uint64_t v) {
  char b[17];
  return std::string(HexU64(v, b));
}

// Copies the source's tensor bytes at write time (the source stays mapped; nothing is held).
GgufWriter::Filler CopyOf(const GgufTensorInfo* t) {
  return [t](std::span<uint8_t> out) {
    std::memcpy(out.data(), t->data, out.size());
    return Status::Ok();
  };
}

}  // namespace

uint64_t PackedStructureHash(const std::vector<std::pair<std::string, GgufValue>>& metadata,
                             const std::vector<GgufTensorInfo>& tensors, uint64_t tokenizer_fingerprint) {
  uint64_t h = Fnv1a(kFnvOffset, &tokenizer_fingerprint, sizeof tokenizer_fingerprint);
  for (const auto& [key, value] : metadata) {
    if (key == kStructureKey || key == kChecksumsKey) continue;
    // The tokenizer's fingerprint holds these (hashing ~10 MB of strings again would cost a
    // start ~10 ms).
    if (key == k::kTokTokens || key == k::kTokTypes || key == k::kTokMerges) continue;
    h = HashValue(Fnv1a(h, key), value);
  }
  for (const GgufTensorInfo& t : tensors) {
    h = Fnv1a(h, t.name);
    const int32_t type = static_cast<int32_t>(t.type);
    h = Fnv1a(h, &type, sizeof type);
    h = Fnv1a(h, t.dims.data(), t.dims.size() * sizeof(int64_t));
  }
  return h;
}

Expected<std::string> ModelArchitecture(const GgufFile& f) {
  TLR_ASSIGN_OR_RETURN(std::string arch, f.GetString(k::kArchitecture));
  if (arch != kPackedArch) return arch;
  return f.GetString(kArchKey);
}

bool LooksPacked(const std::string& path) {
  // magic, version, tensor count, key count, then the first key (u64 length, bytes), its type
  // (u32: 8 = string) and the string (u64 length, bytes).
  const std::string key = k::kArchitecture, arch = kPackedArch;
  const size_t need = 24 + 8 + key.size() + 4 + 8 + arch.size();
  // Mapped, not read: the few bytes come from one page (and memory files work as well).
  auto map = MappedFile::Open(path);
  if (!map.ok() || map->size() < need) return false;
  const std::string head(reinterpret_cast<const char*>(map->bytes().data()), need);
  auto u64 = [&](size_t at) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(head[at + i])) << (8 * i);
    return v;
  };
  size_t at = 24;
  if (head.compare(0, 4, "GGUF") != 0 || u64(at) != key.size() || head.compare(at + 8, key.size(), key) != 0) return false;
  at += 8 + key.size();
  if (static_cast<uint8_t>(head[at]) != 8 || head[at + 1] || head[at + 2] || head[at + 3]) return false;
  at += 4;
  return u64(at) == arch.size() && head.compare(at + 8, arch.size(), arch) == 0;
}

Expected<std::optional<PackedInfo>> ReadPackedInfo(const GgufFile& f) {
  auto arch = f.GetString(k::kArchitecture);
  if (!arch.ok() || *arch != kPackedArch) return std::optional<PackedInfo>();
  auto bad = [](const Status& s) {
    return s.WithPrefix("a packed model (general.architecture '" + std::string(kPackedArch) + "') whose TLR keys are damaged");
  };
  PackedInfo info;
  auto format = f.GetUint(kFormatKey);
  if (!format.ok()) return bad(format.status());
  if (*format != kPackedFormat) {
    return Status::Error("a packed model in format " + std::to_string(*format) + ", written by another TLR version (this one reads format " +
                         std::to_string(kPackedFormat) + "): convert the original GGUF again with this version's `tlr convert`");
  }
  auto layout = f.GetUint(kLayoutKey);
  if (!layout.ok()) return bad(layout.status());
  if (*layout > UINT32_MAX) return bad(Status::Error(std::string(kLayoutKey) + " " + std::to_string(*layout) + " is out of range"));
  info.layout_version = static_cast<uint32_t>(*layout);
  auto a = f.GetString(kArchKey);
  if (!a.ok()) return bad(a.status());
  info.arch = *a;
  if (auto simd = f.GetString(kSimdKey); simd.ok()) info.simd_target = *simd;
  auto fp = f.GetString(kFingerprintKey);
  if (!fp.ok()) return bad(fp.status());
  auto fpv = ParseHex(*fp);
  if (!fpv.ok()) return bad(fpv.status().WithPrefix(kFingerprintKey));
  info.fingerprint = *fpv;
  auto st = f.GetString(kStructureKey);
  if (!st.ok()) return bad(st.status());
  auto stv = ParseHex(*st);
  if (!stv.ok()) return bad(stv.status().WithPrefix(kStructureKey));
  info.structure = *stv;
  auto names = f.GetArray(kTensorsKey, GgufType::kString);
  if (!names.ok()) return bad(names.status());
  for (const GgufValue& n : (*names)->items) {
    const std::string& name = std::get<std::string>(n.v);
    if (!f.FindTensor(name)) return bad(Status::Error(std::string(kTensorsKey) + " names '" + name + "', which the file does not hold"));
    info.tensors.insert(name);
  }
  auto sums = f.GetArray(kChecksumsKey, GgufType::kUint64);
  if (!sums.ok()) return bad(sums.status());
  if ((*sums)->items.size() != f.tensors().size()) {
    return bad(Status::Error(std::string(kChecksumsKey) + " has " + std::to_string((*sums)->items.size()) +
                             " entries for " + std::to_string(f.tensors().size()) + " tensors"));
  }
  for (const GgufValue& v : (*sums)->items) info.checksums.push_back(std::get<uint64_t>(v.v));
  if (const GgufValue* a = f.Find(kSourceAlignmentKey)) {
    if (a->type() != GgufType::kUint32) return bad(Status::Error(std::string(kSourceAlignmentKey) + " must be u32"));
    info.source_alignment = *a;
  }
  return std::optional<PackedInfo>(std::move(info));
}

Status VerifyPackedTensors(const GgufFile& f, const PackedInfo& info) {
  const auto& ts = f.tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    if (WeightChecksum({ts[i].data, static_cast<size_t>(ts[i].n_bytes)}) != info.checksums[i]) {
      return Status::Error("tensor '" + ts[i].name + "' is damaged (its checksum differs): convert the original GGUF again");
    }
  }
  return Status::Ok();
}

Status WritePackedGguf(const std::string& in, const std::string& out,
                       const std::function<void(size_t, size_t)>& progress) {
  Model::Options opts;
  opts.repack = false;
  opts.weight_cache = "off";
  TLR_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(in, opts));
  const GgufFile& f = model->file();
  if (auto arch = f.GetString(k::kArchitecture); arch.ok() && *arch == kPackedArch) {
    return Status::Error("'" + in + "' is packed already (tlr convert --unpack writes the plain GGUF)");
  }
  // Two tensors over the same bytes (a tied LM head written as a second tensor, say) cannot be
  // packed: the panels would change what the other one reads.
  std::map<std::pair<uint32_t, uint64_t>, const GgufTensorInfo*> by_offset;  // (shard, offset)
  for (const GgufTensorInfo& t : f.tensors()) by_offset[{t.shard, t.offset}] = &t;
  const GgufTensorInfo* prev = nullptr;
  for (const auto& [at, t] : by_offset) {
    if (prev && prev->shard == t->shard && prev->offset + prev->n_bytes > at.second) {
      return Status::Error("'" + in + "': tensors '" + prev->name + "' and '" + t->name +
                           "' share their bytes; a file with overlapping tensors cannot be packed");
    }
    prev = t;
  }
  if (by_offset.size() != f.tensors().size()) {
    return Status::Error("'" + in + "': two tensors start at the same offset; a file with overlapping tensors cannot be packed");
  }
  std::map<const GgufTensorInfo*, WeightView> panel;
  for (const auto& [t, view] : model->PanelMatrices()) panel[t] = view;

  // Each tensor's bytes as they will be written: the panels, or the source's.
  auto fill = [&](const GgufTensorInfo& t) -> GgufWriter::Filler {
    auto it = panel.find(&t);
    if (it == panel.end()) return CopyOf(&t);
    const WeightView view = it->second;
    return [view](std::span<uint8_t> bytes) {
      RepackMatrix(view, bytes.data());
      return Status::Ok();
    };
  };
  // The checksums go in the header, before the bytes: a first pass makes them.
  GgufValue sums{GgufArray{GgufType::kUint64, {}}};
  std::vector<std::string> packed_names;
  std::vector<uint8_t> buf;
  for (const GgufTensorInfo& t : f.tensors()) {
    uint64_t sum;
    if (panel.count(&t)) {
      buf.resize(t.n_bytes);
      TLR_RETURN_IF_ERROR(fill(t)(buf));
      sum = WeightChecksum(buf);
      packed_names.push_back(t.name);
    } else {
      sum = WeightChecksum({t.data, static_cast<size_t>(t.n_bytes)});
    }
    std::get<GgufArray>(sums.v).items.emplace_back(sum);
  }
  std::vector<uint8_t>().swap(buf);

  // The metadata as written, in order; the structure hash covers all of it but itself and the
  // checksums (the tlr.packed.* keys that say how the bytes are read included).
  std::vector<std::pair<std::string, GgufValue>> kv;
  bool had_alignment = false;
  for (const auto& [key, value] : f.metadata()) {
    if (key.starts_with("split.")) continue;  // a split model packs into one file
    if (key == k::kArchitecture) {
      kv.emplace_back(key, GgufValue::Str(kPackedArch));
    } else if (key == k::kAlignment) {
      had_alignment = true;
      kv.emplace_back(kSourceAlignmentKey, value);
      kv.emplace_back(key, GgufValue::U32(static_cast<uint32_t>(kPackedAlignment)));
    } else {
      kv.emplace_back(key, value);
    }
  }
  if (!had_alignment) kv.emplace_back(k::kAlignment, GgufValue::U32(static_cast<uint32_t>(kPackedAlignment)));
  kv.emplace_back(kFormatKey, GgufValue::U32(kPackedFormat));
  kv.emplace_back(kArchKey, GgufValue::Str(model->config().arch_name));
  kv.emplace_back(kLayoutKey, GgufValue::U32(kRepackLayoutVersion));
  kv.emplace_back(kSimdKey, GgufValue::Str(ActiveSimdTarget()));
  kv.emplace_back(kFingerprintKey, GgufValue::Str(model->fingerprint_hex()));
  kv.emplace_back(kTensorsKey, GgufValue::StrArray(packed_names));
  GgufWriter w(f.version());
  for (auto& [key, value] : kv) w.Set(key, value);
  w.Set(kStructureKey, GgufValue::Str(Hex(PackedStructureHash(kv, f.tensors(), model->tokenizer().Fingerprint()))));
  w.Set(kChecksumsKey, std::move(sums));
  for (const GgufTensorInfo& t : f.tensors()) TLR_RETURN_IF_ERROR(w.AddTensorLazy(t.name, t.type, t.dims, fill(t)));
  return w.WriteFile(out, progress);
}

Status WriteUnpackedGguf(const std::string& in, const std::string& out,
                         const std::function<void(size_t, size_t)>& progress) {
  {
    TLR_ASSIGN_OR_RETURN(GgufFile plain, GgufFile::Open(in));
    TLR_ASSIGN_OR_RETURN(std::optional<PackedInfo> packed, ReadPackedInfo(plain));
    if (!packed) return Status::Error("'" + in + "' is a plain GGUF, not a packed one (tlr convert without --unpack packs it)");
  }
  Model::Options opts;
  opts.weight_cache = "off";
  TLR_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(in, opts));  // checks every checksum
  const GgufFile& f = model->file();
  TLR_ASSIGN_OR_RETURN(std::optional<PackedInfo> info, ReadPackedInfo(f));
  std::map<const GgufTensorInfo*, WeightView> panel;
  for (const auto& [t, view] : model->PanelMatrices()) {
    if (view.repacked) panel[t] = view;
  }
  GgufWriter w(f.version());
  for (const auto& [key, value] : f.metadata()) {
    if (key == k::kArchitecture) {
      w.Set(key, GgufValue::Str(info->arch));
    } else if (key == k::kAlignment) {
      if (info->source_alignment) w.Set(key, *info->source_alignment);
    } else if (!IsPackedKey(key)) {
      w.Set(key, value);
    }
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    auto it = panel.find(&t);
    GgufWriter::Filler fill = CopyOf(&t);
    if (it != panel.end()) {
      const WeightView view = it->second;
      fill = [view](std::span<uint8_t> bytes) {
        for (int64_t r = 0; r < view.n_rows; ++r) UnrepackRow(view, r, bytes.data() + r * view.row_bytes);
        return Status::Ok();
      };
    }
    TLR_RETURN_IF_ERROR(w.AddTensorLazy(t.name, t.type, t.dims, std::move(fill)));
  }
  return w.WriteFile(out, progress);
}

}  // namespace tlr
