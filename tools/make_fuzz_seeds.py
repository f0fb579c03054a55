#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (small, committed):
  src/model/gguf/fuzz_seeds/        hand-built GGUF files covering every value type
  src/model/tokenizer/fuzz_seeds/   the tokenizer test texts, each behind a selector byte
Run from the repository root: python3 tools/make_fuzz_seeds.py"""
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack('<Q', len(b)) + b


def kv(key, vtype, payload):
    return gstr(key) + struct.pack('<I', vtype) + payload


def gguf(kvs, tensors=(), version=3):
    out = struct.pack('<IIQQ', 0x46554747, version, len(tensors), len(kvs)) + b''.join(kvs)
    data = b''
    for name, dims, ttype, blob in tensors:
        out += gstr(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<q', d) for d in dims)
        out += struct.pack('<IQ', ttype, len(data))
        data += blob + b'\0' * ((-len(blob)) % 32)
    if tensors:
        out += b'\0' * ((-len(out)) % 32)
    return out + data


def main():
    gdir = os.path.join(ROOT, 'src/model/gguf/fuzz_seeds')
    os.makedirs(gdir, exist_ok=True)
    scalars = [
        kv('t.u8', 0, struct.pack('<B', 7)), kv('t.i8', 1, struct.pack('<b', -7)),
        kv('t.u16', 2, struct.pack('<H', 7)), kv('t.i16', 3, struct.pack('<h', -7)),
        kv('t.u32', 4, struct.pack('<I', 7)), kv('t.i32', 5, struct.pack('<i', -7)),
        kv('t.f32', 6, struct.pack('<f', 1.5)), kv('t.bool', 7, b'\1'),
        kv('t.str', 8, gstr('qwen2')), kv('t.u64', 10, struct.pack('<Q', 7)),
        kv('t.i64', 11, struct.pack('<q', -7)), kv('t.f64', 12, struct.pack('<d', 2.5)),
    ]
    arrays = [
        kv('tokenizer.ggml.tokens', 9, struct.pack('<IQ', 8, 3) + gstr('a') + gstr('b') + gstr('ab')),
        kv('tokenizer.ggml.scores', 9, struct.pack('<IQ', 6, 3) + struct.pack('<fff', 0, -1, -2)),
        kv('t.nested', 9, struct.pack('<IQ', 9, 2) + struct.pack('<IQ', 5, 1) + struct.pack('<i', 3)
           + struct.pack('<IQ', 8, 1) + gstr('x')),
    ]
    seeds = {
        'empty_v3.gguf': gguf([]),
        'empty_v2.gguf': gguf([], version=2),
        'scalars.gguf': gguf(scalars),
        'arrays.gguf': gguf(arrays + [kv('general.alignment', 4, struct.pack('<I', 32))]),
        'tensors.gguf': gguf([kv('general.architecture', 8, gstr('llama'))], [
            ('token_embd.weight', [4, 2], 0, struct.pack('<8f', *range(8))),
            ('blk.0.attn_q.weight', [32], 8, b'\1' * 34),
            ('blk.0.ffn_up.weight', [256], 12, b'\2' * 144),
        ]),
    }
    for name, blob in seeds.items():
        with open(os.path.join(gdir, name), 'wb') as f:
            f.write(blob)

    tdir = os.path.join(ROOT, 'src/model/tokenizer/fuzz_seeds')
    os.makedirs(tdir, exist_ok=True)
    inp = os.path.join(ROOT, '..', 'shared', 'tokenizer-vectors', 'ggml-vocab-gpt-2.gguf.inp')
    with open(inp, 'rb') as f:
        texts = f.read().split(b'\n__ggml_vocab_test__\n')
    texts = [t for t in texts if t][:24] + [b'a<|endoftext|>b<s>c', b'\xff\xfe\xe2\x82 bad']
    for i, t in enumerate(texts):
        with open(os.path.join(tdir, 'text%02d' % i), 'wb') as f:
            f.write(bytes([i % 8]) + t)
    with open(os.path.join(tdir, 'ids'), 'wb') as f:
        f.write(bytes([8]) + struct.pack('<6i', 15496, 995, 50256, -1, 1 << 30, 29871))


if __name__ == '__main__':
    main()
