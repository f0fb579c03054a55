// Test fixture (model layer): writes a GGUF's tensors into shards the way llama.cpp's
// gguf-split does, so tests open split models without an outside tool. The first shard holds
// all the metadata; every shard holds split.no (u16, from 0), split.count (u16) and
// split.tensors.count (i32); files are PREFIX-0000i-of-0000n.gguf, counting from 1; the
// tensors keep their order, spread evenly (shard 1 first).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "model/gguf/gguf_keys.h"
#include "model/gguf/gguf_reader.h"
#include "model/gguf/gguf_writer.h"

namespace tlr {

inline std::string SplitShardPath(const std::string& prefix, int no, int count) {
  char b[64];
  std::snprintf(b, sizeof b, "-%05d-of-%05d.gguf", no + 1, count);
  return prefix + b;
}

// Writes `in` as `count` shards; returns their paths, the first first.
inline Expected<std::vector<std::string>> WriteSplitGguf(const GgufFile& in, const std::string& prefix, int count) {
  namespace k = gguf_keys;
  std::vector<std::string> paths;
  const size_t n = in.tensors().size();
  for (int i = 0; i < count; ++i) {
    GgufWriter w(in.version());
    if (i == 0) {
      for (const auto& [key, value] : in.metadata()) {
        if (key.rfind("split.", 0) != 0) w.Set(key, value);
      }
    }
    w.Set(k::kSplitNo, GgufValue(static_cast<uint16_t>(i)));
    w.Set(k::kSplitCount, GgufValue(static_cast<uint16_t>(count)));
    w.Set(k::kSplitTensorsCount, GgufValue(static_cast<int32_t>(n)));
    for (size_t t = n * i / count; t < n * (i + 1) / count; ++t) {
      const GgufTensorInfo& ti = in.tensors()[t];
      TLR_RETURN_IF_ERROR(w.AddTensor(ti.name, ti.type, ti.dims, {ti.data, static_cast<size_t>(ti.n_bytes)}));
    }
    paths.push_back(SplitShardPath(prefix, i, count));
    TLR_RETURN_IF_ERROR(w.WriteFile(paths.back()));
  }
  return paths;
}

}  // namespace tlr
