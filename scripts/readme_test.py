#!/usr/bin/env python3
"""Runs the command blocks of the README (and docs/guide.md) as a newcomer would: every ```sh and
```python block in order, from a fresh directory that sees the repository's build/, models/,
docs/, python/ and examples/ as the repository root does, so `build/bin/tlr ...` runs as
written. A block fails the test when it exits non-zero, or when its output shows a silent wrong
turn: a routed token that fell back to the SLM ("fallbacks": N > 0), a warning, or an error.

A block the test cannot run as written (it needs a GPU server, a model file the reader brings, or
it is this test itself) is preceded by a line `<!-- not tested: REASON -->`; a block whose output
must show something is preceded by `<!-- expect: REGEX -->` (Python's re, searched in stdout and
stderr together).

Commands that start a server in the background (`... &`) get waited for until their port
answers, and are stopped at the end. The README's ports (8080 for `tlr serve`, 8090 for `tlr ui`)
are replaced by free ones, so the test can run beside anything.

    readme_test.py --source SRC --build BUILD [FILE.md ...]    (default: README.md docs/guide.md)
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

FENCE = re.compile(r'^```(\w*)\s*$')
NOT_TESTED = re.compile(r'^<!--\s*not tested:\s*(.+?)\s*-->\s*$')
EXPECT = re.compile(r'^<!--\s*expect:\s*(.+?)\s*-->\s*$')
# What a block's output must not show unless it expects it.
WRONG_TURNS = [  # noqa: E501
    (re.compile(r'"fallbacks":\s*[1-9]'), 'routed tokens fell back to the SLM'),
    (re.compile(r'\b[1-9][0-9]* fallbacks\b'), 'routed tokens fell back to the SLM'),
    (re.compile(r'^warning:', re.M), 'a warning'),
    (re.compile(r'\berror:', re.I), 'an error'),
    (re.compile(r'Traceback \(most recent call last\)'), 'a Python exception'),
]


def blocks(path):
    """(line number, language, text, reason not tested or None, expected regex or None) per block."""
    out = []
    lines = open(path, encoding='utf-8').read().split('\n')
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        lang, start = m.group(1), i
        j = i + 1
        while j < len(lines) and not lines[j].startswith('```'):
            j += 1
        reason = expect = None
        k = start - 1
        while k >= 0 and (not lines[k].strip() or NOT_TESTED.match(lines[k]) or EXPECT.match(lines[k])):
            if NOT_TESTED.match(lines[k]):
                reason = NOT_TESTED.match(lines[k]).group(1)
            if EXPECT.match(lines[k]):
                expect = EXPECT.match(lines[k]).group(1)
            k -= 1
        out.append((start + 1, lang, '\n'.join(lines[start + 1:j]), reason, expect))
        i = j + 1
    return out


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port, proc_pids, seconds=30):
    end = time.time() + seconds
    while time.time() < end:
        try:
            socket.create_connection(('127.0.0.1', port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


def rewrite(text, ports):
    """The block with the README's ports replaced by this run's, and each background command
    followed by a wait for its port."""
    for readme_port, port in ports.items():
        text = re.sub(r'(127\.0\.0\.1:|localhost:|--port )%d\b' % readme_port, r'\g<1>%d' % port, text)
    lines = []
    for line in text.split('\n'):
        s = line.rstrip()
        if re.search(r'tlr serve\b', s) and '--port' not in s and not re.search(r'\bhttps?://(?!127\.0\.0\.1)', s):
            s = re.sub(r'tlr serve\b', 'tlr serve --port %d' % ports[8080], s, count=1)
        if re.search(r'tlr ui\b', s) and '--port' not in s:
            s = re.sub(r'tlr ui\b', 'tlr ui --port %d' % ports[8090], s, count=1)
        lines.append(s)
        code = re.sub(r'\s+#.*$', '', s)
        if code.endswith('&') and not code.endswith('&&'):
            m = re.search(r'--port (\d+)', code)
            port = int(m.group(1)) if m else None
            lines.append('echo $! >> "$README_TEST_PIDS"')
            if port:
                lines.append('__wait_port %d || { echo "nothing listens on port %d" >&2; exit 1; }' % (port, port))
    return '\n'.join(lines)


PRELUDE = r'''
__wait_port() {
  for _ in $(seq 1 300); do
    (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--source', required=True)
    ap.add_argument('--build', required=True)
    ap.add_argument('files', nargs='*')
    a = ap.parse_args()
    src, build = os.path.abspath(a.source), os.path.abspath(a.build)
    files = a.files or ['README.md', 'docs/guide.md']
    work = tempfile.mkdtemp(prefix='tlr_readme_')
    # The repository as its root shows it (the build folder may live elsewhere), writable
    # files of the blocks (q.txt, ...) landing in this temporary folder.
    for name in ['models', 'docs', 'python', 'examples', 'include', 'src', 'cmake', 'scripts', 'tools', 'Makefile',
                 'CMakeLists.txt', 'CMakePresets.json']:
        os.symlink(os.path.join(src, name), os.path.join(work, name))
    os.symlink(build, os.path.join(work, 'build'))
    os.mkdir(os.path.join(work, 'home'))
    pids = os.path.join(work, '.pids')
    open(pids, 'w').close()
    env = dict(os.environ, README_TEST_PIDS=pids, HOME=os.path.join(work, 'home'))
    env.pop('TLR_DEMO_DIR', None)
    env['PYTHONPATH'] = os.path.join(work, 'python')
    env.pop('TLR_LIBRARY', None)  # the binding must find the library by itself
    ports = {8080: free_port(), 8090: free_port()}
    ran = skipped = 0
    failures = []
    try:
        for f in files:
            for line, lang, text, reason, expect in blocks(os.path.join(src, f)):
                where = '%s:%d' % (f, line)
                if lang not in ('sh', 'python'):
                    if reason is None and lang in ('c', 'bash', 'console'):
                        failures.append('%s: a ```%s block with neither a test nor "<!-- not tested: why -->"' % (where, lang))
                    continue
                if reason is not None:
                    skipped += 1
                    continue
                if lang == 'sh':
                    cmd = ['bash', '-e', '-o', 'pipefail', '-c', PRELUDE + rewrite(text, ports)]
                else:
                    code = text
                    for rp, p in ports.items():
                        code = re.sub(r'(127\.0\.0\.1:|localhost:)%d\b' % rp, r'\g<1>%d' % p, code)
                    cmd = [sys.executable, '-c', code]
                t0 = time.time()
                # Output to a file, not a pipe: a server a block starts in the background keeps
                # its copy of the descriptor, and a pipe would never end.
                log = os.path.join(work, '.block-%d.log' % line)
                with open(log, 'w') as out_f:
                    try:
                        rc = subprocess.run(cmd, cwd=work, env=env, stdout=out_f, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, timeout=300).returncode
                    except subprocess.TimeoutExpired:
                        rc = 'timeout (300 s)'
                out = open(log, encoding='utf-8', errors='replace').read()
                ran += 1
                problem = None
                if rc != 0:
                    problem = 'exit status %s' % rc
                elif expect and not re.search(expect, out, re.M):
                    problem = 'the output does not show /%s/' % expect
                else:
                    for rx, what in WRONG_TURNS:
                        if rx.search(out) and not (expect and re.search(expect, rx.search(out).group(0))):
                            problem = 'the output shows %s: %r' % (what, rx.search(out).group(0))
                            break
                print('%s %s (%s, %.1f s)' % ('FAIL' if problem else 'ok  ', where, lang, time.time() - t0), flush=True)
                if problem:
                    failures.append('%s: %s\n--- block ---\n%s\n--- output (last 3000 characters) ---\n%s' % (
                        where, problem, text, out[-3000:]))
    finally:
        for pid in open(pids).read().split():
            try:
                os.kill(int(pid), signal.SIGTERM)
            except (OSError, ValueError):
                pass
        time.sleep(0.2)
        shutil.rmtree(work, ignore_errors=True)
    print('%d blocks run, %d not tested (marked), %d failed' % (ran, skipped, len(failures)))
    for f in failures:
        print('\nFAIL ' + f)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
