#!/usr/bin/env python3
"""Writes docs/RESULTS.md from an evaluation's results.json (make results): the table, the
plots, and the comparison with the paper's shape, every number computed from the file; with
NET_DIR also the same evaluation over `tlr serve` with a simulated round trip.
With PIPELINE_DIR also the pipeline comparison: off-PACE and on-PACE for PACE in own, 20ms
(at least one pace with both), optionally auto-PACE (`--llm-budget auto`) and llm-alone (a
large_only row on the same questions, for the LLM cost against the LLM alone); it also writes
PIPELINE_DIR/time_vs_llm_cost.svg.
Every table with routed tokens also shows the LLM's real work: the tokens it prefilled and
generated per question, generated per routed token, and its cost against the LLM alone (price
units: prefilled + price_ratio x generated). results.json files from before those fields show "-".
With COST_DIR the accuracy-against-cost curves of both routing policies (COST_DIR, and
COST_DIR/xvocab for the cross-vocabulary pair; COST_DIR/signals.txt from route_signals.py).
Usage: results.py RESULTS_DIR OUT.md [NET_DIR [PIPELINE_DIR [XVOCAB_DIR [COST_DIR]]]]"""
import json
import os
import sys


def die(msg):
    sys.exit('results.py: ' + msg)


def load(d, what):
    """results.json of directory d; a clear error if d or its results.json is missing."""
    if not os.path.isdir(d):
        die('%s: no such directory (%s); run scripts/results.sh (make results) to produce it' % (d, what))
    path = os.path.join(d, 'results.json')
    if not os.path.isfile(path):
        die('%s: no results.json (%s); run scripts/results.sh (make results) to produce it' % (d, what))
    try:
        with open(path) as f:
            res = json.load(f)
    except ValueError as e:
        die('%s: not valid JSON: %s' % (path, e))
    if not isinstance(res, dict) or not isinstance(res.get('rows'), list) or not res['rows']:
        die('%s: no rows' % path)
    return res


def one(rows, mode, path):
    r = next((r for r in rows if r['mode'] == mode), None)
    if r is None:
        die('%s: no %s row (run tlr eval without --no-baselines)' % (path, mode))
    return r


def fmt(v, f):
    return '-' if v is None else f % v


# The LLM's work of one row (None when an older results.json lacks the field).

def per_q(r, key):
    v, n = r.get(key), r.get('n')
    return None if v is None or not n else v / n


def gen_per_routed(r):
    if r.get('llm_generated_tokens') is None or not r.get('routed_tokens'):
        return None
    v = r.get('llm_generated_per_routed')
    return v if v is not None else r['llm_generated_tokens'] / r['routed_tokens']


def price_ratio(r, res=None):
    v = r.get('price_ratio')
    if v is None and res is not None:
        v = res.get('price_ratio')
    return v


def llm_cost(r):
    """Mean LLM cost per question: prefilled + price_ratio x generated, in input-token units."""
    if r.get('llm_cost') is not None:
        return r['llm_cost']
    pre, gen, pr = per_q(r, 'llm_prefilled_tokens'), per_q(r, 'llm_generated_tokens'), r.get('price_ratio')
    return None if pre is None or gen is None or pr is None else pre + pr * gen


def alone_row(rows, n):
    """The LLM-alone row on n questions, if any, with a cost to compare with."""
    return next((r for r in rows if r['mode'] == 'large_only' and r.get('n') == n and llm_cost(r)), None)


def cost_vs_alone(r, alone=None):
    """The row's LLM cost as a fraction of the LLM alone's on the same questions."""
    if r.get('llm_cost_vs_llm_alone') is not None:
        return r['llm_cost_vs_llm_alone']
    c = llm_cost(r)
    if alone is None or c is None or alone.get('n') != r.get('n') or not llm_cost(alone):
        return None
    return c / llm_cost(alone)


def pct(v):
    return fmt(None if v is None else 100 * v, '%.1f%%')


def span(vals, f, unit=''):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    lo, hi = min(vals), max(vals)
    return (f % lo if f % lo == f % hi else (f + '-' + f) % (lo, hi)) + unit


def ms(v):
    return None if v is None else 1e3 * v


HEADER = ['| mode | threshold | accuracy | well formed | routed tokens | routed % | LLM prefill / q | LLM gen / q | '
          'LLM gen / routed | LLM cost vs alone | SLM time (ms) | TTFT (ms) | TBT SLM (ms) | comm + LLM (ms) | '
          'router (ms) | overall (ms) | fallbacks |',
          '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|']


def table(rows):
    alone = None
    for r in rows:
        alone = alone or alone_row(rows, r.get('n'))
    L = list(HEADER)
    for r in rows:
        t = '' if r['threshold'] is None else '%.2f' % r['threshold']
        L.append('| %s | %s | %.1f%% | %.1f%% | %d / %d | %.1f%% | %s | %s | %s | %s | %.3f | %.3f | %.4f | %.3f | %.4f | '
                 '%.3f | %d |' % (
                     r['mode'], t, 100 * r['accuracy'], r['well_formed_pct'], r['routed_tokens'], r['generated_tokens'],
                     r['routed_pct'], fmt(per_q(r, 'llm_prefilled_tokens'), '%.1f'),
                     fmt(per_q(r, 'llm_generated_tokens'), '%.1f'), fmt(gen_per_routed(r), '%.2f'),
                     pct(cost_vs_alone(r, alone)), 1e3 * r['slm_time_s'], 1e3 * r['ttft_s'], 1e3 * r['tbt_slm_s'],
                     1e3 * r['comm_llm_time_s'], 1e3 * r.get('router_time_s', 0), 1e3 * r['overall_s'],
                     r.get('fallbacks', 0)))
    return L


