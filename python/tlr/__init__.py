"""TLR from Python: token-level routing between an on-device SLM and a large model.

A thin ctypes binding over libtlr.so (include/tlr.h); standard library only, Python >= 3.9.

    import tlr
    dev = tlr.Device("slm.gguf", "router.gguf")
    llm = tlr.Llm(server="http://gpu-box:8080")        # or tlr.Llm(model="llm.gguf")
    for tok in dev.generate("Question: ...", llm=llm, threshold=0.8):
        print(tok.text, end="", flush=True)            # tok.source: "SLM", "LLM", "FALLBACK"
    print(dev.last_stats)

The library is found from $TLR_LIBRARY, next to an installed package (share/tlr/python), in the
source tree's build/lib (PYTHONPATH=python after `make`), or by the dynamic loader's search path
(libtlr.so.1).

Thread-safety follows the C API: one generation at a time per Device (a second one raises
TlrError with code TLR_ERR_BUSY); Device.cancel(), tokenize() and detokenize() may be called
from any thread; one Llm may serve several devices at once. close() may be called at any time,
from any thread: Device.close() cancels the device's running generation (an open generate()
iterator included) and frees the device once its calls have returned (from inside a callback it
returns at once, and the last call frees it); Llm.close() frees the LLM once the generations
using it have ended. A closed object's methods raise ValueError.
"""

import atexit
import contextlib
import ctypes
import dataclasses
import inspect
import queue
import sys
import threading
import time
import weakref
from typing import Callable, Iterator, List, Optional

__all__ = ["Device", "Llm", "Token", "Stats", "TlrError", "api_version", "version", "pack_model"]

from ._native import (API_VERSION_MAJOR, _CALLBACK, _HTTP_CANCEL, _HTTP_SEND, _DeviceInfo,  # noqa: F401
                      _DeviceParams, _GenerateParams, _HttpHook, _LlmParams, _Stats, _b,
                      _flag, _ids, _int, _load, _messages, _no_nul, _path, _text)

_c = ctypes

# tlr_status
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_LOAD = 2
ERR_INCOMPATIBLE = 3
ERR_LLM = 4
ERR_BUSY = 5
ERR_BUFFER_TOO_SMALL = 6
ERR_GENERATE = 7
ERR_INTERNAL = 8

_MODES = {"joint": 0, "small_only": 1, "large_only": 2}
_POLICIES = {"threshold": 0, "cost": 1}
_SOURCES = ("SLM", "LLM", "FALLBACK")
_STOPS = ("eos", "max_tokens", "callback", "cancelled")


class TlrError(Exception):
    """A failed TLR call: `code` is the tlr_status, `status` its name, str() the C message."""

    def __init__(self, code: int, status: str, message: str):
        super().__init__(message)
        self.code = code
        self.status = status


@dataclasses.dataclass(frozen=True)
class Token:
    """One generated token: where it came from and what it cost."""
    id: int
    text: str            # complete UTF-8 characters ('' while a character is split, and for the end)
    source: str          # "SLM", "LLM" or "FALLBACK" (routed, but the LLM call failed)
    confidence: float    # the router's; -1 when it did not run
    end: bool
    slm_ms: float
    router_ms: float
    llm_ms: float
    stall_ms: float
    at_ms: float
    llm_error: str       # FALLBACK: why the call failed


@dataclasses.dataclass(frozen=True)
class Stats:
    """What one generation did (tlr_stats)."""
    prompt_tokens: int
    generated: int
    routed: int
    fallbacks: int
    llm_calls: int
    stop: str            # "eos", "max_tokens", "callback", "cancelled"
    threshold: float
    ttft_ms: float
    tbt_ms: float
    total_ms: float
    slm_ms: float
    router_ms: float
    llm_ms: float
    stall_ms: float
    spec_resolved: int
    spec_hits: int
    spec_branch_hits: int
    lookahead_used: int
    wasted_slm_steps: int
    cancelled_calls: int
    http_requests: int
    retries: int
    resyncs: int
    failed_calls: int
    llm_failure: str
    llm_prefilled: int     # the LLM's work: tokens it prefilled,
    llm_generated: int     # tokens it generated (routed, lookahead, cancelled calls),
    llm_forward_ms: float  # and its forward-pass time (-1: not reported)
    prompt_reused: int     # prompt tokens the SLM's cache already held (not prefilled)

    # Derived, under the names every other output uses (docs/guide.md, "A generation's statistics").
    @property
    def routed_pct(self) -> float:
        return 100.0 * self.routed / self.generated if self.generated else 0.0

    @property
    def spec_hit_pct(self) -> float:
        hits = self.spec_hits + self.spec_branch_hits
        return 100.0 * hits / self.spec_resolved if self.spec_resolved else 0.0

    @property
    def llm_generated_per_routed(self) -> float:
        return self.llm_generated / self.routed if self.routed else 0.0


