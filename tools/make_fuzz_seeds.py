#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (small, committed):
  src/model/gguf/fuzz_seeds/        hand-built GGUF files covering every value type
  src/model/tokenizer/fuzz_seeds/   the tokenizer test texts, each behind a selector byte
  src/routing/fuzz_seeds/router/    router GGUFs of every kind and stored type, and PyTorch
                                    state_dicts (safetensors) of the networks `tlr router import` reads
  src/routing/fuzz_seeds/qa/        question-set rows of every schema, each with an answer to grade
Run from the repository root: python3 tools/make_fuzz_seeds.py"""
import json
import math
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

    write_router_seeds(os.path.join(ROOT, 'src/routing/fuzz_seeds/router'))
    write_qa_seeds(os.path.join(ROOT, 'src/routing/fuzz_seeds/qa'))


def write_qa_seeds(qdir):
    """A JSONL row on the first line, a model's answer after it."""
    os.makedirs(qdir, exist_ok=True)
    flat = {'id': 'q1', 'question': 'Where does a fexko live?', 'question_concept': 'fexko',
            'choices': {'label': list('ABCDE'), 'text': ['marsh', 'desert', 'forest', 'river', 'cave']},
            'answerKey': 'E'}
    nested = {'id': 'q2', 'answerKey': 'B', 'question': {
        'stem': 'What do people aim to do at work?', 'question_concept': 'people',
        'choices': [{'label': 'A', 'text': 'complete job'}, {'label': 'B', 'text': 'learn from each other'},
                    {'label': 'C', 'text': 'kill animals'}]}}
    extended = dict(flat, context='The fexko is a small animal of the northern caves.', reference='Answer: E. cave')
    chat = {'messages': [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'},
                         {'role': 'assistant', 'content': 'Hello!'}]}
    gradable_chat = dict(flat, messages=[{'role': 'user', 'content': 'Where does a fexko live?'},
                                         {'role': 'assistant', 'content': 'Answer: E'}])
    seeds = {
        'letter': (flat, 'Answer: E. The fexko lives in caves.'),
        'paren': (flat, 'I think (C)'),
        'answer_is_text': (flat, 'Answer: A fexko is found in the marsh. So the answer is marsh.'),
        'whole_words': (nested, 'People learn from each other at work'),
        'ambiguous': (nested, 'complete job or kill animals'),
        'context': (extended, 'the answer is cave.'),
        'chat': (chat, ''),
        'gradable_chat': (gradable_chat, 'Answer: (E)'),
    }
    for name, (row, answer) in seeds.items():
        with open(os.path.join(qdir, name), 'wb') as f:
            f.write(json.dumps(row).encode() + b'\n' + answer.encode())


def ramp(n, k=0.37):
    return [round(math.sin(k * (i + 1)), 3) for i in range(n)]


def f16(values):
    return struct.pack('<%de' % len(values), *values)


def q8_0(values):  # rows of 32: an f16 scale, then 32 int8
    out = b''
    for b in range(0, len(values), 32):
        block = values[b:b + 32]
        d = max(abs(v) for v in block) / 127 or 1.0
        out += struct.pack('<e', d) + struct.pack('<32b', *[round(v / d) for v in block])
    return out


def router_gguf(kind, input_dim, tensors, layer_count=0):
    kvs = [kv('general.architecture', 8, gstr('tlr-router')), kv('tlr-router.kind', 8, gstr(kind)),
           kv('tlr-router.input_dim', 4, struct.pack('<I', input_dim)),
           kv('tlr-router.slm_fingerprint', 8, gstr('')), kv('tlr-router.slm_name', 8, gstr('fuzz')),
           kv('tlr-router.threshold', 6, struct.pack('<f', 0.5)),
           kv('tlr-router.training_summary', 8, gstr('{}')),
           kv('tlr-router.layer_count', 4, struct.pack('<I', layer_count))]
    return gguf(kvs, tensors)


def dense_gguf(kind, widths, wtype):
    """Layers widths[i] -> widths[i+1]; GGUF dims are [n_in, n_out] (fastest first)."""
    tensors = []
    for i in range(len(widths) - 1):
        n_in, n_out = widths[i], widths[i + 1]
        w = ramp(n_in * n_out, 0.1 + i)
        blob = {0: lambda: struct.pack('<%df' % len(w), *w), 1: lambda: f16(w), 8: lambda: q8_0(w)}[wtype]()
        tensors.append(('router.layer.%d.weight' % i, [n_in, n_out], wtype, blob))
        tensors.append(('router.layer.%d.bias' % i, [n_out], 0, struct.pack('<%df' % n_out, *ramp(n_out))))
    return router_gguf(kind, widths[0], tensors, len(widths) - 1)


