#!/usr/bin/python3
"""Reference forward pass of qwen2 / llama GGUF models in PyTorch (float64), written from the
architectures' definitions, independent of the C++ engine.

  /usr/bin/python3 tools/reference/forward.py MODEL.gguf --tokens 1,2,3 --greedy 32 --out golden.json

Writes logits and final hidden states (after the final norm) for every prompt position, and
the greedy continuation of --greedy tokens. Used by make_fixtures.sh for the ctest fixtures.
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_min import Gguf  # noqa: E402


class Reference:
    def __init__(self, path):
        g = Gguf(path)
        m = g.meta
        self.arch = m['general.architecture']
        a = self.arch
        self.n_embd = m[a + '.embedding_length']
        self.n_layers = m[a + '.block_count']
        self.n_heads = m[a + '.attention.head_count']
        self.n_kv = m.get(a + '.attention.head_count_kv', self.n_heads)
        self.hd = self.n_embd // self.n_heads
        self.eps = m.get(a + '.attention.layer_norm_rms_epsilon', 1e-6)
        self.base = m.get(a + '.rope.freq_base', 10000.0)
        t = {k: (None if v is None else torch.tensor(v, dtype=torch.float64)) for k, v in g.tensors.items()}
        for k, v in t.items():
            if v is None:
                raise SystemExit('tensor %s is quantized; the reference needs f32/f16/bf16' % k)
        self.t = t
        self.out = t.get('output.weight', t['token_embd.weight'])
        half = self.hd // 2
        inv = self.base ** (-2.0 * torch.arange(half, dtype=torch.float64) / self.hd)
        if 'rope_freqs.weight' in t:
            inv = inv / t['rope_freqs.weight']
        self.inv_freq = inv

    def rms(self, x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, pos):
        # x: [T, heads, hd]
        ang = pos[:, None].double() * self.inv_freq[None, :]  # [T, half]
        c, s = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
        if self.arch == 'qwen2':  # NeoX: rotate halves
            x0, x1 = x[..., :self.hd // 2], x[..., self.hd // 2:]
            return torch.cat([x0 * c - x1 * s, x0 * s + x1 * c], -1)
        x0, x1 = x[..., 0::2], x[..., 1::2]  # GPT-J / llama.cpp "normal": adjacent pairs
        out = torch.empty_like(x)
        out[..., 0::2] = x0 * c - x1 * s
        out[..., 1::2] = x0 * s + x1 * c
        return out

    def forward(self, tokens):
        t = self.t
        T = len(tokens)
        x = t['token_embd.weight'][torch.tensor(tokens)]
        pos = torch.arange(T)
        mask = torch.full((T, T), float('-inf'), dtype=torch.float64).triu(1)
        for l in range(self.n_layers):
            p = 'blk.%d.' % l
            h = self.rms(x, t[p + 'attn_norm.weight'])
            q = h @ t[p + 'attn_q.weight'].T
            k = h @ t[p + 'attn_k.weight'].T
            v = h @ t[p + 'attn_v.weight'].T
            if p + 'attn_q.bias' in t:
                q, k, v = q + t[p + 'attn_q.bias'], k + t[p + 'attn_k.bias'], v + t[p + 'attn_v.bias']
            q = self.rope(q.view(T, self.n_heads, self.hd), pos)
            k = self.rope(k.view(T, self.n_kv, self.hd), pos)
            v = v.view(T, self.n_kv, self.hd)
            rep = self.n_heads // self.n_kv
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
            att = torch.einsum('qhd,khd->hqk', q, k) / math.sqrt(self.hd) + mask
            att = torch.softmax(att, -1)
            o = torch.einsum('hqk,khd->qhd', att, v).reshape(T, -1)
            x = x + o @ t[p + 'attn_output.weight'].T
            h = self.rms(x, t[p + 'ffn_norm.weight'])
            g = h @ t[p + 'ffn_gate.weight'].T
            u = h @ t[p + 'ffn_up.weight'].T
            x = x + (torch.nn.functional.silu(g) * u) @ t[p + 'ffn_down.weight'].T
        hidden = self.rms(x, t['output_norm.weight'])
        return hidden @ self.out.T, hidden


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('model')
    ap.add_argument('--tokens', required=True, help='comma-separated prompt token ids')
    ap.add_argument('--greedy', type=int, default=32)
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    ref = Reference(a.model)
    tokens = [int(x) for x in a.tokens.split(',')]
    logits, hidden = ref.forward(tokens)
    seq = list(tokens)
    for _ in range(a.greedy):
        lg, _ = ref.forward(seq)
        seq.append(int(torch.argmax(lg[-1])))
    json.dump({'model': os.path.basename(a.model), 'arch': ref.arch, 'tokens': tokens,
               'logits': [[round(float(v), 7) for v in row] for row in logits],
               'hidden': [[round(float(v), 7) for v in row] for row in hidden],
               'greedy': seq[len(tokens):]}, open(a.out, 'w'))
    print('wrote %s (%d positions, greedy %s...)' % (a.out, len(tokens), seq[len(tokens):len(tokens) + 8]))


if __name__ == '__main__':
    main()
