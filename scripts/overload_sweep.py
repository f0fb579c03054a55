#!/usr/bin/env python3
"""Goodput against offered load: does a saturated `tlr serve` keep answering?

For each server binary (this build, and --baseline another build's `tlr` in the same run),
starts `tlr serve -t THREADS` on a free loopback port with a model file, runs this build's
`tlr loadtest --sweep` against it (devices arriving all at once, calling back to back, each
waiting --timeout seconds per call) and stops it. Prints one table per server and protocol:
goodput (calls answered within the device's timeout, per second), refused, timed out and failed
calls per device count, and the ratio of goodput at the largest counts to the sweep's peak;
writes every run's JSON and an SVG plot of the curves into --out.

Usage: scripts/overload_sweep.py [--tlr build/bin/tlr] [--baseline OLD/bin/tlr] [--model FILE]
         [--backend tlr|openai|both] [--counts 4,8,16,32,64,128] [--duration 30] [--threads 1]
         [--timeout 2] [--out docs/results-overload]
Without --model a random-weight file of the qwen2.5-0.5b shape (Q8_0) is written once into
build/bench/ (`tlr make-random`). A benchmark, not a test (minutes). Standard library only.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

from serve_helper import start_server

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
COLORS = {"after": "#1f77b4", "before": "#d62728"}


def sweep(tlr, server_tlr, model, backend, a, work, tag):
    log = open(os.path.join(work, tag + "-serve.log"), "w+")
    p, url = start_server([server_tlr, "serve", "--port", "0", "-t", str(a.threads), "-m", model,
                           "--max-sessions", "1024", "--session-quota", "1024"], log, "overload_sweep: tlr serve")
    out = os.path.join(a.out, tag + ".json")
    cmd = [tlr, "loadtest", "--server", url, "--backend", backend, "--vocab", model, "--sweep", a.counts,
           "--duration", str(a.duration), "--ramp-up", "0", "--llm-timeout", str(a.timeout),
           "--prompt-tokens", "64", "--gen-tokens", "8", "--server-pid", str(p.pid), "--json", out]
    print("overload_sweep: " + " ".join(cmd), file=sys.stderr, flush=True)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        p.terminate()
        p.wait(timeout=60)
    print(r.stdout, file=sys.stderr, flush=True)
    if not os.path.exists(out):
        sys.exit("overload_sweep: loadtest wrote no results:\n%s%s" % (r.stdout, r.stderr))
    with open(out) as f:
        return json.load(f)


def table(name, j):
    runs = j["runs"]
    peak = max(r["goodput_per_s"] for r in runs) or 1
    lines = ["**%s**: peak goodput %.1f calls/s" % (name, peak), "",
             "| devices | goodput/s | of peak | answered | refused | of them paced | partial | timed out | failed | p50 ms | p99 ms | refusal p99 ms | new conversations' tokens | server resyncs | evictions |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        if r.get("error"):
            lines.append("| %d | 0 | 0x | - | - | - | - | - | - | - | - | - | - | - | - |  (%s)" % (r["sessions"], r["error"]))
            continue
        s = r.get("server", {})
        # Servers before the pacer (--baseline) report neither: "-".
        paced, new = s.get("new_conversations_paced"), s.get("new_conversation_tokens")
        lines.append("| %d | %.1f | %.2fx | %d | %d | %s | %d | %d | %d | %.0f | %.0f | %.1f | %s | %d | %d |" % (
            r["sessions"], r["goodput_per_s"], r["goodput_per_s"] / peak, r["calls"], r.get("refused", 0),
            "-" if paced is None else "%d" % paced, r.get("partial", 0), r.get("timed_out", 0), r.get("failed", 0),
            r["latency_ms"]["p50"], r["latency_ms"]["p99"], r.get("refused_ms", {}).get("p99", 0),
            "-" if new is None else "%d" % new, s.get("resyncs", 0), s.get("evictions", 0)))
    return "\n".join(lines) + "\n"


def svg(curves, title):
    """Goodput against devices (log2 x axis), one line per curve, in the look of src/tools/plots.cc."""
    W, H, L, R, T, B = 640, 400, 70, 150, 40, 50
    xs = sorted({r["sessions"] for c in curves.values() for r in c})
    ymax = max(r["goodput_per_s"] for c in curves.values() for r in c) * 1.15 or 1
    lx = [math.log2(x) for x in xs]
    x0, x1 = min(lx), max(lx) if max(lx) > min(lx) else min(lx) + 1

    def px(x):
        return L + (math.log2(x) - x0) / (x1 - x0) * (W - L - R)

    def py(y):
        return H - B - y / ymax * (H - T - B)

    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">' % (W, H),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="22" font-size="14">%s</text>' % (L, title),
         '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, H - B, W - R, H - B),
         '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (L, T, L, H - B)]
    for x in xs:
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (px(x), H - B + 16, x))
    for i in range(6):
        y = ymax * i / 5
        o.append('<text x="%d" y="%.1f" text-anchor="end">%.0f</text>' % (L - 6, py(y) + 4, y))
        o.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (L, py(y), W - R, py(y)))
    o.append('<text x="%d" y="%d" text-anchor="middle">devices calling back to back (all arriving at once)</text>' % ((L + W - R) // 2, H - 12))
    o.append('<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">goodput (answered calls/s)</text>' % ((T + H - B) // 2, (T + H - B) // 2))
    for k, (name, runs) in enumerate(curves.items()):
        color = COLORS.get(name.split()[0], ["#2ca02c", "#9467bd"][k % 2])
        pts = " ".join("%.1f,%.1f" % (px(r["sessions"]), py(r["goodput_per_s"])) for r in runs)
        o.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' % (color, pts))
        for r in runs:
            o.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>' % (px(r["sessions"]), py(r["goodput_per_s"]), color))
        o.append('<text x="%d" y="%d" fill="%s">%s</text>' % (W - R + 10, T + 16 + 18 * k, color, name))
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tlr", default=os.path.join(ROOT, "build", "bin", "tlr"))
    ap.add_argument("--baseline", help="another build's tlr: its server is swept too, in the same run")
    ap.add_argument("--baseline-name", help="how the plot names the baseline (e.g. its commit; default: its path)")
    ap.add_argument("--model", help="the server's GGUF (default: a random qwen2.5-0.5b-shape Q8_0 file)")
    ap.add_argument("--backend", default="both", choices=["tlr", "openai", "both"])
    ap.add_argument("--counts", default="4,8,16,32,64,128")
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "results-overload"))
    a = ap.parse_args()
    model = a.model
    if not model:
        model = os.path.join(ROOT, "build", "bench", "qwen2.5-0.5b-q8_0-random.gguf")
        if not os.path.exists(model):
            os.makedirs(os.path.dirname(model), exist_ok=True)
            subprocess.run([a.tlr, "make-random", "--preset", "qwen2.5-0.5b", "--type", "q8_0", "-o", model], check=True)
    os.makedirs(a.out, exist_ok=True)
    backends = ["tlr", "openai"] if a.backend == "both" else [a.backend]
    servers = [("after", a.tlr)] + ([("before", a.baseline)] if a.baseline else [])
    report = []
    with tempfile.TemporaryDirectory(prefix="tlr-overload-") as work:
        for backend in backends:
            curves = {}
            for tag, server in servers:
                j = sweep(a.tlr, server, model, backend, a, work, "%s-%s" % (backend, tag))
                curves["%s (%s)" % (tag, "this build" if tag == "after" else a.baseline_name or server)] = j["runs"]
                report.append(table("%s, %s server (%s)" % ({"tlr": "native /tlr/v1/next", "openai": "/v1/completions"}[backend], tag, server), j))
                runs = j["runs"]
                peak = max(r["goodput_per_s"] for r in runs) or 1
                tail = runs[-2:]
                report.append("goodput at %s devices: %s of the peak\n" % (
                    " and ".join(str(r["sessions"]) for r in tail),
                    " and ".join("%.2fx" % (r["goodput_per_s"] / peak) for r in tail)))
            with open(os.path.join(a.out, "goodput_%s.svg" % backend), "w") as f:
                f.write(svg(curves, "Goodput of tlr serve -t %d under load (%s, %.0f s timeout)" % (
                    a.threads, {"tlr": "native protocol", "openai": "/v1/completions"}[backend], a.timeout)))
    print("\n".join(report))
    print("(%s; %.0f s per point; 64-token prompts, 8 new tokens and 1 LLM token per call; device timeout %.1f s)" % (
        os.path.basename(model), a.duration, a.timeout))


if __name__ == "__main__":
    main()
