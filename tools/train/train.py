#!/usr/bin/python3
"""Trains one model of the demo pair on a generated world (run under /usr/bin/python3, which
has Debian's python3-torch). The corpus is tokenized by TLR itself (`tlr tokenize`), so the
model sees exactly the ids the engine will produce. Logs progress, checkpoints, and exports a
GGUF that TLR loads, plus the PyTorch greedy continuation of a probe prompt for comparison.

  /usr/bin/python3 tools/train/train.py --data DIR --tlr build/bin/tlr --embd 64 --layers 2 \\
      --heads 4 --kv-heads 2 --ff 192 --tokens 2000000 --out DIR/slm
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, Model, export_gguf  # noqa: E402

PROBE = 'Question: What is a zinthar made of?\nA. stone\nB. wood\nC. glass\nD. iron\nE. clay\n'


def tokenize(tlr, tokenizer, path=None, text=None):
    cmd = [tlr, 'tokenize', '--tokenizer', tokenizer, '--ids-only', '--parse-special']
    cmd += ['-f', path] if path else [text]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--data', required=True, help='worldgen output with corpus.txt and tokenizer.json')
    ap.add_argument('--tlr', required=True, help='path to the tlr binary')
    ap.add_argument('--corpus', default='corpus.txt',
                    help='training text inside --data (corpus_partial.txt: a model that knows less)')
    ap.add_argument('--aux', default='',
                    help='second text inside --data (drills.txt) that a share of every batch is drawn from')
    ap.add_argument('--aux-frac', type=float, default=0.25, help='share of each batch drawn from --aux')
    ap.add_argument('--embd', type=int, default=64)
    ap.add_argument('--layers', type=int, default=2)
    ap.add_argument('--heads', type=int, default=4)
    ap.add_argument('--kv-heads', type=int, default=2)
    ap.add_argument('--ff', type=int, default=192)
    ap.add_argument('--seq', type=int, default=128)
    ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--tokens', type=float, default=2e6, help='training tokens (stops there)')
    ap.add_argument('--lr', type=float, default=3e-3)
    ap.add_argument('--init', default='',
                    help='start from this GGUF (a model exported by this script) instead of random weights')
    ap.add_argument('--chat-template', default='',
                    help='a Jinja file written into the GGUF as tokenizer.chat_template (the format of --aux chats)')
    ap.add_argument('--warmup', type=int, default=100, help='learning-rate warm-up steps')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    tok_path = os.path.join(a.data, 'tokenizer.json')
    ids = torch.tensor(tokenize(a.tlr, tok_path, path=os.path.join(a.data, a.corpus)), dtype=torch.long)
    aux = None
    if a.aux:
        aux = torch.tensor(tokenize(a.tlr, tok_path, path=os.path.join(a.data, a.aux)), dtype=torch.long)
    n_aux = int(round(a.batch * a.aux_frac)) if aux is not None else 0
    n_vocab = len(json.load(open(tok_path))['model']['vocab']) + len(json.load(open(tok_path))['added_tokens'])
    cfg = Config(n_vocab, a.embd, a.layers, a.heads, a.kv_heads, a.ff, n_ctx=max(512, a.seq))
    model = Model(cfg)
    if a.init:
        from golden import load as load_gguf
        init = load_gguf(a.init)
        shape = lambda c: (c.n_vocab, c.n_embd, c.n_layers, c.n_heads, c.n_kv_heads, c.n_ff)
        if shape(init.c) != shape(cfg):
            raise SystemExit('--init %s has shape %s, not %s' % (a.init, shape(init.c), shape(cfg)))
        model.load_state_dict(init.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0, betas=(0.9, 0.95))
    steps = int(a.tokens // (a.batch * a.seq))
    log = open(os.path.join(a.out, 'train.log'), 'a')
    say = lambda m: (print(m, flush=True), log.write(m + '\n'), log.flush())
    say('config %s; %d parameters; corpus %d tokens; aux %d tokens (%d of %d rows per batch); %d steps' % (
        json.dumps(cfg.to_dict()), model.n_params(), len(ids), 0 if aux is None else len(aux), n_aux,
        a.batch, steps))
    gen = torch.Generator().manual_seed(a.seed)
    t0 = time.time()
    loss_avg = None
    for step in range(1, steps + 1):
        lr = a.lr * min(1.0, step / max(1, a.warmup)) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for g in opt.param_groups:
            g['lr'] = lr
        src = [ids] * (a.batch - n_aux) + [aux] * n_aux
        starts = [int(torch.randint(0, len(t) - a.seq - 1, (1,), generator=gen)) for t in src]
        x = torch.stack([t[s:s + a.seq] for t, s in zip(src, starts)])
        y = torch.stack([t[s + 1:s + a.seq + 1] for t, s in zip(src, starts)])
        logits, _ = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, n_vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_avg = loss.item() if loss_avg is None else 0.98 * loss_avg + 0.02 * loss.item()
        if step % 100 == 0 or step == steps:
            el = time.time() - t0
            say('step %d/%d loss %.4f lr %.2e %.0f tok/s %.0fs' % (step, steps, loss_avg, lr,
                step * a.batch * a.seq / el, el))
        if step % 2000 == 0:
            torch.save({'model': model.state_dict(), 'config': cfg.to_dict(), 'step': step},
                       os.path.join(a.out, 'checkpoint.pt'))
    model.eval()
    gguf = os.path.join(a.out, 'model.gguf')
    chat_template = open(a.chat_template, encoding='utf-8').read() if a.chat_template else None
    export_gguf(model, tok_path, gguf, 'tlr demo %dx%d' % (a.layers, a.embd), chat_template)
    probe = tokenize(a.tlr, tok_path, text=PROBE)
    seq = list(probe)
    with torch.no_grad():
        for _ in range(24):
            logits, _ = model(torch.tensor([seq]))
            seq.append(int(torch.argmax(logits[0, -1])))
    json.dump({'probe': PROBE, 'greedy': seq[len(probe):], 'params': model.n_params(),
               'final_loss': loss_avg, 'seconds': time.time() - t0},
              open(os.path.join(a.out, 'summary.json'), 'w'))
    say('exported %s; greedy after the probe: %s' % (gguf, seq[len(probe):]))


if __name__ == '__main__':
    main()