def _check(code: int) -> None:
    if code != OK:
        lib = _load()
        raise TlrError(code, lib.tlr_status_name(code).decode(), lib.tlr_last_error().decode("utf-8", "replace"))


def api_version() -> int:
    """TLR_API_VERSION of the loaded library (major * 100 + minor)."""
    return _load().tlr_api_version()


def version() -> str:
    return _load().tlr_version().decode()


def pack_model(gguf_path, packed_path) -> None:
    """Writes the model at gguf_path as one packed file (tlr_model_pack): its weights in the
    kernels' layout, opened as any model, as fast as with a weight cache but one copy on disk."""
    _check(_load().tlr_model_pack(_b("gguf_path", gguf_path, True), _b("packed_path", packed_path, True)))


# ---- the objects ----------------------------------------------------------------------------------

_tls = threading.local()  # .depth: TLR calls (callbacks and the http hook included) on this thread


@contextlib.contextmanager
def _inside_tlr():
    _tls.depth = getattr(_tls, "depth", 0) + 1
    try:
        yield
    finally:
        _tls.depth -= 1


def _in_tlr() -> bool:
    """Whether this thread is inside a TLR call (e.g. in on_token; not in an http callable, which
    runs on a thread of its own): a close() there cannot wait for the running calls to return,
    since one of them is waiting for it."""
    return getattr(_tls, "depth", 0) > 0


class _Handle:
    """Owns one C handle; close() (or the end of a with block, or garbage collection) frees it, once
    no call on it is running (the C API: free a handle only when no call on it is running)."""
    _free = ""  # the C function that frees the handle
    _what = ""  # "device", "LLM": what the closed error names

    _handle = None
    _lib = None  # kept by the object: at interpreter exit module globals may already be gone
    _cv = None  # guards _handle, _closed and _running; notified when a call ends
    _closed = False
    _running = 0  # calls using the handle now

    def _adopt(self, lib, handle) -> None:
        self._cv = threading.Condition()
        self._lib, self._handle = lib, handle

    @property
    def closed(self) -> bool:
        return self._closed or not self._handle

    def _check_open(self) -> None:
        if self._closed or not self._handle:
            raise ValueError("the %s is closed" % self._what)

    @contextlib.contextmanager
    def _use(self):
        """The C handle, not freed (counted in _running) until the block ends; the last call to end
        after close() frees it."""
        cv = self._cv
        if cv is None:
            raise ValueError("the %s is closed" % self._what)
        with cv:
            self._check_open()
            self._running += 1
            handle = self._handle
        try:
            with _inside_tlr():
                yield handle
        finally:
            with cv:
                self._running -= 1
                if self._closed and self._running == 0:
                    self._release()
                cv.notify_all()

    def _release(self) -> None:  # under _cv, no call running
        handle, self._handle = self._handle, None
        if handle and self._lib is not None:
            getattr(self._lib, self._free)(handle)

    def close(self) -> None:
        """Frees the handle now, or, while calls on it are running, when the last one ends; the
        object's methods raise ValueError from now on. Closing again does nothing."""
        cv = self._cv
        if cv is None or (self._closed and not self._handle):  # closed, the handle freed or being freed
            return
        with cv:
            self._closed = True
            if self._running == 0:
                self._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


class _Run:
    """One generation in progress, as the LLM's http hook sees it: an exception that must not be
    swallowed (KeyboardInterrupt, SystemExit) is handed to it and the generation cancelled."""
    __slots__ = ("raised", "_cancel")

    def __init__(self, raised: List[BaseException], cancel: Callable[[], object]):
        self.raised, self._cancel = raised, cancel

    def interrupt(self, e: BaseException) -> None:
        self.raised.append(e)
        self._cancel()


