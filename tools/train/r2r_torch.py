#!/usr/bin/env python3
"""R2R's router (thu-nics/R2R, r2r/models/router.py: HiddenStatesTokenLMHeadLogitsClassifier) for
`tlr router import --kind r2r`, three ways:

  --train DUMP        trained here on `tlr router train --dump-features DUMP` (the SLM's hidden
                      states, top-100 logits, tokens, CITER labels, and its embedding table), with
                      R2R's loss (BCE on "critical" = the SLM's token must be routed) and its frozen
                      token embedding; --scores writes 1,000 held-out positions for --check;

  --convert CKPT.pt   an R2R checkpoint (torch.save of {"model_type", "init_args", "common_args",
                      "state_dict", ...}, as its save_model writes) -> its state_dict as safetensors,
                      with the threshold and init_args as metadata;
  --random            a network of that layout with random weights (the test of the import: no
                      checkpoint can be downloaded where TLR is built), and with --check the scores
                      it gives on N random positions (hidden states, logits) for `--check`.

The module below is written here from R2R's definition (same parameter names and shapes, same
forward pass: LayerNorm'd inputs when normalize_input, the top-K logits through a projection,
[hidden, token embedding, logits features] through combined_projection, then the backbone's
input projection, pre-LayerNorm residual MLP blocks with GELU, and a LayerNorm'd output layer).
Its output is the logit of "critical" (route); the scores written are TLR's confidence,
1 - sigmoid(logit). Needs PyTorch (Debian: python3-torch; run with /usr/bin/python3).

  /usr/bin/python3 tools/train/r2r_torch.py --random --hidden 96 --vocab 512 --out r2r.safetensors --check c.safetensors
  build/bin/tlr router import --slm slm.gguf --kind r2r --from r2r.safetensors -o r2r.gguf --check c.safetensors
"""
import argparse
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from router_torch import auroc, load_dump, read_safetensors, write_safetensors  # noqa: E402


class Block(nn.Module):
    def __init__(self, d_in, d_out, expansion, dropout):
        super().__init__()
        self.layer_norm = nn.LayerNorm(d_in)
        self.mlp = nn.Sequential(nn.Linear(d_in, d_in * expansion), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(d_in * expansion, d_out), nn.Dropout(dropout))
        self.dim_change = nn.Linear(d_in, d_out) if d_in != d_out else nn.Identity()

    def forward(self, x):
        return self.dim_change(x) + self.mlp(self.layer_norm(x))


class Backbone(nn.Module):
    def __init__(self, d0, dims, expansion, dropout):
        super().__init__()
        self.input_projection = nn.Linear(d0, dims[0])
        widths = dims + [dims[-1]]
        self.blocks = nn.ModuleList(Block(widths[i], widths[i + 1], expansion, dropout) for i in range(len(widths) - 1))
        self.output_layer = nn.Sequential(nn.LayerNorm(dims[-1]), nn.Linear(dims[-1], 1))

    def forward(self, x):
        x = self.input_projection(x)
        for b in self.blocks:
            x = b(x)
        return self.output_layer(x)


class R2RRouter(nn.Module):
    def __init__(self, hidden, vocab, embed, topk, dims, expansion=4, dropout=0.1, normalize_input=False):
        super().__init__()
        self.normalize_input = normalize_input
        if normalize_input:
            self.layer_norm_hidden_states = nn.LayerNorm(hidden)
            self.layer_norm_token = nn.LayerNorm(embed)
        self.token_embeddings = nn.Embedding(vocab, embed)
        self.logits_projection = nn.Linear(topk, hidden)
        self.combined_projection = nn.Linear(hidden + embed + hidden, dims[0])
        self.backbone = Backbone(dims[0], dims, expansion, dropout)

    def forward(self, hidden_states, token, logits):
        e = self.token_embeddings(token)
        if self.normalize_input:
            hidden_states = self.layer_norm_hidden_states(hidden_states)
            e = self.layer_norm_token(e)
            logits = torch.softmax(logits, dim=-1)
        x = torch.cat([hidden_states, e, self.logits_projection(logits)], dim=-1)
        return self.backbone(self.combined_projection(x))


