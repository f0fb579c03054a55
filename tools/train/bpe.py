#!/usr/bin/env python3
"""Trains the demo pair's tokenizer: a small byte-level BPE over the generated corpus, written
as a Hugging Face tokenizer.json that TLR's tokenizer loads (Qwen2 pre-tokenizer, GPT-2 byte
mapping), so GGUF export can carry it as tokenizer.ggml.* metadata.

Frequent words (attribute values, function words) become single tokens; the made-up names,
each seen only a few times, stay split into syllable-sized pieces. Deterministic: ties go to
the lexicographically smallest pair.

  python3 tools/train/bpe.py --corpus DIR/corpus.txt --vocab 1024 --out DIR/tokenizer.json
"""
import argparse
import collections
import json
import re

# The Qwen2 pre-tokenizer regex as tokenizer.json states it (TLR reads it with ICU) ...
QWEN2_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
               "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
# ... and the same pattern for ASCII text in Python's re (no \p classes), used for training.
ASCII_REGEX = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+[\r\n]*"
                         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ['<|endoftext|>', '<|im_start|>', '<|im_end|>']


def bytes_to_unicode():
    bs = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def train(text, vocab_size):
    if not text.isascii():
        raise SystemExit('the corpus must be ASCII (the training pre-tokenizer assumes it)')
    b2u = bytes_to_unicode()
    words = collections.Counter(ASCII_REGEX.findall(text))
    seqs = {w: [b2u[b] for b in w.encode()] for w in words}
    vocab = [b2u[b] for b in range(256)]
    merges = []
    while len(vocab) + len(SPECIAL) < vocab_size:
        pairs = collections.Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        merged = best[0] + best[1]
        vocab.append(merged)
        for w in words:
            s = seqs[w]
            if len(s) < 2:
                continue
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == best[0] and s[i + 1] == best[1]:
                    out.append(merged)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return vocab, merges


def tokenizer_json(vocab, merges):
    ids = {t: i for i, t in enumerate(vocab)}
    added = [{'id': len(vocab) + k, 'content': t, 'single_word': False, 'lstrip': False,
              'rstrip': False, 'normalized': False, 'special': True} for k, t in enumerate(SPECIAL)]
    byte_level = {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': False, 'use_regex': False}
    return {
        'version': '1.0', 'truncation': None, 'padding': None, 'added_tokens': added,
        'normalizer': None,
        'pre_tokenizer': {'type': 'Sequence', 'pretokenizers': [
            {'type': 'Split', 'pattern': {'Regex': QWEN2_REGEX}, 'behavior': 'Isolated', 'invert': False},
            byte_level]},
        'post_processor': None, 'decoder': byte_level,
        'model': {'type': 'BPE', 'dropout': None, 'unk_token': None, 'continuing_subword_prefix': '',
                  'end_of_word_suffix': '', 'fuse_unk': False, 'byte_fallback': False,
                  'ignore_merges': False, 'vocab': ids, 'merges': [list(m) for m in merges]},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--corpus', required=True)
    ap.add_argument('--vocab', type=int, default=1024, help='vocabulary size including special tokens')
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    text = open(a.corpus, encoding='utf-8').read()
    for t in SPECIAL:  # special tokens are matched whole by the tokenizer, never merged
        text = text.replace(t, '\n')
    vocab, merges = train(text, a.vocab)
    with open(a.out, 'w', encoding='utf-8') as f:
        json.dump(tokenizer_json(vocab, merges), f, ensure_ascii=False, indent=1)
    print('%d tokens (%d merges) -> %s' % (len(vocab) + len(SPECIAL), len(merges), a.out))


if __name__ == '__main__':
    main()
