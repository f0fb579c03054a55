#!/usr/bin/python3
"""Golden outputs of a demo model from the PyTorch training code (tools/train/model.py), for
the C++ engine's test: reads the GGUF's tensors back into model.py's Model (so the reference
is the very network that was trained, not the engine's own arithmetic), runs a prompt, and
writes logits and final hidden states for every position plus the greedy continuation.

  /usr/bin/python3 tools/train/golden.py models/demo/slm.gguf --tokens 1,2,3 --greedy 24 \\
      --out src/model/testdata/demo-slm.golden.json
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, '..', 'reference'))
from gguf_min import Gguf  # noqa: E402
from model import Config, Model  # noqa: E402


def load(path):
    g = Gguf(path)
    m = g.meta
    a = m['general.architecture']
    t = g.tensors
    n_vocab, n_embd = t['token_embd.weight'].shape
    cfg = Config(n_vocab, n_embd, m[a + '.block_count'], m[a + '.attention.head_count'],
                 m[a + '.attention.head_count_kv'], m[a + '.feed_forward_length'],
                 n_ctx=m[a + '.context_length'], rope_base=m[a + '.rope.freq_base'],
                 rms_eps=m[a + '.attention.layer_norm_rms_epsilon'])
    model = Model(cfg)
    sd = {'embd.weight': t['token_embd.weight'], 'norm.weight': t['output_norm.weight']}
    names = {'attn_norm.weight': 'attn_norm.weight', 'attn_q.weight': 'q.weight', 'attn_k.weight': 'k.weight',
             'attn_v.weight': 'v.weight', 'attn_q.bias': 'q.bias', 'attn_k.bias': 'k.bias',
             'attn_v.bias': 'v.bias', 'attn_output.weight': 'o.weight', 'ffn_norm.weight': 'ffn_norm.weight',
             'ffn_gate.weight': 'gate.weight', 'ffn_up.weight': 'up.weight', 'ffn_down.weight': 'down.weight'}
    for i in range(cfg.n_layers):
        for gname, pname in names.items():
            sd['blocks.%d.%s' % (i, pname)] = t['blk.%d.%s' % (i, gname)]
    state = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in sd.items()}
    model.load_state_dict(state)
    model.eval()
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('model')
    ap.add_argument('--tokens', required=True, help='comma-separated prompt token ids')
    ap.add_argument('--greedy', type=int, default=24)
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = load(a.model)
    tokens = [int(x) for x in a.tokens.split(',')]
    with torch.no_grad():
        logits, hidden = model(torch.tensor([tokens]))
        seq = list(tokens)
        for _ in range(a.greedy):
            lg, _ = model(torch.tensor([seq]))
            seq.append(int(torch.argmax(lg[0, -1])))
    json.dump({'model': os.path.basename(a.model), 'tokens': tokens,
               'logits': [[round(float(v), 6) for v in row] for row in logits[0]],
               'hidden': [[round(float(v), 6) for v in row] for row in hidden[0]],
               'greedy': seq[len(tokens):]}, open(a.out, 'w'))
    print('%s: %d positions, greedy %s -> %s' % (a.model, len(tokens), seq[len(tokens):], a.out))


if __name__ == '__main__':
    main()
