"""The demo pair's architecture in PyTorch: a qwen2-style decoder (RMSNorm, Q/K/V biases,
NeoX RoPE, grouped-query attention, SwiGLU, tied embeddings), written to compute exactly what
TLR's engine computes for architecture "qwen2", plus GGUF export with llama.cpp's key and
tensor names (tokenizer metadata from the tokenizer.json made by bpe.py)."""
import json
import math
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, n_vocab, n_embd, n_layers, n_heads, n_kv_heads, n_ff, n_ctx=512,
                 rope_base=10000.0, rms_eps=1e-6):
        self.n_vocab, self.n_embd, self.n_layers = n_vocab, n_embd, n_layers
        self.n_heads, self.n_kv_heads, self.n_ff = n_heads, n_kv_heads, n_ff
        self.n_ctx, self.rope_base, self.rms_eps = n_ctx, rope_base, rms_eps
        self.head_dim = n_embd // n_heads

    def to_dict(self):
        return dict(self.__dict__)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        hd = c.head_dim
        self.attn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.q = nn.Linear(c.n_embd, c.n_heads * hd, bias=True)
        self.k = nn.Linear(c.n_embd, c.n_kv_heads * hd, bias=True)
        self.v = nn.Linear(c.n_embd, c.n_kv_heads * hd, bias=True)
        self.o = nn.Linear(c.n_heads * hd, c.n_embd, bias=False)
        self.ffn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.gate = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.up = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.down = nn.Linear(c.n_ff, c.n_embd, bias=False)

    def forward(self, x, cos, sin):
        c = self.c
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(B, T, c.n_heads, c.head_dim)
        k = self.k(h).view(B, T, c.n_kv_heads, c.head_dim)
        v = self.v(h).view(B, T, c.n_kv_heads, c.head_dim)
        q, k = rope_neox(q, cos, sin), rope_neox(k, cos, sin)
        rep = c.n_heads // c.n_kv_heads
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, hd]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        att = torch.softmax(scores.masked_fill(mask, float('-inf')), -1) @ v
        x = x + self.o(att.transpose(1, 2).reshape(B, T, -1))
        h = self.ffn_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def rope_neox(x, cos, sin):
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], -1)


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embd = nn.Embedding(c.n_vocab, c.n_embd)
        nn.init.normal_(self.embd.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.n_embd, c.rms_eps)
        inv = c.rope_base ** (-torch.arange(0, c.head_dim // 2, dtype=torch.float64) * 2 / c.head_dim)
        ang = torch.arange(c.n_ctx, dtype=torch.float64)[:, None] * inv[None, :]
        self.register_buffer('cos', torch.cos(ang).float()[None, :, None, :], persistent=False)
        self.register_buffer('sin', torch.sin(ang).float()[None, :, None, :], persistent=False)

    def forward(self, ids):
        T = ids.shape[1]
        x = self.embd(ids)
        for b in self.blocks:
            x = b(x, self.cos[:, :T], self.sin[:, :T])
        h = self.norm(x)
        return h @ self.embd.weight.T, h

    def n_params(self):
        return sum(p.numel() for p in self.parameters())


# ------------------------------------------------------------------------------------------
# GGUF export (v3, F32 tensors; llama.cpp conventions).

def _str(s):
    b = s.encode('utf-8')
    return struct.pack('<Q', len(b)) + b


def _kv(key, vtype, payload):
    return _str(key) + struct.pack('<I', vtype) + payload


def _arr(etype, items):
    out = struct.pack('<IQ', etype, len(items))
    if etype == 8:
        return out + b''.join(_str(x) for x in items)
    fmt = {4: '<I', 5: '<i', 6: '<f'}[etype]
    return out + b''.join(struct.pack(fmt, x) for x in items)


def export_gguf(model, tokenizer_json_path, path, name, chat_template=None):
    """Writes the model as a GGUF; chat_template (text) becomes tokenizer.chat_template."""
    c = model.c
    tok = json.load(open(tokenizer_json_path, encoding='utf-8'))
    vocab = tok['model']['vocab']
    n_tok = max(max(vocab.values()), max(a['id'] for a in tok['added_tokens'])) + 1
    if n_tok != c.n_vocab:
        raise SystemExit('tokenizer has %d tokens, the model %d' % (n_tok, c.n_vocab))
    tokens = [''] * n_tok
    types = [1] * n_tok
    for t, i in vocab.items():
        tokens[i] = t
    ids = {}
    for a in tok['added_tokens']:
        tokens[a['id']] = a['content']
        types[a['id']] = 3 if a['special'] else 4
        ids[a['content']] = a['id']
    merges = [' '.join(m) if isinstance(m, list) else m for m in tok['model']['merges']]
    a = 'qwen2'
    kvs = [
        _kv('general.architecture', 8, _str(a)), _kv('general.name', 8, _str(name)),
        _kv('general.file_type', 4, struct.pack('<I', 0)),
        _kv(a + '.context_length', 4, struct.pack('<I', c.n_ctx)),
        _kv(a + '.embedding_length', 4, struct.pack('<I', c.n_embd)),
        _kv(a + '.block_count', 4, struct.pack('<I', c.n_layers)),
        _kv(a + '.feed_forward_length', 4, struct.pack('<I', c.n_ff)),
        _kv(a + '.attention.head_count', 4, struct.pack('<I', c.n_heads)),
        _kv(a + '.attention.head_count_kv', 4, struct.pack('<I', c.n_kv_heads)),
        _kv(a + '.attention.layer_norm_rms_epsilon', 6, struct.pack('<f', c.rms_eps)),
        _kv(a + '.rope.freq_base', 6, struct.pack('<f', c.rope_base)),
        _kv('tokenizer.ggml.model', 8, _str('gpt2')), _kv('tokenizer.ggml.pre', 8, _str('qwen2')),
        _kv('tokenizer.ggml.tokens', 9, _arr(8, tokens)),
        _kv('tokenizer.ggml.token_type', 9, _arr(5, types)),
        _kv('tokenizer.ggml.merges', 9, _arr(8, merges)),
        _kv('tokenizer.ggml.bos_token_id', 4, struct.pack('<I', ids['<|endoftext|>'])),
        _kv('tokenizer.ggml.eos_token_id', 4, struct.pack('<I', ids['<|endoftext|>'])),
        _kv('tokenizer.ggml.eot_token_id', 4, struct.pack('<I', ids['<|im_end|>'])),
        _kv('tokenizer.ggml.add_bos_token', 7, b'\0'),
        _kv('tokenizer.ggml.add_eos_token', 7, b'\0'),
    ]
    if chat_template:
        kvs.append(_kv('tokenizer.chat_template', 8, _str(chat_template)))
    tensors = [('token_embd.weight', model.embd.weight)]
    for i, b in enumerate(model.blocks):
        p = 'blk.%d.' % i
        tensors += [(p + 'attn_norm.weight', b.attn_norm.weight), (p + 'attn_q.weight', b.q.weight),
                    (p + 'attn_k.weight', b.k.weight), (p + 'attn_v.weight', b.v.weight),
                    (p + 'attn_q.bias', b.q.bias), (p + 'attn_k.bias', b.k.bias),
                    (p + 'attn_v.bias', b.v.bias), (p + 'attn_output.weight', b.o.weight),
                    (p + 'ffn_norm.weight', b.ffn_norm.weight), (p + 'ffn_gate.weight', b.gate.weight),
                    (p + 'ffn_up.weight', b.up.weight), (p + 'ffn_down.weight', b.down.weight)]
    tensors.append(('output_norm.weight', model.norm.weight))
    head = struct.pack('<IIQQ', 0x46554747, 3, len(tensors), len(kvs)) + b''.join(kvs)
    infos, blobs, off = b'', [], 0
    for tname, t in tensors:
        data = t.detach().float().contiguous().numpy().tobytes()
        dims = list(reversed(t.shape))  # ggml order: fastest dimension first
        infos += _str(tname) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<q', d) for d in dims)
        infos += struct.pack('<IQ', 0, off)
        pad = (-len(data)) % 32
        blobs.append(data + b'\0' * pad)
        off += len(data) + pad
    out = head + infos
    out += b'\0' * ((-len(out)) % 32)
    with open(path + '.tmp', 'wb') as f:
        f.write(out)
        for blob in blobs:
            f.write(blob)
    import os
    os.replace(path + '.tmp', path)
