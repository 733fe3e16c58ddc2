"""GPU memory through the NVIDIA driver or the HIP runtime, loaded with ctypes on first use
(no torch, no CUDA toolkit needed).

``mooncake.allocate_gpu_memory(size, device=0)`` returns the device address of ``size`` bytes
allocated on GPU ``device`` (cuMemAlloc in the device's primary context, the one the CUDA
runtime and torch use; hipMalloc on ROCm); ``mooncake.free_gpu_memory(ptr)`` frees it. Where
there is no GPU driver or no GPU, they raise RuntimeError naming what is missing.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Dict, Optional, Tuple

__all__ = ["allocate_gpu_memory", "free_gpu_memory", "runtime"]

_vp, _int, _size = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_P = ctypes.POINTER


class _CUDADriver:
    """libcuda (the NVIDIA driver API)."""

    kind, prefix, tag = "CUDA", "cu", "cuda"

    def __init__(self, lib: ctypes.CDLL, path: str):
        self.lib, self.path = lib, path
        sig = {"cuInit": [ctypes.c_uint], "cuDeviceGetCount": [_P(_int)],
               "cuDeviceGet": [_P(_int), _int], "cuDevicePrimaryCtxRetain": [_P(_vp), _int],
               "cuCtxGetCurrent": [_P(_vp)], "cuCtxSetCurrent": [_vp],
               "cuMemAlloc_v2": [_P(ctypes.c_uint64), _size], "cuMemFree_v2": [ctypes.c_uint64],
               "cuMemcpyHtoD_v2": [ctypes.c_uint64, _vp, _size],
               "cuMemcpyDtoH_v2": [_vp, ctypes.c_uint64, _size],
               "cuStreamSynchronize": [_vp], "cuGetErrorString": [_int, _P(ctypes.c_char_p)]}
        self.f = {}
        for name, args in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, _int
            self.f[name] = fn
        self._init_rc = self.f["cuInit"](0)
        self._ctx: Dict[int, int] = {}

    def error(self, code: int) -> str:
        s = ctypes.c_char_p()
        self.f["cuGetErrorString"](code, ctypes.byref(s))
        return f"{s.value.decode() if s.value else 'error'} (CUresult {code})"

    def call(self, what: str, name: str, *args) -> None:
        rc = self.f[name](*args)
        if rc != 0:
            raise RuntimeError(f"{what}: {name} failed: {self.error(rc)}")

    def device_count(self) -> Tuple[int, Optional[str]]:
        if self._init_rc != 0:
            return 0, "cuInit: " + self.error(self._init_rc)
        n = _int(0)
        rc = self.f["cuDeviceGetCount"](ctypes.byref(n))
        return (n.value, None) if rc == 0 else (0, self.error(rc))

    def _on(self, what: str, device: int, fn, *args):
        """Runs fn in the primary context of ``device``, restoring the thread's context."""
        ctx = self._ctx.get(device)
        if ctx is None:
            dev, c = _int(), _vp()
            self.call(what, "cuDeviceGet", ctypes.byref(dev), device)
            self.call(what, "cuDevicePrimaryCtxRetain", ctypes.byref(c), dev.value)
            ctx = self._ctx[device] = c.value
        prev = _vp()
        self.call(what, "cuCtxGetCurrent", ctypes.byref(prev))
        self.call(what, "cuCtxSetCurrent", _vp(ctx))
        try:
            return fn(*args)
        finally:
            self.f["cuCtxSetCurrent"](prev)

    def malloc(self, what: str, device: int, size: int) -> int:
        out = ctypes.c_uint64()
        self._on(what, device, self.call, what, "cuMemAlloc_v2", ctypes.byref(out), size)
        return out.value

    def free(self, what: str, device: int, ptr: int) -> None:
        self._on(what, device, self.call, what, "cuMemFree_v2", ptr)

    def to_device(self, what: str, device: int, ptr: int, data: bytes) -> None:
        buf = ctypes.create_string_buffer(data, len(data))
        self._on(what, device, self.call, what, "cuMemcpyHtoD_v2", ptr, buf, len(data))

    def from_device(self, what: str, device: int, ptr: int, n: int) -> bytes:
        buf = ctypes.create_string_buffer(n)
        self._on(what, device, self.call, what, "cuMemcpyDtoH_v2", buf, ptr, n)
        return buf.raw

    def stream_sync(self, what: str, device: int, stream: int) -> None:
        self._on(what, device, self.call, what, "cuStreamSynchronize", _vp(stream))


