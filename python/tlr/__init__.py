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
from any thread; one Llm may serve several devices at once.
"""

import atexit
import ctypes
import dataclasses
import os
import queue
import threading
import weakref
from typing import Callable, Iterator, List, Optional

__all__ = ["Device", "Llm", "Token", "Stats", "TlrError", "api_version", "version", "pack_model"]

API_VERSION_MAJOR = 1

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


# ---- the C structs (field for field as in tlr.h) ---------------------------------------------

_c = ctypes


class _DeviceParams(_c.Structure):
    _fields_ = [("struct_size", _c.c_size_t), ("slm_path", _c.c_char_p), ("router", _c.c_char_p),
                ("n_threads", _c.c_int), ("kv_type", _c.c_char_p), ("seed", _c.c_uint64),
                ("kv_slots", _c.c_int), ("kv_budget_mb", _c.c_int64), ("n_ctx", _c.c_int64),
                ("weight_cache", _c.c_char_p)]


class _DeviceInfo(_c.Structure):
    _fields_ = [("struct_size", _c.c_size_t), ("n_vocab", _c.c_int32), ("bos", _c.c_int32),
                ("eos", _c.c_int32), ("n_embd", _c.c_int64), ("router_threshold", _c.c_float),
                ("router_kind", _c.c_char * 16)]


class _HttpRequest(_c.Structure):
    _fields_ = [("method", _c.c_char_p), ("url", _c.c_char_p), ("headers", _c.POINTER(_c.c_char_p)),
                ("body", _c.c_void_p), ("body_len", _c.c_size_t), ("timeout_s", _c.c_double)]


_HTTP_SEND = _c.CFUNCTYPE(None, _c.c_void_p, _c.c_void_p, _c.POINTER(_HttpRequest))
_HTTP_CANCEL = _c.CFUNCTYPE(None, _c.c_void_p, _c.c_void_p)


class _HttpHook(_c.Structure):
    _fields_ = [("struct_size", _c.c_size_t), ("send", _HTTP_SEND), ("cancel", _HTTP_CANCEL),
                ("user_data", _c.c_void_p)]


class _LlmParams(_c.Structure):
    _fields_ = [("struct_size", _c.c_size_t), ("model_path", _c.c_char_p), ("server_url", _c.c_char_p),
                ("backend", _c.c_char_p), ("api_key", _c.c_char_p), ("server_model", _c.c_char_p),
                ("ca_file", _c.c_char_p), ("verify_tls", _c.c_int), ("timeout_s", _c.c_double),
                ("retries", _c.c_int), ("retry_after_s", _c.c_double), ("connections", _c.c_int),
                ("sim_rtt_ms", _c.c_double), ("sim_jitter_ms", _c.c_double), ("n_threads", _c.c_int),
                ("kv_type", _c.c_char_p), ("weight_cache", _c.c_char_p), ("llm_tokenizer", _c.c_char_p),
                ("http_hook", _c.POINTER(_HttpHook))]


class _GenerateParams(_c.Structure):
    _fields_ = [("struct_size", _c.c_size_t), ("mode", _c.c_int), ("threshold", _c.c_float),
                ("span", _c.c_int), ("max_tokens", _c.c_int), ("chat", _c.c_int),
                ("temperature", _c.c_float), ("top_k", _c.c_int), ("top_p", _c.c_float),
                ("min_p", _c.c_float), ("repeat_penalty", _c.c_float), ("repeat_last_n", _c.c_int),
                ("seed", _c.c_uint64), ("pipeline", _c.c_int), ("spec_depth", _c.c_int),
                ("spec_branches", _c.c_int), ("lookahead", _c.c_int), ("sim_slm_ms", _c.c_double),
                ("llm_budget", _c.c_double), ("policy", _c.c_int), ("price_ratio", _c.c_double),
                ("cost_budget", _c.c_double)]


class _Message(_c.Structure):
    _fields_ = [("role", _c.c_char_p), ("content", _c.c_char_p)]


def _messages(items):
    """A C array of tlr_message from {"role", "content"} dicts, and the bytes it points to."""
    items = list(items)
    arr = (_Message * max(1, len(items)))()
    keep = []
    for i, m in enumerate(items):
        role, content = (m.get("role"), m.get("content")) if isinstance(m, dict) else (None, None)
        if not isinstance(role, str) or not isinstance(content, str):
            raise ValueError("message %d needs a string 'role' and 'content'" % i)
        keep += [role.encode(), content.encode()]
        arr[i].role, arr[i].content = keep[-2], keep[-1]
    return arr, keep


class _Token(_c.Structure):
    _fields_ = [("struct_size", _c.c_size_t), ("id", _c.c_int32), ("text", _c.c_void_p),
                ("text_len", _c.c_size_t), ("source", _c.c_int), ("confidence", _c.c_float),
                ("end", _c.c_int), ("slm_ms", _c.c_double), ("router_ms", _c.c_double),
                ("llm_ms", _c.c_double), ("stall_ms", _c.c_double), ("at_ms", _c.c_double),
                ("llm_error", _c.c_char_p)]


class _Stats(_c.Structure):
    _fields_ = [("struct_size", _c.c_size_t), ("prompt_tokens", _c.c_int64), ("generated", _c.c_int64),
                ("routed", _c.c_int64), ("fallbacks", _c.c_int64), ("llm_calls", _c.c_int64),
                ("stop", _c.c_int), ("threshold", _c.c_float), ("ttft_ms", _c.c_double),
                ("tbt_ms", _c.c_double), ("total_ms", _c.c_double), ("slm_ms", _c.c_double),
                ("router_ms", _c.c_double), ("llm_ms", _c.c_double), ("stall_ms", _c.c_double),
                ("spec_resolved", _c.c_int64), ("spec_hits", _c.c_int64), ("spec_branch_hits", _c.c_int64),
                ("lookahead_used", _c.c_int64), ("wasted_slm_steps", _c.c_int64),
                ("cancelled_calls", _c.c_int64), ("http_requests", _c.c_int64), ("retries", _c.c_int64),
                ("resyncs", _c.c_int64), ("failed_calls", _c.c_int64), ("llm_failure", _c.c_char * 256),
                ("llm_prefilled", _c.c_int64), ("llm_generated", _c.c_int64), ("llm_forward_ms", _c.c_double),
                ("prompt_reused", _c.c_int64)]


_CALLBACK = _c.CFUNCTYPE(_c.c_int, _c.POINTER(_Token), _c.c_void_p)


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


# ---- loading the library ----------------------------------------------------------------------

_lib = None
_lib_lock = threading.Lock()


def _candidates() -> List[str]:
    out = []
    if os.environ.get("TLR_LIBRARY"):
        out.append(os.environ["TLR_LIBRARY"])
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from . import _install  # written by `make install`
        out.append(os.path.normpath(os.path.join(here, _install.LIBRARY)))
    except ImportError:
        pass
    # The source tree: python/tlr next to the build folder of `make` (build/lib).
    built = os.path.normpath(os.path.join(here, "..", "..", "build", "lib", "libtlr.so.%d" % API_VERSION_MAJOR))
    if os.path.exists(built):
        out.append(built)
    out.append("libtlr.so.%d" % API_VERSION_MAJOR)
    return out


def _declare(lib) -> None:
    P = _c.POINTER
    sig = {
        "tlr_api_version": (_c.c_int, []),
        "tlr_version": (_c.c_char_p, []),
        "tlr_status_name": (_c.c_char_p, [_c.c_int]),
        "tlr_last_error": (_c.c_char_p, []),
        "tlr_device_params_init": (None, [P(_DeviceParams)]),
        "tlr_device_open": (_c.c_int, [P(_DeviceParams), P(_c.c_void_p)]),
        "tlr_device_free": (None, [_c.c_void_p]),
        "tlr_device_get_info": (_c.c_int, [_c.c_void_p, P(_DeviceInfo)]),
        "tlr_tokenize": (_c.c_int, [_c.c_void_p, _c.c_char_p, _c.c_size_t, _c.c_int, _c.c_int,
                                    P(_c.c_int32), _c.c_size_t, P(_c.c_size_t)]),
        "tlr_detokenize": (_c.c_int, [_c.c_void_p, P(_c.c_int32), _c.c_size_t, _c.c_int, _c.c_char_p,
                                      _c.c_size_t, P(_c.c_size_t)]),
        "tlr_llm_params_init": (None, [P(_LlmParams)]),
        "tlr_llm_open": (_c.c_int, [P(_LlmParams), P(_c.c_void_p)]),
        "tlr_llm_free": (None, [_c.c_void_p]),
        "tlr_generate_params_init": (None, [P(_GenerateParams)]),
        "tlr_generate": (_c.c_int, [_c.c_void_p, _c.c_void_p, _c.c_char_p, P(_GenerateParams), _CALLBACK,
                                    _c.c_void_p, P(_Stats)]),
        "tlr_generate_ids": (_c.c_int, [_c.c_void_p, _c.c_void_p, P(_c.c_int32), _c.c_size_t,
                                        P(_GenerateParams), _CALLBACK, _c.c_void_p, P(_Stats)]),
        "tlr_generate_chat": (_c.c_int, [_c.c_void_p, _c.c_void_p, P(_Message), _c.c_size_t,
                                         P(_GenerateParams), _CALLBACK, _c.c_void_p, P(_Stats)]),
        "tlr_device_cancel": (_c.c_int, [_c.c_void_p]),
        "tlr_conversation_save": (_c.c_int, [_c.c_void_p, P(_Message), _c.c_size_t, _c.c_char_p]),
        "tlr_conversation_load": (_c.c_int, [_c.c_void_p, _c.c_char_p]),
        "tlr_http_complete": (None, [_c.c_void_p, _c.c_int, P(_c.c_char_p), _c.c_char_p, _c.c_size_t]),
        "tlr_http_fail": (None, [_c.c_void_p, _c.c_char_p]),
        "tlr_model_pack": (_c.c_int, [_c.c_char_p, _c.c_char_p]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args


def _load():
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        errors = []
        for path in _candidates():
            try:
                lib = _c.CDLL(path)
            except OSError as e:
                errors.append("%s: %s" % (path, e))
                continue
            _declare(lib)
            major = lib.tlr_api_version() // 100
            if major != API_VERSION_MAJOR:
                raise ImportError("%s has TLR API %d, this binding needs %d.x" % (path, major, API_VERSION_MAJOR))
            _lib = lib
            return lib
        raise ImportError("cannot load libtlr (set TLR_LIBRARY to its path): " + "; ".join(errors))


def _check(code: int) -> None:
    if code != OK:
        lib = _load()
        raise TlrError(code, lib.tlr_status_name(code).decode(), lib.tlr_last_error().decode("utf-8", "replace"))


def _b(s: Optional[str]) -> Optional[bytes]:
    return None if s is None else os.fsencode(s) if isinstance(s, os.PathLike) else str(s).encode()


def api_version() -> int:
    """TLR_API_VERSION of the loaded library (major * 100 + minor)."""
    return _load().tlr_api_version()


def version() -> str:
    return _load().tlr_version().decode()


def pack_model(gguf_path, packed_path) -> None:
    """Writes the model at gguf_path as one packed file (tlr_model_pack): its weights in the
    kernels' layout, opened as any model, as fast as with a weight cache but one copy on disk."""
    _check(_load().tlr_model_pack(_b(gguf_path), _b(packed_path)))


