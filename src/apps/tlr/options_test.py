#!/usr/bin/env python3
"""The options test (issue 45): every option a command lists in --help reaches what it runs on.

usage: options_test.py TLR DEMO_DIR

Walks `tlr --help` for the commands (and `tlr router --help` for its subcommands), reads each
command's --help for the options it lists, and for each one runs the command twice with the
hidden --print-params (the resolved parameters the command would run on, shared and its own, as
JSON): once with the command's base arguments and once with the option added at its example
value (from the hidden --list-options, declared beside the option). The two must differ. An
option listed in --help without an example, or whose example changes nothing, fails the test:
an option that is accepted and dropped cannot pass.
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile


def run(tlr, args, cwd):
    return subprocess.run([tlr] + args, capture_output=True, text=True, cwd=cwd, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith("TLR_") or k == "TLR_DEMO_DIR"})


def subcommands(help_text):
    out, on = [], False
    for line in help_text.splitlines():
        if line.startswith("Subcommands:"):
            on = True
            continue
        if on:
            m = re.match(r"^  (\S+)\s", line)
            if m:
                out.append(m.group(1))
            elif line.strip() == "" and out:
                break
    return out


def listed_options(help_text):
    """Long names (or the short one where there is none) of the options --help lists."""
    names = []
    for line in help_text.splitlines():
        m = re.match(r"^  (-[^\s]+)", line)
        if not m:
            continue
        flags = m.group(1).split(",")
        long = [f for f in flags if f.startswith("--")]
        name = long[0] if long else flags[0]
        if name not in ("--help", "-h"):
            names.append((name, flags))
    return names


def expand(value, demo):
    return value.replace("@demo", demo)


def main():
    tlr, demo = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    failures, checked = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        top = run(tlr, ["--help"], tmp)
        commands = [[c] for c in subcommands(top.stdout)]
        for c in list(commands):
            sub = subcommands(run(tlr, c + ["--help"], tmp).stdout)
            if sub:
                commands.remove(c)
                commands += [c + [s] for s in sub]
        if len(commands) < 15:
            failures.append(f"only {len(commands)} commands found in `tlr --help`: {commands}")
        for cmd in commands:
            name = " ".join(cmd)
            helped = listed_options(run(tlr, cmd + ["--help"], tmp).stdout)
            lo = run(tlr, cmd + ["--list-options"], tmp)
            if lo.returncode != 0:
                failures.append(f"{name}: --list-options failed: {lo.stderr.strip()}")
                continue
            lines = [json.loads(x) for x in lo.stdout.splitlines() if x.strip()]
            base = [expand(a, demo) for a in shlex.split(lines[0]["args"])]
            examples = {o["name"]: o for o in lines[1:]}

            def params(args):
                r = run(tlr, cmd + args + ["--print-params"], tmp)
                if r.returncode != 0:
                    return None, (r.stderr.strip() or r.stdout.strip())[:300]
                return json.loads(r.stdout), None

            ref, err = params(base)
            if ref is None:
                failures.append(f"{name}: --print-params with the base arguments {base} failed: {err}")
                continue
            for opt, aliases in helped:
                checked += 1
                ex = examples.get(opt)
                if ex is None or "example" not in ex:
                    failures.append(f"{name} {opt}: listed in --help but has no example (declare one beside it)")
                    continue
                with_args = [expand(a, demo) for a in shlex.split(ex.get("with", ""))]
                drop = [a[1:] for a in with_args if a.startswith("!")]
                with_args = [a for a in with_args if not a.startswith("!")]
                args = list(base)
                for d in drop:  # an option the example replaces (with its value)
                    if d in args:
                        k = args.index(d)
                        del args[k:k + 2]
                value = [] if ex["flag"] else [expand(ex["example"], demo)]
                given = [a for a in aliases if a in args]
                if given:  # a required option: the example replaces the base value
                    k = args.index(given[0])
                    args[k + 1:k + 2] = value
                    trial = args + with_args
                else:
                    trial = args + with_args + [opt] + value
                before, err = params(args + with_args) if with_args or drop else (ref, None)
                if before is None:
                    failures.append(f"{name} {opt}: the example's companions {with_args} fail alone: {err}")
                    continue
                after, err = params(trial)
                if after is None:
                    failures.append(f"{name} {opt}: {shlex.join(trial)} failed: {err}")
                elif after == before:
                    failures.append(f"{name} {opt} {' '.join(value)}: changes nothing the command runs on "
                                    "(accepted and dropped?)")
    for f in failures:
        print("FAIL", f)
    print(f"options_test: {checked} options of {len(commands)} commands checked, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
