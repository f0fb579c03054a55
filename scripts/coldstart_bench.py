#!/usr/bin/env python3
"""Cold start and memory, TLR against llama.cpp on the same GGUF files (issue 32's yardstick).

For each file, alternated ROUNDS times in one run: `tlr run -m FILE -p PROMPT -n 2 -t T -c CTX`
and the same job through llama.cpp's C API (tools/interop/llamacpp_coldstart.cc, built from
source by tools/interop/llamacpp_source.sh). Measured from the outside, the same way for both:
wall time from fork to exit (process start to the second generated token, plus exit) and the
peak resident set (wait4's ru_maxrss). Both have opened the file before (TLR's weight cache
exists, the file is in the page cache): "second and later opens". A separate run of each
reports resident memory after the second token split into file-backed and anonymous.

Prints a Markdown table of medians and the ratios (TLR / llama.cpp: below 1 means TLR is
faster or smaller), and with --json the raw samples.

Usage: scripts/coldstart_bench.py [--rounds N] [--threads T] [--ctx C] [--tlr PATH]
           [--llama-dir DIR] FILE.gguf...
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time


def timed(cmd, env=None):
    """Runs cmd; returns (wall seconds, peak resident bytes, stdout, stderr)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    # Read before waiting (the pipes must not fill); wait4 gives this child's own rusage.
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"coldstart_bench: {' '.join(cmd)} failed ({proc.returncode}):\n"
                 f"{err.decode(errors='replace')[-2000:]}")
    return wall, usage.ru_maxrss * 1024, out.decode(errors="replace"), err.decode(errors="replace")


MIB = 1048576.0
UNITS = {"KiB": 1024.0, "MiB": MIB, "GiB": MIB * 1024}


def tlr_memory(text):
    """Parses `tlr run -v`'s 'while generating: 510 MiB resident (file-backed 21 MiB,
    anonymous 489 MiB), peak 598 MiB (the KV cache: 48 MiB)'."""
    line = next((l for l in text.splitlines() if l.startswith("while generating:")), None)
    if line is None:
        sys.exit("coldstart_bench: tlr run -v printed no 'while generating' line")
    nums = re.findall(r"([\d.]+) (KiB|MiB|GiB)", line)
    vals = [float(n) * UNITS[u] for n, u in nums]
    return {"resident_bytes": vals[0], "resident_file_bytes": vals[1],
            "resident_anon_bytes": vals[2], "peak_resident_bytes": vals[3],
            "kv_bytes": vals[4] if len(vals) > 4 else 0.0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--prompt", default="Hello")
    ap.add_argument("--tlr", default="build/bin/tlr")
    ap.add_argument("--llama-dir", default="build/llamacpp/build",
                    help="llama.cpp build directory (tools/interop/llamacpp_source.sh)")
    ap.add_argument("--json", action="store_true", help="also print the raw samples as JSON")
    a = ap.parse_args()
    harness = os.path.join(a.llama_dir, "bin", "tlr-llamacpp-coldstart")
    if not os.access(harness, os.X_OK):
        sys.exit(f"coldstart_bench: {harness} not found: run tools/interop/llamacpp_source.sh")
    raw = {}
    print(f"process start to the 2nd generated token (+ exit), {a.threads} threads, context "
          f"{a.ctx}, prompt {a.prompt!r}, median of {a.rounds} alternated runs; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores\n")
    print("| file | TLR s | llama.cpp s | ratio | TLR peak MiB | llama.cpp peak MiB | ratio | "
          "TLR anon / file MiB | llama.cpp anon / file MiB | TLR KV MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for f in a.files:
        ours_cmd = [a.tlr, "run", "-m", f, "-p", a.prompt, "-n", "2", "-t", str(a.threads),
                    "-c", str(a.ctx)]
        theirs_cmd = [harness, f, a.prompt, "2", str(a.threads), str(a.ctx)]
        # Opens before measuring: TLR writes its weight cache, both read the file into the
        # page cache.
        timed(ours_cmd)
        timed(theirs_cmd)
        samples = {"tlr_s": [], "llama_s": [], "tlr_peak": [], "llama_peak": []}
        for _ in range(a.rounds):
            w, peak, _, _ = timed(ours_cmd)
            samples["tlr_s"].append(w)
            samples["tlr_peak"].append(peak)
            w, peak, _, _ = timed(theirs_cmd)
            samples["llama_s"].append(w)
            samples["llama_peak"].append(peak)
        _, _, _, err = timed(ours_cmd + ["-v"])
        ours_mem = tlr_memory(err)
        _, _, _, err = timed(theirs_cmd + ["--memory"])
        theirs_mem = json.loads(err.strip().splitlines()[-1])
        med = {k: statistics.median(v) for k, v in samples.items()}
        raw[f] = {"samples": samples, "tlr_memory": ours_mem, "llama_memory": theirs_mem}
        print(f"| {os.path.basename(f)} | {med['tlr_s']:.3f} | {med['llama_s']:.3f} | "
              f"{med['tlr_s'] / med['llama_s']:.2f}x | {med['tlr_peak'] / MIB:.0f} | "
              f"{med['llama_peak'] / MIB:.0f} | {med['tlr_peak'] / med['llama_peak']:.2f}x | "
              f"{ours_mem['resident_anon_bytes'] / MIB:.0f} / "
              f"{ours_mem['resident_file_bytes'] / MIB:.0f} | "
              f"{theirs_mem['resident_anon_bytes'] / MIB:.0f} / "
              f"{theirs_mem['resident_file_bytes'] / MIB:.0f} | {ours_mem['kv_bytes'] / MIB:.0f} |",
              flush=True)
    if a.json:
        print(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
