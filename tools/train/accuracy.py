#!/usr/bin/env python3
"""Accuracy of a demo model on generated questions, decoded greedily by TLR's C++ engine
(`tlr run`, one process per question), until the evaluation harness exists.

  python3 tools/train/accuracy.py --tlr build/bin/tlr --model W/llm/model.gguf --data W/test.jsonl --limit 500

An answer counts as well formed when exactly one choice can be extracted from it: a stated
letter (`answer is C`, `Answer: C`, `(C)`), or else exactly one choice's text after "Answer:".
Prints accuracy, well-formed share and mean answer length in tokens.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'worldgen'))
import worldgen  # noqa: E402

LETTER = re.compile(r'(?:answer is|Answer:)\s*\(?([A-E])\b|\(([A-E])\)')


def extract(answer, row):
    """The chosen label, or None when no single choice can be extracted."""
    m = LETTER.search(answer)
    if m:
        return m.group(1) or m.group(2)
    head = answer.split('Answer:', 1)[-1].split('.', 1)[0].strip().lower()
    hits = [lab for lab, text in zip(row['choices']['label'], row['choices']['text'])
            if head == text.lower()]
    return hits[0] if len(hits) == 1 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--tlr', required=True)
    ap.add_argument('--model', required=True)
    ap.add_argument('--data', required=True)
    ap.add_argument('--limit', type=int, default=500)
    ap.add_argument('--max-tokens', type=int, default=32)
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.data, encoding='utf-8')][:a.limit]
    right = well = tokens = 0
    with tempfile.TemporaryDirectory() as tmp:
        pf = os.path.join(tmp, 'prompt.txt')
        for i, row in enumerate(rows):
            with open(pf, 'w', encoding='utf-8') as f:
                f.write(worldgen.prompt(row))
            r = subprocess.run([a.tlr, 'run', '-m', a.model, '-f', pf, '-n', str(a.max_tokens),
                                '--temp', '0', '-t', '1'], capture_output=True, text=True, check=True)
            answer = r.stdout.split('\n\n', 1)[0]
            m = re.search(r'generated: (\d+) tokens', r.stderr)
            tokens += int(m.group(1)) if m else 0
            label = extract(answer, row)
            well += label is not None
            right += label == row['answerKey']
            if sys.stderr.isatty():
                sys.stderr.write('\r%d/%d accuracy %.1f%%' % (i + 1, len(rows), 100.0 * right / (i + 1)))
    if sys.stderr.isatty():
        sys.stderr.write('\n')
    n = max(1, len(rows))
    print(json.dumps({'model': a.model, 'n': len(rows), 'accuracy': right / n,
                      'well_formed_pct': 100.0 * well / n, 'tokens_per_answer': tokens / n}))


if __name__ == '__main__':
    main()
