// A router from PyTorch (routing layer): the layers of a router network saved as a
// state_dict in safetensors (`safetensors.torch.save_file(model.state_dict(), path)`, or
// tools/train/router_torch.py), for `tlr router import`.
//
// The network is found by structure, not by names (prefixes differ from one codebase to
// another): the linear layers are the 2-D ".weight" tensors (with their ".bias", if any) in
// the state_dict's order (keys compared with their numbers as numbers: "net.4" before "net.10"),
// and a BatchNorm1d is a prefix with "running_mean" and "running_var" (and, when affine,
// "weight" and "bias"; "num_batches_tracked" is ignored), applied to the output of the linear
// layer before it. Between linear layers: ReLU; after the last: sigmoid, read as the router's
// confidence that the SLM's token is fine (with `invert`, as the probability of routing or
// deferring, as Co-LLM's own head gives it: the confidence is 1 minus it). Dropout has no
// weights and is an identity at inference.
//   citer  Linear(h, 2h), BatchNorm1d(2h), ReLU, Dropout, Linear(2h, h), ReLU, Linear(h, 1)
//   colm   Linear(h, 1)   (Co-LLM's deferral head)
// BatchNorm is folded into the linear layer before it (running statistics, `bn_eps`), as the
// trainer here stores its own routers.
#pragma once

#include <vector>

#include "routing/router.h"
#include "routing/safetensors.h"

namespace tlr {

struct RouterImportOptions {
  int64_t hidden_size = 0;           // the SLM's n_embd: the first layer's input
  std::optional<RouterKind> kind;    // unset: from the layer count (3: citer, 1: colm)
  bool invert = false;               // the network outputs the probability of routing (deferring)
  float bn_eps = 1e-5f;              // BatchNorm1d's default
};

// The dense layers (BatchNorm folded), and the kind they make.
Expected<std::vector<DenseLayer>> RouterLayersFromStateDict(const SafeTensorsFile& f, const RouterImportOptions& opts,
                                                            RouterKind* kind);

}  // namespace tlr
