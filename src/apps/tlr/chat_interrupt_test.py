#!/usr/bin/env python3
"""`tlr chat` on a terminal (a pseudo-terminal here, so Ctrl-C is the terminal's SIGINT): Ctrl-C
while a reply is being written stops that reply, which stays in the conversation, and the chat
goes on; Ctrl-C at the prompt leaves (exit status 0). Usage: chat_interrupt_test.py path/to/tlr"""
import os
import pty
import select
import sys
import time

tlr = sys.argv[1]
pid, fd = pty.fork()
if pid == 0:  # a 400 ms simulated round trip per LLM call: a 200-token reply takes far longer than the test
    os.execv(tlr, [tlr, "chat", "--no-color", "--sim-rtt", "400", "-t", "1", "-n", "200"])
out = b""


def read_until(what, seconds):
    global out
    end = time.time() + seconds
    while time.time() < end and what not in out:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                out += os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                break
    return what in out


def fail(why):
    print("FAIL:", why, "\n--- terminal ---\n" + out.decode(errors="replace"))
    sys.exit(1)


if not read_until(b"> ", 120):
    fail("no prompt")
os.write(fd, b"Where is a tharko? Tell me a long story about it.\r")
if not read_until(b"Where is a tharko? Tell me a long story about it.\r\n", 10):
    fail("the message was not echoed")
time.sleep(2.5)  # a few tokens of the reply
os.write(fd, b"\x03")
if not read_until(b"[stopped: the reply so far stays in the conversation]", 20):
    fail("Ctrl-C did not stop the reply")
os.write(fd, b"/stats\r")
if not read_until(b"stop: stopped", 10):
    fail("/stats does not show the stopped reply")
if not read_until(b"conversation: 1 turns", 10):
    fail("the stopped reply is not a turn of the conversation")
time.sleep(0.3)
os.write(fd, b"\x03")  # at the prompt: leave
status = None
end = time.time() + 20
while time.time() < end:
    read_until(b"\0", 0.2)
    p, st = os.waitpid(pid, os.WNOHANG)
    if p:
        status = st
        break
if status is None:
    os.kill(pid, 9)
    fail("Ctrl-C at the prompt did not end the chat")
if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
    fail("exit status %r (want 0)" % status)
print("ok: Ctrl-C stopped the reply, kept it, and left from the prompt")
