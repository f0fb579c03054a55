// The weight cache (see weight_cache.h).
#include "model/weight_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "util/hash.h"

namespace tlr {

namespace {

constexpr char kMagic[4] = {'T', 'L', 'R', 'W'};
constexpr uint32_t kFormat = 2;
constexpr uint64_t kAlign = uint64_t{2} << 20;  // 2 MiB: huge-page boundaries in the mapping
constexpr uint64_t kPage = 4096;                // every matrix starts on a page

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Little-endian writer / reader of the header and table.
struct Out {
  std::vector<uint8_t> b;
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
  }
};
struct In {
  std::span<const uint8_t> b;
  size_t p = 0;
  bool ok = true;
  uint64_t Get(int n) {
    if (p + static_cast<size_t>(n) > b.size()) {
      ok = false;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(b[p + static_cast<size_t>(i)]) << (8 * i);
    p += static_cast<size_t>(n);
    return v;
  }
  std::string Str() {
    const uint64_t n = Get(4);
    if (!ok || n > 4096 || p + n > b.size()) {
      ok = false;
      return "";
    }
    std::string s(reinterpret_cast<const char*>(b.data() + p), n);
    p += n;
    return s;
  }
};

uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

}  // namespace

std::vector<uint64_t> WeightCacheLayout(const std::vector<uint64_t>& sizes, uint64_t start) {
  std::vector<uint64_t> offsets(sizes.size(), 0);
  // Matrices of 2 MiB or more start on 2 MiB boundaries, in order.
  struct Gap {
    uint64_t from, to;
  };
  std::vector<Gap> gaps;
  uint64_t off = RoundUp(start, kPage);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < kAlign) continue;
    const uint64_t at = RoundUp(off, kAlign);
    if (at > off) gaps.push_back({off, at});
    offsets[i] = at;
    off = RoundUp(at + sizes[i], kPage);
  }
  // The smaller ones fill the gaps before those boundaries (largest first, first gap that
  // holds it), the rest follow the last one: no stretch of the file is left empty, so reading
  // ahead and mapping around a fault never bring in pages that hold nothing.
  std::vector<size_t> small;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < kAlign) small.push_back(i);
  }
  std::stable_sort(small.begin(), small.end(), [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  for (size_t i : small) {
    bool placed = false;
    for (Gap& g : gaps) {
      if (g.to - g.from >= sizes[i]) {
        offsets[i] = g.from;
        g.from = std::min(g.to, RoundUp(g.from + sizes[i], kPage));
        placed = true;
        break;
      }
    }
    if (!placed) {
      offsets[i] = off;
      off = RoundUp(off + sizes[i], kPage);
    }
  }
  return offsets;
}

uint64_t WeightChecksum(std::span<const uint8_t> bytes) {
  constexpr uint64_t kP1 = 0x9e3779b185ebca87ull, kP2 = 0xc2b2ae3d27d4eb4full;
  uint64_t lane[4] = {kP1, kP2, kP1 ^ kP2, bytes.size()};
  const uint8_t* p = bytes.data();
  size_t n = bytes.size(), i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      lane[k] = Rotl(lane[k] + w * kP2, 31) * kP1;
    }
  }
  uint64_t h = Rotl(lane[0], 1) + Rotl(lane[1], 7) + Rotl(lane[2], 12) + Rotl(lane[3], 18);
  for (; i < n; ++i) h = (h ^ p[i]) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  return h;
}

std::string WeightCache::PathFor(const std::string& model_path, uint64_t fingerprint, const std::string& dir) {
  namespace fs = std::filesystem;
  char hex[17], where[17];
  // In a folder shared by several models, each copy of a model has its own cache (the file's
  // place is in the name): two copies would otherwise rebuild each other's at every load.
  std::error_code ec;
  fs::path place = fs::absolute(model_path, ec);
  if (!ec) place = place.lexically_normal();
  const std::string place_s = place.string();
  const std::string name = fs::path(model_path).filename().string() + "." + std::string(HexU64(fingerprint, hex)) + "." +
                           std::string(HexU64(Fnv1a(kFnvOffset, place_s.data(), place_s.size()), where)).substr(0, 8) +
                           ".tlrw";
  if (!dir.empty()) return (fs::path(dir) / name).string();
  const fs::path beside = fs::path(model_path).parent_path();
  if (access((beside.empty() ? fs::path(".") : beside).c_str(), W_OK) == 0) return model_path + ".tlrw";
  fs::path base;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) base = x;
  else if (const char* h = std::getenv("HOME"); h && *h) base = fs::path(h) / ".cache";
  else return model_path + ".tlrw";  // nowhere better: writing fails and the model loads as before
  return (base / "tlr" / name).string();
}

Expected<WeightCacheKey> WeightCache::KeyFor(const std::string& model_path, uint64_t fingerprint, uint32_t layout_version,
                                             const std::string& simd_target, const std::vector<std::string>& shards) {
  WeightCacheKey k;
  uint64_t shards_hash = kFnvOffset;
  for (const std::string& p : shards.empty() ? std::vector<std::string>{model_path} : shards) {
    struct stat st;
    if (stat(p.c_str(), &st) != 0) return Status::Error("cannot stat '" + p + "'");
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    k.source_size += size;
    k.source_mtime_ns = mtime;
    shards_hash = Fnv1a(Fnv1a(shards_hash, &size, sizeof size), &mtime, sizeof mtime);
  }
  // A split model: every shard's size and time, in one number where one file's time goes.
  if (shards.size() > 1) k.source_mtime_ns = static_cast<int64_t>(shards_hash);
  k.fingerprint = fingerprint;
  k.layout_version = layout_version;
  k.simd_target = simd_target;
  return k;
}

