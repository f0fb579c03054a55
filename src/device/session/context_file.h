// A conversation's SLM context in a file (device layer): an app saves it when it closes and
// restores it in a new process, so the conversation goes on without prefilling its history
// again.
//
// Format (little-endian; version 1):
//   "TLRCTX01"                       8 bytes
//   model fingerprint                u64 (Model::fingerprint: architecture, shapes, vocabulary,
//                                         tensor names, types and sampled bytes)
//   KV type, layers, KV heads, head dim   4 x u32
//   n                                u64 (positions held)
//   tokens                           n x i32
//   rows                             u64 byte count, then KvCache::Rows()
//   checksum                         u64 FNV-1a of everything before
// Loading checks every field against the model and the file's length before it allocates or
// copies anything: a file from another model, another KV type, a truncated or corrupt file is a
// clear error, never a crash or a wrong cache.
#pragma once

#include <string>

#include "device/decode/decoder.h"
#include "model/model.h"
#include "util/status.h"

namespace tlr {

// Writes `context` (its cache and the tokens it holds) atomically to `path`.
Status SaveSlmContext(const std::string& path, const Model& slm, const SlmContext& context);

// Reads a context saved for `slm`; its cache gets room for max(n_ctx, the positions it holds).
Expected<SlmContext> LoadSlmContext(const std::string& path, const Model& slm, int64_t n_ctx);

}  // namespace tlr