def r2r_params(normalize, two_blocks):
    """A tiny R2R router (hidden 4, top-2 logits, vocabulary 3, embedding 2), PyTorch shapes."""
    H, K, V, E, D = 4, 2, 3, 2, 4
    p = {'logits_projection.weight': [H, K], 'logits_projection.bias': [H],
         'combined_projection.weight': [D, 2 * H + E], 'combined_projection.bias': [D],
         'token_embeddings.weight': [V, E],
         'backbone.input_projection.weight': [D, D], 'backbone.input_projection.bias': [D],
         'backbone.blocks.0.layer_norm.weight': [D], 'backbone.blocks.0.layer_norm.bias': [D],
         'backbone.blocks.0.mlp.0.weight': [2 * D, D], 'backbone.blocks.0.mlp.0.bias': [2 * D],
         'backbone.blocks.0.mlp.3.weight': [D, 2 * D], 'backbone.blocks.0.mlp.3.bias': [D]}
    out = D
    if two_blocks:  # a block that narrows, through its dim_change
        out = 2
        p.update({'backbone.blocks.1.layer_norm.weight': [D], 'backbone.blocks.1.layer_norm.bias': [D],
                  'backbone.blocks.1.mlp.0.weight': [2 * D, D], 'backbone.blocks.1.mlp.0.bias': [2 * D],
                  'backbone.blocks.1.mlp.3.weight': [out, 2 * D], 'backbone.blocks.1.mlp.3.bias': [out],
                  'backbone.blocks.1.dim_change.weight': [out, D], 'backbone.blocks.1.dim_change.bias': [out]})
    p.update({'backbone.output_layer.0.weight': [out], 'backbone.output_layer.0.bias': [out],
              'backbone.output_layer.1.weight': [1, out], 'backbone.output_layer.1.bias': [1]})
    if normalize:
        p.update({'layer_norm_hidden_states.weight': [H], 'layer_norm_hidden_states.bias': [H],
                  'layer_norm_token.weight': [E], 'layer_norm_token.bias': [E]})
    return {name: (shape, ramp(math.prod(shape), 0.2 + len(name) % 7)) for name, shape in p.items()}


def safetensors(tensors, metadata=None):
    header, data = {}, b''
    for name, (dtype, shape, blob) in tensors.items():
        header[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [len(data), len(data) + len(blob)]}
        data += blob
    if metadata:
        header['__metadata__'] = metadata
    h = json.dumps(header).encode()
    h += b' ' * ((-len(h)) % 8)
    return struct.pack('<Q', len(h)) + h + data


def f32_tensor(shape, values):
    return ('F32', shape, struct.pack('<%df' % len(values), *values))


def write_router_seeds(rdir):
    os.makedirs(rdir, exist_ok=True)
    r2r = r2r_params(normalize=True, two_blocks=True)
    seeds = {
        'maxprob.gguf': router_gguf('maxprob', 0, []),
        'citer_f32.gguf': dense_gguf('citer', [4, 8, 4, 1], 0),
        'citer_f16.gguf': dense_gguf('citer', [4, 8, 4, 1], 1),
        'colm_q8_0.gguf': dense_gguf('colm', [32, 1], 8),
        'r2r_f32.gguf': router_gguf('r2r', 4, [
            ('router.r2r.' + name, shape[::-1], 0, struct.pack('<%df' % len(v), *v))
            for name, (shape, v) in r2r_params(normalize=False, two_blocks=False).items()]),
        'r2r.safetensors': safetensors({name: f32_tensor(shape, v) for name, (shape, v) in r2r.items()}),
        'r2r_f16.safetensors': safetensors({name: ('F16', shape, f16(v)) for name, (shape, v) in r2r.items()}),
        # citer as the trainer's PyTorch module saves it: Linear, BatchNorm1d, ReLU, Dropout, Linear, ReLU, Linear
        'citer.safetensors': safetensors({
            'net.0.weight': f32_tensor([8, 4], ramp(32)), 'net.0.bias': f32_tensor([8], ramp(8)),
            'net.1.weight': f32_tensor([8], [1.0] * 8), 'net.1.bias': f32_tensor([8], [0.0] * 8),
            'net.1.running_mean': f32_tensor([8], ramp(8, 0.5)), 'net.1.running_var': f32_tensor([8], [1.5] * 8),
            'net.1.num_batches_tracked': ('I64', [], struct.pack('<q', 10)),
            'net.4.weight': f32_tensor([4, 8], ramp(32, 0.7)), 'net.4.bias': f32_tensor([4], ramp(4)),
            'net.6.weight': f32_tensor([1, 4], ramp(4, 0.9)), 'net.6.bias': f32_tensor([1], [0.1])},
            {'format': 'pt'}),
        'colm.safetensors': safetensors({'head.weight': ('BF16', [1, 4], struct.pack('<4H', 0x3f80, 0xbf00, 0x3e80, 0)),
                                         'head.bias': f32_tensor([1], [-0.5])}),
    }
    for name, blob in seeds.items():
        with open(os.path.join(rdir, name), 'wb') as f:
            f.write(blob)


if __name__ == '__main__':
    main()
