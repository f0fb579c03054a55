#!/usr/bin/env python3
"""Runs http_hook_test (C, the app's own HTTP stack through tlr_http_hook) against a real
`tlr serve` of the bundled demo LLM on a free loopback port (capi layer, run by ctest and by
`make aarch64-test`). Standard library only.

    http_hook_test.py --tlr TLR --program HTTP_HOOK_TEST --demo DIR [--run-prefix "qemu-aarch64 ..."]
                      [--expect-tokens-from NATIVE_PROGRAM] [--sync]

--run-prefix: how to run the program (an emulator for a cross-built one);
--expect-tokens-from: a native build of the program; its routed tokens must equal the other's.
"""
import argparse
import os
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from serve_helper import start_server  # noqa: E402


def run_program(cmd, url, demo, extra=()):
    p = subprocess.run(cmd + [url, demo] + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        sys.exit("%s failed (%d)" % (" ".join(cmd), p.returncode))
    return [l for l in p.stdout.splitlines() if l.startswith("tokens:")][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tlr", required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--run-prefix", default="")
    ap.add_argument("--expect-tokens-from", default="")
    ap.add_argument("--sync", action="store_true", help="the hook answers inside send (no threads: qemu-user)")
    a = ap.parse_args()
    with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
        server, url = start_server([a.tlr, "serve", "-m", os.path.join(a.demo, "llm.gguf"), "--port", "0"], log)
        try:
            tokens = run_program(shlex.split(a.run_prefix) + [a.program], url, a.demo, ["--sync"] if a.sync else [])
            if a.expect_tokens_from:
                native = run_program([a.expect_tokens_from], url, a.demo)
                if native != tokens:
                    sys.exit("tokens differ from the native build's:\n native %s\n this   %s" % (native, tokens))
                print("same tokens as the native build")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