class Llm(_Handle):
    """The large model: in this process (`model=` a GGUF path) or behind a server (`server=` URL).

    http: the app's own HTTP stack for the server's requests (instead of TLR's built-in client), a
    callable http(method, url, headers, body, timeout_s) -> (status, headers, body) with headers
    dicts and bodies bytes. Each request runs it on a daemon thread of its own ("tlr-http"), never on
    TLR's threads, and is answered when it returns: a callable that blocks holds up neither the
    call's deadline (timeout_s: past it the token falls back to the SLM's, the late answer is
    dropped) nor Device.cancel() or close(); it may close this Llm or a device (as from any other
    thread). An Exception it raises fails that request (its tokens fall back to the SLM's,
    llm_error naming the exception). A BaseException that is not an Exception (KeyboardInterrupt, SystemExit) fails
    the request too, cancels the generations that were using this Llm when the request was sent
    (and still are) and is raised from their run()/generate(), as from on_token.

    close() while devices are generating with it lets those generations finish: the LLM is freed
    when the last one ends."""
    _free = "tlr_llm_free"
    _what = "LLM"

    def __init__(self, model: Optional[str] = None, server: Optional[str] = None, *, backend: str = "tlr",
                 api_key: Optional[str] = None, server_model: Optional[str] = None,
                 ca_file: Optional[str] = None, verify_tls: bool = True, timeout_s: float = 2.0,
                 retries: int = 2, retry_after_s: float = 1.0, connections: int = 4,
                 sim_rtt_ms: float = 0.0, sim_jitter_ms: float = 0.0, threads: int = 1, kv_type: str = "f16",
                 weight_cache: str = "auto", llm_tokenizer: Optional[str] = None,
                 http: Optional[Callable] = None):
        lib = _load()
        self._runs: "set[_Run]" = set()  # generations using this LLM now, under _runs_lock
        self._runs_lock = threading.Lock()
        p = _LlmParams()
        lib.tlr_llm_params_init(_c.byref(p))
        keep = [_b("model", model, True), _b("server", server), _b("backend", backend), _b("api_key", api_key),
                _b("server_model", server_model), _b("ca_file", ca_file, True), _b("kv_type", kv_type),
                _b("weight_cache", weight_cache, True), _b("llm_tokenizer", llm_tokenizer, True)]
        (p.model_path, p.server_url, p.backend, p.api_key, p.server_model, p.ca_file, p.kv_type,
         p.weight_cache, p.llm_tokenizer) = keep
        p.verify_tls = _flag(verify_tls)
        p.timeout_s, p.retries, p.retry_after_s = timeout_s, _int("retries", retries), retry_after_s
        p.connections, p.sim_rtt_ms, p.sim_jitter_ms = _int("connections", connections), sim_rtt_ms, sim_jitter_ms
        p.n_threads = _int("threads", threads)
        if http is not None:
            if not callable(http):
                raise TypeError("http must be a callable (method, url, headers, body, timeout_s) -> "
                                "(status, headers, body)")
            self._hook = _HttpHook(_c.sizeof(_HttpHook), _HTTP_SEND(_http_sender(lib, http, self._runs,
                                                                                  self._runs_lock)),
                                   _HTTP_CANCEL(), None)
            p.http_hook = _c.pointer(self._hook)
        h = _c.c_void_p()
        _check(lib.tlr_llm_open(_c.byref(p), _c.byref(h)))
        self._adopt(lib, h)

    @contextlib.contextmanager
    def _serving(self, run: _Run):
        with self._runs_lock:
            self._runs.add(run)
        try:
            yield
        finally:
            with self._runs_lock:  # the hook cancels runs under it: none after this returns
                self._runs.discard(run)


def _reason(e: BaseException) -> bytes:
    try:
        text = "%s: %s" % (type(e).__name__, e)
    except Exception:  # noqa: BLE001 - a str() that raises
        text = type(e).__name__
    return text.replace("\0", "\\0").encode(errors="replace")


