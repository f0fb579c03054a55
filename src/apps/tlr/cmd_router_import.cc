// `tlr router import` (apps layer): a router file from a PyTorch router network saved as a
// safetensors state_dict (routing/router_import.h), checked against PyTorch's own scores when
// given them.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "apps/tlr/commands.h"
#include "apps/tlr/options.h"
#include "model/model.h"
#include "ops/thread_pool.h"
#include "quant/ggml_type.h"
#include "routing/r2r_net.h"
#include "routing/router_import.h"

namespace tlr::cli {

namespace {

struct ImportOwn {
  std::string from, out, kind = "auto", weight_type = "f32", check;
  float threshold = 0.5f, bn_eps = 1e-5f, tolerance = 1e-5f;
  bool invert = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ImportOwn, from, out, kind, weight_type, check, threshold, bn_eps, tolerance,
                                   invert)

}  // namespace

Command AddRouterImport(CLI::App* router_app) {
  auto [app, o, p] = NewCommand<ImportOwn>(
      router_app, "import", "Make a router file from a PyTorch router (a safetensors state_dict)");
  Example(app->add_option("--from", o->from, "The network's state_dict as safetensors (safetensors.torch.save_file)")
              ->required(),
          "y.safetensors");
  Example(app->add_option("-o,--out", o->out, "Router GGUF to write")->required(), "r2.gguf");
  Example(app->add_option("--kind", o->kind, "citer (Linear h-2h, BatchNorm, Linear 2h-h, Linear h-1), colm (Linear "
                                             "h-1), r2r (R2R's router: hidden state, token, top-K logits; "
                                             "tools/train/r2r_torch.py converts its checkpoint), or auto (r2r when "
                                             "the file has its tensors, else from the number of linear layers)")
              ->capture_default_str()->check(CLI::IsMember({"auto", "citer", "colm", "r2r"})),
          "colm");
  Example(app->add_flag("--invert", o->invert, "The network's sigmoid is the probability of routing to the LLM (as "
                                              "Co-LLM's deferral head gives it), not of keeping the SLM's token (as "
                                              "router_torch.py trains)"),
          "");
  Example(app->add_option("--threshold", o->threshold, "Recommended threshold to store (calibrate it: tlr router "
                                                       "calibrate)")
              ->capture_default_str()->check(CLI::Range(0.0f, 1.0f)),
          "0.7");
  Example(app->add_option("--weight-type", o->weight_type, "How the file stores the matrices (f32: scores exactly as "
                                                           "PyTorch's; f16, q8_0: half and a quarter of the memory "
                                                           "and of what r2r reads per token, scores within "
                                                           "quantization error: give --check a --tolerance)")
              ->capture_default_str()->check(CLI::IsMember({"f32", "f16", "q8_0"})),
          "f16");
  Example(app->add_option("--bn-eps", o->bn_eps, "BatchNorm1d's eps")->capture_default_str(), "0.001");
  Example(app->add_option("--check", o->check,
                          "safetensors with \"features\" [n, hidden] and PyTorch's \"scores\" [n] on them (after the "
                          "sigmoid; r2r: also the SLM's \"logits\" [n, vocabulary] there, and scores are 1 - "
                          "P(critical)): the imported router must give the same scores within --tolerance")
              ->check(CLI::ExistingFile),
          "@demo/test.jsonl");
  Example(app->add_option("--tolerance", o->tolerance, "Largest allowed |difference| for --check")
              ->capture_default_str(),
          "0.01");
  AddOptions(app, kCmdRouterImport, p.get(), "--slm @demo/slm.gguf --from x.safetensors -o r.gguf");
  app->footer("Example (tools/train/router_torch.py trains one on `tlr router train --dump-features DIR`):\n"
              "  tlr router import --slm slm.gguf --from router.safetensors -o router.gguf --check scores.safetensors");
  return MakeCommand(app, p, o, [o = o, p = p, app = app](const std::string& cmd) -> int {
    if (o->check.empty() && app->get_option("--tolerance")->count() > 0) {
      return ReportError(cmd, "--tolerance does nothing without --check (it bounds the check's differences)");
    }
    auto slm = Model::Load(p->slm);
    if (!slm.ok()) return ReportError(cmd, "SLM: " + slm.status().message());
    auto st = ReadSafeTensors(o->from);
    if (!st.ok()) return ReportError(cmd, "--from: " + st.status().message());
    RouterImportOptions io;
    io.hidden_size = (*slm)->config().n_embd;
    io.invert = o->invert;
    io.bn_eps = o->bn_eps;
    if (o->kind != "auto") io.kind = o->kind == "citer" ? RouterKind::kCiter : RouterKind::kColm;
    const bool r2r = o->kind == "r2r" || (o->kind == "auto" && st->tensors.count("combined_projection.weight"));
    if (r2r && o->invert) {
      return ReportError(cmd, "--invert is for citer and colm networks (R2R's router gives P(critical), which TLR reads as "
                              "1 - confidence already)");
    }
    if (r2r && app->get_option("--bn-eps")->count() > 0) return ReportError(cmd, "--bn-eps is for citer networks (R2R's router has no BatchNorm)");
    RouterKind kind = RouterKind::kR2r;
    Expected<std::vector<DenseLayer>> layers = std::vector<DenseLayer>{};
    if (!r2r) layers = RouterLayersFromStateDict(*st, io, &kind);
    if (!layers.ok()) return ReportError(cmd, o->from + ": " + layers.status().message());
    if (kind == RouterKind::kColm && app->get_option("--bn-eps")->count() > 0) {
      return ReportError(cmd, "--bn-eps is for citer networks (a Co-LLM router has no BatchNorm)");
    }
    RouterInfo info;
    info.kind = kind;
    info.slm_fingerprint = (*slm)->fingerprint_hex();
    if (auto nm = (*slm)->file().GetString("general.name"); nm.ok()) info.slm_name = *nm;
    info.threshold = o->threshold;
    info.training_summary = nlohmann::json{{"imported_from", o->from}, {"invert", o->invert}}.dump();
    const GgmlType type = o->weight_type == "q8_0" ? GgmlType::kQ8_0 : o->weight_type == "f16" ? GgmlType::kF16 : GgmlType::kF32;
    Expected<Router> router = Status::Error("no router");
    if (r2r) {
      std::map<std::string, R2rNet::Tensor> params;
      for (const auto& [name, t] : st->tensors) {
        auto v = SafeTensorFloats(name, t);
        if (!v.ok()) return ReportError(cmd, o->from + ": " + v.status().message());
        params[name] = {t.shape, std::move(v).value()};
      }
      if (!params.count("token_embeddings.weight")) {  // R2R's saved checkpoints leave out the SLM's embedding
        const int64_t V = (*slm)->config().n_vocab, E = (*slm)->config().n_embd;
        R2rNet::Tensor e{{V, E}, std::vector<float>(static_cast<size_t>(V * E))};
        for (int64_t t = 0; t < V; ++t) (*slm)->EmbeddingRow(static_cast<int32_t>(t), e.v.data() + t * E);
        params["token_embeddings.weight"] = std::move(e);
      }
      auto net = R2rNet::FromParams(std::move(params));
      if (!net.ok()) return ReportError(cmd, o->from + ": " + net.status().message());
      TLR_CLI_CHECK(cmd, net->StoreMatricesAs(type));
      router = Router::FromR2r(info, std::move(net).value());
      if (router.ok()) {
        if (Status s = router->CheckCompatible(**slm); !s.ok()) return ReportError(cmd, o->from + ": " + s.message());
      }
    } else {
      router = Router::FromLayers(info, std::move(layers).value(), type);
    }
    if (!router.ok()) return ReportError(cmd, router.status().message());
    if (!o->check.empty()) {
      auto c = ReadSafeTensors(o->check);
      if (!c.ok()) return ReportError(cmd, "--check: " + c.status().message());
      auto x = c->tensors.find("features");
      auto y = c->tensors.find("scores");
      if (x == c->tensors.end() || y == c->tensors.end() || x->second.shape.size() != 2 ||
          x->second.shape[1] != io.hidden_size || y->second.elements() != x->second.shape[0]) {
        return ReportError(cmd, "--check: needs \"features\" [n, " + std::to_string(io.hidden_size) + "] and \"scores\" [n]");
      }
      auto xs = SafeTensorFloats("features", x->second);
      auto ys = SafeTensorFloats("scores", y->second);
      if (!xs.ok() || !ys.ok()) return ReportError(cmd, "--check: " + (xs.ok() ? ys.status() : xs.status()).message());
      const int64_t n = x->second.shape[0];
      std::vector<float> mine(static_cast<size_t>(n));
      ThreadPool pool(1);
      if (r2r) {
        const int64_t V = (*slm)->config().n_vocab;
        auto l = c->tensors.find("logits");
        if (l == c->tensors.end() || l->second.shape != std::vector<int64_t>{n, V}) {
          return ReportError(cmd, "--check: an r2r router needs the SLM's \"logits\" [" + std::to_string(n) + ", " +
                                      std::to_string(V) + "] too");
        }
        auto ls = SafeTensorFloats("logits", l->second);
        if (!ls.ok()) return ReportError(cmd, "--check: " + ls.status().message());
        for (int64_t i = 0; i < n; ++i) {
          mine[static_cast<size_t>(i)] = router->Confidence(xs->data() + i * io.hidden_size, ls->data() + i * V, V, &pool);
        }
      } else {
        router->ConfidenceBatch(xs->data(), n, mine.data(), &pool);
      }
      double worst = 0;
      for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(static_cast<double>(mine[i]) - (*ys)[i]));
      std::printf("checked %lld scores against PyTorch's: largest difference %.3g\n", static_cast<long long>(n), worst);
      if (!(worst <= o->tolerance)) {
        return ReportError(cmd, "the imported router's scores differ from PyTorch's by up to " + std::to_string(worst) +
                                    " (more than --tolerance " + std::to_string(o->tolerance) + "); nothing written");
      }
    }
    TLR_CLI_CHECK(cmd, router->Save(o->out));
    std::printf("%s router (%lld parameters) for %s written to %s\n", std::string(RouterKindName(kind)).c_str(),
                static_cast<long long>(router->n_params()), p->slm.c_str(), o->out.c_str());
    return 0;
  });
}

}  // namespace tlr::cli