# ---- the objects ----------------------------------------------------------------------------------

class _Handle:
    """Owns one C handle; close() (or the end of a with block, or garbage collection) frees it."""
    _free = ""  # the C function that frees the handle

    _handle = None
    _lib = None  # kept by the object: at interpreter exit module globals may already be gone

    def close(self) -> None:
        if self._handle and self._lib is not None:
            getattr(self._lib, self._free)(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


class Llm(_Handle):
    """The large model: in this process (`model=` a GGUF path) or behind a server (`server=` URL).

    http: the app's own HTTP stack for the server's requests (instead of TLR's built-in client), a
    callable http(method, url, headers, body, timeout_s) -> (status, headers, body) with headers
    dicts and bodies bytes; it runs on TLR's calling thread, and an exception it raises fails that
    request (its tokens fall back to the SLM's, llm_error naming the exception)."""
    _free = "tlr_llm_free"

    def __init__(self, model: Optional[str] = None, server: Optional[str] = None, *, backend: str = "tlr",
                 api_key: Optional[str] = None, server_model: Optional[str] = None,
                 ca_file: Optional[str] = None, verify_tls: bool = True, timeout_s: float = 2.0,
                 retries: int = 2, retry_after_s: float = 1.0, connections: int = 4,
                 sim_rtt_ms: float = 0.0, sim_jitter_ms: float = 0.0, threads: int = 1, kv_type: str = "f16",
                 weight_cache: str = "auto", llm_tokenizer: Optional[str] = None,
                 http: Optional[Callable] = None):
        lib = _load()
        self._handle = None
        p = _LlmParams()
        lib.tlr_llm_params_init(_c.byref(p))
        keep = [_b(model), _b(server), _b(backend), _b(api_key), _b(server_model), _b(ca_file), _b(kv_type),
                _b(weight_cache), _b(llm_tokenizer)]
        (p.model_path, p.server_url, p.backend, p.api_key, p.server_model, p.ca_file, p.kv_type,
         p.weight_cache, p.llm_tokenizer) = keep
        p.verify_tls = 1 if verify_tls else 0
        p.timeout_s, p.retries, p.retry_after_s = timeout_s, retries, retry_after_s
        p.connections, p.sim_rtt_ms, p.sim_jitter_ms, p.n_threads = connections, sim_rtt_ms, sim_jitter_ms, threads
        if http is not None:
            if not callable(http):
                raise TypeError("http must be a callable (method, url, headers, body, timeout_s) -> "
                                "(status, headers, body)")
            self._hook = _HttpHook(_c.sizeof(_HttpHook), _HTTP_SEND(_http_sender(lib, http)),
                                   _HTTP_CANCEL(), None)
            p.http_hook = _c.pointer(self._hook)
        h = _c.c_void_p()
        _check(lib.tlr_llm_open(_c.byref(p), _c.byref(h)))
        self._lib, self._handle = lib, h


def _http_sender(lib, http: Callable):
    """The C hook's send over a Python callable: answers each exchange before returning."""
    def send(_user, exchange, request):
        r = request.contents
        try:
            headers = {}
            i = 0
            while r.headers[i] is not None:
                headers[r.headers[i].decode()] = r.headers[i + 1].decode()
                i += 2
            body = _c.string_at(r.body, r.body_len) if r.body_len else b""
            status, reply_headers, reply_body = http(r.method.decode(), r.url.decode(), headers, body, r.timeout_s)
            if isinstance(reply_body, str):
                reply_body = reply_body.encode()
            flat = []
            for k, v in (reply_headers or {}).items():
                flat += [str(k).encode(), str(v).encode()]
            arr = (_c.c_char_p * (len(flat) + 1))(*flat, None)
            lib.tlr_http_complete(exchange, int(status), arr, bytes(reply_body), len(reply_body))
        except BaseException as e:  # noqa: B902 - anything the app's stack raises fails this request
            lib.tlr_http_fail(exchange, ("%s: %s" % (type(e).__name__, e)).encode(errors="replace"))
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


class Device(_Handle):
    """The device side: an SLM and its router (a router GGUF or "maxprob"/"entropy"/"random").
    The prompt cache keeps up to kv_slots SLM contexts (kv_budget_mb MiB, n_ctx positions each):
    a prompt continuing an earlier one (a conversation) prefills only what is new. weight_cache:
    "auto" (beside the model, else the user's cache directory), a directory, or "off" (the
    weight cache: docs/guide.md#the-weight-cache)."""
    _free = "tlr_device_free"
    _exiting = False

    def __init__(self, slm: str, router: str, *, threads: int = 1, kv_type: str = "f16", seed: int = 42,
                 kv_slots: int = 4, kv_budget_mb: int = 1024, n_ctx: int = 4096, weight_cache: str = "auto"):
        lib = _load()
        self._handle = None
        p = _DeviceParams()
        lib.tlr_device_params_init(_c.byref(p))
        keep = [_b(slm), _b(router), _b(kv_type), _b(weight_cache)]
        p.slm_path, p.router, p.kv_type, p.weight_cache = keep
        p.n_threads, p.seed = threads, seed
        p.kv_slots, p.kv_budget_mb, p.n_ctx = kv_slots, kv_budget_mb, n_ctx
        h = _c.c_void_p()
        _check(lib.tlr_device_open(_c.byref(p), _c.byref(h)))
        self._lib, self._handle = lib, h
        self.last_stats: Optional[Stats] = None
        self._running = 0  # calls into tlr_generate now, under _cv
        self._cv = threading.Condition()
        _devices.add(self)

    def _stop_for_exit(self) -> None:
        self._exiting = True
        if self._handle:
            self._lib.tlr_device_cancel(self._handle)
            with self._cv:
                self._cv.wait_for(lambda: self._running == 0, timeout=10)

    def _h(self):
        if not self._handle:
            raise ValueError("the device is closed")
        return self._handle

    @property
    def info(self) -> dict:
        i = _DeviceInfo()
        i.struct_size = _c.sizeof(i)
        _check(_load().tlr_device_get_info(self._h(), _c.byref(i)))
        return {"n_vocab": i.n_vocab, "bos": i.bos, "eos": i.eos, "n_embd": i.n_embd,
                "router_threshold": i.router_threshold, "router_kind": i.router_kind.decode()}

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> List[int]:
        data = text.encode()
        n = _c.c_size_t()
        cap = len(data) + 8
        while True:
            buf = (_c.c_int32 * cap)()
            code = _load().tlr_tokenize(self._h(), data, len(data), int(add_special), int(parse_special), buf, cap,
                                        _c.byref(n))
            if code == ERR_BUFFER_TOO_SMALL:
                cap = n.value
                continue
            _check(code)
            return list(buf[:n.value])

    def detokenize(self, ids: List[int], render_special: bool = False) -> str:
        arr = (_c.c_int32 * max(1, len(ids)))(*ids)
        n = _c.c_size_t()
        cap = 16 * len(ids) + 1
        while True:
            buf = _c.create_string_buffer(cap)
            code = _load().tlr_detokenize(self._h(), arr, len(ids), int(render_special), buf, cap, _c.byref(n))
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
        _check(_load().tlr_conversation_save(self._h(), msgs, len(keep) // 2, os.fsencode(path)))

    def load_conversation(self, path: str) -> None:
        """Puts a saved conversation context into the prompt cache (another model's file, or a
        corrupt one, raises TlrError)."""
        _check(_load().tlr_conversation_load(self._h(), os.fsencode(path)))

    def cancel(self) -> None:
        """Stops the generation running on this device (from any thread)."""
        _check(_load().tlr_device_cancel(self._h()))

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
        chat: wrap a text prompt as a user message in the SLM's chat template (a conversation is
        always templated; token ids are taken as they are, so chat=True with either is an error).
        llm_budget: LLM tokens the pipeline may cost per routed token (None: no limit).
        policy: "threshold" or "cost" (a call's bar falls as its price rises: a cold first call needs
        far less confidence than a warm one); price_ratio: an LLM output token in input tokens;
        cost_budget: most the LLM's calls may cost per generation in those units (0: no limit)."""
        lib = _load()
        if mode not in _MODES:
            raise ValueError("mode must be one of %s" % ", ".join(_MODES))
        if policy not in _POLICIES:
            raise ValueError("policy must be one of %s" % ", ".join(_POLICIES))
        p = _GenerateParams()
        lib.tlr_generate_params_init(_c.byref(p))
        p.mode = _MODES[mode]
        p.threshold = -1.0 if threshold is None else float(threshold)
        p.span, p.max_tokens, p.chat = span, max_tokens, int(chat)
        p.temperature, p.top_k, p.top_p, p.min_p = temperature, top_k, top_p, min_p
        p.repeat_penalty, p.repeat_last_n, p.seed = repeat_penalty, repeat_last_n, seed
        p.pipeline, p.spec_depth, p.spec_branches = int(pipeline), spec_depth, spec_branches
        p.lookahead, p.sim_slm_ms = lookahead, sim_slm_ms
        p.llm_budget = 0.0 if llm_budget is None else float(llm_budget)  # None: no limit ("auto")
        p.policy, p.price_ratio, p.cost_budget = _POLICIES[policy], float(price_ratio), float(cost_budget)
        raised: List[BaseException] = []

        def trampoline(tp, _user):
            if raised:
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

        # A list of {"role", "content"} dicts is a conversation (tlr_generate_chat); other
        # sequences are token ids.
        messages, n_messages, ids, keep = None, 0, [], []
        if chat and not isinstance(prompt, str):
            raise ValueError("chat=True wraps a text prompt in the chat template; a conversation is always "
                             "templated and token ids are taken as they are: leave chat out")
        if not isinstance(prompt, str):
            items = list(prompt)
            if items and isinstance(items[0], dict):
                messages, keep = _messages(items)
                n_messages = len(items)
            else:
                ids = items
        cb = _CALLBACK(trampoline)
        st = _Stats()
        st.struct_size = _c.sizeof(st)
        llm_h = llm._handle if llm is not None else None
        if llm is not None and not llm_h:
            raise ValueError("the LLM is closed")
        with self._cv:
            self._running += 1
        try:
            if isinstance(prompt, str):
                code = lib.tlr_generate(self._h(), llm_h, prompt.encode(), _c.byref(p), cb, None, _c.byref(st))
            elif messages is not None:
                code = lib.tlr_generate_chat(self._h(), llm_h, messages, n_messages, _c.byref(p), cb, None,
                                             _c.byref(st))
            else:
                arr = (_c.c_int32 * max(1, len(ids)))(*ids)
                code = lib.tlr_generate_ids(self._h(), llm_h, arr, len(ids), _c.byref(p), cb, None, _c.byref(st))
        finally:
            with self._cv:
                self._running -= 1
                self._cv.notify_all()
        if raised:
            raise raised[0]
        _check(code)
        stats = Stats(**{f.name: getattr(st, f.name) for f in dataclasses.fields(Stats)
                         if f.name not in ("stop", "llm_failure")},
                      stop=_STOPS[st.stop], llm_failure=st.llm_failure.decode("utf-8", "replace"))
        self.last_stats = stats
        return stats

    def generate(self, prompt, llm: Optional[Llm] = None, **kwargs) -> Iterator[Token]:
        """Yields the tokens as they come (the generation runs on a helper thread). Stopping the
        iteration early (break, close()) cancels the generation. Statistics: self.last_stats.
        Keyword arguments as for run(), including on_token."""
        events: "queue.Queue" = queue.Queue(maxsize=64)
        done = object()
        user_cb = kwargs.pop("on_token", None)
        stop = threading.Event()

        def on_token(tok: Token):
            if user_cb is not None and user_cb(tok):
                return True
            while not stop.is_set() and not self._exiting:
                try:
                    events.put(tok, timeout=0.05)
                    return False
                except queue.Full:
                    continue
            return True

        result: List[object] = []

        def work():
            try:
                self.run(prompt, llm, on_token=on_token, **kwargs)
            except BaseException as e:
                result.append(e)
            finally:
                while True:
                    try:
                        events.put(done, timeout=0.05)
                        break
                    except queue.Full:
                        if stop.is_set() or self._exiting:
                            break

        th = threading.Thread(target=work, name="tlr-generate", daemon=True)
        th.start()
        try:
            while True:
                item = events.get()
                if item is done:
                    break
                yield item
        finally:
            stop.set()
            th.join()
        if result:
            raise result[0]
