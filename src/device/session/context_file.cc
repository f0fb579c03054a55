// A conversation's SLM context in a file (see context_file.h).
#include "device/session/context_file.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "util/hash.h"
#include "util/mapped_file.h"

namespace tlr {

namespace {

constexpr char kMagic[8] = {'T', 'L', 'R', 'C', 'T', 'X', '0', '1'};

template <typename T>
void Put(std::vector<uint8_t>* out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out->insert(out->end(), p, p + sizeof v);
}

// Reads fields in order; the first short read fails every later one.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> b) : b_(b) {}
  template <typename T>
  bool Get(T* v) {
    if (b_.size() - at_ < sizeof *v) return false;
    std::memcpy(v, b_.data() + at_, sizeof *v);
    at_ += sizeof *v;
    return true;
  }
  std::span<const uint8_t> Take(uint64_t n) {
    if (n > b_.size() - at_) return {};
    auto s = b_.subspan(at_, static_cast<size_t>(n));
    at_ += static_cast<size_t>(n);
    return s;
  }
  size_t at() const { return at_; }
  size_t left() const { return b_.size() - at_; }

 private:
  std::span<const uint8_t> b_;
  size_t at_ = 0;
};

std::string Hex(uint64_t v) {
  char buf[17];
  return std::string(HexU64(v, buf));
}

}  // namespace

Status SaveSlmContext(const std::string& path, const Model& slm, const SlmContext& context) {
  if (!context.has_cache()) return Status::Error("the conversation has no context to save yet");
  const KvCache& c = context.cache;
  const int64_t n = std::min<int64_t>(c.size(), static_cast<int64_t>(context.tokens.size()));
  if (n != c.size()) return Status::Error("internal error: the context's tokens and cache disagree");
  std::vector<uint8_t> out(kMagic, kMagic + sizeof kMagic);
  Put<uint64_t>(&out, slm.fingerprint());
  Put<uint32_t>(&out, static_cast<uint32_t>(c.type()));
  Put<uint32_t>(&out, static_cast<uint32_t>(c.n_layers()));
  Put<uint32_t>(&out, static_cast<uint32_t>(c.n_kv_heads()));
  Put<uint32_t>(&out, static_cast<uint32_t>(c.head_dim()));
  Put<uint64_t>(&out, static_cast<uint64_t>(n));
  for (int64_t i = 0; i < n; ++i) Put<int32_t>(&out, context.tokens[static_cast<size_t>(i)]);
  const std::vector<uint8_t> rows = c.Rows();
  Put<uint64_t>(&out, rows.size());
  out.insert(out.end(), rows.begin(), rows.end());
  Put<uint64_t>(&out, Fnv1a(kFnvOffset, out.data(), out.size()));
  return WriteFileAtomic(path, out);
}

Expected<SlmContext> LoadSlmContext(const std::string& path, const Model& slm, int64_t n_ctx) {
  TLR_ASSIGN_OR_RETURN(MappedFile f, MappedFile::Open(path));
  const std::string what = "'" + path + "': ";
  std::span<const uint8_t> b = f.bytes();
  if (b.size() < sizeof kMagic + 8 || std::memcmp(b.data(), kMagic, sizeof kMagic) != 0) {
    return Status::Error(what + "not a saved TLR conversation context");
  }
  uint64_t sum = 0;
  std::memcpy(&sum, b.data() + b.size() - 8, 8);
  if (sum != Fnv1a(kFnvOffset, b.data(), b.size() - 8)) {
    return Status::Error(what + "the file is corrupt or truncated (checksum mismatch)");
  }
  Reader r(b.first(b.size() - 8));
  r.Take(sizeof kMagic);
  uint64_t fingerprint = 0, n = 0, rows_bytes = 0;
  uint32_t type = 0, layers = 0, heads = 0, head_dim = 0;
  if (!r.Get(&fingerprint) || !r.Get(&type) || !r.Get(&layers) || !r.Get(&heads) || !r.Get(&head_dim) || !r.Get(&n)) {
    return Status::Error(what + "the file is truncated");
  }
  if (fingerprint != slm.fingerprint()) {
    return Status::Error(what + "saved with another model (fingerprint " + Hex(fingerprint) + ", this SLM's is " +
                         Hex(slm.fingerprint()) + ")");
  }
  if (type != static_cast<uint32_t>(slm.kv_type())) {
    return Status::Error(what + "saved with another KV cache type (--kv-type) than this SLM uses");
  }
  const ModelConfig& cfg = slm.config();
  if (layers != static_cast<uint64_t>(cfg.n_layers) || heads != static_cast<uint64_t>(cfg.n_kv_heads) ||
      head_dim != static_cast<uint64_t>(cfg.head_dim)) {
    return Status::Error(what + "its KV shape does not match this SLM's");
  }
  if (n == 0 || n > r.left() / sizeof(int32_t) || n > (uint64_t{1} << 24)) {
    return Status::Error(what + "holds an impossible number of positions (" + std::to_string(n) + ")");
  }
  SlmContext c;
  c.tokens.resize(static_cast<size_t>(n));
  for (int32_t& t : c.tokens) {
    r.Get(&t);
    if (t < 0 || t >= cfg.n_vocab) return Status::Error(what + "holds a token id outside the vocabulary");
  }
  if (!r.Get(&rows_bytes) || rows_bytes != r.left()) return Status::Error(what + "the KV rows are truncated");
  c.n_ctx = std::max<int64_t>(n_ctx, static_cast<int64_t>(n));
  TLR_ASSIGN_OR_RETURN(c.cache, slm.NewCache(c.n_ctx, KvMemory::kOnDemand));
  Status st = c.cache.RestoreRows(static_cast<int64_t>(n), r.Take(rows_bytes));
  if (!st.ok()) return st.WithPrefix(what.substr(0, what.size() - 2));
  return c;
}

}  // namespace tlr
