#!/usr/bin/env python3
"""What a question-level gate could gain, from `tlr eval --answers` lines (docs/routing.md).

    tlr eval --limit 0 --max-tokens 40 --thresholds 0.8 --answers a.jsonl
    scripts/route_signals.py a.jsonl [--threshold 0.8] [--price-ratio 4] [--world W/world.json --data test.jsonl]

Needs the small_only, large_only and a joint row (threshold policy) at --threshold. Prints:
  - how well the router's confidences over the SLM's own answer tell whether that answer is
    right (AUROC; 0.5 is chance), for a few ways of reading them;
  - the oracle gate: the LLM left out of the questions the SLM answers right alone, the joint
    row elsewhere;
  - a real gate on the best of those signals: the SLM's answer kept where its score clears g.
A question's LLM cost is estimated from its tokens as the issue did: the context up to its last
routed token read once, plus R per routed token (the LLM alone: its prompt and its answer but
the last token read, plus R per answer token).
"""
import argparse
import json
import sys


def auroc(scores, labels):
    pairs = sorted(zip(scores, labels))
    n_pos = sum(labels)
    n_neg = len(labels) - n_pos
    if not n_pos or not n_neg:
        return float('nan')
    rank_sum, i = 0.0, 0
    while i < len(pairs):  # average ranks over ties
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        rank = (i + 1 + j) / 2.0
        rank_sum += rank * sum(1 for k in range(i, j) if pairs[k][1])
        i = j
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('answers')
    ap.add_argument('--threshold', type=float, default=0.8)
    ap.add_argument('--price-ratio', type=float, default=4.0)
    ap.add_argument('--world', help='world.json of the demo world (worldgen.py): also the gate that knows which '
                                    'things the SLM was taught (its partial_things); needs --data')
    ap.add_argument('--data', help='the question set the answers are for (question ids -> things)')
    a = ap.parse_args()
    small, large, joint = {}, {}, {}
    with open(a.answers) as f:
        for line in f:
            r = json.loads(line)
            if r['mode'] == 'small_only':
                small[r['id']] = r
            elif r['mode'] == 'large_only':
                large[r['id']] = r
            elif r.get('policy', 'threshold') == 'threshold' and abs(r['threshold'] - a.threshold) < 1e-6:
                joint[r['id']] = r
    ids = [i for i in small if i in large and i in joint]
    if not ids:
        sys.exit('route_signals: need small_only, large_only and joint @ %g rows for the same questions' % a.threshold)
    R = a.price_ratio
    def cost_joint(r):
        routed = [k for k, s in enumerate(r['sources']) if s != 'SLM']
        return (r['prompt_tokens'] + routed[-1] + R * len(routed)) if routed else 0.0

    def cost_large(r):
        n = len(r['ids'])
        return r['prompt_tokens'] + n - 1 + R * n

    alone = sum(cost_large(large[i]) for i in ids) / len(ids)
    acc = lambda rows: 100.0 * sum(1 for r in rows if r['correct']) / len(rows)
    print('%d questions; SLM alone %.1f%%, LLM alone %.1f%%, joint @ %g %.1f%% at %.1f%% of the LLM alone\'s cost '
          '(estimated)' % (len(ids), acc([small[i] for i in ids]), acc([large[i] for i in ids]), a.threshold,
                           acc([joint[i] for i in ids]), 100 * sum(cost_joint(joint[i]) for i in ids) / len(ids) / alone))
    right = [bool(small[i]['correct']) for i in ids]
    conf = {i: [c for c in small[i]['confidences'] if c >= 0] or [1.0] for i in ids}
    signals = {
        'min over the answer': lambda c: min(c),
        'mean over the answer': lambda c: sum(c) / len(c),
        'product over the answer': lambda c: __import__('math').prod(c),
        'min over the first 8 tokens': lambda c: min(c[:8]),
    }
    best, best_auc = None, 0
    print('\nHow well the SLM\'s own answer\'s confidences tell whether it is right (AUROC, 0.5 = chance):')
    for name, f in signals.items():
        v = auroc([f(conf[i]) for i in ids], right)
        print('  %-28s %.3f' % (name, v))
        if v > best_auc:
            best, best_auc = name, v
    def gate(keep):  # keep[i]: the SLM's answer stands, no LLM
        rows = [small[i] if keep[i] else joint[i] for i in ids]
        cost = sum(0.0 if keep[i] else cost_joint(joint[i]) for i in ids) / len(ids) / alone
        return acc(rows), 100 * cost, 100.0 * sum(keep.values()) / len(ids)
    o = gate({i: bool(small[i]['correct']) for i in ids})
    print('\nOracle gate (the LLM left out where the SLM alone is right): %.1f%% at %.1f%% of the cost (%.0f%% of '
          'questions kept)' % o)
    if a.world and a.data:
        try:
            with open(a.world) as f:
                taught = set(json.load(f)['partial_things'])
            with open(a.data) as f:
                thing = {r['id']: r.get('question_concept') for r in map(json.loads, filter(str.strip, f))}
        except (OSError, ValueError, KeyError) as e:
            sys.exit('route_signals: %s' % e)
        keep = {i: thing.get(i) in taught for i in ids}
        print('Taught-thing gate (the LLM left out where the SLM was taught the thing asked about): %.1f%% at %.1f%% '
              'of the cost (%.0f%% of questions kept)' % gate(keep))
    print('Gate on "%s" (keep the SLM\'s answer where it clears g):' % best)
    f = signals[best]
    scores = sorted(f(conf[i]) for i in ids)
    for q in (0.1, 0.25, 0.5, 0.75):
        g = scores[int(q * (len(scores) - 1))]
        keep = {i: f(conf[i]) > g for i in ids}
        print('  g = %.3f: %.1f%% at %.1f%% of the cost (%.0f%% kept)' % ((g,) + gate(keep)))
    print('A gate without information (a random share s kept) lies on the line from the SLM alone to the joint row:')
    j_acc = acc([joint[i] for i in ids])
    j_cost = 100 * sum(cost_joint(joint[i]) for i in ids) / len(ids) / alone
    s_acc = acc([small[i] for i in ids])
    for s in (0.25, 0.5, 0.75):
        print('  s = %.2f: %.1f%% at %.1f%%' % (s, s * s_acc + (1 - s) * j_acc, (1 - s) * j_cost))


if __name__ == '__main__':
    main()