def train(a):
    torch.manual_seed(a.seed)
    m, x, y, v = load_dump(a.train)
    if "topk" not in m or "embeddings" not in m:
        sys.exit("r2r_torch.py: %s has no top logits or embeddings (dump it with a newer tlr)" % a.train)
    top, tok = [], []
    for sh in m["shards"]:
        t = read_safetensors(os.path.join(a.train, sh["file"]))
        top.append(t["top_logits"].float())
        tok.append(t["tokens"].long())
    top, tok = torch.cat(top), torch.cat(tok)
    emb = read_safetensors(os.path.join(a.train, m["embeddings"]))["embeddings"].float()
    vocab, hidden = emb.shape
    dims = [int(d) for d in a.dims.split(",")]
    net = R2RRouter(hidden, vocab, hidden, top.shape[1], dims, a.expansion, normalize_input=a.normalize_input)
    with torch.no_grad():
        net.token_embeddings.weight.copy_(emb)
    net.token_embeddings.weight.requires_grad = False  # R2R's freeze_lm_head
    opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=a.lr)
    loss_fn = nn.BCEWithLogitsLoss()
    tr = (~v).nonzero().squeeze(1)
    va = v.nonzero().squeeze(1)
    critical = 1 - y  # label 1: keep the SLM's token; R2R's target: 1 = route
    best = None
    for epoch in range(a.epochs):
        net.train()
        perm = tr[torch.randperm(len(tr))]
        for b in range(0, len(perm), 256):
            i = perm[b:b + 256]
            opt.zero_grad()
            loss = loss_fn(net(x[i], tok[i], top[i]).squeeze(-1), critical[i])
            loss.backward()
            opt.step()
        net.eval()
        with torch.no_grad():
            conf = 1 - torch.sigmoid(net(x[va], tok[va], top[va]).squeeze(-1))
        score = auroc(conf, y[va])
        print("epoch %d: held-out AUROC %.4f" % (epoch + 1, score))
        if best is None or score > best[0]:
            best = (score, {k: t.clone() for k, t in net.state_dict().items()})
    net.load_state_dict(best[1])  # the best epoch on the held-out questions
    net.eval()
    print("kept the network of held-out AUROC %.4f" % best[0])
    state = {k: t for k, t in net.state_dict().items() if k != "token_embeddings.weight"}
    write_safetensors(a.out, state, {"format": "pt", "tlr_kind": "r2r"})
    if a.scores:
        i = va[:1000]
        # Full logits whose top-K and argmax are the dumped ones (the rest far below).
        logits = torch.full((len(i), vocab), float(top[i].min()) - 100.0)
        for r, k in enumerate(i.tolist()):
            others = [c for c in range(vocab) if c != int(tok[k])][: top.shape[1] - 1]
            logits[r, int(tok[k])] = top[k, 0]
            logits[r, others] = top[k, 1:]
        with torch.no_grad():
            scores = 1 - torch.sigmoid(net(x[i], tok[i], top[i]).squeeze(-1))
        write_safetensors(a.scores, {"features": x[i].contiguous(), "logits": logits, "scores": scores})
    print("wrote %s (%d parameters)" % (a.out, sum(t.numel() for t in state.values())))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", help="a `tlr router train --dump-features` directory")
    ap.add_argument("--epochs", type=int, default=8, help="--train: epochs")
    ap.add_argument("--lr", type=float, default=1e-3, help="--train: Adam learning rate")
    ap.add_argument("--scores", help="--train: 1,000 held-out positions and their scores, for --check")
    ap.add_argument("--convert", help="an R2R checkpoint (.pt)")
    ap.add_argument("--random", action="store_true", help="random weights of R2R's layout")
    ap.add_argument("--out", required=True, help="the state_dict as safetensors")
    ap.add_argument("--hidden", type=int, default=96, help="--random: the SLM's hidden size")
    ap.add_argument("--vocab", type=int, default=512, help="--random: the SLM's vocabulary")
    ap.add_argument("--topk", type=int, default=100)
    ap.add_argument("--dims", default="64,64,48", help="--random: hidden_dims (R2R's default config: 6 x 1024)")
    ap.add_argument("--expansion", type=int, default=2)
    ap.add_argument("--normalize-input", action="store_true")
    ap.add_argument("--no-embedding", action="store_true",
                    help="leave token_embeddings.weight out (as R2R's save_model does; the import takes the SLM's)")
    ap.add_argument("--check", help="--random: write N positions and their scores here")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if sum(map(bool, (a.convert, a.random, a.train))) != 1:
        sys.exit("r2r_torch.py: give one of --train DUMP, --convert CKPT, --random")
    if a.train:
        train(a)
        return
    if a.convert:
        try:
            ckpt = torch.load(a.convert, map_location="cpu", weights_only=False)
            state = ckpt["state_dict"]
        except Exception as e:  # noqa: BLE001 (torch raises many kinds)
            sys.exit("r2r_torch.py: %s is not an R2R checkpoint: %s" % (a.convert, e))
        if ckpt.get("model_type") not in (None, "HiddenStatesTokenLMHeadLogitsClassifier"):
            sys.exit("r2r_torch.py: model_type %s is not R2R's token router" % ckpt.get("model_type"))
        meta = {"format": "pt", "tlr_kind": "r2r", "threshold": str((ckpt.get("common_args") or {}).get("threshold"))}
        write_safetensors(a.out, {k: v.float() for k, v in state.items()}, meta)
        print("wrote %s: %d tensors" % (a.out, len(state)))
        return
    torch.manual_seed(a.seed)
    dims = [int(d) for d in a.dims.split(",")]
    net = R2RRouter(a.hidden, a.vocab, a.hidden, a.topk, dims, a.expansion, normalize_input=a.normalize_input).eval()
    with torch.no_grad():  # LayerNorms away from 1 and 0, so a wrong affine shows
        for name, p in net.named_parameters():
            if "layer_norm" in name or "output_layer.0" in name:
                p.add_(0.3 * torch.randn_like(p))
    state = dict(net.state_dict())
    if a.no_embedding:
        del state["token_embeddings.weight"]
    write_safetensors(a.out, state, {"format": "pt", "tlr_kind": "r2r"})
    if a.check:
        if a.no_embedding:
            sys.exit("r2r_torch.py: --check needs the embedding in the network (its scores depend on it)")
        h = torch.randn(a.n, a.hidden)
        logits = 3 * torch.randn(a.n, a.vocab)
        with torch.no_grad():
            top = torch.topk(logits, a.topk, dim=-1).values
            token = torch.argmax(logits, dim=-1)
            scores = 1 - torch.sigmoid(net(h, token, top)).squeeze(-1)
        write_safetensors(a.check, {"features": h, "logits": logits, "scores": scores})
    print("wrote %s (%d parameters)%s" % (a.out, sum(v.numel() for v in state.values()),
                                         ", and %d scored positions in %s" % (a.n, a.check) if a.check else ""))


if __name__ == "__main__":
    main()
