#!/usr/bin/env python3
"""Router labelling through a server against the LLM in process, side by side (a benchmark).

Writes router training rows (the dev questions' variants with references, tools/worldgen/
variants.py, and without references, so both the teacher-forced predictions and the greedy
answers are asked for), then times `tlr router train`'s labelling (its "labels in S s": the
references, the SLM's and the LLM's teacher-forced passes) with --llm and with --server against
a local `tlr serve` (native and openai backends), alternating, and prints each setting's median
and its throughput relative to the LLM in process. The routers must come out the same.

Usage: python3 scripts/label_throughput.py [--repeats 3] [--variants 4] [--threads 2]
Needs build/bin/tlr.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_helper import start_server  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tlr", default=os.path.join(ROOT, "build", "bin", "tlr"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--variants", type=int, default=4, help="variants per dev question (rows with references)")
    ap.add_argument("--threads", type=int, default=2, help="the trainer's and the server's threads")
    a = ap.parse_args()
    demo = os.path.join(ROOT, "models", "demo")
    with tempfile.TemporaryDirectory(prefix="tlr-labels-") as work:
        rows = os.path.join(work, "rows.jsonl")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "worldgen", "variants.py"), "--data",
                        os.path.join(demo, "dev.jsonl"), "--n", str(a.variants), "--seed", "7", "--reference",
                        "--out", rows], check=True, capture_output=True)
        with open(rows, "a") as out, open(os.path.join(demo, "dev.jsonl")) as dev:
            out.write(dev.read())  # the dev questions themselves: the LLM answers them
        log = open(os.path.join(work, "serve.log"), "w+")
        p, url = start_server([a.tlr, "serve", "--port", "0", "-t", str(a.threads)], log, "label_throughput: tlr serve")
        settings = {"in process": ["--llm", os.path.join(demo, "llm.gguf")],
                    "tlr serve, native": ["--server", url, "--backend", "tlr"],
                    "tlr serve, openai": ["--server", url, "--backend", "openai"]}
        times = {k: [] for k in settings}
        fingerprints = {}
        try:
            for rep in range(a.repeats):
                for name, flags in settings.items():
                    out = os.path.join(work, "r.gguf")
                    r = subprocess.run([a.tlr, "router", "train", "--slm", os.path.join(demo, "slm.gguf"), "--data", rows,
                                        "--out", out, "-t", str(a.threads), "--epochs", "1"] + flags,
                                       capture_output=True, text=True)
                    m = re.search(r"labels in ([0-9.]+) s", r.stderr)
                    if r.returncode != 0 or not m:
                        sys.exit("%s failed:\n%s" % (name, r.stderr))
                    times[name].append(float(m.group(1)))
                    info = subprocess.run([a.tlr, "router", "info", "--json", out], capture_output=True, text=True).stdout
                    fingerprints.setdefault(name, re.search(r'"weights_fingerprint": "(\w+)"', info).group(1))
        finally:
            p.terminate()
            p.wait(timeout=10)
    base = statistics.median(times["in process"])
    print("| LLM | labels (s, median of %d) | throughput vs in process | router |" % a.repeats)
    print("|---|---:|---:|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        print("| %s | %.2f | %.2fx | %s |" % (name, med, base / med, fingerprints[name]))
    if len(set(fingerprints.values())) != 1:
        sys.exit("the routers differ")


if __name__ == "__main__":
    main()
