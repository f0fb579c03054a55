// libFuzzer target for the router files TLR reads (routing layer, fuzz label): a router GGUF as
// `tlr` loads it (the GGUF reader, then Router::FromGguf's checks), and a PyTorch state_dict in
// safetensors as `tlr router import` reads it (citer/colm layers, or an R2R network). An input
// starting with "GGUF" is the first, any other the second. Any input must load or fail with a
// message; a router that loads must score positions, and survive its own write and read with
// the same scores bit for bit; a safetensors file that parses must survive its own write and
// read unchanged.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "model/gguf/gguf_reader.h"
#include "routing/router.h"
#include "routing/router_import.h"
#include "routing/safetensors.h"

namespace {

// Aborts (a finding) saying which property broke, and the error a loader gave, if any.
void Check(bool ok, const char* what, const tlr::Status& why = tlr::Status::Ok()) {
  if (ok) return;
  std::fprintf(stderr, "router_fuzz: %s %s\n", what, why.message().c_str());
  std::abort();
}

// Confidences for two positions (hidden states and logits from a fixed ramp).
std::vector<float> Scores(tlr::Router& r) {
  const int64_t dim = std::max<int64_t>(r.info().input_dim, 1);
  const int64_t vocab = r.r2r() ? r.r2r()->vocab : 16;
  std::vector<float> hidden(static_cast<size_t>(dim)), logits(static_cast<size_t>(vocab)), out;
  for (int pos = 0; pos < 2; ++pos) {
    for (int64_t i = 0; i < dim; ++i) hidden[static_cast<size_t>(i)] = std::sin(0.37f * static_cast<float>(i + pos));
    for (int64_t i = 0; i < vocab; ++i) logits[static_cast<size_t>(i)] = std::cos(0.11f * static_cast<float>(i * (pos + 1)));
    out.push_back(r.Confidence(hidden.data(), logits.data(), vocab, nullptr));
  }
  return out;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A router must save, and what it saved must load and score the same.
void CheckRoundTrip(tlr::Router& r) {
  const std::vector<float> scores = Scores(r);
  auto bytes = r.ToBytes();
  Check(bytes.ok(), "a router that loaded did not save:", bytes.status());
  auto file = tlr::GgufFile::FromBytes(*bytes);
  Check(file.ok(), "a saved router is not a GGUF:", file.status());
  auto again = tlr::Router::FromGguf(*file, "saved");
  Check(again.ok(), "a saved router did not load:", again.status());
  Check(SameBits(Scores(*again), scores), "a saved router scores differently");
}

tlr::GgmlType TypeFor(size_t size) {
  const tlr::GgmlType types[] = {tlr::GgmlType::kF32, tlr::GgmlType::kF16, tlr::GgmlType::kQ8_0};
  return types[size % 3];
}

void StateDict(const uint8_t* data, size_t size) {
  auto f = tlr::ParseSafeTensors({reinterpret_cast<const char*>(data), size}, "fuzz");
  if (!f.ok()) return;
  auto bytes = tlr::SafeTensorsBytes(*f);
  Check(bytes.ok(), "a safetensors file that parsed did not write:", bytes.status());
  auto g = tlr::ParseSafeTensors({reinterpret_cast<const char*>(bytes->data()), bytes->size()});
  Check(g.ok(), "a written safetensors file did not parse:", g.status());
  Check(g->metadata == f->metadata && g->tensors.size() == f->tensors.size(), "a written safetensors file differs");
  for (const auto& [name, t] : f->tensors) {
    auto it = g->tensors.find(name);
    Check(it != g->tensors.end() && it->second.dtype == t.dtype && it->second.shape == t.shape &&
          it->second.data == t.data, "a written safetensors tensor differs");
  }
  // As `tlr router import` reads it: citer/colm layers for the hidden size of the first matrix...
  tlr::RouterImportOptions io;
  for (const auto& [name, t] : f->tensors) {
    if (t.shape.size() == 2) {
      io.hidden_size = t.shape[1];
      break;
    }
  }
  tlr::RouterKind kind = tlr::RouterKind::kCiter;
  auto layers = tlr::RouterLayersFromStateDict(*f, io, &kind);
  if (layers.ok()) {
    tlr::RouterInfo info;
    info.kind = kind;
    auto r = tlr::Router::FromLayers(info, std::move(layers).value(), TypeFor(size));
    if (r.ok()) CheckRoundTrip(*r);
  }
  // ...or an R2R network.
  std::map<std::string, tlr::R2rNet::Tensor> params;
  for (const auto& [name, t] : f->tensors) {
    auto v = tlr::SafeTensorFloats(name, t);
    if (!v.ok()) return;
    params[name] = {t.shape, std::move(v).value()};
  }
  auto net = tlr::R2rNet::FromParams(std::move(params));
  if (!net.ok() || !net->StoreMatricesAs(TypeFor(size)).ok()) return;
  auto r = tlr::Router::FromR2r({}, std::move(net).value());
  Check(r.ok(), "an R2R network that loaded made no router:", r.status());
  CheckRoundTrip(*r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= 4 && std::memcmp(data, "GGUF", 4) == 0) {
    auto f = tlr::GgufFile::FromBytes({data, size});
    if (!f.ok()) return 0;
    auto r = tlr::Router::FromGguf(*f, "fuzz");
    if (r.ok()) CheckRoundTrip(*r);
    return 0;
  }
  StateDict(data, size);
  return 0;
}
