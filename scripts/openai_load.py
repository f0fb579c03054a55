#!/usr/bin/env python3
"""The OpenAI endpoint's promise under load: many devices resending a growing context.

Starts `tlr serve` on a free loopback port (default flags but threads) with a model file, runs
`tlr loadtest` over the native session protocol and over /v1/completions (the whole context as
token ids each call, as devices on the openai backend and OpenAI clients send it) in one run,
one after the other against the same server, and prints calls/s, latency percentiles and the
tokens the server prefilled per call for each; the ratio openai / native is the figure the
cost issue asks for (>= 0.8 with default flags).

Usage: scripts/openai_load.py [--tlr build/bin/tlr] [--model FILE] [--sessions 32] [--duration 60]
                              [--serve-flag=--prompt-cache=4 ...] [--quick] [--json out.json]
Without --model a random-weight file of the qwen2.5-0.5b shape (Q8_0) is written once into
build/bench/ (`tlr make-random`). Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

from serve_helper import start_server

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def loadtest(tlr, url, backend, vocab, sessions, duration, work, pid):
    out = os.path.join(work, backend + ".json")
    cmd = [tlr, "loadtest", "--server", url, "--backend", backend, "--vocab", vocab, "--sessions", str(sessions),
           "--duration", str(duration), "--prompt-tokens", "64", "--gen-tokens", "8",
           "--ramp-up", str(min(10.0, duration / 4)), "--server-pid", str(pid), "--json", out]
    print("openai_load: " + " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("openai_load: loadtest (%s) failed:\n%s%s" % (backend, r.stdout, r.stderr))
    print(r.stdout, file=sys.stderr, flush=True)
    with open(out) as f:
        return json.load(f)["runs"][-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tlr", default=os.path.join(ROOT, "build", "bin", "tlr"))
    ap.add_argument("--model", help="the server's GGUF (default: a random qwen2.5-0.5b-shape Q8_0 file)")
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--serve-flag", action="append", default=[], help="an extra `tlr serve` flag (repeatable)")
    ap.add_argument("--quick", action="store_true", help="8 devices for 10 s (a smoke run)")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    if a.quick:
        a.sessions, a.duration = 8, 10
    model = a.model
    if not model:
        model = os.path.join(ROOT, "build", "bench", "qwen2.5-0.5b-q8_0-random.gguf")
        if not os.path.exists(model):
            os.makedirs(os.path.dirname(model), exist_ok=True)
            subprocess.run([a.tlr, "make-random", "--preset", "qwen2.5-0.5b", "--type", "q8_0", "-o", model],
                           check=True)
    extra = [f for flag in a.serve_flag for f in flag.split("=", 1)]
    results = {}
    with tempfile.TemporaryDirectory(prefix="tlr-openai-load-") as work:
        log = open(os.path.join(work, "serve.log"), "w+")
        p, url = start_server([a.tlr, "serve", "--port", "0", "-t", str(a.threads), "-m", model] + extra, log,
                              "openai_load: tlr serve")
        try:
            for backend in ("tlr", "openai"):
                results[backend] = loadtest(a.tlr, url, backend, model, a.sessions, a.duration, work, p.pid)
        finally:
            p.terminate()
            p.wait(timeout=30)

    def row(name, r):
        lat = r.get("latency_ms", {})
        calls = max(1, r.get("calls", 0))
        return "| %s | %.1f | %.0f | %.0f | %.0f | %d |" % (
            name, r["calls_per_s"], lat.get("p50", 0), lat.get("p99", 0),
            r.get("server", {}).get("prefill_tokens", 0) / calls, r.get("errors", 0))

    print("| protocol | calls/s | p50 ms | p99 ms | prefilled / call | errors |")
    print("|---|---:|---:|---:|---:|---:|")
    print(row("native (`/tlr/v1/next`)", results["tlr"]))
    print(row("OpenAI (`/v1/completions`)", results["openai"]))
    ratio = results["openai"]["calls_per_s"] / results["tlr"]["calls_per_s"] if results["tlr"]["calls_per_s"] else 0
    print("\nopenai / native calls/s: %.2f (%d devices, %.0f s each, 64-token prompts, 8 new tokens and 1 "
          "generated token per call; serve flags: %s)" % (ratio, a.sessions, a.duration,
                                                          " ".join(extra) or "defaults"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"results": results, "ratio": ratio, "sessions": a.sessions, "duration": a.duration,
                       "serve_flags": extra}, f, indent=1)


if __name__ == "__main__":
    main()