def work_note(res):
    pr = next((price_ratio(r, res) for r in res['rows'] if price_ratio(r, res) is not None), None)
    return ('LLM prefill / gen per question: the tokens the LLM read (context it had not seen) and wrote (with the '
            'pipeline also lookahead and the work of calls later cancelled or missed); LLM gen / routed: tokens it '
            'wrote per routed token; LLM cost vs alone: (prefilled + R x generated) against the same for the LLM '
            'alone on the same questions, %s. "-": not recorded in this results.json, or nothing to compare with.' % (
                'with an output token priced at R = %g input tokens' % pr if pr is not None else
                'R the price of an output token in input tokens'))


def setting_text(res):
    s = 'the pipeline %s' % res.get('pipeline', 'setting not recorded')
    if res.get('pipeline') == 'on' and res.get('llm_budget') is not None:
        s += ', `--llm-budget %s`' % res['llm_budget']
    return s


def network_section(d, out):
    res = load(d, 'the evaluation over the network')
    rows = res['rows']
    rel = os.path.relpath(d, os.path.dirname(out))
    rtt = res.get('sim_rtt_ms', 0)
    ordered = [r for r in rows if r['mode'] != 'joint'] + sorted(
        (r for r in rows if r['mode'] == 'joint'), key=lambda r: r['threshold'])
    L = ['## Over the network: `tlr serve` and a simulated %g ms round trip' % rtt, '',
         'The same pair with the LLM behind a local `tlr serve` (native protocol, delta sync) and `--sim-rtt %g` '
         '(the paper assumed 170 ms), on the first %d test questions, with %s. Files: `%s/`.' % (
             rtt, rows[0]['n'], setting_text(res), rel), '']
    L += table(ordered)
    L += ['', work_note(res), '']
    per_call = []
    for r in rows:
        calls = r['routed_tokens'] / max(r['n'], 1)  # route span 1: one call per routed token
        if calls > 0:
            per_call.append((r, 1e3 * r['comm_llm_time_s'] / calls))
    if per_call:
        lo = min(c for _, c in per_call)
        hi = max(c for _, c in per_call)
        L.append('- Communication + LLM per routed call: %.1f-%.1f ms across the rows, i.e. the simulated %g ms round '
                 'trip plus %.1f-%.1f ms of loopback HTTP and LLM compute.' % (lo, hi, rtt, lo - rtt, hi - rtt))
    joint = sorted((r for r in rows if r['mode'] == 'joint'), key=lambda r: r['threshold'])
    if joint:
        a, b = joint[0], joint[-1]
        L.append('- Overall time per question grows with the routed share, as in the paper\'s Table 1: %.3f s at %.1f%% '
                 'routed (threshold %.2f) to %.3f s at %.1f%% (%.2f); the network, not the models, dominates.' % (
                     a['overall_s'], a['routed_pct'], a['threshold'], b['overall_s'], b['routed_pct'], b['threshold']))
        alone = alone_row(rows, joint[0]['n'])
        g = span([gen_per_routed(r) for r in joint], '%.2f')
        c = span([None if cost_vs_alone(r, alone) is None else 100 * cost_vs_alone(r, alone) for r in joint], '%.1f', '%')
        if g is not None:
            L.append('- The LLM\'s work across the joint rows (thresholds %.2f-%.2f): %s tokens generated per routed '
                     'token%s.' % (a['threshold'], b['threshold'], g,
                                   ', a cost of %s of the LLM alone\'s on the same questions' % c if c else
                                   ' (no large_only row to compare the cost with)'))
    L += ['', '![Time per question vs threshold over the network (stacked)](%s/latency_vs_threshold.svg)' % rel, '']
    return L


SETTINGS = [('off', 'off'), ('on', 'on'), ('auto', 'auto')]
PACES = [('own', 'the bundled SLM\'s own pace', 'own pace'), ('20ms', 'a SIMULATED 20 ms per SLM step', '20 ms/step')]


def same_answers(d, a, b):
    """'identical (N answers ...)', '**DIFFERENT** ...' or a note that answers.jsonl is missing."""
    pa, pb = os.path.join(d, a, 'answers.jsonl'), os.path.join(d, b, 'answers.jsonl')
    if not (os.path.isfile(pa) and os.path.isfile(pb)):
        return 'not compared (no answers.jsonl in %s)' % ' and '.join(
            p for p, ok in [(a, os.path.isfile(pa)), (b, os.path.isfile(pb))] if not ok)
    ta, tb = open(pa).read(), open(pb).read()
    n = sum(1 for line in tb.splitlines() if line.strip())
    return '%s (%d answers compared token for token)' % ('identical' if ta == tb else '**DIFFERENT**', n)


def by_threshold(res):
    return {round(r['threshold'], 4): r for r in res['rows'] if r['mode'] == 'joint'}


def svg_escape(s):
    return s.replace('&', '&amp;').replace('<', '&lt;').replace('>', '&gt;').replace('"', '&quot;')


def nice_step(lo, hi, n):
    import math
    raw = (hi - lo) / n
    if raw <= 0:
        return 1.0
    p = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * p:
            return m * p
    return 10 * p


def tick(v):
    if abs(v) >= 100 or v == int(v):
        return '%.0f' % v
    if abs(v) >= 1:
        return '%.1f' % v
    return '%.3g' % v