def _http_sender(lib, http: Callable, runs: "set[_Run]", runs_lock: threading.Lock):
    """The C hook's send over a Python callable. send copies the request and returns at once; the
    callable runs on a daemon thread of its own ("tlr-http", one per exchange), which answers the
    exchange when the callable returns. TLR meanwhile keeps the call's deadline and cancellation
    (tlr.h: an answer after TLR gave up is dropped, an exchange being a handle, not memory), and no
    Python code of the app runs inside the hook, where tlr_llm_free would wait for it: Llm.close()
    (or Device.close(), whose free sends a DELETE through the hook) from the callable is safe.
    While the interpreter exits (a device freed by its finalization: the DELETE of its session)
    no thread can start (one started then never runs, and start() waits for it forever): the
    request fails at once instead (the server expires the session)."""
    is_finalizing = sys.is_finalizing  # kept here: module globals may be gone at exit

    def fail(exchange, e: BaseException, sent_for: "set[_Run]") -> None:
        lib.tlr_http_fail(exchange, _reason(e))  # an exchange is always answered
        if not isinstance(e, Exception):
            # KeyboardInterrupt, SystemExit: as from on_token, the generations that were using this
            # LLM when the request was sent, and still are, stop and raise it once their C call has
            # returned (not one that started later: the answer may come after its own ended)
            with runs_lock:
                for run in runs & sent_for:
                    run.interrupt(e)

    def answer(exchange, method: str, url: str, headers: dict, body: bytes, timeout_s: float,
               sent_for: "set[_Run]") -> None:
        try:
            status, reply_headers, reply_body = http(method, url, headers, body, timeout_s)
            if isinstance(reply_body, str):
                reply_body = reply_body.encode()
            elif reply_body is None or isinstance(reply_body, int):  # bytes(5) would be 5 NULs
                raise TypeError("the reply's body must be bytes or str, not %s" % type(reply_body).__name__)
            reply_body = bytes(reply_body)
            flat = []
            for k, v in (reply_headers or {}).items():
                k, v = (x if isinstance(x, bytes) else str(x).encode() for x in (k, v))
                flat += [_no_nul("a reply header's name", k), _no_nul("reply header %r" % k, v)]
            arr = (_c.c_char_p * (len(flat) + 1))(*flat, None)
            lib.tlr_http_complete(exchange, _int("the reply's status", int(status)), arr, reply_body,
                                  len(reply_body))
        except BaseException as e:  # noqa: B902 - anything the app's stack raises fails this request
            fail(exchange, e, sent_for)

    def send(_user, exchange, request):
        with _inside_tlr():
            with runs_lock:
                sent_for = set(runs)
            try:
                r = request.contents  # valid only during send: copied here
                headers = {}
                i = 0
                while r.headers[i] is not None:
                    headers[r.headers[i].decode()] = r.headers[i + 1].decode()
                    i += 2
                body = _c.string_at(r.body, r.body_len) if r.body_len else b""
                args = (exchange, r.method.decode(), r.url.decode(), headers, body, r.timeout_s, sent_for)
                if is_finalizing():
                    raise RuntimeError("the interpreter is exiting: the http callable is not called")
                threading.Thread(target=answer, args=args, name="tlr-http", daemon=True).start()
            except BaseException as e:  # noqa: B902 - e.g. no thread could be started: the request fails
                fail(exchange, e, sent_for)
    return send


# Devices alive, for the exit handler below.
_devices: "weakref.WeakSet[Device]" = weakref.WeakSet()


@atexit.register
def _stop_generations_at_exit() -> None:
    # A generation still running in another thread when the interpreter exits would be inside
    # libtlr while the process tears down (Python ends such threads wherever they are): cancel
    # every running generation and wait for it to return first.
    for dev in list(_devices):
        dev._stop_for_exit()


