// safetensors files (routing layer): the tensor format PyTorch users exchange weights and data
// in (Hugging Face's: an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the bytes). Router training dumps its features in it and
// `tlr router import` reads a PyTorch router's state_dict from it.
//
// Reading checks everything a damaged or hostile file can get wrong (header size, JSON, dtypes,
// shapes against byte ranges, ranges inside the file, overlaps) and names it in the error.
// Writing is atomic (a temporary file renamed into place).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace tlr {

struct SafeTensor {
  std::string dtype;             // "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;     // little-endian, row-major
  int64_t elements() const;
};

struct SafeTensorsFile {
  std::map<std::string, SafeTensor> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__" (strings only)
};

// Bytes of one element of a dtype (0: unknown dtype).
int SafeTensorDtypeSize(const std::string& dtype);

Expected<SafeTensorsFile> ReadSafeTensors(const std::string& path);
// The same from bytes in memory; `name` (a file's) begins the errors.
Expected<SafeTensorsFile> ParseSafeTensors(std::string_view bytes, const std::string& name = "");
Status WriteSafeTensors(const std::string& path, const SafeTensorsFile& file);
// The bytes WriteSafeTensors writes.
Expected<std::vector<uint8_t>> SafeTensorsBytes(const SafeTensorsFile& file);

// A tensor's values as floats (F32, F16, BF16, F64), or an error naming the tensor.
Expected<std::vector<float>> SafeTensorFloats(const std::string& name, const SafeTensor& t);

// Tensors made from values.
SafeTensor MakeF32Tensor(std::vector<int64_t> shape, const std::vector<float>& values);
SafeTensor MakeI32Tensor(std::vector<int64_t> shape, const std::vector<int32_t>& values);
SafeTensor MakeU8Tensor(std::vector<int64_t> shape, const std::vector<uint8_t>& values);

}  // namespace tlr