class _HIPRuntime:
    """libamdhip64 (ROCm's HIP runtime)."""

    kind, prefix, tag = "HIP", "hip", "hip"

    def __init__(self, lib: ctypes.CDLL, path: str):
        self.lib, self.path = lib, path
        sig = {"hipGetDeviceCount": [_P(_int)], "hipGetDevice": [_P(_int)],
               "hipSetDevice": [_int], "hipMalloc": [_P(_vp), _size], "hipFree": [_vp],
               "hipMemcpy": [_vp, _vp, _size, _int], "hipStreamSynchronize": [_vp]}
        self.f = {}
        for name, args in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, _int
            self.f[name] = fn
        es = lib.hipGetErrorString
        es.argtypes, es.restype = [_int], ctypes.c_char_p
        self._es = es

    def error(self, code: int) -> str:
        s = self._es(code)
        return f"{s.decode() if s else 'error'} (hipError {code})"

    def call(self, what: str, name: str, *args) -> None:
        rc = self.f[name](*args)
        if rc != 0:
            raise RuntimeError(f"{what}: {name} failed: {self.error(rc)}")

    def device_count(self) -> Tuple[int, Optional[str]]:
        n = _int(0)
        rc = self.f["hipGetDeviceCount"](ctypes.byref(n))
        return (n.value, None) if rc == 0 else (0, self.error(rc))

    def _on(self, what: str, device: int, fn, *args):
        prev = _int()
        self.call(what, "hipGetDevice", ctypes.byref(prev))
        self.call(what, "hipSetDevice", device)
        try:
            return fn(*args)
        finally:
            self.f["hipSetDevice"](prev.value)

    def malloc(self, what: str, device: int, size: int) -> int:
        out = _vp()
        self._on(what, device, self.call, what, "hipMalloc", ctypes.byref(out), size)
        return out.value or 0

    def free(self, what: str, device: int, ptr: int) -> None:
        self._on(what, device, self.call, what, "hipFree", _vp(ptr))

    def to_device(self, what: str, device: int, ptr: int, data: bytes) -> None:
        buf = ctypes.create_string_buffer(data, len(data))
        self._on(what, device, self.call, what, "hipMemcpy", _vp(ptr), buf, len(data), 1)

    def from_device(self, what: str, device: int, ptr: int, n: int) -> bytes:
        buf = ctypes.create_string_buffer(n)
        self._on(what, device, self.call, what, "hipMemcpy", buf, _vp(ptr), n, 2)
        return buf.raw

    def stream_sync(self, what: str, device: int, stream: int) -> None:
        self._on(what, device, self.call, what, "hipStreamSynchronize", _vp(stream))


_lock = threading.Lock()
_runtime = None
_runtime_error: Optional[str] = None
# ptr -> (device, size) of what allocate_gpu_memory handed out
_blocks: Dict[int, Tuple[int, int]] = {}


def runtime():
    """The GPU driver/runtime (loaded once); RuntimeError when this host has none."""
    global _runtime, _runtime_error
    with _lock:
        if _runtime is not None:
            return _runtime
        if _runtime_error is None:
            rocm = os.environ.get("ROCM_PATH") or "/opt/rocm"
            for cls, name in ((_CUDADriver, "libcuda.so.1"), (_HIPRuntime, "libamdhip64.so"),
                              (_HIPRuntime, os.path.join(rocm, "lib", "libamdhip64.so"))):
                try:
                    _runtime = cls(ctypes.CDLL(name), name)
                    return _runtime
                except (OSError, AttributeError):
                    continue
            _runtime_error = ("there is no NVIDIA driver (libcuda.so.1 cannot be loaded) and no "
                              f"ROCm HIP runtime (libamdhip64.so, {rocm}/lib)")
        raise RuntimeError(_runtime_error)


