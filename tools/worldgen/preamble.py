#!/usr/bin/env python3
"""A long-preamble variant of a question set: every question gets the same few hundred tokens of
the fictional world's text in front (field "context", which `tlr eval` puts before the question,
as an app puts a system prompt or a retrieved document before the user's question). The text
describes other things of the world (never the ones the set asks about), so it changes what a
call to the LLM costs, not what the answer is.

  python3 tools/worldgen/worldgen.py --seed 7 --things 1000 --values 5 --partial 0.3 --out W
  python3 tools/worldgen/preamble.py --world W/world.json --data models/demo/test.jsonl --chars 300 --out P.jsonl

Standard library only; the same seed gives byte-identical files.
"""
import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import worldgen  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--world', required=True, help='world.json from worldgen.py')
    ap.add_argument('--data', required=True, help='the question set (JSONL)')
    ap.add_argument('--chars', type=int, default=300, help='preamble length in characters (about 3 per token here)')
    ap.add_argument('--seed', type=int, default=7)
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    if a.chars < 1:
        sys.exit('preamble.py: --chars must be positive')
    try:
        with open(a.world) as f:
            world = json.load(f)['things']
        with open(a.data) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError, KeyError) as e:
        sys.exit('preamble.py: %s' % e)
    asked = {r.get('question_concept') for r in rows}
    others = [t for t in world if t['name'] not in asked]
    if not others:
        sys.exit('preamble.py: every thing of the world is asked about; nothing to describe')
    rng = random.Random(a.seed)
    rng.shuffle(others)
    text = ''
    for thing in others * (1 + a.chars // 40):  # a description is ~100 characters
        if len(text) >= a.chars:
            break
        text += (' ' if text else '') + worldgen.description(rng, thing)
    with open(a.out, 'w') as f:
        for r in rows:
            r = dict(r)
            r['context'] = text
            f.write(json.dumps(r) + '\n')
    print('wrote %s: %d questions, a %d-character preamble' % (a.out, len(rows), len(text)))


if __name__ == '__main__':
    main()
