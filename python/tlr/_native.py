"""The C side of the binding (internal): the structs of tlr.h field for field, loading libtlr
and declaring its functions, and checking what goes through ctypes (which cuts a string at a NUL
and wraps an integer that does not fit its C type)."""

import ctypes
import operator
import os
import threading
from typing import List, Optional

API_VERSION_MAJOR = 1


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


def _messages(items, what="messages"):
    """A C array of tlr_message from {"role", "content"} dicts, and the bytes it points to."""
    if isinstance(items, (str, bytes, bytearray, memoryview, dict)) or items is None:
        raise TypeError("%s must be a list of {'role': str, 'content': str} dicts, not %s"
                        % (what, type(items).__name__))
    items = list(items)
    arr = (_Message * max(1, len(items)))()
    keep = []
    for i, m in enumerate(items):
        role, content = (m.get("role"), m.get("content")) if isinstance(m, dict) else (None, None)
        if not isinstance(role, str) or not isinstance(content, str):
            raise ValueError("message %d needs a string 'role' and 'content'" % i)
        keep += [_text("message %d's role" % i, role), _text("message %d's content" % i, content)]
        arr[i].role, arr[i].content = keep[-2], keep[-1]
    return arr, keep


# ---- checking what goes through ctypes (which truncates strings at a NUL and wraps integers) --

_INT_RANGES = {"int": (-2 ** 31, 2 ** 31 - 1), "int32_t": (-2 ** 31, 2 ** 31 - 1),
               "int64_t": (-2 ** 63, 2 ** 63 - 1), "uint64_t": (0, 2 ** 64 - 1)}


def _int(name: str, value, ctype: str = "int") -> int:
    """value as an int that fits the C type it goes to (ctypes would wrap it silently)."""
    if isinstance(value, (str, bytes, bytearray, float)):
        raise TypeError("%s must be an integer, not %s" % (name, type(value).__name__))
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError("%s must be an integer, not %s" % (name, type(value).__name__)) from None
    lo, hi = _INT_RANGES[ctype]
    if not lo <= v <= hi:
        raise OverflowError("%s %d is out of range for the C %s it is passed as ([%d, %d])"
                            % (name, v, ctype, lo, hi))
    return v


def _flag(value) -> int:
    """A flag (chat, pipeline, add_special, ...) as the C int 1 or 0, after its truth value as
    bool() reads it: int(value) would go to C as it is, and ctypes wraps it (2**32 became 0, off)."""
    return 1 if value else 0


def _ids(name: str, ids) -> list:
    """A sequence of token ids (int32), checked."""
    if isinstance(ids, (str, bytes, bytearray, memoryview)) or ids is None or isinstance(ids, dict):
        raise TypeError("%s must be a list of token ids (ints), not %s" % (name, type(ids).__name__))
    try:
        items = list(ids)
    except TypeError:
        raise TypeError("%s must be a list of token ids (ints), not %s" % (name, type(ids).__name__)) from None
    return [_int("%s[%d]" % (name, i), t, "int32_t") for i, t in enumerate(items)]


def _text(name: str, s) -> bytes:
    """A str as the UTF-8 of a NUL-terminated C string (a NUL inside would cut it short there)."""
    if not isinstance(s, str):
        raise TypeError("%s must be a str, not %s" % (name, type(s).__name__))
    if "\0" in s:
        raise ValueError("%s holds a NUL character (at index %d), which a C string cannot carry"
                         % (name, s.index("\0")))
    return s.encode()


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


def _no_nul(name: str, b: bytes) -> bytes:
    if b"\0" in b:
        raise ValueError("%s holds a NUL character (at index %d), which a C string cannot carry"
                         % (name, b.index(b"\0")))
    return b


def _path(name: str, p) -> bytes:
    """A path (str, bytes or os.PathLike) as a C string."""
    try:
        b = os.fsencode(p)
    except TypeError:
        raise TypeError("%s must be a path (str, bytes or os.PathLike), not %s" % (name, type(p).__name__)) from None
    return _no_nul(name, b)


def _b(name: str, s, path: bool = False) -> Optional[bytes]:
    """An optional string parameter as a C string: None stays NULL; a path may also be bytes or
    os.PathLike; a NUL inside is refused (C would read the string only up to it)."""
    if s is None:
        return None
    if path:
        return _path(name, s)
    if isinstance(s, (bytes, bytearray, memoryview)):
        raise TypeError("%s must be a str, not %s" % (name, type(s).__name__))
    return _no_nul(name, str(s).encode())


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
