#!/usr/bin/env python3
"""Routers on the cost curve: each evaluation's joint rows against a reference evaluation's
(`tlr eval --out` results.json files of the same questions), at equal LLM cost.

    scripts/cost_compare.py REF_DIR DIR... [--json]

For every joint row of DIR whose cost (against the LLM alone, its own large_only row) lies within
the reference's range, the reference's accuracy at that cost (linear between its rows, over its
upper envelope) and the difference. Prints one line per DIR: rows compared, how many are more /
less accurate (by more than 0.05 points), the mean and smallest difference in points.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import cost_vs_alone, curve_at, load, one  # noqa: E402


def curve(d):
    res = load(d, 'an evaluation')
    rows = res['rows']
    large = one(rows, 'large_only', os.path.join(d, 'results.json'))
    pts = [(cost_vs_alone(r, large), r['accuracy']) for r in rows if r['mode'] == 'joint']
    return [(c, a) for c, a in pts if c is not None]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    if len(args) < 2:
        sys.exit(__doc__)
    ref = curve(args[0])
    out = []
    for d in args[1:]:
        diffs = []
        for c, a in curve(d):
            r = curve_at(ref, c)
            if r is not None:
                diffs.append(100 * (a - r))
        row = {'dir': d, 'compared': len(diffs), 'better': sum(v > 0.05 for v in diffs),
               'worse': sum(v < -0.05 for v in diffs),
               'mean_points': sum(diffs) / len(diffs) if diffs else None, 'min_points': min(diffs) if diffs else None}
        out.append(row)
        if '--json' not in sys.argv:
            print('%s: %d rows at the reference\'s costs, %d more accurate, %d less; mean %s, smallest %s points' % (
                d, row['compared'], row['better'], row['worse'],
                '%+.2f' % row['mean_points'] if diffs else '-', '%+.2f' % row['min_points'] if diffs else '-'))
    if '--json' in sys.argv:
        print(json.dumps(out, indent=1))


if __name__ == '__main__':
    main()
