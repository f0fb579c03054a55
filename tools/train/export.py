#!/usr/bin/python3
"""Exports a training checkpoint (train.py writes DIR/checkpoint.pt every 2000 steps) to GGUF,
to measure a model mid-run with the C++ engine:

  /usr/bin/python3 tools/train/export.py --checkpoint W/llm/checkpoint.pt \\
      --tokenizer W/tokenizer.json --out /tmp/llm-step.gguf
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, Model, export_gguf  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--checkpoint', required=True)
    ap.add_argument('--tokenizer', required=True)
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    ck = torch.load(a.checkpoint, map_location='cpu')
    c = ck['config']
    cfg = Config(c['n_vocab'], c['n_embd'], c['n_layers'], c['n_heads'], c['n_kv_heads'], c['n_ff'],
                 n_ctx=c['n_ctx'])
    model = Model(cfg)
    model.load_state_dict(ck['model'])
    model.eval()
    export_gguf(model, a.tokenizer, a.out, 'tlr demo %dx%d step %d' % (c['n_layers'], c['n_embd'], ck['step']))
    print('step %d -> %s' % (ck['step'], a.out))


if __name__ == '__main__':
    main()