def _generate_params(lib, *, mode, threshold, span, max_tokens, chat, temperature, top_k, top_p, min_p,
                     repeat_penalty, repeat_last_n, seed, pipeline, spec_depth, spec_branches, lookahead,
                     sim_slm_ms, llm_budget, policy, price_ratio, cost_budget) -> _GenerateParams:
    """run()'s keyword arguments as tlr_generate_params, the integers checked against their C types
    and the flags (chat, pipeline) taken as truth values."""
    if mode not in _MODES:
        raise ValueError("mode must be one of %s" % ", ".join(_MODES))
    if policy not in _POLICIES:
        raise ValueError("policy must be one of %s" % ", ".join(_POLICIES))
    p = _GenerateParams()
    lib.tlr_generate_params_init(_c.byref(p))
    p.mode = _MODES[mode]
    p.threshold = -1.0 if threshold is None else float(threshold)
    p.span, p.max_tokens, p.chat = _int("span", span), _int("max_tokens", max_tokens), _flag(chat)
    p.temperature, p.top_k, p.top_p, p.min_p = temperature, _int("top_k", top_k), top_p, min_p
    p.repeat_penalty, p.repeat_last_n = repeat_penalty, _int("repeat_last_n", repeat_last_n)
    p.seed = _int("seed", seed, "uint64_t")
    p.pipeline, p.spec_depth = _flag(pipeline), _int("spec_depth", spec_depth)
    p.spec_branches, p.lookahead = _int("spec_branches", spec_branches), _int("lookahead", lookahead)
    p.sim_slm_ms = sim_slm_ms
    p.llm_budget = 0.0 if llm_budget is None else float(llm_budget)  # None: no limit ("auto")
    p.policy, p.price_ratio, p.cost_budget = _POLICIES[policy], float(price_ratio), float(cost_budget)
    return p


