#!/usr/bin/env python3
"""What the pipeline costs the LLM: time per question against the LLM's real work.

Starts `tlr serve` (the demo LLM) on a free loopback port, runs `tlr eval` over it with a
simulated round trip in each setting (pipeline off, on without lookahead, on with the defaults;
at a SIMULATED 20 ms per SLM step and at the demo SLM's own pace) and reads the server's
/metrics before and after every run, so the LLM's work is the server's own count: tokens
generated (answers, lookahead, and calls whose answers were cancelled or never read), tokens
prefilled, tokens rewound. Prints one Markdown table; with --baseline OTHER_TLR, the same
settings with another build of `tlr` in the same run (before/after a change, on one machine).

Usage: scripts/llm_cost.py [--tlr build/bin/tlr] [--baseline OLD/bin/tlr] [--quick]
                           [--settings NAME,...] [--json out.json]
Standard library only. Each eval runs sequentially (one device), so the server's counters
between two scrapes are exactly that run's work.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import urllib.request

from serve_helper import start_server

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# name: (extra eval flags, questions, quick questions)
SETTINGS = [
    ("20ms-off", ["--sim-slm-ms", "20", "--pipeline", "off"], 60, 10),
    ("20ms-la0", ["--sim-slm-ms", "20", "--pipeline", "on", "--lookahead", "0"], 60, 10),
    ("20ms-default", ["--sim-slm-ms", "20"], 60, 10),
    ("own-off", ["--pipeline", "off"], 100, 15),
    ("own-la0", ["--pipeline", "on", "--lookahead", "0"], 100, 15),
    ("own-default", [], 100, 15),
]
COUNTERS = ["tlr_generated_tokens_total", "tlr_prefill_tokens_total", "tlr_rewound_tokens_total",
            "tlr_lookahead_tokens_total", "tlr_forward_seconds_total"]


_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never through a proxy


def scrape(url):
    with _LOCAL.open(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for name in COUNTERS:
        m = re.search(r"^" + name + r" ([0-9.eE+-]+)$", text, re.M)
        out[name] = float(m.group(1)) if m else None
    return out


def run_setting(tlr, url, name, flags, n, workdir):
    out = os.path.join(workdir, name)
    before = scrape(url)
    cmd = [tlr, "eval", "--server", url, "--sim-rtt", "170", "--thresholds", "0.8", "--no-baselines",
           "--max-tokens", "40", "-t", "1", "--limit", str(n), "--out", out] + flags
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("llm_cost: %s failed:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    after = scrape(url)
    with open(os.path.join(out, "results.json")) as f:
        row = json.load(f)["rows"][0]
    work = {k: (after[k] - before[k]) if after[k] is not None and before[k] is not None else None for k in COUNTERS}
    return {"setting": name, "questions": n, "time_per_question_ms": 1e3 * row["overall_s"],
            "ttft_ms": 1e3 * row["ttft_s"], "routed_pct": row["routed_pct"], "routed": row["routed_tokens"],
            "generated": row["generated_tokens"], "accuracy": row["accuracy"],
            "server_generated": work["tlr_generated_tokens_total"],
            "server_prefilled": work["tlr_prefill_tokens_total"],
            "server_rewound": work["tlr_rewound_tokens_total"],
            "server_lookahead": work["tlr_lookahead_tokens_total"],
            "server_forward_s": work["tlr_forward_seconds_total"],
            "wasted_slm_steps": row.get("wasted_slm_steps"), "slm_steps": row.get("slm_steps"),
            "slm_rows": row.get("slm_rows"),
            "device_llm_generated": row.get("llm_generated_tokens"),
            "device_llm_prefilled": row.get("llm_prefilled_tokens")}


def fmt(v, f="%.0f"):
    return "-" if v is None else f % v


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tlr", default=os.path.join(ROOT, "build", "bin", "tlr"))
    ap.add_argument("--baseline", help="another tlr binary to measure in the same run (e.g. before a change)")
    ap.add_argument("--quick", action="store_true", help="fewer questions per setting (a smoke run)")
    ap.add_argument("--settings", help="comma-separated subset of: " + ",".join(s[0] for s in SETTINGS))
    ap.add_argument("--add", action="append", default=[], metavar="NAME=FLAGS",
                    help="an extra setting: a name starting with 20ms- or own- (its pace) and the eval flags, "
                         "e.g. own-b4='--spec-branches 4 --lookahead 0' (repeatable; this build only, not --baseline)")
    ap.add_argument("--questions", type=int, help="questions per setting (default: 60 at 20 ms/step, 100 at own pace)")
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 unless the device's own count of the LLM's work (results.json) agrees with the "
                         "server's: equal with the pipeline off, never more with it on (a test)")
    a = ap.parse_args()
    chosen = SETTINGS
    if a.settings:
        names = a.settings.split(",")
        unknown = [x for x in names if x not in [s[0] for s in SETTINGS]]
        if unknown:
            sys.exit("llm_cost: unknown setting(s) %s" % ", ".join(unknown))
        chosen = [s for s in SETTINGS if s[0] in names]
    for spec in a.add:
        name, eq, flags = spec.partition("=")
        if not eq or not (name.startswith("20ms-") or name.startswith("own-")):
            sys.exit("llm_cost: --add wants NAME=FLAGS with NAME starting with 20ms- or own-, got %r" % spec)
        pace = ["--sim-slm-ms", "20"] if name.startswith("20ms-") else []
        n = 60 if pace else 100
        chosen = chosen + [(name, pace + shlex.split(flags), n, 10 if pace else 15, True)]
    chosen = [c if len(c) == 5 else c + (False,) for c in chosen]
    if a.questions:
        chosen = [(name, flags, a.questions, a.questions, only) for name, flags, _, _, only in chosen]
    builds = [("after", a.tlr)] + ([("before", a.baseline)] if a.baseline else [])
    for label, path in builds:
        if not os.access(path, os.X_OK):
            sys.exit("llm_cost: %s is not an executable tlr (%s)" % (path, label))
    rows = []
    with tempfile.TemporaryDirectory(prefix="tlr-llm-cost-") as work:
        # Alternate the builds setting by setting, so drift on a shared host hits both alike.
        servers = {}
        try:
            for label, path in builds:
                log = open(os.path.join(work, label + "-serve.log"), "w+")
                servers[label] = start_server([path, "serve", "--port", "0", "-t", "1"], log, "llm_cost: tlr serve")
            for name, flags, n, quick_n, after_only in chosen:
                for label, path in builds:
                    if after_only and label != "after":
                        continue  # --add settings may use flags the baseline does not have
                    r = run_setting(path, servers[label][1], label + "-" + name, flags, quick_n if a.quick else n, work)
                    r["setting"] = name
                    r["build"] = label
                    rows.append(r)
                    print("llm_cost: %-7s %-13s %6.0f ms/question" % (label, name, r["time_per_question_ms"]),
                          file=sys.stderr, flush=True)
        finally:
            for p, _ in servers.values():
                p.terminate()
                p.wait(timeout=10)
    print("| build | setting | questions | time / question (ms) | speedup | TTFT (ms) | routed % | routed | "
          "LLM generated | per routed | LLM prefilled | prefill vs off | rewound | SLM rows wasted / q | accuracy |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        per = r["server_generated"] / r["routed"] if r["server_generated"] is not None and r["routed"] else None
        # The blocking run of the same build, pace and questions: what the ratios compare with.
        off = [o for o in rows if o["build"] == r["build"] and o["setting"] == r["setting"].split("-")[0] + "-off"
               and o["questions"] == r["questions"]]
        speedup = off[0]["time_per_question_ms"] / r["time_per_question_ms"] if off else None
        pre = (r["server_prefilled"] / off[0]["server_prefilled"]
               if off and r["server_prefilled"] is not None and off[0]["server_prefilled"] else None)
        r["speedup_vs_off"], r["prefill_vs_off"] = speedup, pre
        wasted = r.get("wasted_slm_steps")
        wasted_q = wasted / r["questions"] if wasted is not None else None
        print("| %s | %s | %d | %.0f | %s | %.1f | %.1f | %d | %s | %s | %s | %s | %s | %s | %.1f%% |" % (
            r["build"], r["setting"], r["questions"], r["time_per_question_ms"], fmt(speedup, "%.2fx"), r["ttft_ms"],
            r["routed_pct"], r["routed"], fmt(r["server_generated"]), fmt(per, "%.2f"), fmt(r["server_prefilled"]),
            fmt(pre, "%.2fx"), fmt(r["server_rewound"]), fmt(wasted_q, "%.1f"), 100 * r["accuracy"]))
    print("\nLLM generated / prefilled / rewound: the server's counters over each run (/metrics); speedup and "
          "prefill vs off: against the same build's blocking run at the same pace. Every eval: "
          "threshold 0.8, --sim-rtt 170, --max-tokens 40, one device.")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    if a.check:
        bad = []
        for r in rows:
            dev, srv = r["device_llm_generated"], r["server_generated"]
            blocking = r["setting"].endswith("-off")
            if dev is None or srv is None:
                bad.append("%s %s: no count (device %s, server %s)" % (r["build"], r["setting"], dev, srv))
            elif (blocking and dev != srv) or dev > srv or (blocking and r["device_llm_prefilled"] != r["server_prefilled"]):
                bad.append("%s %s: the device counted %s generated / %s prefilled, the server %s / %s" % (
                    r["build"], r["setting"], dev, r["device_llm_prefilled"], srv, r["server_prefilled"]))
        for b in bad:
            print("llm_cost: " + b, file=sys.stderr)
        if bad:
            sys.exit(1)


if __name__ == "__main__":
    main()
