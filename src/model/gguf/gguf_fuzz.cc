// libFuzzer target for the GGUF reader (model layer, fuzz label). Any input must parse or
// fail cleanly; whatever parses must survive a write/read round trip unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <vector>

#include "model/gguf/gguf_reader.h"
#include "model/gguf/gguf_writer.h"

namespace {
// Serialises a parsed file again with the writer; nullopt when the writer refuses it (its
// limits are stricter, e.g. tensor names of 64+ bytes that ggml could not load).
std::optional<std::vector<uint8_t>> Rewrite(const tlr::GgufFile& f) {
  tlr::GgufWriter w(f.version());
  for (const auto& [k, v] : f.metadata()) w.Set(k, v);
  for (const auto& t : f.tensors()) {
    if (!w.AddTensor(t.name, t.type, t.dims, {t.data, t.n_bytes}).ok()) return std::nullopt;
  }
  auto bytes = w.ToBytes();
  if (!bytes.ok()) return std::nullopt;
  return std::move(bytes).value();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = tlr::GgufFile::FromBytes({data, size});
  if (!f.ok()) return 0;
  size_t rendered = 0;
  for (const auto& [k, v] : f->metadata()) rendered += v.ToString(4).size();
  const auto once = Rewrite(*f);
  if (!once) return 0;
  // What the writer wrote must parse, and writing that again must give the same bytes
  // (compared as bytes so that NaN floats count as equal to themselves).
  auto again = tlr::GgufFile::FromBytes(*once);
  if (!again.ok()) std::abort();
  const auto twice = Rewrite(*again);
  if (!twice || *twice != *once) std::abort();
  return rendered == SIZE_MAX;
}
