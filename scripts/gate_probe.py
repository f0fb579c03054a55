#!/usr/bin/env python3
"""Can the prompt tell whether the SLM will answer right? A linear probe on the SLM's hidden state
at the prompt's last token (the state its first answer token is read from), trained on one
question set and scored on another (docs/routing.md: the question-level gate).

    W=world dir of tools/worldgen/worldgen.py --seed 7 --things 1000 --values 5 --partial 0.3
    python3 tools/worldgen/variants.py --data $W/dev.jsonl --n 12 --seed 7 --reference --out $W/router_train.jsonl
    for s in dev test; do   # the dumps' first position of each question is its prompt's last token
      data=$W/router_train.jsonl; [ $s = test ] && data=models/demo/test.jsonl
      tlr router train --data $data --out /tmp/r-$s.gguf --epochs 1 --dump-features D/$s
      tlr eval --data $data --limit 0 --max-tokens 40 --thresholds '' --answers D/$s.answers
    done
    /usr/bin/python3 scripts/gate_probe.py D/dev D/dev.answers D/test D/test.answers [--world $W/world.json --data models/demo/test.jsonl]

Prints the probe's AUROC for "the SLM alone answers right" on both sets, and with --world how well
the same score picks out the things the SLM was taught. Needs PyTorch (python3-torch).
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tools', 'train'))
from router_torch import auroc, read_safetensors  # noqa: E402


def prompt_states(d):
    with open(os.path.join(d, 'manifest.json')) as f:
        m = json.load(f)
    xs, qs = [], []
    for sh in m['shards']:
        t = read_safetensors(os.path.join(d, sh['file']))
        xs.append(t['features'].float())
        qs.append(t['question'].long())
    x, q = torch.cat(xs), torch.cat(qs)
    first = {}
    for i, g in enumerate(q.tolist()):
        first.setdefault(g, i)
    return {m['questions'][g]['id']: x[i] for g, i in first.items()}


def slm_right(path):
    out = {}
    with open(path) as f:
        for line in f:
            a = json.loads(line)
            if a['mode'] == 'small_only':
                out[a['id']] = bool(a['correct'])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('train_dump')
    ap.add_argument('train_answers')
    ap.add_argument('test_dump')
    ap.add_argument('test_answers')
    ap.add_argument('--world')
    ap.add_argument('--data')
    a = ap.parse_args()
    sets = []
    for dump, answers in ((a.train_dump, a.train_answers), (a.test_dump, a.test_answers)):
        states, right = prompt_states(dump), slm_right(answers)
        ids = [i for i in states if i in right]
        if not ids:
            sys.exit('gate_probe: no question of %s has an answer in %s' % (dump, answers))
        sets.append((ids, torch.stack([states[i] for i in ids]), torch.tensor([float(right[i]) for i in ids])))
    (_, xd, yd), (ti, xt, yt) = sets
    mu, sd = xd.mean(0), xd.std(0) + 1e-6
    xd, xt = (xd - mu) / sd, (xt - mu) / sd
    print('train: %d questions (the SLM right on %.1f%%); test: %d (%.1f%%)' % (
        len(yd), 100 * yd.mean(), len(yt), 100 * yt.mean()))
    for wd in (1e-3, 1e-2, 1e-1):
        torch.manual_seed(0)
        lin = torch.nn.Linear(xd.shape[1], 1)
        opt = torch.optim.Adam(lin.parameters(), lr=1e-2, weight_decay=wd)
        for _ in range(500):
            opt.zero_grad()
            torch.nn.functional.binary_cross_entropy_with_logits(lin(xd).squeeze(-1), yd).backward()
            opt.step()
        with torch.no_grad():
            s_train, s_test = lin(xd).squeeze(-1), lin(xt).squeeze(-1)
        line = 'weight decay %g: AUROC train %.3f, test %.3f' % (wd, auroc(s_train, yd), auroc(s_test, yt))
        if a.world and a.data:
            with open(a.world) as f:
                taught = set(json.load(f)['partial_things'])
            with open(a.data) as f:
                thing = {r['id']: r.get('question_concept') for r in map(json.loads, filter(str.strip, f))}
            yk = torch.tensor([float(thing.get(i) in taught) for i in ti])
            line += '; as a detector of taught things (test) %.3f' % auroc(s_test, yk)
        print(line)


if __name__ == '__main__':
    main()
