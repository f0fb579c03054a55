"""Tests of the Python binding (python/tlr) over libtlr.so on the bundled demo pair.

Run by ctest under /usr/bin/python3 and the python3 on PATH:
    TLR_LIBRARY=build/lib/libtlr.so.1 TLR_DEMO_DIR=models/demo python3 python/tlr_test.py
"""

import inspect
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tlr  # noqa: E402

DEMO = os.environ.get("TLR_DEMO_DIR") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "demo")
# Test question 2 of the demo pair: the SLM answers river, the LLM (and joint routing) cave.
PROMPT = "Question: Where does a fexko live?\nA. marsh\nB. desert\nC. forest\nD. river\nE. cave\n"


def demo(name):
    return os.path.join(DEMO, name)


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def carry(method, target, headers, body, timeout_s):
    """An http callable over http.client: carries a request to the real server."""
    import http.client
    import urllib.parse
    u = urllib.parse.urlsplit(target)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout_s)
    conn.request(method, u.path + ("?" + u.query if u.query else ""), body=body, headers=headers)
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, dict(r.getheaders()), data


CARRY_SOURCE = inspect.getsource(carry)  # for the scripts run_script runs

needs_server = unittest.skipUnless(os.environ.get("TLR_BIN"), "TLR_BIN (the tlr binary, to start a server) not set")


class BindingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dev = tlr.Device(demo("slm.gguf"), demo("router.gguf"))
        cls.llm = tlr.Llm(model=demo("llm.gguf"))

    @classmethod
    def tearDownClass(cls):
        cls.llm.close()
        cls.dev.close()

    def start_server(self):
        """Starts `tlr serve` with the demo LLM on a free loopback port for this test; its URL."""
        import re
        log = tempfile.NamedTemporaryFile("w+", suffix=".log")
        server = subprocess.Popen([os.environ["TLR_BIN"], "serve", "-m", demo("llm.gguf"), "--port", "0"],
                                  stdout=log, stderr=subprocess.STDOUT)

        def stop():
            server.terminate()
            server.wait(timeout=30)
            log.close()
        self.addCleanup(stop)
        for _ in range(600):
            with open(log.name) as f:
                m = re.search(r"^listening on (\S+)", f.read(), re.M)
            if m:
                return m.group(1)
            threading.Event().wait(0.05)
        self.fail("tlr serve did not start")

    def test_version(self):
        self.assertEqual(tlr.api_version() // 100, tlr.API_VERSION_MAJOR)
        self.assertTrue(tlr.version())

    def test_generate_yields_tokens_and_stats(self):
        toks = list(self.dev.generate(PROMPT, llm=self.llm, max_tokens=40))
        self.assertTrue(toks)
        sources = {t.source for t in toks}
        self.assertIn("LLM", sources)
        self.assertIn("SLM", sources)
        st = self.dev.last_stats
        self.assertIsInstance(st, tlr.Stats)
        self.assertEqual(st.generated, len(toks))
        self.assertEqual(st.routed, sum(t.source == "LLM" for t in toks))
        self.assertAlmostEqual(st.routed_pct, 100.0 * st.routed / st.generated)
        self.assertAlmostEqual(st.llm_generated_per_routed, st.llm_generated / st.routed)
        self.assertGreaterEqual(st.spec_hit_pct, 0.0)
        self.assertEqual(st.stop, "eos")
        self.assertTrue(toks[-1].end)
        self.assertAlmostEqual(st.threshold, self.dev.info["router_threshold"], places=5)
        # run() with a callback sees the same tokens; so does a prompt given as ids.
        seen = []
        self.dev.run(PROMPT, self.llm, on_token=seen.append, max_tokens=40)
        self.assertEqual([(t.id, t.source) for t in seen], [(t.id, t.source) for t in toks])
        ids = self.dev.tokenize(PROMPT)
        again = []
        self.dev.run(ids, self.llm, on_token=again.append, max_tokens=40)
        self.assertEqual([t.id for t in again], [t.id for t in toks])
        text = "".join(t.text for t in toks)
        self.assertEqual(self.dev.detokenize([t.id for t in toks if not t.end]), text)

    def test_conversation_reuses_earlier_turns(self):
        # A conversation as message dicts: each turn equals a device without a prompt cache, and
        # prefills only the new turn (the demo SLM's template is ChatML).
        cold = tlr.Device(demo("slm.gguf"), demo("router.gguf"), kv_slots=0)
        try:
            conv = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": PROMPT}]
            for turn in range(3):
                warm_toks = list(self.dev.generate(conv, llm=self.llm, max_tokens=24))
                warm = [(t.id, t.source) for t in warm_toks]
                warm_st = self.dev.last_stats
                plain = [(t.id, t.source) for t in cold.generate(conv, llm=self.llm, max_tokens=24)]
                self.assertEqual(warm, plain, "turn %d" % turn)
                self.assertEqual(cold.last_stats.prompt_reused, 0)
                if turn:
                    self.assertGreater(warm_st.prompt_reused, warm_st.prompt_tokens // 2, "turn %d" % turn)
                text = "".join(t.text for t in warm_toks if not t.end)
                conv += [{"role": "assistant", "content": text}, {"role": "user", "content": "And why?"}]
            with self.assertRaises(ValueError):
                self.dev.run([{"role": "user"}], self.llm)
            for templated_or_ids in (conv, [1, 2, 3]):  # chat=True would do nothing: refused
                with self.assertRaises(ValueError):
                    self.dev.run(templated_or_ids, self.llm, chat=True)
            with self.assertRaises(tlr.TlrError):
                self.dev.run([{"role": "robot", "content": "hi"}], self.llm)
        finally:
            cold.close()

    def test_conversation_saved_and_resumed_in_another_process(self):
        conv = [{"role": "user", "content": PROMPT}]
        reply = "".join(t.text for t in self.dev.generate(conv, llm=self.llm, max_tokens=24) if not t.end)
        first_prompt = self.dev.last_stats.prompt_tokens
        conv.append({"role": "assistant", "content": reply})
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "conv.ctx")
            self.dev.save_conversation(conv, path)
            conv.append({"role": "user", "content": "Why that one?"})
            want = [[t.id, t.source] for t in self.dev.generate(conv, llm=self.llm, max_tokens=24)]
            want_reused = self.dev.last_stats.prompt_reused
            script = (
                "import json, sys\n"
                "sys.path.insert(0, %r)\n"
                "import tlr\n"
                "dev = tlr.Device(%r, %r)\n"
                "dev.load_conversation(%r)\n"
                "llm = tlr.Llm(model=%r)\n"
                "toks = [[t.id, t.source] for t in dev.generate(json.loads(sys.argv[1]), llm=llm, max_tokens=24)]\n"
                "st = dev.last_stats\n"
                "print(json.dumps({'toks': toks, 'reused': st.prompt_reused, 'prompt': st.prompt_tokens}))\n"
            ) % (os.path.dirname(os.path.abspath(__file__)), demo("slm.gguf"), demo("router.gguf"), path,
                 demo("llm.gguf"))
            out = subprocess.run([sys.executable, "-c", script, json.dumps(conv)], capture_output=True, text=True,
                                 timeout=120)
            self.assertEqual(out.returncode, 0, out.stderr)
            got = json.loads(out.stdout)
            self.assertEqual(got["toks"], want)
            # The history was not prefilled again: as much reused as without the interruption.
            self.assertEqual(got["reused"], want_reused)
            self.assertGreaterEqual(got["reused"], first_prompt)
            # Another model's file is refused with a clear error.
            other = tlr.Device(demo("llm.gguf"), "maxprob")
            try:
                with self.assertRaises(tlr.TlrError) as e:
                    other.load_conversation(path)
                self.assertIn("another model", str(e.exception))
            finally:
                other.close()

    def test_cost_policy_routes_less_than_the_threshold_rule(self):
        # A question the LLM has not read yet (the cost policy prices the first call cold), first.
        other = ("Question: What would you use a tharko for?\nA. building\nB. singing\nC. cooking\n"
                 "D. fishing\nE. healing\n")
        cost = self.dev.run(other, llm=self.llm, max_tokens=40, policy="cost")
        joint = self.dev.run(other, llm=self.llm, max_tokens=40)
        self.assertGreater(joint.routed, 0)
        self.assertLess(cost.routed, joint.routed)
        none = self.dev.run(other, llm=self.llm, max_tokens=40, cost_budget=1)  # no call costs under 5
        self.assertEqual(none.routed, 0)
        with self.assertRaises(ValueError):
            self.dev.run(PROMPT, llm=self.llm, policy="cheap")

    def test_thresholds_zero_and_one(self):
        small = [t.id for t in self.dev.generate(PROMPT, mode="small_only", max_tokens=40)]
        large = [t.id for t in self.dev.generate(PROMPT, llm=self.llm, mode="large_only", max_tokens=40)]
        self.assertEqual([t.id for t in self.dev.generate(PROMPT, llm=self.llm, threshold=0.0, max_tokens=40)], small)
        self.assertEqual([t.id for t in self.dev.generate(PROMPT, llm=self.llm, threshold=1.0, max_tokens=40)], large)

    def test_cancel_from_another_thread(self):
        first, released = threading.Event(), threading.Event()

        def hold(tok):
            first.set()
            released.wait(30)

        result = {}

        def work():
            result["stats"] = self.dev.run(PROMPT, self.llm, on_token=hold, max_tokens=200)

        th = threading.Thread(target=work)
        th.start()
        self.assertTrue(first.wait(30))
        with self.assertRaises(tlr.TlrError) as busy:  # one generation at a time per device
            self.dev.run(PROMPT, self.llm)
        self.assertEqual(busy.exception.status, "TLR_ERR_BUSY")
        self.dev.cancel()
        released.set()
        th.join()
        self.assertEqual(result["stats"].stop, "cancelled")
        self.assertEqual(result["stats"].generated, 1)

    def test_breaking_out_of_generate_stops_it(self):
        for i, _ in enumerate(self.dev.generate(PROMPT, llm=self.llm, max_tokens=200)):
            if i == 2:
                break
        # cancelled: the break cancels it; callback: it reached its next token first; eos: it had finished
        self.assertIn(self.dev.last_stats.stop, ("cancelled", "callback", "eos"))
        self.assertEqual(self.dev.run(PROMPT, self.llm, max_tokens=5).generated, 5)  # the device is free again

    def test_callback_that_raises(self):
        class Boom(Exception):
            pass

        def boom(tok):
            raise Boom("from the callback")

        with self.assertRaises(Boom):
            self.dev.run(PROMPT, self.llm, on_token=boom)
        with self.assertRaises(Boom):
            list(self.dev.generate(PROMPT, llm=self.llm, on_token=boom))
        self.assertEqual(self.dev.run(PROMPT, self.llm, max_tokens=3).generated, 3)

    def test_weight_cache_in_a_directory_of_the_callers_choice(self):
        with tempfile.TemporaryDirectory() as d:
            want = [t.id for t in self.dev.generate(PROMPT, mode="small_only", max_tokens=20)]
            for _ in range(2):  # written at the first open, mapped at the second
                dev = tlr.Device(demo("slm.gguf"), demo("router.gguf"), weight_cache=d)
                got = [t.id for t in dev.generate(PROMPT, mode="small_only", max_tokens=20)]
                dev.close()
                self.assertEqual(got, want)
                self.assertEqual(len([f for f in os.listdir(d) if f.endswith(".tlrw")]), 1)
            llm = tlr.Llm(model=demo("llm.gguf"), weight_cache=d)
            llm.close()
            self.assertEqual(len([f for f in os.listdir(d) if f.endswith(".tlrw")]), 2)

    def test_packed_models_route_as_the_originals(self):
        want = [(t.id, t.source) for t in self.dev.generate(PROMPT, llm=self.llm, max_tokens=30)]
        with tempfile.TemporaryDirectory() as d:
            slm, llm = os.path.join(d, "slm.gguf"), os.path.join(d, "llm.gguf")
            tlr.pack_model(demo("slm.gguf"), slm)
            tlr.pack_model(demo("llm.gguf"), llm)
            dev, big = tlr.Device(slm, demo("router.gguf")), tlr.Llm(model=llm)
            got = [(t.id, t.source) for t in dev.generate(PROMPT, llm=big, max_tokens=30)]
            dev.close()
            big.close()
            self.assertEqual(got, want)
            self.assertEqual(sorted(os.listdir(d)), ["llm.gguf", "slm.gguf"])  # no weight cache beside them
            with self.assertRaises(tlr.TlrError) as e:
                tlr.pack_model(slm, os.path.join(d, "again.gguf"))
            self.assertEqual(e.exception.code, tlr.ERR_LOAD)
            self.assertIn("packed already", str(e.exception))

    def test_missing_file(self):
        with self.assertRaises(tlr.TlrError) as e:
            tlr.Device(demo("no-such-slm.gguf"), demo("router.gguf"))
        self.assertEqual(e.exception.code, tlr.ERR_LOAD)
        self.assertIn("no-such-slm.gguf", str(e.exception))
        with self.assertRaises(tlr.TlrError) as e:
            tlr.Llm(model=demo("no-such-llm.gguf"))
        self.assertEqual(e.exception.code, tlr.ERR_LOAD)

    def test_wrong_router(self):
        with self.assertRaises(tlr.TlrError) as e:  # the demo router is the SLM's, not the LLM's
            tlr.Device(demo("llm.gguf"), demo("router.gguf"))
        self.assertEqual(e.exception.status, "TLR_ERR_INCOMPATIBLE")
        with self.assertRaises(tlr.TlrError) as e:
            tlr.Device(demo("slm.gguf"), "no-such-kind")
        self.assertEqual(e.exception.code, tlr.ERR_LOAD)

    def test_bad_threshold(self):
        for bad in (1.5, float("nan")):
            with self.assertRaises(tlr.TlrError) as e:
                self.dev.run(PROMPT, self.llm, threshold=bad)
            self.assertEqual(e.exception.code, tlr.ERR_INVALID_ARGUMENT)
            self.assertIn("threshold", str(e.exception))

    def test_unreachable_server_gives_fallback_tokens(self):
        with tlr.Llm(server="http://127.0.0.1:%d" % closed_port(), timeout_s=2, retries=0) as llm:
            toks = list(self.dev.generate(PROMPT, llm=llm, max_tokens=40))
        self.assertIn("FALLBACK", {t.source for t in toks})
        self.assertNotIn("LLM", {t.source for t in toks})
        self.assertTrue(any(t.llm_error for t in toks if t.source == "FALLBACK"))
        self.assertEqual(self.dev.last_stats.fallbacks, sum(t.source == "FALLBACK" for t in toks))
        small = [t.id for t in self.dev.generate(PROMPT, mode="small_only", max_tokens=40)]
        self.assertEqual([t.id for t in toks], small)

    def test_http_callable_that_raises_gives_fallback_tokens(self):
        def offline(method, url, headers, body, timeout_s):
            raise ConnectionError("airplane mode")
        with tlr.Llm(server="http://llm.example:8080", http=offline, timeout_s=2, retries=0) as llm:
            toks = list(self.dev.generate(PROMPT, llm=llm, max_tokens=40))
        self.assertNotIn("LLM", {t.source for t in toks})
        errors = [t.llm_error for t in toks if t.source == "FALLBACK"]
        self.assertTrue(errors)
        self.assertIn("ConnectionError: airplane mode", errors[0])
        with self.assertRaises(TypeError):
            tlr.Llm(server="http://llm.example:8080", http="not a callable")

    @needs_server
    def test_http_callable_carries_the_calls_to_a_real_server(self):
        import urllib.parse
        url = self.start_server()
        seen = []

        def carrying(method, target, headers, body, timeout_s):
            reply = carry(method, target, headers, body, timeout_s)
            seen.append((method, urllib.parse.urlsplit(target).path))
            return reply

        runs = []
        for hook in (None, carrying):
            with tlr.Llm(server=url, http=hook, timeout_s=10) as llm:
                toks = [(t.id, t.source) for t in self.dev.generate(PROMPT, llm=llm, max_tokens=40,
                                                                   threshold=0.95, pipeline=False)]
                st = self.dev.last_stats
                runs.append((toks, st.llm_prefilled, st.llm_generated, st.fallbacks))
        self.assertEqual(runs[0], runs[1])
        self.assertIn("LLM", {s for _, s in runs[1][0]})
        self.assertIn(("POST", "/tlr/v1/next"), seen)
        # Leaving a generate() loop while the generation waits for an LLM call that does not
        # come (the hook holds /tlr/v1/next) cancels that generation: the loop ends now, not
        # when the call's 30 s are over.
        release = threading.Event()

        def held(method, target, headers, body, timeout_s):
            if urllib.parse.urlsplit(target).path == "/tlr/v1/next":
                release.wait(timeout_s)
                raise OSError("held by the test")
            return carry(method, target, headers, body, timeout_s)

        with tlr.Llm(server=url, http=held, timeout_s=30) as llm:
            t0 = time.monotonic()
            seen_sources = []
            for tok in self.dev.generate(PROMPT, llm=llm, max_tokens=40, threshold=0.95, pipeline=False):
                seen_sources.append(tok.source)
                if len(seen_sources) == 4:  # the SLM's four; the fifth is routed (above): held
                    break
            left = time.monotonic() - t0
            release.set()
        self.assertEqual(seen_sources, [s for _, s in runs[0][0][:4]])
        self.assertEqual(runs[0][0][4][1], "LLM")
        self.assertLess(left, 10, "the abandoned generation ran on until its LLM call's timeout")
        self.assertEqual(self.dev.last_stats.stop, "cancelled")

    def test_slow_http_callable_keeps_the_deadline_and_cancel(self):
        # The callable ran inside the hook's send on TLR's thread, which could then neither keep
        # the call's deadline nor a cancel while it blocked: with timeout_s 0.5 and a callable
        # blocking 4 s, two tokens took 8 s, and cancel() returned when the callable did. It runs
        # on a thread of its own now: each call gives up at its deadline (FALLBACK tokens), and a
        # cancel ends the generation at once.
        release = threading.Event()
        self.addCleanup(release.set)  # the callables' threads end with the test
        entered = threading.Event()
        threads = []

        def blocking(method, url, headers, body, timeout_s):
            threads.append(threading.current_thread())
            entered.set()
            release.wait(4)
            raise OSError("too slow")

        with tlr.Llm(server="http://llm.example:8080", http=blocking, timeout_s=0.5, retries=0) as llm:
            t0 = time.monotonic()
            toks = list(self.dev.generate(PROMPT, llm=llm, threshold=1.0, max_tokens=2, pipeline=False))
            took = time.monotonic() - t0
        self.assertEqual([t.source for t in toks], ["FALLBACK", "FALLBACK"])
        self.assertIn("timeout", toks[0].llm_error)
        self.assertLess(took, 2.5, "the generation waited for the blocking callable")
        self.assertTrue(threads and all(th.name == "tlr-http" and th.daemon for th in threads))

        entered.clear()
        with tlr.Llm(server="http://llm.example:8080", http=blocking, timeout_s=30, retries=0) as llm:
            result = []
            th = threading.Thread(target=lambda: result.append(self.dev.run(PROMPT, llm, threshold=1.0,
                                                                            max_tokens=2)))
            th.start()
            self.assertTrue(entered.wait(10))
            t0 = time.monotonic()
            self.dev.cancel()
            th.join(10)
            took = time.monotonic() - t0
        self.assertLess(took, 1.0, "cancel() waited for the blocking callable")
        self.assertEqual(result[0].stop, "cancelled")

    @needs_server
    def test_http_callable_that_closes_its_llm_or_the_device(self):
        # Device.close() frees the device's server session with a DELETE through the Llm's http
        # callable. A callable that closed its Llm there hung for good: tlr_llm_free waited for
        # the hook call it was made from. The callable runs on its own thread now: the LLM is
        # freed at once and the device's close() returns. A callable that closes the device being
        # freed returns at once (it waited for the DELETE it was answering: the call's timeout);
        # one that closes its Llm during a generation lets the generation end first.
        url = self.start_server()
        out = self.run_script(
            "import faulthandler; faulthandler.dump_traceback_later(20, exit=True)\n" + CARRY_SOURCE + (
            "held, done = {}, threading.Event()\n"
            "def closes_llm(method, url, headers, body, timeout_s):\n"
            "    if method == 'DELETE':\n"
            "        t0 = time.monotonic(); held['llm'].close(); held['took'] = time.monotonic() - t0\n"
            "        done.set()\n"
            "    return carry(method, url, headers, body, timeout_s)\n"
            "held['llm'] = tlr.Llm(server=URL, http=closes_llm)\n"
            "print('routed', d.run(P, held['llm'], threshold=1.0, max_tokens=3).routed > 0)\n"
            "t0 = time.monotonic(); d.close(); took = time.monotonic() - t0\n"
            "print('delete-closes-llm', done.wait(10), held['took'] < 1, took < 2, held['llm']._handle is None)\n"
            "def closes_device(method, url, headers, body, timeout_s):\n"
            "    if method == 'DELETE':\n"
            "        t0 = time.monotonic(); held['dev'].close(); held['took'] = time.monotonic() - t0\n"
            "        done.set()\n"
            "    return carry(method, url, headers, body, timeout_s)\n"
            "done.clear()\n"
            "held['dev'] = tlr.Device(SLM, ROUTER)\n"
            "llm = tlr.Llm(server=URL, http=closes_device, timeout_s=2)\n"
            "print('routed', held['dev'].run(P, llm, threshold=1.0, max_tokens=3).routed > 0)\n"
            "held['dev'].close()\n"
            "print('delete-closes-device', done.wait(10), held['took'] < 0.5, held['dev']._handle is None)\n"
            "def closes_mid(method, url, headers, body, timeout_s):\n"
            "    if url.endswith('/tlr/v1/next'):\n"
            "        held['mid'].close()\n"
            "    return carry(method, url, headers, body, timeout_s)\n"
            "held['mid'] = tlr.Llm(server=URL, http=closes_mid)\n"
            "d = tlr.Device(SLM, ROUTER)\n"
            "st = d.run(P, held['mid'], threshold=1.0, max_tokens=3)\n"
            "print('mid', st.stop, st.generated, held['mid'].closed, held['mid']._handle is None)\n"
            "d.close()\n"
            .replace("URL", repr(url)).replace("SLM, ROUTER", "%r, %r" % (demo("slm.gguf"), demo("router.gguf")))))
        self.assertEqual(out, ["routed", "True", "delete-closes-llm", "True", "True", "True", "True",
                               "routed", "True", "delete-closes-device", "True", "True", "True",
                               "mid", "max_tokens", "3", "True", "True"])

    @needs_server
    def test_http_callable_at_interpreter_exit(self):
        # A device left open frees its server session (a DELETE through the http callable) when
        # the interpreter's finalization collects it; no thread can run the callable then (Python
        # 3.11: start() waited forever for it). The request fails instead and the process exits.
        url = self.start_server()
        out = self.run_script(
            "import faulthandler; faulthandler.dump_traceback_later(10, exit=True)\n" + CARRY_SOURCE + (
            "dev = tlr.Device(%r, %r)\n"
            "dev.llm = tlr.Llm(server=%r, http=carry)  # freed after the device: it carries its DELETE\n"
            "print('routed', dev.run(P, dev.llm, threshold=1.0, max_tokens=3).routed > 0)\n"
            % (demo("slm.gguf"), demo("router.gguf"), url)))
        self.assertEqual(out, ["routed", "True"])

    def test_flags_are_truth_values(self):
        # The flags went to C through int(): ctypes wrapped 2**32 to 0, so a true value read as off.
        hello = "<|im_end|> hello"
        for on in (True, 2 ** 32, 2 ** 64, -1, "yes"):
            self.assertEqual(self.dev.tokenize(hello, add_special=on, parse_special=on),
                             self.dev.tokenize(hello, add_special=True, parse_special=True), repr(on))
            self.assertEqual(self.dev.detokenize([self.dev.info["eos"]], render_special=on), "<|endoftext|>")
            st = self.dev.run(PROMPT, mode="small_only", chat=on, max_tokens=1)
            self.assertEqual(st.prompt_tokens, self.dev.run(PROMPT, mode="small_only", chat=True,
                                                            max_tokens=1).prompt_tokens, repr(on))
            self.assertGreater(self.dev.run(PROMPT, self.llm, pipeline=on, max_tokens=30).spec_resolved, 0)
        self.assertNotEqual(self.dev.tokenize(hello, parse_special=0), self.dev.tokenize(hello, parse_special=1))
        self.assertEqual(self.dev.detokenize([self.dev.info["eos"]], render_special=0), "")
        self.assertNotEqual(self.dev.run(PROMPT, mode="small_only", chat=0, max_tokens=1).prompt_tokens,
                            st.prompt_tokens)
        self.assertEqual(self.dev.run(PROMPT, self.llm, pipeline=0, max_tokens=30).spec_resolved, 0)

    def run_script(self, body):
        """Runs `body` in a fresh interpreter with tlr imported and a device `d` (SLM + router) and
        an in-process LLM `l` open; a crash there (SIGSEGV) is a failure here, not the end of the
        test run. Returns its stdout's lines."""
        script = ("import sys, threading, time; sys.path.insert(0, %r); import tlr\n"
                  "P = %r\n"
                  "d = tlr.Device(%r, %r)\n"
                  "l = tlr.Llm(model=%r)\n") % (os.path.dirname(os.path.abspath(__file__)), PROMPT, demo("slm.gguf"),
                                                  demo("router.gguf"), demo("llm.gguf")) + body
        p = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, "exit status %d\nstdout:\n%s\nstderr:\n%s" % (p.returncode, p.stdout,
                                                                                           p.stderr))
        return p.stdout.split()

    def test_device_closed_while_it_generates(self):
        # close() (and the end of a with block) while a generate() iterator is open, while another
        # thread is in run(), from inside on_token, and with an abandoned iterator whose helper
        # thread waits on a full queue: freed under the running call, this was a SIGSEGV. Now the
        # generation is cancelled, close() returns once it has, and the device is closed.
        out = self.run_script(
            "def closed(f):\n"
            "    try:\n"
            "        f()\n"
            "    except ValueError as e:\n"
            "        return str(e) == 'the device is closed'\n"
            "    return False\n"
            "def check(dev, name):\n"
            "    calls = [lambda: dev.run(P, mode='small_only'), lambda: dev.generate(P, mode='small_only'),\n"
            "             lambda: dev.tokenize('x'), lambda: dev.detokenize([1]), lambda: dev.info, dev.cancel,\n"
            "             lambda: dev.save_conversation([{'role': 'user', 'content': 'x'}], 'x.ctx'),\n"
            "             lambda: dev.load_conversation('x.ctx')]\n"
            "    print(name, dev.closed and dev._handle is None and all(closed(f) for f in calls))\n"
            "    dev.close()  # again: nothing\n"
            # An open iterator (a slow SLM: 2000 tokens would take 10 s).
            "it = d.generate(P, mode='small_only', max_tokens=2000, sim_slm_ms=5)\n"
            "next(it)\n"
            "t0 = time.time(); d.close(); took = time.time() - t0\n"
            "rest = list(it)\n"
            "print('iter', took < 5, len(rest) < 100, d.last_stats.stop)\n"
            "check(d, 'iter-closed')\n"
            # Another thread in run().
            "d = tlr.Device(d_args[0], d_args[1])\n"
            "first, res = threading.Event(), []\n"
            "go = lambda: res.append(d.run(P, mode='small_only', max_tokens=2000, sim_slm_ms=5,\n"
            "                              on_token=lambda t: first.set()))\n"
            "th = threading.Thread(target=go)\n"
            "th.start(); first.wait(30); d.close(); th.join()\n"
            "print('thread', res[0].stop, res[0].generated < 1000)\n"
            "check(d, 'thread-closed')\n"
            # A with block left with the iterator open.
            "with tlr.Device(d_args[0], d_args[1]) as d:\n"
            "    it = d.generate(P, l, threshold=1.0, max_tokens=2000, sim_slm_ms=5)\n"
            "    next(it)\n"
            "print('with', len(list(it)) < 100)\n"
            "check(d, 'with-closed')\n"
            # From inside on_token: it cannot wait for the call it is in; the call frees the device.
            "d = tlr.Device(d_args[0], d_args[1])\n"
            "st = d.run(P, mode='small_only', max_tokens=2000, sim_slm_ms=5, on_token=lambda t: d.close())\n"
            "print('callback', st.stop, st.generated < 3)\n"
            "check(d, 'callback-closed')\n"
            # An abandoned iterator (never resumed) whose helper thread waits on a full queue.
            "d = tlr.Device(d_args[0], d_args[1])\n"
            "it = d.generate(P, mode='small_only', max_tokens=2000)\n"
            "next(it); time.sleep(0.3)\n"
            "t0 = time.time(); d.close(); took = time.time() - t0\n"
            "print('abandoned', took < 5, 0 < len(list(it)) <= 64)\n"
            "check(d, 'abandoned-closed')\n"
            # Llm.close() while a device generates with it: the generation goes on to its end and
            # the LLM is freed after it.
            "d = tlr.Device(d_args[0], d_args[1])\n"
            "it = d.generate(P, l, threshold=1.0, max_tokens=40, sim_slm_ms=5)\n"
            "next(it); l.close()\n"
            "rest = list(it)\n"
            "print('llm', d.last_stats.stop, d.last_stats.routed > 10, l.closed, l._handle is None)\n"
            "try:\n"
            "    d.run(P, l)\n"
            "except ValueError as e:\n"
            "    print('llm-closed', str(e) == 'the LLM is closed')\n"
            .replace("d_args[0], d_args[1]", "%r, %r" % (demo("slm.gguf"), demo("router.gguf"))))
        self.assertEqual(out, ["iter", "True", "True", "cancelled", "iter-closed", "True",
                               "thread", "cancelled", "True", "thread-closed", "True",
                               "with", "True", "with-closed", "True",
                               "callback", "cancelled", "True", "callback-closed", "True",
                               "abandoned", "True", "True", "abandoned-closed", "True",
                               "llm", "eos", "True", "True", "True", "llm-closed", "True"])

    def test_llm_argument_must_be_an_llm(self):
        # A Device (or anything else) given as the LLM was read as a tlr_llm handle.
        for wrong in (self.dev, "http://127.0.0.1:1", 1):
            with self.assertRaises(TypeError) as e:
                self.dev.run(PROMPT, wrong, max_tokens=4)
            self.assertIn("tlr.Llm", str(e.exception))
            with self.assertRaises(TypeError):  # at the call, not at the first token
                self.dev.generate(PROMPT, wrong, max_tokens=4)
        with self.assertRaises(TypeError):
            self.dev.generate(PROMPT, self.llm, no_such_option=1)
        with self.assertRaises(TypeError):
            self.dev.run(PROMPT, self.llm, on_token=5)
        self.assertEqual(self.dev.run(PROMPT, None, mode="small_only", max_tokens=3).generated, 3)

    def test_text_with_a_nul_character(self):
        # A C string ends at a NUL: "Hello\0..." was generated after "Hello" alone.
        for prompt in ("Hello\0" + PROMPT, [{"role": "user", "content": "Hi\0 and the rest"}]):
            with self.assertRaises(ValueError) as e:
                self.dev.run(prompt, self.llm, max_tokens=4)
            self.assertIn("NUL", str(e.exception))
            with self.assertRaises(ValueError):
                self.dev.generate(prompt, self.llm, max_tokens=4)
        with self.assertRaises(ValueError):
            self.dev.save_conversation([{"role": "user\0", "content": "x"}], os.devnull)
        with self.assertRaises(ValueError):
            self.dev.load_conversation("conv\0.ctx")
        with self.assertRaises(ValueError):
            tlr.Device(demo("slm.gguf") + "\0ignored", demo("router.gguf"))
        with self.assertRaises(ValueError):
            tlr.Llm(server="http://127.0.0.1:1", api_key="key\0rest")
        # tokenize takes the text's length: it is passed whole.
        ids = self.dev.tokenize("Hello\0world", add_special=False)
        self.assertGreater(len(ids), len(self.dev.tokenize("Hello", add_special=False)))
        self.assertEqual(self.dev.detokenize(ids), "Hello\0world")

    def test_integers_out_of_their_c_range_and_bytes(self):
        # ctypes wraps integers to the C type: 2**32 + 72 was token 72, max_tokens 2**32 + 3 was 3.
        with self.assertRaises(OverflowError) as e:
            self.dev.detokenize([2 ** 32 + 72])
        self.assertIn("ids[0]", str(e.exception))
        for option in ("max_tokens", "span", "top_k", "spec_depth", "lookahead", "seed"):
            with self.assertRaises(OverflowError) as e:
                self.dev.run(PROMPT, self.llm, **{option: 2 ** 64 + 3})
            self.assertIn(option, str(e.exception))
        with self.assertRaises(OverflowError):
            self.dev.run(PROMPT, self.llm, seed=-1)  # uint64_t
        with self.assertRaises(OverflowError):
            self.dev.run([2 ** 32 + 72, 2 ** 32 + 101], self.llm, max_tokens=4)
        with self.assertRaises(OverflowError):
            tlr.Device(demo("slm.gguf"), demo("router.gguf"), threads=2 ** 32 + 1)
        with self.assertRaises(OverflowError):
            tlr.Llm(model=demo("llm.gguf"), threads=2 ** 32 + 1)
        with self.assertRaises(TypeError):
            self.dev.run(PROMPT, self.llm, max_tokens=4.5)
        # Bytes are neither text nor token ids (they were taken as ids, one per byte).
        with self.assertRaises(TypeError):
            self.dev.run(b"Hi there", self.llm, max_tokens=4)
        with self.assertRaises(TypeError):
            self.dev.tokenize(b"Hi there")
        with self.assertRaises(TypeError):
            self.dev.detokenize(b"Hi there")
        # What fits goes through as it is: C checks it (and says so) instead of seeing it wrapped.
        with self.assertRaises(tlr.TlrError) as e:
            self.dev.run(PROMPT, self.llm, max_tokens=2 ** 31 - 1)
        self.assertIn("2147483647", str(e.exception))
        self.assertEqual(self.dev.run(PROMPT, self.llm, max_tokens=3, seed=2 ** 64 - 1).generated, 3)

    def test_http_callable_that_raises_keyboard_interrupt_or_system_exit(self):
        # As from on_token: the generation stops and the exception is raised from run()/generate()
        # (it was swallowed into FALLBACK tokens "HTTP stack failed: KeyboardInterrupt").
        calls = []

        def interrupted(method, url, headers, body, timeout_s):
            calls.append(url)
            raise KeyboardInterrupt()

        def exits(method, url, headers, body, timeout_s):
            calls.append(url)
            raise SystemExit(3)

        for hook, kind in ((interrupted, KeyboardInterrupt), (exits, SystemExit)):
            with tlr.Llm(server="http://llm.example:8080", http=hook, timeout_s=2, retries=0) as llm:
                t0 = time.monotonic()
                with self.assertRaises(kind):
                    self.dev.run(PROMPT, llm, max_tokens=200)
                with self.assertRaises(kind):
                    list(self.dev.generate(PROMPT, llm=llm, max_tokens=200))
                self.assertLess(time.monotonic() - t0, 20)
        self.assertTrue(calls)
        self.assertEqual(self.dev.run(PROMPT, self.llm, max_tokens=3).generated, 3)  # the device is free again

    def test_interpreter_exit_during_generation(self):
        # A generator left suspended at exit, its generation still running on the helper thread
        # (the simulated SLM pace keeps it going): without the binding's exit handler Python ended
        # that thread inside tlr_generate (abort: forced unwind swallowed) or tore the process
        # down under it (SIGSEGV, now and then). The process must exit cleanly, every time.
        script = ("import sys; sys.path.insert(0, %r); import tlr\n"
                  "d = tlr.Device(%r, %r)\n"
                  "l = tlr.Llm(model=%r)\n"
                  "g = d.generate(%r, llm=l, max_tokens=200, sim_slm_ms=20)\n"
                  "print(next(g).source)\n") % (os.path.dirname(os.path.abspath(__file__)), demo("slm.gguf"),
                                                  demo("router.gguf"), demo("llm.gguf"), PROMPT)
        p = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.strip(), "SLM")


if __name__ == "__main__":
    unittest.main(verbosity=2)
