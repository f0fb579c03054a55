#!/usr/bin/python3
"""Reference forward pass of qwen2 / llama / qwen3 / gemma3 GGUF models in PyTorch (float64),
written from the architectures' definitions (Hugging Face transformers' modeling_qwen2,
modeling_llama, modeling_qwen3, modeling_gemma3), independent of the C++ engine.

qwen3: qwen2 without the Q/K/V biases, with an RMS norm over each Q and K head before RoPE
  (q_norm, k_norm) and the head dimension from attention.key_length.
gemma3: embeddings times sqrt(hidden_size); Q/K head norms; each sublayer's output RMS-normed
  (post_attention_layernorm, post_feedforward_layernorm) before its residual add; a
  gelu_pytorch_tanh-gated MLP; layer i uses sliding-window attention (a query at position p
  sees keys p - window < j <= p) with RoPE base rope_local_base_freq = 10000 unless
  (i + 1) % sliding_window_pattern == 0 (pattern 6), when it is global with rope_theta;
  scores scaled by query_pre_attn_scalar ** -0.5 (the file's attention.scale, else
  1 / sqrt(head_dim)); tied LM head. Gemma's RMSNorm multiplies by (1 + w); GGUF files store
  1 + w (llama.cpp's converter adds the 1), so the stored weight multiplies directly here.

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
        self.hd = m.get(a + '.attention.key_length', self.n_embd // self.n_heads)
        self.eps = m.get(a + '.attention.layer_norm_rms_epsilon', 1e-6)
        self.base = m.get(a + '.rope.freq_base', 10000.0)
        self.gemma = a == 'gemma3'
        self.scale = m.get(a + '.attention.scale', 1.0 / math.sqrt(self.hd))
        self.window = m.get(a + '.attention.sliding_window', 0) if self.gemma else 0
        self.pattern = m.get(a + '.attention.sliding_window_pattern', 6)
        self.softcap = m.get(a + '.final_logit_softcapping', 0.0) if self.gemma else 0.0
        t = {k: (None if v is None else torch.tensor(v, dtype=torch.float64)) for k, v in g.tensors.items()}
        for k, v in t.items():
            if v is None:
                raise SystemExit('tensor %s is quantized; the reference needs f32/f16/bf16' % k)
        self.t = t
        self.out = t.get('output.weight', t['token_embd.weight'])
        self.inv_freq = self.inv_freqs(self.base)
        if 'rope_freqs.weight' in t:
            self.inv_freq = self.inv_freq / t['rope_freqs.weight']
        self.inv_freq_local = self.inv_freqs(m.get(a + '.rope.freq_base_swa', 10000.0))

    def inv_freqs(self, base):
        half = self.hd // 2
        return base ** (-2.0 * torch.arange(half, dtype=torch.float64) / self.hd)

    def is_sliding(self, layer):
        return self.gemma and self.window > 0 and (layer + 1) % self.pattern != 0

    def rms(self, x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, pos, inv_freq):
        # x: [T, heads, hd]
        ang = pos[:, None].double() * inv_freq[None, :]  # [T, half]
        c, s = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
        if self.arch != 'llama':  # NeoX: rotate halves
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
        if self.gemma:
            x = x * math.sqrt(self.n_embd)
        pos = torch.arange(T)
        causal = torch.full((T, T), float('-inf'), dtype=torch.float64).triu(1)
        # Sliding window: key j is visible from query i when i - window < j <= i.
        dist = pos[:, None] - pos[None, :]
        windowed = causal.masked_fill(dist >= max(self.window, 1), float('-inf'))
        for l in range(self.n_layers):
            p = 'blk.%d.' % l
            sliding = self.is_sliding(l)
            h = self.rms(x, t[p + 'attn_norm.weight'])
            q = h @ t[p + 'attn_q.weight'].T
            k = h @ t[p + 'attn_k.weight'].T
            v = h @ t[p + 'attn_v.weight'].T
            if p + 'attn_q.bias' in t:
                q, k, v = q + t[p + 'attn_q.bias'], k + t[p + 'attn_k.bias'], v + t[p + 'attn_v.bias']
            q = q.view(T, self.n_heads, self.hd)
            k = k.view(T, self.n_kv, self.hd)
            if self.arch in ('qwen3', 'gemma3'):
                q = self.rms(q, t[p + 'attn_q_norm.weight'])
                k = self.rms(k, t[p + 'attn_k_norm.weight'])
            inv = self.inv_freq_local if sliding else self.inv_freq
            q = self.rope(q, pos, inv)
            k = self.rope(k, pos, inv)
            v = v.view(T, self.n_kv, self.hd)
            rep = self.n_heads // self.n_kv
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
            att = torch.einsum('qhd,khd->hqk', q, k) * self.scale + (windowed if sliding else causal)
            att = torch.softmax(att, -1)
            o = torch.einsum('hqk,khd->qhd', att, v).reshape(T, -1) @ t[p + 'attn_output.weight'].T
            if self.gemma:
                o = self.rms(o, t[p + 'post_attention_norm.weight'])
            x = x + o
            h = self.rms(x, t[p + 'ffn_norm.weight'])
            g = h @ t[p + 'ffn_gate.weight'].T
            u = h @ t[p + 'ffn_up.weight'].T
            if self.gemma:
                act = torch.nn.functional.gelu(g, approximate='tanh')
            else:
                act = torch.nn.functional.silu(g)
            f = (act * u) @ t[p + 'ffn_down.weight'].T
            if self.gemma:
                f = self.rms(f, t[p + 'post_ffw_norm.weight'])
            x = x + f
        hidden = self.rms(x, t['output_norm.weight'])
        logits = hidden @ self.out.T
        if self.softcap:
            logits = self.softcap * torch.tanh(logits / self.softcap)
        return logits, hidden


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
