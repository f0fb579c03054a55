#!/usr/bin/env python3
"""Checks the include rule of src/: a layer reaches only the layers below it.

    util < quant < ops < model < routing < net < device | server < tools < capi < apps

`device` and `server` are the two sides of the network on one level: neither library includes
the other. Inside `device` the rooms are ordered the same way:

    llm < http | decode < remote < labels < session < ui

(`http` and `decode` side by side: neither includes the other). A test, fuzzer or benchmark (`*_test.cc`, `*_fuzz.cc`, `*_bench.cc`, and the tests' `*_fixture.h`) may also include
the other side of its level, since an end-to-end test drives a real server with the device's
backends; it never includes a layer above its own. Run by CTest as `layers_test` (label unit);
exits 1 listing every include that breaks the rule, with file and line.

Usage: check_layers.py [SRC_DIR]   (default: the src/ beside this script's folder)
"""
import os
import re
import sys

RANK = {
    "util": 0, "quant": 1, "ops": 2, "model": 3, "routing": 4, "net": 5,
    "device": 6, "server": 6, "tools": 7, "capi": 8, "apps": 9,
}
# The rooms of src/device, in order; a file in a room includes only rooms below it (a test
# anything of its layer).
ROOMS = {"llm": 0, "http": 1, "decode": 1, "remote": 2, "labels": 3, "session": 4, "ui": 5}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
TEST_FILE = re.compile(r"(_(test|fuzz|bench)\.cc|_fixture\.h)$")


def room_violation(rel, name, lineno, included, is_test):
    """An include inside src/device: the room order (every file of device sits in a room)."""
    parts = rel.split(os.sep)
    mine = parts[1] if len(parts) > 1 else None
    target = included.split("/")
    theirs = target[1] if len(target) > 2 else None
    where = os.path.join(rel, name)
    if mine not in ROOMS:
        return [f"{where}: src/device files sit in a room ({', '.join(ROOMS)}), not in {rel}"]
    if theirs not in ROOMS:
        return [f"{where}:{lineno}: includes \"{included}\", which is in no room of src/device"]
    if theirs == mine or is_test or ROOMS[theirs] < ROOMS[mine]:
        return []
    return [f"{where}:{lineno}: includes \"{included}\" ({theirs}, not below {mine} among device's rooms)"]


def violations(src):
    found = []
    folders_seen = set()
    for root, _, files in os.walk(src):
        rel = os.path.relpath(root, src)
        layer = rel.split(os.sep)[0]
        if layer == ".":
            continue
        if layer not in RANK:
            found.append(f"{rel}: folder '{layer}' has no layer (add it to RANK in {__file__})")
            continue
        folders_seen.add(layer)
        for name in sorted(files):
            if not name.endswith((".cc", ".h")):
                continue
            path = os.path.join(root, name)
            is_test = bool(TEST_FILE.search(name))
            if layer == "device" and (len(rel.split(os.sep)) < 2 or rel.split(os.sep)[1] not in ROOMS):
                found.append(f"{os.path.join(rel, name)}: src/device files sit in a room ({', '.join(ROOMS)})")
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1).split("/")[0]
                    if target == "device" and layer == "device":
                        found.extend(room_violation(rel, name, lineno, m.group(1), is_test))
                        continue
                    if target not in RANK or target == layer:
                        continue  # a system/third-party-style or same-folder include
                    mine, theirs = RANK[layer], RANK[target]
                    ok = theirs < mine or (is_test and theirs == mine)
                    if not ok:
                        what = "a layer above" if theirs > mine else "the other side of the network"
                        found.append(f"{os.path.relpath(path, src)}:{lineno}: includes \"{m.group(1)}\" "
                                     f"({target}, {what} of {layer})")
    missing = set(RANK) - folders_seen
    if missing:
        found.append(f"no folder for layer(s) {', '.join(sorted(missing))} under {src}")
    return found


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    found = violations(os.path.normpath(src))
    for v in found:
        print(v)
    if found:
        print(f"check_layers: {len(found)} include(s) break the layer rule")
        return 1
    print("check_layers: every include reaches down (or, in a test, across device|server)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