def time_vs_cost_svg(series, alone_cost, price):
    """A scatter plot in the look of src/tools/plots.cc: one line per (setting, pace) through its thresholds,
    each point labelled with its threshold; x = LLM cost per question, y = time per question (ms)."""
    W, H, left, right, top, bottom = 640.0, 400.0, 70.0, 160.0, 40.0, 55.0
    pw, ph = W - left - right, H - top - bottom
    xs = [x for s in series for x, _, _ in s['points']] + ([alone_cost] if alone_cost else [])
    ys = [y for s in series for _, y, _ in s['points']]
    x0, x1, y0, y1 = 0.0, max(xs), 0.0, max(ys)
    xstep, ystep = nice_step(x0, x1, 6), nice_step(y0, y1, 5)
    x1 = -(-x1 // xstep) * xstep
    y1 = -(-y1 // ystep) * ystep
    if x1 <= x0:
        x1 = x0 + 1
    if y1 <= y0:
        y1 = y0 + 1

    def X(x):
        return left + (x - x0) / (x1 - x0) * pw

    def Y(y):
        return top + ph - (y - y0) / (y1 - y0) * ph

    title = 'Time per question vs the LLM\'s cost per question'
    o = ['<?xml version="1.0" encoding="UTF-8"?>',
         '<svg xmlns="http://www.w3.org/2000/svg" width="%.2f" height="%.2f" viewBox="0 0 %.2f %.2f" '
         'font-family="sans-serif" font-size="12">' % (W, H, W, H),
         '<title>%s</title>' % svg_escape(title),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%.2f" y="22" text-anchor="middle" font-size="15">%s</text>' % (W / 2, svg_escape(title))]
    y = y0
    while y <= y1 + 1e-9:
        o.append('<line x1="%.2f" y1="%.2f" x2="%.2f" y2="%.2f" stroke="#ddd"/>' % (left, Y(y), left + pw, Y(y)))
        o.append('<text x="%.2f" y="%.2f" text-anchor="end">%s</text>' % (left - 6, Y(y) + 4, tick(y)))
        y += ystep
    x = x0
    while x <= x1 + 1e-9:
        o.append('<line x1="%.2f" y1="%.2f" x2="%.2f" y2="%.2f" stroke="#eee"/>' % (X(x), top, X(x), top + ph))
        o.append('<line x1="%.2f" y1="%.2f" x2="%.2f" y2="%.2f" stroke="black"/>' % (X(x), top + ph, X(x), top + ph + 5))
        o.append('<text x="%.2f" y="%.2f" text-anchor="middle">%s</text>' % (X(x), top + ph + 18, tick(x)))
        x += xstep
    o.append('<rect x="%.2f" y="%.2f" width="%.2f" height="%.2f" fill="none" stroke="black"/>' % (left, top, pw, ph))
    xl = 'LLM cost per question (prefilled + %s x generated tokens)' % ('%g' % price if price is not None else 'R')
    o.append('<text x="%.2f" y="%.2f" text-anchor="middle">%s</text>' % (left + pw / 2, H - 12, svg_escape(xl)))
    o.append('<text transform="translate(18 %.2f) rotate(-90)" text-anchor="middle">ms per question</text>' % (top + ph / 2))
    if alone_cost:
        o.append('<line x1="%.2f" y1="%.2f" x2="%.2f" y2="%.2f" stroke="#555" stroke-dasharray="6 4"/>' % (
            X(alone_cost), top, X(alone_cost), top + ph))
        o.append('<text x="%.2f" y="%.2f" text-anchor="end" font-size="10">LLM alone</text>' % (X(alone_cost) - 4, top + 12))
    labels = []
    for s in series:
        pts = sorted(s['points'])
        dash = ' stroke-dasharray="5 3"' if s['dashed'] else ''
        o.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>' % (
            ' '.join('%.2f,%.2f' % (X(x), Y(y)) for x, y, _ in pts), s['color'], dash))
        for x, y, label in pts:
            if s['square']:
                o.append('<rect x="%.2f" y="%.2f" width="7" height="7" fill="%s"/>' % (X(x) - 3.5, Y(y) - 3.5, s['color']))
            else:
                o.append('<circle cx="%.2f" cy="%.2f" r="3.5" fill="%s"/>' % (X(x), Y(y), s['color']))
            labels.append((X(x), Y(y), label, s['color']))
    # Threshold labels where they do not overlap one already placed (about 5 px per character, 9 px high).
    boxes = []
    for px, py, label, color in labels:
        w = 5.2 * len(label)
        for dx, dy in ((5, -5), (5, 12), (-5 - w, -5), (-5 - w, 12)):
            bx, by = px + dx, py + dy
            box = (bx, by - 8, bx + w, by + 1)
            if box[0] < left or box[2] > left + pw or box[1] < top or box[3] > top + ph:
                continue
            if all(box[2] < b[0] or box[0] > b[2] or box[3] < b[1] or box[1] > b[3] for b in boxes):
                boxes.append(box)
                o.append('<text x="%.2f" y="%.2f" font-size="9" fill="%s">%s</text>' % (bx, by, color, svg_escape(label)))
                break
    ly = top + 10
    for s in series:
        if s['square']:
            o.append('<rect x="%.2f" y="%.2f" width="12" height="12" fill="%s"/>' % (left + pw + 8, ly + 40, s['color']))
        else:
            o.append('<circle cx="%.2f" cy="%.2f" r="6" fill="%s"/>' % (left + pw + 14, ly + 46, s['color']))
        o.append('<text x="%.2f" y="%.2f">%s</text>' % (left + pw + 26, ly + 50, svg_escape(s['name'])))
        ly += 18
    o.append('<text x="%.2f" y="%.2f" font-size="10">labels: threshold</text>' % (left + pw + 8, ly + 50))
    o.append('</svg>')
    return '\n'.join(o) + '\n'


def pipeline_section(d, out):
    rel = os.path.relpath(d, os.path.dirname(out))
    if not os.path.isdir(d):
        die('%s: no such directory (the pipeline runs); run scripts/results.sh (make results) to produce it' % d)
    runs = {}  # (setting, pace) -> results.json
    for pace, _, _ in PACES:
        have = [s for s, _ in SETTINGS if os.path.isdir(os.path.join(d, '%s-%s' % (s, pace)))]
        if not have:
            continue
        for need in ('off', 'on'):
            if need not in have:
                die('%s: %s-%s is missing (%s-%s is there; the pipeline tables need both off and on)' % (
                    d, need, pace, have[0], pace))
        for s in have:
            runs[(s, pace)] = load(os.path.join(d, '%s-%s' % (s, pace)), 'pipeline %s at pace %s' % (s, pace))
    if not runs:
        die('%s: none of off-own/on-own or off-20ms/on-20ms is there; run scripts/results.sh (make results)' % d)
    # The LLM alone on the same questions (optional): llm-alone/ or a large_only row in one of the runs.
    alone = None
    if os.path.isdir(os.path.join(d, 'llm-alone')):
        alone_res = load(os.path.join(d, 'llm-alone'), 'the LLM alone on the pipeline\'s questions')
        alone = one(alone_res['rows'], 'large_only', os.path.join(d, 'llm-alone', 'results.json'))
    for res in runs.values():
        alone = alone or alone_row(res['rows'], res['rows'][0].get('n'))
    on = next(res for (s, _), res in runs.items() if s == 'on')
    rtt0 = on.get('sim_rtt_ms', 170)
    n0 = on['rows'][0]['n']
    have_auto = any(s == 'auto' for s, _ in runs)

    def opt(key, f):
        return f % on[key] if on.get(key) is not None else 'not recorded'

    L = ['## The asynchronous pipeline over the network', '',
         'The same server and a simulated %g ms round trip, the first %d test questions, with the device blocking on '
         'every routed token (`--pipeline off`, as above and as the paper\'s system) and with the asynchronous '
         'pipeline (`--pipeline on`). The SLM keeps decoding while routed tokens are on the network, and routed tokens '
         'inside that speculation have their calls in flight at once. Its default options, as recorded in the '
         'results.json files: %s (the SLM\'s top candidates at the oldest unanswered routed position, decoded '
         'ahead in one batched SLM pass; branch lines send no LLM calls until they stand), at most %s speculative '
         'tokens ahead of that position, lookahead adaptive up to %s tokens of the LLM\'s own continuation with a '
         'routed call (asked only while earlier drafts stood; a later routed token whose context matches takes its '
         'token from the draft without a call), and %s (the LLM tokens the pipeline may ask for per '
         'routed token: answers, lookahead and speculative calls, including ones later cancelled).%s '
         'Once at the bundled SLM\'s own pace (a few tens of microseconds per step), once with every SLM pass padded '
         'to 20 ms (`--sim-slm-ms 20`, SIMULATED: the pace of a 0.5B-class SLM on a device). Files: `%s/`.' % (
             rtt0, n0, '%d branch%s' % (on['spec_branches'], '' if on['spec_branches'] == 1 else 'es')
             if on.get('spec_branches') is not None else 'branches (their number not recorded)',
             opt('spec_depth', '%d'), opt('lookahead', '%d'),
             '`--llm-budget %s`' % on['llm_budget'] if on.get('llm_budget') is not None else
             'an LLM budget (not recorded in these files)',
             ' Setting `auto` is the pipeline with `--llm-budget auto`: no limit on the LLM\'s work, as fast as '
             'possible.' if have_auto else '', rel), '']
    plot = []
    for pace, label, short in PACES:
        if ('off', pace) not in runs:
            continue
        settings = [s for s, _ in SETTINGS if (s, pace) in runs]
        rows = {s: by_threshold(runs[(s, pace)]) for s in settings}
        rtt = runs[('on', pace)].get('sim_rtt_ms', 170) / 1e3
        L += ['### At %s' % label, '',
              '| threshold | pipeline | routed % | accuracy | overall (ms) | faster | stall / routed | spec. stood | '
              'lookahead used | wasted SLM steps | LLM calls | LLM prefill / q | LLM gen / q | LLM gen / routed | '
              'LLM cost / q | cost vs off | cost vs alone | TBT SLM (ms) |',
              '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
        for t in sorted(set().union(*rows.values())):
            off = rows['off'].get(t)
            for s in settings:
                r = rows[s].get(t)
                if r is None:
                    continue
                faster = off['overall_s'] / max(r['overall_s'], 1e-9) if off else None
                c, c_off = llm_cost(r), llm_cost(off) if off else None
                spec = '-' if s == 'off' else '%.1f%%' % r['spec_hit_pct']
                look = '-' if s == 'off' else '%d' % r['lookahead_used']
                L.append('| %.2f | %s | %.1f%% | %.1f%% | %.1f | %s | %s | %s | %s | %d | %d | %s | %s | %s | %s | %s | '
                         '%s | %.4f |' % (
                             r['threshold'], s, r['routed_pct'], 100 * r['accuracy'], 1e3 * r['overall_s'],
                             fmt(faster, '%.2fx'), fmt(r['stall_per_routed_s'] / rtt if rtt else None, '%.3f RTT'), spec, look,
                             r['wasted_slm_steps'], r['llm_calls'], fmt(per_q(r, 'llm_prefilled_tokens'), '%.1f'),
                             fmt(per_q(r, 'llm_generated_tokens'), '%.1f'), fmt(gen_per_routed(r), '%.2f'),
                             fmt(c, '%.1f'), fmt(c / c_off if c is not None and c_off else None, '%.2fx'),
                             pct(cost_vs_alone(r, alone)), 1e3 * r['tbt_slm_s']))
                if c is not None:
                    plot.append((s, pace, short, c, 1e3 * r['overall_s'], '%.2f' % r['threshold']))
        L.append('')
        for s in settings[1:]:
            L.append('- Tokens and their sources with the pipeline %s and off: %s.' % (s, same_answers(
                d, '%s-%s' % (s, pace), 'off-' + pace)))
        for s in settings:
            g = span([gen_per_routed(r) for r in rows[s].values()], '%.2f')
            if g is None:
                continue
            vs_off = span([llm_cost(r) / llm_cost(rows['off'][t]) for t, r in rows[s].items()
                           if t in rows['off'] and llm_cost(r) is not None and llm_cost(rows['off'][t])], '%.2f', 'x')
            vs_alone = span([None if cost_vs_alone(r, alone) is None else 100 * cost_vs_alone(r, alone)
                             for r in rows[s].values()], '%.1f', '%')
            parts = ['%s LLM tokens generated per routed token' % g]
            if s != 'off' and vs_off:
                parts.append('an LLM cost of %s the blocking run\'s' % vs_off)
            if vs_alone:
                parts.append('%s of the LLM alone\'s' % vs_alone)
            L.append('- The LLM\'s work with the pipeline %s, across the thresholds: %s.' % (s, ', '.join(parts)))
        L.append('')
    L += ['Stall is the time the device had nothing to do but wait for the LLM, per routed token, in round trips; '
          '"spec. stood" is the share of routed tokens answered by a call whose LLM token was the speculated one; '
          'wasted SLM steps are token rows the SLM computed and then discarded (the price of speculating); LLM calls '
          'with the pipeline include calls cancelled when speculation was discarded, and exclude routed tokens taken '
          'from lookahead drafts. ' + work_note(on) + ' Cost vs off: against the blocking run at the same threshold; '
          'cost vs alone: the LLM cost against a large_only row on the same %d questions (%s).' % (
              n0, '`llm-alone/`' if os.path.isdir(os.path.join(d, 'llm-alone')) else
              'none in these files: "-"' if alone is None else 'from a run with baselines'), '']
    if plot:
        colors = {'off': '#c62828', 'on': '#1565c0', 'auto': '#2e7d32'}
        series = []
        for s, _ in SETTINGS:
            for pace, _, short in PACES:
                pts = [(x, y, lab) for (s2, p2, _, x, y, lab) in plot if s2 == s and p2 == pace]
                if pts:
                    series.append({'name': '%s, %s' % (s, short), 'color': colors[s], 'dashed': pace != 'own',
                                   'square': pace != 'own', 'points': pts})
        price = next((price_ratio(r, res) for res in runs.values() for r in res['rows']
                      if price_ratio(r, res) is not None), None)
        svg = os.path.join(d, 'time_vs_llm_cost.svg')
        with open(svg, 'w') as f:
            f.write(time_vs_cost_svg(series, llm_cost(alone) if alone else None, price))
        L += ['![Time per question vs the LLM\'s cost per question, per pipeline setting, pace and threshold](%s/'
              'time_vs_llm_cost.svg)' % rel, '',
              'One point per setting, pace and threshold (the label): time per question against the LLM\'s cost per '
              'question (prefilled + %s x generated tokens)%s.' % (
                  '%g' % price if price is not None else 'R',
                  '; the dashed vertical line is the LLM alone\'s cost on the same questions' if alone else ''), '']
    else:
        L += ['(No time vs LLM cost plot: these results.json files do not record the LLM\'s work.)', '']
    return L


def paper_work(picks, small, large, net_res):
    """The paper's Table 1 (accuracy, routed %, time) with the LLM's work beside routed %."""
    alone = large if llm_cost(large) else None
    net_rows = net_res['rows'] if net_res else None
    net_alone = alone_row(net_rows, net_rows[0]['n']) if net_rows else None
    lines = ['| run | threshold | accuracy | routed % | LLM gen / routed | LLM cost vs alone | time / question (ms) |',
             '|---|---:|---:|---:|---:|---:|---:|']
    for name, r in [('SLM alone', small), ('LLM alone', large)]:
        lines.append('| in process, %s | | %.1f%% | %.1f%% | %s | %s | %.1f |' % (
            name, 100 * r['accuracy'], r['routed_pct'], fmt(gen_per_routed(r), '%.2f'), pct(cost_vs_alone(r, alone)),
            1e3 * r['overall_s']))
    seen = set()
    for r in picks:
        if r is None or id(r) in seen:
            continue
        seen.add(id(r))
        lines.append('| in process | %.2f | %.1f%% | %.1f%% | %s | %s | %.1f |' % (
            r['threshold'], 100 * r['accuracy'], r['routed_pct'], fmt(gen_per_routed(r), '%.2f'),
            pct(cost_vs_alone(r, alone)), 1e3 * r['overall_s']))
        n = next((x for x in net_rows or [] if x['mode'] == 'joint' and abs(x['threshold'] - r['threshold']) < 1e-4), None)
        if n is not None:
            lines.append('| network, pipeline %s | %.2f | %.1f%% | %.1f%% | %s | %s | %.1f |' % (
                net_res.get('pipeline', '?'), n['threshold'], 100 * n['accuracy'], n['routed_pct'],
                fmt(gen_per_routed(n), '%.2f'),
                pct(cost_vs_alone(n, net_alone)), 1e3 * n['overall_s']))
    return lines


def at_routed(joint, routed):
    """The accuracy of a joint curve at a routed share, linear between its two nearest rows."""
    pts = sorted((r['routed_pct'], r['accuracy']) for r in joint)
    if routed <= pts[0][0]:
        return pts[0][1]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 <= routed <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (routed - x0) / (x1 - x0)
    return pts[-1][1]


def xvocab_section(d, out, shared_joint, shared_large):
    """The cross-vocabulary pair against the shared-vocabulary one (issue 33's acceptance)."""
    res = load(d, 'the cross-vocabulary evaluation')
    rows = res['rows']
    path = os.path.join(d, 'results.json')
    rel = os.path.relpath(d, os.path.dirname(out))
    small, large = one(rows, 'small_only', path), one(rows, 'large_only', path)
    joint = sorted((r for r in rows if r['mode'] == 'joint'), key=lambda r: r['threshold'])
    if not joint:
        die('%s: no joint rows' % path)
    L = ['## Pairs with different vocabularies', '',
         'The same SLM (512-token BPE) with `%s` as the LLM: the same world, trained by `tools/train` with its own '
         '1024-token BPE, so the two vocabularies differ (fingerprints unequal) and every routed call goes through the '
         'vocabulary bridge (the context re-encoded in the LLM\'s tokens, the last word held back and spelled again '
         'under the LLM\'s constraint, the reply turned into SLM tokens; docs/guide.md). Router: `%s`, trained with '
         'labels decided on text (`tlr router train` through the bridge). All %d test questions, in process, %s. '
         'Files: `%s/`.' % (res.get('llm'), res.get('router'), small['n'], setting_text(res), rel), '']
    L += table([small, large] + joint)
    L.append('')
    best10 = max((r for r in joint if r['routed_pct'] <= 10), key=lambda r: r['accuracy'], default=None)
    native = None
    if os.path.isdir(os.path.join(d, 'native')):
        nres = load(os.path.join(d, 'native'), 'the cross-vocabulary LLM alone in its own vocabulary')
        native = one(nres['rows'], 'large_only', os.path.join(d, 'native', 'results.json'))
    L.append('- The LLM alone through the bridge (every token a routed call, each spelling the held-back word again): '
             '%.1f%%%s; the SLM alone %.1f%%.' % (
                 100 * large['accuracy'],
                 '; in its own vocabulary, without the bridge (`%s/native/`): %.1f%%, %s LLM tokens generated and %s '
                 'prefilled per question' % (rel, 100 * native['accuracy'], fmt(per_q(native, 'llm_generated_tokens'), '%.1f'),
                                             fmt(per_q(native, 'llm_prefilled_tokens'), '%.1f')) if native else '',
                 100 * small['accuracy']))
    if best10:
        shared = at_routed(shared_joint, best10['routed_pct'])
        diff = 100 * (best10['accuracy'] - shared)
        L.append('- At <= 10%% routed: %.1f%% (threshold %.2f, %.1f%% routed), **%.2fx** the SLM alone; the '
                 'shared-vocabulary pair at the same routed share (its curve above, linear between its rows): %.1f%%, '
                 '**%.1f points %s**.' % (
                     100 * best10['accuracy'], best10['threshold'], best10['routed_pct'],
                     best10['accuracy'] / max(small['accuracy'], 1e-9), 100 * shared, abs(diff),
                     'above' if diff >= 0 else 'below'))

        def closed(joint_acc, llm_acc):
            return (joint_acc - small['accuracy']) / max(llm_acc - small['accuracy'], 1e-9)
        L.append('- The two LLMs differ (%.1f%% alone here, %.1f%% for the shared pair\'s), so also the share of the gap '
                 'between the SLM and its LLM that routing closes at that routed share: %.1f%% here, %.1f%% for the '
                 'shared-vocabulary pair.' % (
                     100 * large['accuracy'], 100 * shared_large['accuracy'],
                     100 * closed(best10['accuracy'], large['accuracy']), 100 * closed(shared, shared_large['accuracy'])))
        g = gen_per_routed(best10)
        if g is not None:
            L.append('- What the bridge costs the LLM there: %.2f tokens generated per routed token (the held-back word '
                     'spelled again, one piece more than the SLM tokens it gives) and %s LLM tokens prefilled per '
                     'question; %d routed calls fell back to the SLM\'s token%s.' % (
                         g, fmt(per_q(best10, 'llm_prefilled_tokens'), '%.1f'), best10.get('fallbacks', 0),
                         '; an LLM cost of %s of the LLM alone answering in its own vocabulary (the table\'s "vs alone" '
                         'column compares with the bridged LLM alone)' % pct(cost_vs_alone(
                             dict(best10, llm_cost_vs_llm_alone=None), native)) if native and llm_cost(native) else ''))
    L += ['', '![Accuracy vs routed share, cross-vocabulary pair](%s/accuracy_vs_routed.svg)' % rel, '']
    return L


def curve_at(points, x):
    """Accuracy of a curve of (cost, accuracy) points at cost x, linear between its points (mixing
    two settings question by question reaches any point between them), over its upper envelope
    (a costlier row is never worse); None outside the curve's costs."""
    pts, best = [], None
    for c, a in sorted(points):
        best = a if best is None else max(best, a)
        pts.append((c, best))
    if not pts or x < pts[0][0] - 1e-12 or x > pts[-1][0] + 1e-12:
        return None
    for (c0, a0), (c1, a1) in zip(pts, pts[1:]):
        if c0 <= x <= c1:
            return a0 if c1 == c0 else a0 + (a1 - a0) * (x - c0) / (c1 - c0)
    return pts[-1][1]


def cost_section(d, out):
    """Accuracy against the LLM's cost, per routing policy, for the bundled pair (d), its long-preamble
    variant (d/preamble) and the cross-vocabulary pair (d/xvocab) when present; d/signals.txt:
    scripts/route_signals.py."""
    rel = os.path.relpath(d, os.path.dirname(out))
    L = ['## Accuracy against the LLM\'s cost', '',
         'The routed share hides what the LLM really does: the first routed token of a question makes it read the '
         'whole context, later ones only their few new tokens. The same questions with both routing policies '
         '(docs/routing.md): `threshold` (route below the threshold) and `cost` (a call\'s bar falls as its price '
         'rises: a cold first call must be far less sure than a warm one; its threshold is the bar of the cheapest '
         'call). Cost: the LLM\'s (prefilled + R x generated) against the LLM alone on the same questions. Files: '
         '`%s/`.' % rel, '']
    pairs = [('bundled pair', d)]
    if os.path.isdir(os.path.join(d, 'preamble')):
        pairs.append(('bundled pair, long preamble (every question after the same ~105 tokens of text about other '
                      'things: tools/worldgen/preamble.py; the demo models were trained on short texts and lose '
                      'their way past ~100 tokens of preamble)', os.path.join(d, 'preamble')))
    if os.path.isdir(os.path.join(d, 'xvocab')):
        pairs.append(('cross-vocabulary pair (the LLM with its own 1024-token vocabulary, bridged)',
                      os.path.join(d, 'xvocab')))
    for name, path in pairs:
        res = load(path, 'the cost curves of the ' + name)
        rows = res['rows']
        large = one(rows, 'large_only', os.path.join(path, 'results.json'))
        pols = {}
        for r in rows:
            if r['mode'] == 'joint':
                pols.setdefault(r.get('policy') or 'threshold', []).append(r)
        L += ['### %s' % name[0].upper() + name[1:], '',
              '| policy | threshold | accuracy | routed % | LLM prefill / q | LLM gen / q | LLM cost vs alone |',
              '|---|---:|---:|---:|---:|---:|---:|']
        curves = {}
        for pol, rs in sorted(pols.items()):
            rs.sort(key=lambda r: (cost_vs_alone(r, large) or 0))
            curves[pol] = [(cost_vs_alone(r, large), r['accuracy']) for r in rs if cost_vs_alone(r, large) is not None]
            for r in rs:
                L.append('| %s | %.3f | %.1f%% | %.1f%% | %s | %s | %s |' % (
                    pol, r['threshold'], 100 * r['accuracy'], r['routed_pct'], fmt(per_q(r, 'llm_prefilled_tokens'), '%.1f'),
                    fmt(per_q(r, 'llm_generated_tokens'), '%.1f'), pct(cost_vs_alone(r, large))))
        L += ['', 'The LLM alone: %.1f%%; the SLM alone: %.1f%%.' % (
            100 * large['accuracy'], 100 * one(rows, 'small_only', path)['accuracy']), '']
        goal = 0.97 * large['accuracy']
        for pol, pts in sorted(curves.items()):
            hit = min((c for c, a in pts if a >= goal), default=None)
            L.append('- %s policy: the cheapest row with at least 97%% of the LLM alone\'s accuracy (%.1f%%) costs %s.' % (
                pol, 100 * goal, pct(hit) if hit is not None else 'more than any row here (none reaches it)'))
        if 'threshold' in curves and 'cost' in curves:
            diffs = []
            for c, a in curves['cost']:
                ref = curve_at(curves['threshold'], c)
                if ref is not None:
                    diffs.append((c, 100 * (a - ref)))
            if diffs:
                better = sum(1 for _, v in diffs if v > 0.05)
                worse = sum(1 for _, v in diffs if v < -0.05)
                L.append('- The cost policy against the threshold policy at equal cost (linear between the threshold '
                         'policy\'s rows): %d of %d rows more accurate, %d less, the rest within 0.05 points; per row: %s.' % (
                             better, len(diffs), worse, ', '.join('%+.1f at %.1f%%' % (v, 100 * c) for c, v in diffs)))
        L += ['', '![Accuracy vs the LLM\'s cost, %s](%s/accuracy_vs_cost.svg)' % (
            name, os.path.relpath(path, os.path.dirname(out))), '']
    sig = os.path.join(d, 'signals.txt')
    if os.path.isfile(sig):
        with open(sig) as f:
            text = f.read().rstrip()
        L += ['What a question-level gate could gain (`scripts/route_signals.py` on the bundled pair\'s answers: the '
              'LLM kept out of a question when the SLM\'s own answer looks right; costs estimated from the tokens):', '',
              '```', text, '```', '']
    return L


def main():
    if len(sys.argv) < 3:
        die('usage: results.py RESULTS_DIR OUT.md [NET_DIR [PIPELINE_DIR [XVOCAB_DIR]]]')
    d, out = sys.argv[1], sys.argv[2]
    res = load(d, 'the in-process evaluation')
    path = os.path.join(d, 'results.json')
    rows = res['rows']
    small = one(rows, 'small_only', path)
    large = one(rows, 'large_only', path)
    joint = sorted((r for r in rows if r['mode'] == 'joint'), key=lambda r: r['threshold'])
    if not joint:
        die('%s: no joint rows' % path)
    net = load(sys.argv[3], 'the evaluation over the network') if len(sys.argv) > 3 else None
    rel = os.path.relpath(d, os.path.dirname(out))
    L = ['# Results on the bundled demo pair', '',
         'Produced by `make results` (never edited by hand): `tlr eval` on all %d questions of '
         '`models/demo/test.jsonl` with the bundled SLM, LLM and router (greedy, %s threads, at most %s '
         'tokens per answer), in process (no network), with %s. Files: `%s/`.' % (
             small['n'], res.get('threads'), res.get('max_tokens'), setting_text(res), rel), '']
    L += table([small, large] + joint)
    L += ['', 'Times are means per question, measured on a shared 2-core VM (noisy; compare rows of one run). ' +
          work_note(res), '']
    for name, what in [('accuracy_vs_threshold.svg', 'Accuracy vs threshold'),
                       ('routed_vs_threshold.svg', 'Routed share vs threshold'),
                       ('latency_vs_threshold.svg', 'Time per question vs threshold (stacked)'),
                       ('accuracy_vs_routed.svg', 'Accuracy vs routed share')]:
        L += ['![%s](%s/%s)' % (what, rel, name), '']
    # Shape comparison with the paper (Table 1, Figures 6-8).
    routed = [r['routed_pct'] for r in joint]
    monotone = all(b >= a for a, b in zip(routed, routed[1:]))
    best10 = max((r for r in joint if r['routed_pct'] <= 10), key=lambda r: r['accuracy'], default=None)
    best7 = max((r for r in joint if r['routed_pct'] <= 7), key=lambda r: r['accuracy'], default=None)
    lo = min(joint, key=lambda r: r['routed_pct'])
    hi = max(joint, key=lambda r: r['routed_pct'])
    alone = large if llm_cost(large) else None

    def work(r):
        g, c = gen_per_routed(r), cost_vs_alone(r, alone)
        if g is None and c is None:
            return ''
        return '; the LLM generated %s tokens per routed token, at %s of the LLM alone\'s cost' % (
            fmt(g, '%.2f'), pct(c))

    L += ['## Compared with the paper', '',
          '- Routed share vs threshold: %s, from %.1f%% at threshold %.2f to %.1f%% at %.2f (the paper: a '
          'higher threshold routes more tokens).' % ('rises monotonically' if monotone else 'does not rise monotonically',
                                                       lo['routed_pct'], lo['threshold'], hi['routed_pct'], hi['threshold'])]
    if best10:
        L.append('- Accuracy gain at <= 10%% routed: %.1f%% (threshold %.2f, %.1f%% routed%s) vs %.1f%% for the SLM '
                 'alone, %.2fx; the LLM alone %.1f%%.' % (100 * best10['accuracy'], best10['threshold'],
                                                          best10['routed_pct'], work(best10),
                                                          100 * small['accuracy'],
                                                          best10['accuracy'] / max(small['accuracy'], 1e-9),
                                                          100 * large['accuracy']))
    if best7:
        L.append('- At <= 7%% routed (the paper: ~60%% gain with under 7%% of tokens to the LLM): %.1f%%, %.2fx the SLM '
                 '(threshold %.2f, %.1f%% routed%s).' % (
                     100 * best7['accuracy'], best7['accuracy'] / max(small['accuracy'], 1e-9), best7['threshold'],
                     best7['routed_pct'], work(best7)))
    L.append('- TBT of the SLM part: %.4f ms with %.1f%% routed vs %.4f ms for the SLM alone (the seed system re-ran '
             'the whole sequence after each routed token and its TBT grew about 4x; here the SLM keeps its KV cache; on '
             'this tiny demo SLM, 25-40 us per step, the differences are cache effects and noise).' % (
                 1e3 * hi['tbt_slm_s'], hi['routed_pct'], 1e3 * small['tbt_slm_s']))
    L.append('- Communication: in process here, so comm + LLM is the LLM\'s compute alone (the next section puts the '
             'LLM behind a server with a simulated round trip).')
    if gen_per_routed(joint[-1]) is not None:
        L += ['- The paper\'s Table 1 reports accuracy, routed share and time; routed tokens are not the LLM\'s whole '
              'work: it also reads (prefills) the context it has not seen, and with the pipeline it writes lookahead and '
              'speculative tokens. The same table with the LLM\'s work beside the routed share (in process: %s%s):' % (
                  setting_text(res), '; over the network (next section): %s, time including the simulated round '
                  'trips' % setting_text(net) if net else ''),
              '']
        L += paper_work([best7, best10, hi], small, large, net)
    L.append('')
    if net is not None:
        L += network_section(sys.argv[3], out)
    if len(sys.argv) > 4:
        L += pipeline_section(sys.argv[4], out)
    if len(sys.argv) > 5:
        L += xvocab_section(sys.argv[5], out, joint, large)
    if len(sys.argv) > 6:
        L += cost_section(sys.argv[6], out)
    with open(out, 'w') as f:
        f.write('\n'.join(L) + '\n')
    print('wrote', out)


if __name__ == '__main__':
    main()
