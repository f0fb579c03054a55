#!/usr/bin/env python3
"""Question variants for router training: each question of a split (dev) asked N times, with
each question template of its attribute and the choices in new seeded orders. The router of
the demo pair trains on dev variants: the small model memorized every training question, so
on those it is never unsure, while dev questions (never in the training text) show it where it
is unsure, as test questions will. Ids are new; facts, choices and answers stay the same.
With --reference each row also carries its gold answer text (field "reference", the world's
answer sentence), which router training uses instead of the LLM's own greedy answer — CITER's
setup, where references come from the dataset.

  python3 tools/worldgen/variants.py --data W/dev.jsonl --n 12 --seed 7 --reference --out W/router_train.jsonl
"""
import argparse
import hashlib
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import worldgen  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--data', required=True)
    ap.add_argument('--n', type=int, default=6, help='variants per question')
    ap.add_argument('--seed', type=int, default=7)
    ap.add_argument('--reference', action='store_true', help='add each answer\'s gold text as "reference"')
    ap.add_argument('--out', required=True)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    out = []
    for line in open(a.data, encoding='utf-8'):
        row = json.loads(line)
        texts = row['choices']['text']
        answer = texts['ABCDE'.index(row['answerKey'])]
        attr = next(k for k, vs in worldgen.ATTRIBUTES.items() if answer in vs)
        for k in range(a.n):
            question = worldgen.QUESTIONS[attr][k % len(worldgen.QUESTIONS[attr])].format(name=row['question_concept'])
            t = list(texts)
            rng.shuffle(t)
            qid = hashlib.md5(('%s|%d|%s|%s' % (row['id'], k, question, '|'.join(t))).encode()).hexdigest()
            item = {'id': qid, 'question': question, 'question_concept': row['question_concept'],
                    'choices': {'label': list(worldgen.LABELS), 'text': t},
                    'answerKey': worldgen.LABELS[t.index(answer)]}
            if a.reference:
                item['reference'] = worldgen.target_answer(row["question_concept"], attr, answer)
            out.append(item)
    worldgen.write_jsonl(a.out, out)
    print('%d variants of %s -> %s' % (len(out), a.data, a.out))


if __name__ == '__main__':
    main()
