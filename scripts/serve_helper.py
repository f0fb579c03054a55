"""Starting `tlr serve` on a free loopback port for the measurement scripts (standard library)."""
import re
import subprocess
import sys
import time


def start_server(cmd, log, what="tlr serve", tries=1200):
    """Runs `cmd` (a `tlr serve ... --port 0` command line) with its output in the open file `log`
    and waits for its "listening on URL" line. Returns (process, url); exits with the log when
    the server does not start."""
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(tries):
        log.flush()
        with open(log.name) as f:
            m = re.search(r"^listening on (\S+)", f.read(), re.M)
        if m:
            return p, m.group(1)
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    with open(log.name) as f:
        sys.exit("%s did not start:\n%s" % (what, f.read()))