def _no_gpu(rt, why: Optional[str]) -> str:
    return f"the {rt.kind} driver ({rt.path}) finds no GPU: {why or '0 devices'}"


def _check_device(what: str, device: int):
    if not isinstance(device, int) or isinstance(device, bool) or device < 0:
        raise ValueError(f"{what}: device must be a GPU index >= 0, got {device!r}")
    try:
        rt = runtime()
    except RuntimeError as e:
        raise RuntimeError(f"{what}: no GPU here: {e}") from None
    n, why = rt.device_count()
    if n == 0:
        raise RuntimeError(f"{what}: no GPU here: {_no_gpu(rt, why)}")
    if device >= n:
        raise ValueError(f"{what}: device {device} does not exist: this host has {n} "
                         f"{rt.kind} device(s), 0..{n - 1}")
    return rt


def allocate_gpu_memory(size: int, device: int = 0) -> int:
    """``size`` bytes of device memory on GPU ``device``: its address (an int). Free it with
    free_gpu_memory. Raises ValueError for a bad size or device, RuntimeError where this host
    has no GPU (naming what is missing) or the allocation fails."""
    what = "allocate_gpu_memory"
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        raise ValueError(f"{what}: size must be a positive number of bytes, got {size!r}")
    rt = _check_device(what, device)
    addr = rt.malloc(f"{what}({size}, device={device})", device, size)
    with _lock:
        _blocks[addr] = (device, size)
    return addr


def free_gpu_memory(ptr: int) -> None:
    """Frees memory from allocate_gpu_memory (ValueError for any other address)."""
    with _lock:
        block = _blocks.pop(ptr, None)
    if block is None:
        raise ValueError(f"free_gpu_memory: {ptr:#x} was not returned by allocate_gpu_memory "
                         "(or was freed already)")
    runtime().free("free_gpu_memory", block[0], ptr)


def gpu_block(addr: int, length: int) -> Optional[Tuple[int, int, int]]:
    """(base, device, size) of the allocate_gpu_memory block overlapping [addr, addr+length),
    None when there is none."""
    with _lock:
        for base, (dev, size) in _blocks.items():
            if addr < base + size and base < addr + max(length, 1):
                return base, dev, size
    return None


def _block_of(what: str, ptr: int, n: int) -> int:
    b = gpu_block(ptr, n)
    if b is None or ptr + n > b[0] + b[2] or ptr < b[0]:
        raise ValueError(f"{what}: [{ptr:#x}, +{n}) is not inside memory from allocate_gpu_memory")
    return b[1]


def copy_to_gpu(ptr: int, data: bytes) -> None:
    """Copies host bytes into memory from allocate_gpu_memory (for tests and examples)."""
    dev = _block_of("copy_to_gpu", ptr, len(data))
    runtime().to_device("copy_to_gpu", dev, ptr, data)


def copy_from_gpu(ptr: int, length: int) -> bytes:
    """Copies ``length`` bytes of memory from allocate_gpu_memory into new bytes."""
    dev = _block_of("copy_from_gpu", ptr, length)
    return runtime().from_device("copy_from_gpu", dev, ptr, length)


def stream_synchronize(what: str, stream_ptr: int, device: int = 0) -> None:
    """Waits for the work queued on a CUDA stream (0: the default stream)."""
    if not isinstance(stream_ptr, int) or isinstance(stream_ptr, bool) or stream_ptr < 0:
        raise ValueError(f"{what}: stream_ptr must be an int (torch: stream.cuda_stream), "
                         f"got {stream_ptr!r}")
    try:
        rt = runtime()
    except RuntimeError as e:
        raise RuntimeError(f"{what} needs CUDA: no GPU here: {e}") from None
    n, why = rt.device_count()
    if n == 0:
        raise RuntimeError(f"{what} needs CUDA: no GPU here: {_no_gpu(rt, why)}")
    rt.stream_sync(what, device, stream_ptr)