class Device(_Handle):
    """The device side: an SLM and its router (a router GGUF or "maxprob"/"entropy"/"random").
    The prompt cache keeps up to kv_slots SLM contexts (kv_budget_mb MiB, n_ctx positions each):
    a prompt continuing an earlier one (a conversation) prefills only what is new. weight_cache:
    "auto" (beside the model, else the user's cache directory), a directory, or "off" (the
    weight cache: docs/guide.md#the-weight-cache).

    close() (or the end of a with block) cancels a running generation (also one an open
    generate() iterator runs) and waits for the device's calls to return before freeing it;
    called from inside one of them (on_token) it returns at once and the last call to end frees
    the device. An Llm's http callable runs on a thread of its own: close() from it waits as from
    any other thread (and returns at once when the device is being freed already). Then every
    method raises ValueError("the device is closed")."""
    _free = "tlr_device_free"
    _what = "device"
    _exiting = False

    def __init__(self, slm: str, router: str, *, threads: int = 1, kv_type: str = "f16", seed: int = 42,
                 kv_slots: int = 4, kv_budget_mb: int = 1024, n_ctx: int = 4096, weight_cache: str = "auto"):
        lib = _load()
        p = _DeviceParams()
        lib.tlr_device_params_init(_c.byref(p))
        keep = [_b("slm", slm, True), _b("router", router, True), _b("kv_type", kv_type),
                _b("weight_cache", weight_cache, True)]
        p.slm_path, p.router, p.kv_type, p.weight_cache = keep
        p.n_threads, p.seed = _int("threads", threads), _int("seed", seed, "uint64_t")
        p.kv_slots = _int("kv_slots", kv_slots)
        p.kv_budget_mb, p.n_ctx = _int("kv_budget_mb", kv_budget_mb, "int64_t"), _int("n_ctx", n_ctx, "int64_t")
        h = _c.c_void_p()
        _check(lib.tlr_device_open(_c.byref(p), _c.byref(h)))
        self._adopt(lib, h)
        self.last_stats: Optional[Stats] = None
        # The generation inside tlr_generate now, by the token its _execute was given: an abandoned
        # generate() iterator cancels its own generation only (never one another thread started).
        self._gen_lock = threading.Lock()
        self._gen_owner: Optional[object] = None
        _devices.add(self)

    def _stop_for_exit(self) -> None:
        self._exiting = True
        cv = self._cv
        if cv is None:
            return
        deadline = time.monotonic() + 10
        with cv:
            while self._running and self._handle and time.monotonic() < deadline:
                self._lib.tlr_device_cancel(self._handle)
                cv.wait(0.05)

    def close(self) -> None:
        """Cancels the running generation, if any, waits for the device's calls to return and
        frees the device (see the class). Closing again does nothing."""
        self._close(wait=not _in_tlr() and not self._exiting)

    def _close(self, wait: bool) -> None:
        cv = self._cv
        # Closed and freed, or being freed: nothing to wait for (the free may be waiting for the
        # DELETE it sent through an http callable, which may be the caller: it cannot take _cv now).
        if cv is None or (self._closed and not self._handle):
            return
        with cv:
            self._closed = True
            # Cancelled again every 50 ms: a generation that had not started in C yet when the
            # first cancel came (cancel acts only on a running one) is stopped as it starts.
            while self._running and self._handle:
                self._lib.tlr_device_cancel(self._handle)
                if not wait:
                    break
                cv.wait(0.05)
            if self._running == 0:
                self._release()

    def __del__(self):
        self._close(wait=False)  # a call running holds the object: none can be, but never hang

    @property
    def info(self) -> dict:
        i = _DeviceInfo()
        i.struct_size = _c.sizeof(i)
        with self._use() as h:
            _check(self._lib.tlr_device_get_info(h, _c.byref(i)))
        return {"n_vocab": i.n_vocab, "bos": i.bos, "eos": i.eos, "n_embd": i.n_embd,
                "router_threshold": i.router_threshold, "router_kind": i.router_kind.decode()}

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> List[int]:
        """The token ids of `text` (a str; passed whole, NUL characters included). add_special:
        BOS/EOS as the vocabulary says; parse_special: control tokens written in the text become
        their ids (flags: any value, taken as its truth value)."""
        if not isinstance(text, str):
            raise TypeError("text must be a str, not %s" % type(text).__name__)
        data = text.encode()
        n = _c.c_size_t()
        cap = len(data) + 8
        with self._use() as h:
            while True:
                buf = (_c.c_int32 * cap)()
                code = self._lib.tlr_tokenize(h, data, len(data), _flag(add_special), _flag(parse_special), buf,
                                              cap, _c.byref(n))
                if code == ERR_BUFFER_TOO_SMALL:
                    cap = n.value
                    continue
                _check(code)
                return list(buf[:n.value])

    def detokenize(self, ids: List[int], render_special: bool = False) -> str:
        """The text of token ids (each must fit an int32: OverflowError). render_special: control
        tokens as their text (a flag: any value, taken as its truth value)."""
        ids = _ids("ids", ids)
        arr = (_c.c_int32 * max(1, len(ids)))(*ids)
        n = _c.c_size_t()
        cap = 16 * len(ids) + 1
        with self._use() as h:
            while True:
                buf = _c.create_string_buffer(cap)
                code = self._lib.tlr_detokenize(h, arr, len(ids), _flag(render_special), buf, cap, _c.byref(n))
                if code == ERR_BUFFER_TOO_SMALL:
                    cap = n.value + 1
                    continue
                _check(code)
                return buf.raw[:n.value].decode("utf-8", "replace")

    def save_conversation(self, messages, path: str) -> None:
        """Saves the prompt cache's context of a conversation (a list of {"role", "content"}
        dicts, with the last reply) to `path`: load_conversation in another process resumes it
        without prefilling its history again."""
        msgs, keep = _messages(messages)
        c_path = _path("path", path)
        with self._use() as h:
            _check(self._lib.tlr_conversation_save(h, msgs, len(keep) // 2, c_path))

    def load_conversation(self, path: str) -> None:
        """Puts a saved conversation context into the prompt cache (another model's file, or a
        corrupt one, raises TlrError)."""
        c_path = _path("path", path)
        with self._use() as h:
            _check(self._lib.tlr_conversation_load(h, c_path))

    def cancel(self) -> None:
        """Stops the generation running on this device (from any thread)."""
        with self._use() as h:
            _check(self._lib.tlr_device_cancel(h))

    def run(self, prompt, llm: Optional[Llm] = None, *, on_token: Optional[Callable[[Token], object]] = None,
            mode: str = "joint", threshold: Optional[float] = None, span: int = 1, max_tokens: int = 128,
            chat: bool = False, temperature: float = 0.0, top_k: int = 40, top_p: float = 1.0, min_p: float = 0.0,
            repeat_penalty: float = 1.0, repeat_last_n: int = 64, seed: int = 42, pipeline: bool = True,
            spec_depth: int = 32, spec_branches: int = 4, lookahead: int = 8, sim_slm_ms: float = 0.0,
            llm_budget: Optional[float] = 1.25, policy: str = "threshold", price_ratio: float = 4.0,
            cost_budget: float = 0.0) -> Stats:
        """Generates after `prompt` (text, a list of token ids taken as they are, or a conversation:
        a list of {"role": ..., "content": ...} dicts whose next assistant message is generated, the
        device's prompt cache reusing what earlier turns left), calling
        on_token(Token) for each token as it is confirmed (return True to stop). Blocks; returns
        the statistics. An exception raised by on_token stops the generation and is re-raised.
        Text goes to C as a NUL-terminated string: a NUL character in it is a ValueError; bytes
        are refused (TypeError: decode them first); integers must fit their C types (OverflowError);
        the flags (chat, pipeline) are truth values: any value, read as bool() reads it.
        llm: a tlr.Llm (None only for mode="small_only").
        chat: wrap a text prompt as a user message in the SLM's chat template (a conversation is
        always templated; token ids are taken as they are, so chat=True with either is an error).
        llm_budget: LLM tokens the pipeline may cost per routed token (None: no limit).
        policy: "threshold" or "cost" (a call's bar falls as its price rises: a cold first call needs
        far less confidence than a warm one); price_ratio: an LLM output token in input tokens;
        cost_budget: most the LLM's calls may cost per generation in those units (0: no limit).
        A close() of the device from another thread ends the generation (stop "cancelled")."""
        args = locals()
        call = self._prepare(prompt, llm, on_token, {k: args[k] for k in _RUN_OPTIONS})
        return self._execute(call, llm, on_token)

    def _prepare(self, prompt, llm, on_token, options: dict):
        """Checks a generation's arguments; returns call(lib, device, llm, callback, stats) -> code."""
        if llm is not None and not isinstance(llm, Llm):
            raise TypeError("llm must be a tlr.Llm (or None for mode='small_only'), not %s" % type(llm).__name__)
        if on_token is not None and not callable(on_token):
            raise TypeError("on_token must be a callable (Token) -> bool, not %s" % type(on_token).__name__)
        p = _generate_params(self._lib or _load(), **options)
        if isinstance(prompt, str):
            data = _text("the prompt", prompt)
            return lambda lib, h, llm_h, cb, st: lib.tlr_generate(h, llm_h, data, _c.byref(p), cb, None, _c.byref(st))
        # A list of {"role", "content"} dicts is a conversation (tlr_generate_chat); other
        # sequences are token ids.
        if prompt is None or isinstance(prompt, (bytes, bytearray, memoryview, dict)) or \
                not hasattr(prompt, "__iter__"):
            raise TypeError("prompt must be a str, a list of token ids or a list of {'role', 'content'} dicts, "
                            "not %s" % type(prompt).__name__)
        if options["chat"]:
            raise ValueError("chat=True wraps a text prompt in the chat template; a conversation is always "
                             "templated and token ids are taken as they are: leave chat out")
        items = list(prompt)
        if items and isinstance(items[0], dict):
            messages, keep = _messages(items)
            n = len(items)
            return lambda lib, h, llm_h, cb, st: lib.tlr_generate_chat(h, llm_h, messages, n, _c.byref(p), cb, None,
                                                                       _c.byref(st))
        ids = _ids("prompt", items)
        arr = (_c.c_int32 * max(1, len(ids)))(*ids)
        return lambda lib, h, llm_h, cb, st: lib.tlr_generate_ids(h, llm_h, arr, len(ids), _c.byref(p), cb, None,
                                                                  _c.byref(st))

    def _cancel_own(self, owner: object) -> None:
        """Cancels the generation `owner` runs, if it is still inside the C call (its handle is
        alive then: _execute holds it)."""
        with self._gen_lock:
            if self._gen_owner is owner:
                self._lib.tlr_device_cancel(self._handle)

    def _execute(self, call, llm: Optional[Llm], on_token, owner: Optional[object] = None) -> Stats:
        lib = self._lib
        raised: List[BaseException] = []  # from on_token or the http hook; re-raised here

        def trampoline(tp, _user):
            if raised or self._closed:
                return 1
            t = tp.contents
            try:
                text = _c.string_at(t.text, t.text_len).decode("utf-8", "replace") if t.text_len else ""
                tok = Token(id=t.id, text=text, source=_SOURCES[t.source], confidence=t.confidence,
                            end=bool(t.end), slm_ms=t.slm_ms, router_ms=t.router_ms, llm_ms=t.llm_ms,
                            stall_ms=t.stall_ms, at_ms=t.at_ms,
                            llm_error=(t.llm_error or b"").decode("utf-8", "replace"))
                return 1 if (on_token is not None and on_token(tok)) else 0
            except BaseException as e:  # re-raised in the caller's frame after the C call returns
                raised.append(e)
                return 1

        cb = _CALLBACK(trampoline)
        st = _Stats()
        st.struct_size = _c.sizeof(st)
        error = None
        with self._use() as h:
            run = _Run(raised, lambda: lib.tlr_device_cancel(h))
            with llm._use() if llm is not None else contextlib.nullcontext() as llm_h, \
                    llm._serving(run) if llm is not None else contextlib.nullcontext():
                if owner is not None:
                    with self._gen_lock:
                        self._gen_owner = owner
                try:
                    code = call(lib, h, llm_h, cb, st)
                finally:
                    if owner is not None:
                        with self._gen_lock:
                            if self._gen_owner is owner:
                                self._gen_owner = None
                if code != OK:  # the message is the calling thread's until its next TLR call
                    error = TlrError(code, lib.tlr_status_name(code).decode(),
                                     lib.tlr_last_error().decode("utf-8", "replace"))
            closed = self._closed
        if raised:
            raise raised[0]
        if error is not None:
            raise error
        stop = _STOPS[st.stop]
        if closed and stop in ("callback", "cancelled"):
            stop = "cancelled"  # by close()
        stats = Stats(**{f.name: getattr(st, f.name) for f in dataclasses.fields(Stats)
                         if f.name not in ("stop", "llm_failure")},
                      stop=stop, llm_failure=st.llm_failure.decode("utf-8", "replace"))
        self.last_stats = stats
        return stats

    def generate(self, prompt, llm: Optional[Llm] = None, **kwargs) -> Iterator[Token]:
        """Yields the tokens as they come (the generation runs on a helper thread). Stopping the
        iteration early (break, close()) cancels the generation. Statistics: self.last_stats.
        Keyword arguments as for run(), including on_token; they are checked here (a wrong one
        raises at once, not at the first token). Closing the device ends the iteration after the
        tokens it had already yielded or queued."""
        bound = _RUN_SIGNATURE.bind(self, prompt, llm, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        call = self._prepare(prompt, llm, a["on_token"], {k: a[k] for k in _RUN_OPTIONS})
        self._check_open()
        return self._tokens(call, llm, a["on_token"])

    def _tokens(self, call, llm: Optional[Llm], user_cb) -> Iterator[Token]:
        events: "queue.Queue" = queue.Queue(maxsize=64)
        done = object()
        stop = threading.Event()

        def gone() -> bool:  # nobody will take the queue's next token
            return stop.is_set() or self._exiting or self._closed

        def on_token(tok: Token):
            if user_cb is not None and user_cb(tok):
                return True
            while not gone():
                try:
                    events.put(tok, timeout=0.05)
                    return False
                except queue.Full:
                    continue
            return True

        result: List[object] = []
        owner = object()

        def work():
            try:
                self._execute(call, llm, on_token, owner)
            except BaseException as e:
                result.append(e)
            finally:
                while True:
                    try:
                        events.put(done, timeout=0.05)
                        break
                    except queue.Full:
                        if gone():
                            break

        th = threading.Thread(target=work, name="tlr-generate", daemon=True)
        th.start()
        try:
            while True:
                try:
                    item = events.get(timeout=0.1)
                except queue.Empty:
                    if th.is_alive():
                        continue
                    try:  # the helper ended without `done` (the device was closed, the queue full)
                        item = events.get_nowait()
                    except queue.Empty:
                        break
                if item is done:
                    break
                yield item
        finally:
            stop.set()
            # Stopped early (break, close()): the generation may be waiting for an LLM call,
            # where no token comes to see `stop`; cancel it (it alone) so that this returns now.
            if th.is_alive():
                self._cancel_own(owner)
            th.join()
        if result:
            raise result[0]


_RUN_SIGNATURE = inspect.signature(Device.run)
# run()'s options that become tlr_generate_params (all its keyword-only parameters but on_token)
_RUN_OPTIONS = tuple(n for n, p in _RUN_SIGNATURE.parameters.items()
                     if p.kind is inspect.Parameter.KEYWORD_ONLY and n != "on_token")
