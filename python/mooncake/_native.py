"""Loads libmooncake.so, the one Go-built library every part of this package shares.

The package reaches the library through ctypes: every foreign call releases the GIL, so
transfers, collectives and store calls never hold it, and one library serves the torch shim and
Python alike (one Go runtime per process). Never call into it from a fork()ed child.
"""

from __future__ import annotations

import ctypes
import os
import threading

_LIB_NAME = "libmooncake.so"
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


class MooncakeError(RuntimeError):
    """An error reported by libmooncake, with its negative status code."""

    def __init__(self, code: int, message: str):
        super().__init__(f"{message} (code {code})" if message else f"mooncake error {code}")
        self.code = code


def lib_path() -> str:
    return os.environ.get("MOONCAKE_LIB", os.path.join(os.path.dirname(__file__), _LIB_NAME))


def lib() -> ctypes.CDLL:
    """The loaded library (loaded once, RTLD_GLOBAL so the torch shim resolves the same copy)."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                path = lib_path()
                if not os.path.exists(path):
                    raise ImportError(
                        f"{path} is missing: build it with `make lib` "
                        "(go build -buildmode=c-shared) or reinstall the package")
                l = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                l.mooncake_last_error.restype = ctypes.c_char_p
                l.mooncake_version.restype = ctypes.c_char_p
                _lib = l
    return _lib


_declared: set = set()


def declare(table: str, signatures: dict) -> ctypes.CDLL:
    """The library with the entries of ``signatures`` ({name: (restype, argtypes)}) declared,
    once per ``table`` (a name for the caller's table) for the whole process."""
    l = lib()
    if table not in _declared:
        with _lock:
            if table not in _declared:
                for name, (res, args) in signatures.items():
                    f = getattr(l, name)
                    f.restype = res
                    f.argtypes = args
                _declared.add(table)
    return l


def last_error() -> str:
    msg = lib().mooncake_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(code: int) -> int:
    """Raises MooncakeError for a negative status, returns it otherwise."""
    if code < 0:
        raise MooncakeError(code, last_error())
    return code


def cstr(s: str | None) -> bytes | None:
    return None if s is None else s.encode("utf-8")


def read_string(fn, *args, initial: int = 4096) -> str:
    """Calls fn(*args, buf, buflen) that copies a string and returns its full length."""
    size = initial
    while True:
        buf = ctypes.create_string_buffer(size)
        n = fn(*args, buf, size)
        if n < 0:
            raise MooncakeError(n, last_error())
        if n < size:
            return buf.value.decode("utf-8", "replace")
        size = n + 1
