#!/usr/bin/env python3
"""Train a TLR router network in PyTorch on `tlr router train --dump-features DIR`.

Reads the dump (manifest.json and its safetensors shards: the SLM's hidden states, CITER labels,
question ids, the trainer's validation split), trains the router network, prints the held-out
AUROC, and saves its state_dict as safetensors for `tlr router import`:

  citer  nn.Sequential(Linear(h, 2h), BatchNorm1d(2h), ReLU, Dropout, Linear(2h, h), ReLU, Linear(h, 1))
  colm   nn.Sequential(Linear(h, 1))

The inputs are standardized per dimension while training (hidden states have very different
scales per dimension); the standardization is folded into the first layer before saving, so the
file holds the plain network. With --scores FILE it also writes the trained network's scores
(sigmoid, eval mode) on up to --score-rows of the dump's hidden states ("features" and "scores"),
which `tlr router import --check FILE` compares with its own.

Needs PyTorch (Debian: python3-torch; run with /usr/bin/python3). safetensors files are read and
written here with the standard library and torch alone (Debian has no safetensors package).

  /usr/bin/python3 tools/train/router_torch.py --dump DIR --out router.safetensors --scores scores.safetensors
  build/bin/tlr router import --slm slm.gguf --from router.safetensors -o router.gguf --check scores.safetensors
"""
import argparse
import json
import os
import struct
import sys

import torch
from torch import nn

DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "F64": (torch.float64, 8), "I64": (torch.int64, 8),
          "I32": (torch.int32, 4), "U8": (torch.uint8, 1)}
NAMES = {v[0]: k for k, v in DTYPES.items()}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: too short for a safetensors file" % path)
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError("%s: the header length does not fit the file" % path)
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        dtype, size = DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(body[b:end]), dtype=dtype) if end > b else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(e["shape"])
    return out


def write_safetensors(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".part"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def load_dump(d):
    with open(os.path.join(d, "manifest.json")) as f:
        m = json.load(f)
    if m.get("format") != "tlr-router-features-1":
        sys.exit("%s is not a `tlr router train --dump-features` directory" % d)
    xs, ys, vs = [], [], []
    for s in m["shards"]:
        t = read_safetensors(os.path.join(d, s["file"]))
        xs.append(t["features"].float())
        ys.append(t["labels"].float())
        vs.append(t["validation"].bool())
    x, y, v = torch.cat(xs), torch.cat(ys), torch.cat(vs)
    if x.shape[1] != m["hidden_size"]:
        sys.exit("the shards' hidden size %d is not the manifest's %d" % (x.shape[1], m["hidden_size"]))
    return m, x, y, v


def network(kind, h, dropout):
    if kind == "colm":
        return nn.Sequential(nn.Linear(h, 1))
    return nn.Sequential(nn.Linear(h, 2 * h), nn.BatchNorm1d(2 * h), nn.ReLU(), nn.Dropout(dropout),
                         nn.Linear(2 * h, h), nn.ReLU(), nn.Linear(h, 1))


def auroc(score, label):
    order = torch.argsort(score)
    ranks = torch.empty_like(score)
    ranks[order] = torch.arange(1, len(score) + 1, dtype=score.dtype)
    pos = label > 0.5
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dump", required=True, help="the --dump-features directory")
    ap.add_argument("--out", required=True, help="the state_dict, safetensors")
    ap.add_argument("--kind", choices=("citer", "colm"), default="citer")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scores", help="also write the trained network's scores on the dump's first hidden states")
    ap.add_argument("--score-rows", type=int, default=1000)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    m, x, y, val = load_dump(a.dump)
    train = ~val
    if int(train.sum()) < 2 or y[train].min() == y[train].max():
        sys.exit("the dump's training rows are too few or all of one class")
    mu = x[train].mean(0)
    sd = x[train].std(0, unbiased=False) + 1e-6
    xs = (x - mu) / sd
    net = network(a.kind, x.shape[1], a.dropout)
    pos = float(y[train].sum())
    neg = float(train.sum()) - pos
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(neg / max(pos, 1.0)))
    opt = torch.optim.Adam(net.parameters(), lr=a.lr)
    xt, yt = xs[train], y[train]
    for epoch in range(a.epochs):
        net.train()
        perm = torch.randperm(len(xt))
        total = 0.0
        for b in range(0, len(xt), a.batch):
            idx = perm[b:b + a.batch]
            if len(idx) < 2:
                continue
            opt.zero_grad()
            loss = loss_fn(net(xt[idx]).squeeze(1), yt[idx])
            loss.backward()
            opt.step()
            total += float(loss) * len(idx)
        net.eval()
        with torch.no_grad():
            s = net(xs[val]).squeeze(1) if int(val.sum()) else torch.empty(0)
        print("epoch %d  loss %.4f  val AUROC %.4f" % (epoch + 1, total / len(xt), auroc(s, y[val]) if len(s) else float("nan")))
    # The standardization into the first layer: W' = W / sd, b' = b - W' mu.
    first = net[0]
    with torch.no_grad():
        first.weight.div_(sd)
        first.bias.sub_(first.weight @ mu)
    net.eval()
    state = {k: v for k, v in net.state_dict().items()}
    write_safetensors(a.out, state, {"format": "pt", "tlr_kind": a.kind})
    print("state_dict (%s) -> %s" % (", ".join(sorted(state)), a.out))
    if a.scores:
        n = min(a.score_rows, len(x))
        with torch.no_grad():
            scores = torch.sigmoid(net(x[:n]).squeeze(1))
        write_safetensors(a.scores, {"features": x[:n].contiguous(), "scores": scores.contiguous()})
        print("scores of %d hidden states -> %s" % (n, a.scores))


if __name__ == "__main__":
    main()
