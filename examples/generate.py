#!/usr/bin/env python3
"""Example: token-level routing from Python through the tlr package (ctypes over libtlr.so).

    PYTHONPATH=$PREFIX/share/tlr/python python3 generate.py SLM ROUTER LLM|http://host:port "Question: ..." [MAX_TOKENS]

Prints one line per token: its id, where it came from (SLM, LLM or FALLBACK) and its text
(newlines and tabs escaped), then a summary on stderr; the same output as generate.c.
"""
import os
import sys

# The package beside an installed copy (share/tlr/examples -> share/tlr/python) or in the source tree.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import tlr  # noqa: E402


def main(argv):
    if len(argv) < 5:
        print("usage: %s SLM ROUTER LLM|URL PROMPT [MAX_TOKENS]" % argv[0], file=sys.stderr)
        return 2
    slm, router, target, prompt = argv[1:5]
    max_tokens = int(argv[5]) if len(argv) > 5 else 64
    try:
        with tlr.Device(slm, router) as device:
            remote = target.startswith(("http://", "https://"))
            with tlr.Llm(server=target) if remote else tlr.Llm(model=target) as llm:
                for tok in device.generate(prompt, llm=llm, max_tokens=max_tokens):
                    text = tok.text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
                    print("%d\t%s\t%s" % (tok.id, tok.source, text), flush=True)
                st = device.last_stats
    except tlr.TlrError as e:
        print("%s: %s" % (e.status, e), file=sys.stderr)
        return 1
    print("%d tokens, %d from the LLM, %d fallbacks, threshold %.3f, %.1f ms"
          % (st.generated, st.routed, st.fallbacks, st.threshold, st.total_ms), file=sys.stderr)
    if st.llm_failure:
        print("LLM failures: " + st.llm_failure, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
