#!/usr/bin/env python3
"""What a conversation costs each side: prefilled tokens and TTFT per turn, prompt cache on and off.

An 8-turn conversation (the first test questions of the demo set as user messages, each
reply appended as the assistant's) through the Python binding (libtlr) with the LLM on a local
`tlr serve`: per turn, the tokens the device's SLM prefilled (stats.prompt_tokens -
stats.prompt_reused), the tokens the server prefilled (its /metrics around the turn) and the
time to the first token. Once with the device's prompt cache (kv_slots 4: the SLM's cache and
the server session stay with the conversation) and once without (kv_slots 0), each on a fresh
server, side by side. With --slm-shape, the SLM is a random-weight file of that shape and the
LLM a random file of the same shape and vocabulary (another seed), with the built-in maxprob
router: a realistic prefill cost on the device; the turns are then token ids (a random model's
reply is not text that tokenizes back to the same ids).

Usage: /usr/bin/python3 scripts/conversation_cost.py [--turns 8] [--slm-shape qwen2.5-0.5b] [--pipeline off] [--json out.json]
Needs build/lib/libtlr.so (make) and build/bin/tlr.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_helper import start_server  # noqa: E402

_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def prefilled(url):
    with _LOCAL.open(url + "/metrics", timeout=10) as r:
        m = re.search(r"^tlr_prefill_tokens_total ([0-9.eE+-]+)$", r.read().decode(), re.M)
    return float(m.group(1)) if m else 0.0


def questions(n):
    out = []
    with open(os.path.join(ROOT, "models", "demo", "test.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            c = row["choices"]
            out.append("Question: %s\n%s" % (row["question"], "\n".join(
                "%s. %s" % (label, text) for label, text in zip(c["label"], c["text"]))))
            if len(out) == n:
                break
    return out


def run(tlr, slm, router, url, kv_slots, user_msgs, max_tokens, by_ids, pipeline):
    """One conversation. by_ids: the turns as token ids (each prompt the previous one, its reply's
    ids and the next user message's), for random-weight models whose replies are not text that
    tokenizes back to the same ids; else as chat messages through the SLM's template."""
    dev = tlr.Device(slm, router, kv_slots=kv_slots)
    llm = tlr.Llm(server=url)
    rows, conv, ids = [], [], []
    try:
        for k, msg in enumerate(user_msgs):
            before = prefilled(url)
            if by_ids:
                ids += dev.tokenize(("\n" if ids else "") + msg + "\n", add_special=not ids)
                toks = list(dev.generate(ids, llm=llm, max_tokens=max_tokens, pipeline=pipeline))
                ids += [t.id for t in toks if not t.end]
            else:
                conv.append({"role": "user", "content": msg})
                toks = list(dev.generate(conv, llm=llm, max_tokens=max_tokens, pipeline=pipeline))
                conv.append({"role": "assistant", "content": "".join(t.text for t in toks if not t.end)})
            st = dev.last_stats
            rows.append({"turn": k + 1, "context": st.prompt_tokens + st.generated,
                         "device_prefilled": st.prompt_tokens - st.prompt_reused,
                         "server_prefilled": prefilled(url) - before, "ttft_ms": st.ttft_ms,
                         "routed": st.routed, "generated": st.generated, "fallbacks": st.fallbacks})
    finally:
        llm.close()
        dev.close()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tlr", default=os.path.join(ROOT, "build", "bin", "tlr"))
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=40)
    ap.add_argument("--slm-shape", help="a `tlr make-random` preset for the SLM (default: the demo SLM)")
    ap.add_argument("--pipeline", choices=("on", "off"), default="on",
                    help="off: block on each routed call (no speculative calls: the server prefills exactly "
                         "the conversation)")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.environ.setdefault("TLR_LIBRARY", os.path.join(ROOT, "build", "lib", "libtlr.so"))
    import tlr  # noqa: E402
    demo = os.path.join(ROOT, "models", "demo")
    slm, router = os.path.join(demo, "slm.gguf"), os.path.join(demo, "router.gguf")
    with tempfile.TemporaryDirectory(prefix="tlr-conv-") as work:
        serve_model = []
        if a.slm_shape:
            # Both models random of that shape (one vocabulary), the LLM with another seed.
            slm, llm_file = os.path.join(work, "slm.gguf"), os.path.join(work, "llm.gguf")
            for path, seed in ((slm, "1"), (llm_file, "2")):
                subprocess.run([a.tlr, "make-random", "--preset", a.slm_shape, "--type", "q8_0", "--seed", seed,
                                "-o", path], check=True, capture_output=True)
            router = "maxprob"
            serve_model = ["-m", llm_file]
        user_msgs = questions(a.turns)
        results = {}
        for label, slots in (("reuse", 4), ("no reuse", 0)):
            log = open(os.path.join(work, label.replace(" ", "-") + "-serve.log"), "w+")
            p, url = start_server([a.tlr, "serve", "--port", "0", "-t", "1"] + serve_model, log,
                                  "conversation_cost: tlr serve")
            try:
                results[label] = run(tlr, slm, router, url, slots, user_msgs, a.max_tokens, bool(a.slm_shape),
                                     a.pipeline == "on")
            finally:
                p.terminate()
                p.wait(timeout=10)
    print("| turn | context | device prefilled (reuse / none) | server prefilled (reuse / none) | TTFT ms (reuse / none) |")
    print("|---:|---:|---:|---:|---:|")
    on, off = results["reuse"], results["no reuse"]
    for r, o in zip(on, off):
        print("| %d | %d | %d / %d | %.0f / %.0f | %.1f / %.1f |" % (
            r["turn"], r["context"], r["device_prefilled"], o["device_prefilled"], r["server_prefilled"],
            o["server_prefilled"], r["ttft_ms"], o["ttft_ms"]))
    for name, rows in results.items():
        if any(r["fallbacks"] for r in rows):
            print("%s: %d tokens were FALLBACK (the LLM failed): its numbers are not comparable" % (
                name, sum(r["fallbacks"] for r in rows)))
        print("%s: device prefilled %d, server prefilled %.0f over a final context of %d tokens; last / second "
              "turn TTFT %.2f" % (name, sum(r["device_prefilled"] for r in rows), sum(r["server_prefilled"] for r in rows),
                                  rows[-1]["context"], rows[-1]["ttft_ms"] / max(rows[1]["ttft_ms"], 1e-9)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
