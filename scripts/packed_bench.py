#!/usr/bin/env python3
"""The packed single-file form against a GGUF with its weight cache (issue 43's yardstick).

For each GGUF file: `tlr run` once (the weight cache is written beside it), `tlr convert` into a
packed file in a directory of its own; then, alternated ROUNDS times in one run, `tlr run -m FILE
-p PROMPT -n 2` on the GGUF (its cache exists) and on the packed file: wall time from fork to exit
and the peak resident set (wait4), and from `tlr run -v` the resident memory while generating,
split into file-backed and anonymous. Also: the disk blocks each form takes (the GGUF plus its
cache against the packed file alone; what else appeared beside the packed file: nothing), and
whether both give the same logits at every prompt position and the same greedy tokens
(`--logits-out`, compared byte for byte).

Usage: scripts/packed_bench.py [--rounds N] [--threads T] [--ctx C] [--tlr PATH] FILE.gguf...
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from coldstart_bench import MIB, timed, tlr_memory  # noqa: E402


def disk_bytes(*paths):
    return sum(os.stat(p).st_blocks * 512 for p in paths if os.path.exists(p))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--prompt", default="Hello, my name is")
    ap.add_argument("--tlr", default="build/bin/tlr")
    a = ap.parse_args()
    print(f"process start to the 2nd generated token (+ exit), {a.threads} threads, context {a.ctx}, "
          f"median of {a.rounds} alternated runs; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{os.cpu_count()} cores\n")
    print("| file | GGUF + cache on disk MiB | packed on disk MiB | start s: cache | start s: packed | ratio | "
          "peak MiB: cache | peak MiB: packed | anon / file MiB: cache | anon / file MiB: packed | logits | tokens |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for f in a.files:
        work = tempfile.mkdtemp(prefix="tlr_packed_bench_")
        try:
            packed = os.path.join(work, "model.packed.gguf")
            run = [a.tlr, "run", "-p", a.prompt, "-n", "2", "-t", str(a.threads), "-c", str(a.ctx)]
            timed(run + ["-m", f])  # the cache exists from here on
            cache = f + ".tlrw"
            if not os.path.exists(cache):
                sys.exit(f"packed_bench: no weight cache beside {f} (is its directory writable?)")
            subprocess.run([a.tlr, "convert", f, "-o", packed], check=True, stdout=subprocess.DEVNULL)
            samples = {"cache": [], "packed": []}
            for _ in range(a.rounds):
                for name, path in (("cache", f), ("packed", packed)):
                    wall, peak, _, _ = timed(run + ["-m", path])
                    samples[name].append((wall, peak))
            mem = {}
            for name, path in (("cache", f), ("packed", packed)):
                _, _, out, err = timed(run + ["-m", path, "-v"])
                mem[name] = tlr_memory(out + err)
            outs = {}
            for name, path in (("cache", f), ("packed", packed)):
                stem = os.path.join(work, name)
                timed([a.tlr, "run", "-p", a.prompt, "-n", "16", "-t", str(a.threads), "-m", path,
                       "--logits-out", stem])
                outs[name] = [open(stem + ext, "rb").read() for ext in (".f32", ".json")]
            beside = sorted(set(os.listdir(work)) - {"model.packed.gguf", "cache.f32", "cache.json",
                                                     "packed.f32", "packed.json"})
            if beside:
                sys.exit(f"packed_bench: files appeared beside the packed model: {beside}")
            med = {k: (statistics.median(w for w, _ in v), statistics.median(p for _, p in v))
                   for k, v in samples.items()}
            same_logits = "same" if outs["cache"][0] == outs["packed"][0] else "DIFFER"
            same_tokens = "same" if outs["cache"][1] == outs["packed"][1] else "DIFFER"
            print(f"| {os.path.basename(f)} | {disk_bytes(f, cache) / MIB:.0f} | {disk_bytes(packed) / MIB:.0f} | "
                  f"{med['cache'][0]:.3f} | {med['packed'][0]:.3f} | {med['packed'][0] / med['cache'][0]:.2f}x | "
                  f"{med['cache'][1] / MIB:.0f} | {med['packed'][1] / MIB:.0f} | "
                  f"{mem['cache']['resident_anon_bytes'] / MIB:.0f} / {mem['cache']['resident_file_bytes'] / MIB:.0f} | "
                  f"{mem['packed']['resident_anon_bytes'] / MIB:.0f} / {mem['packed']['resident_file_bytes'] / MIB:.0f} | "
                  f"{same_logits} | {same_tokens} |", flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