Status WeightCache::Write(const std::string& path, const WeightCacheKey& key, const std::vector<WeightCacheMatrix>& matrices) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  // The table's size first, so the offsets can be computed.
  Out table;
  for (const auto& m : matrices) {
    table.Str(m.name);
    table.U64(0);
    table.U64(0);
    table.U32(0);
    table.U64(0);
  }
  Out head;
  head.b.insert(head.b.end(), kMagic, kMagic + 4);
  head.U32(kFormat);
  head.U64(key.source_size);
  head.U64(static_cast<uint64_t>(key.source_mtime_ns));
  head.U64(key.fingerprint);
  head.U32(key.layout_version);
  head.Str(key.simd_target);
  head.U32(static_cast<uint32_t>(matrices.size()));
  std::vector<uint64_t> sizes;
  for (const auto& m : matrices) sizes.push_back(m.bytes.size());
  const std::vector<uint64_t> offsets = WeightCacheLayout(sizes, head.b.size() + table.b.size());
  table.b.clear();
  for (size_t i = 0; i < matrices.size(); ++i) {
    table.Str(matrices[i].name);
    table.U64(offsets[i]);
    table.U64(matrices[i].bytes.size());
    table.U32(matrices[i].repacked ? 1 : 0);
    table.U64(WeightChecksum(matrices[i].bytes));
  }
  AtomicFileWriter out;
  TLR_RETURN_IF_ERROR(out.Open(path));
  std::vector<uint8_t> first = head.b;
  first.insert(first.end(), table.b.begin(), table.b.end());
  TLR_RETURN_IF_ERROR(out.Write(first));
  // In file order; what lies between two matrices (page padding, a gap nothing filled) is a hole.
  std::vector<size_t> order(matrices.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return offsets[a] < offsets[b]; });
  uint64_t at = first.size();
  for (size_t i : order) {
    if (offsets[i] > at) TLR_RETURN_IF_ERROR(out.Skip(offsets[i] - at));
    TLR_RETURN_IF_ERROR(out.Write(matrices[i].bytes));
    at = offsets[i] + matrices[i].bytes.size();
  }
  return out.Commit();
}

Expected<WeightCache> WeightCache::Open(const std::string& path, const WeightCacheKey& key,
                                        const std::map<std::string, uint64_t>& need, bool checksums) {
  TLR_ASSIGN_OR_RETURN(MappedFile map, MappedFile::Open(path, /*huge=*/true));
  In in{map.bytes()};
  if (map.size() < 8 || std::memcmp(map.bytes().data(), kMagic, 4) != 0) return Status::Error("not a weight cache");
  in.p = 4;
  if (in.Get(4) != kFormat) return Status::Error("written by another TLR version (format)");
  const uint64_t size = in.Get(8), mtime = in.Get(8), fp = in.Get(8);
  const uint32_t layout = static_cast<uint32_t>(in.Get(4));
  const std::string simd = in.Str();
  const uint64_t n = in.Get(4);
  if (!in.ok) return Status::Error("truncated header");
  if (layout != key.layout_version) return Status::Error("written by another TLR version (weight layout " + std::to_string(layout) + ")");
  if (simd != key.simd_target) return Status::Error("made for another SIMD target (" + simd + ", this CPU runs " + key.simd_target + ")");
  if (fp != key.fingerprint) return Status::Error("made for another model");
  if (size != key.source_size || static_cast<int64_t>(mtime) != key.source_mtime_ns) {
    return Status::Error("the model file changed since it was made");
  }
  if (n != need.size()) return Status::Error("holds " + std::to_string(n) + " matrices, the model has " + std::to_string(need.size()));
  WeightCache c;
  std::vector<std::pair<Entry, uint64_t>> sums;
  for (uint64_t i = 0; i < n; ++i) {
    const std::string name = in.Str();
    Entry e;
    e.offset = in.Get(8);
    e.bytes = in.Get(8);
    e.repacked = in.Get(4) != 0;
    const uint64_t sum = in.Get(8);
    if (!in.ok) return Status::Error("truncated table");
    auto it = need.find(name);
    if (it == need.end() || it->second != e.bytes) return Status::Error("matrix '" + name + "' is not the model's");
    if (e.offset % kPage != 0 || e.offset > map.size() || e.bytes > map.size() - e.offset) {
      return Status::Error("matrix '" + name + "' lies outside the file (truncated?)");
    }
    sums.emplace_back(e, sum);
    c.entries_[name] = e;
  }
  if (c.entries_.size() != need.size()) return Status::Error("names a matrix twice");
  for (const auto& [e, sum] : sums) {
    if (!checksums) break;
    if (WeightChecksum(map.bytes().subspan(e.offset, e.bytes)) != sum) return Status::Error("damaged (a checksum differs)");
  }
  c.map_ = std::move(map);
  return c;
}

uint64_t WeightCache::bytes() const {
  uint64_t n = 0;
  for (const auto& [name, e] : entries_) n += e.bytes;
  return n;
}

const uint8_t* WeightCache::Data(const std::string& name, bool* repacked) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return nullptr;
  *repacked = it->second.repacked;
  return map_.bytes().data() + it->second.offset;
}

}  // namespace tlr
