"""GPU memory through the CUDA or HIP runtime, loaded with ctypes on first use (no torch).

``mooncake.allocate_gpu_memory(size, device=0)`` returns the device address of ``size`` bytes
allocated on GPU ``device`` (cudaMalloc / hipMalloc); ``mooncake.free_gpu_memory(ptr)`` frees
it. Where there is no GPU runtime or no GPU, they raise RuntimeError naming what is missing.

The runtime is looked up as libcudart (the system's, or the one the nvidia-* wheels that come
with torch install), then libamdhip64 (ROCm). Calls restore the calling thread's current device.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading
from typing import Dict, List, Optional, Tuple

__all__ = ["allocate_gpu_memory", "free_gpu_memory", "runtime", "GPURuntime"]

_MEMCPY_H2D = 1  # cudaMemcpyHostToDevice == hipMemcpyHostToDevice
_MEMCPY_D2H = 2


class GPURuntime:
    """The CUDA or HIP runtime library, with the few calls we need."""

    def __init__(self, lib: ctypes.CDLL, prefix: str, path: str):
        self.lib, self.prefix, self.path = lib, prefix, path
        self.kind = "CUDA" if prefix == "cuda" else "HIP"
        vp, i = ctypes.c_void_p, ctypes.c_int
        self._f = {}
        for name, args in {"GetDeviceCount": [ctypes.POINTER(i)], "GetDevice": [ctypes.POINTER(i)],
                           "SetDevice": [i], "Malloc": [ctypes.POINTER(vp), ctypes.c_size_t],
                           "Free": [vp], "Memcpy": [vp, vp, ctypes.c_size_t, i],
                           "StreamSynchronize": [vp], "DeviceSynchronize": []}.items():
            fn = getattr(lib, prefix + name)
            fn.argtypes, fn.restype = args, i
            self._f[name] = fn
        es = getattr(lib, prefix + "GetErrorString")
        es.argtypes, es.restype = [i], ctypes.c_char_p
        self._errstr = es

    def error(self, code: int) -> str:
        s = self._errstr(code)
        return f"{s.decode() if s else 'error'} ({self.prefix} error {code})"

    def call(self, what: str, name: str, *args) -> None:
        rc = self._f[name](*args)
        if rc != 0:
            raise RuntimeError(f"{what}: {self.prefix}{name} failed: {self.error(rc)}")

    def device_count(self) -> Tuple[int, Optional[str]]:
        """(number of GPUs, why none: the runtime's message) ."""
        n = ctypes.c_int(0)
        rc = self._f["GetDeviceCount"](ctypes.byref(n))
        if rc != 0:
            return 0, self.error(rc)
        return n.value, None

    def on_device(self, what: str, device: int):
        """A context manager that makes ``device`` current and restores the previous one."""
        rt = self

        class _Ctx:
            def __enter__(self):
                self.prev = ctypes.c_int(0)
                rt.call(what, "GetDevice", ctypes.byref(self.prev))
                rt.call(what, "SetDevice", device)

            def __exit__(self, *exc):
                rt._f["SetDevice"](self.prev.value)
        return _Ctx()


_lock = threading.Lock()
_runtime: Optional[GPURuntime] = None
_runtime_error: Optional[str] = None
# ptr -> (device, size) of what allocate_gpu_memory handed out
_blocks: Dict[int, Tuple[int, int]] = {}


def _candidates() -> List[Tuple[str, str]]:
    out = [("cuda", n) for n in ("libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                 "libcudart.so.11.0")]
    for base in sys.path:  # the nvidia-* wheels torch depends on
        for pat in ("nvidia/cu*/lib/libcudart.so*", "nvidia/cuda_runtime/lib/libcudart.so*"):
            out += [("cuda", p) for p in sorted(glob.glob(os.path.join(base, pat)))]
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    out += [("cuda", p) for p in sorted(glob.glob(os.path.join(cuda_home, "lib64", "libcudart.so*")))]
    rocm = os.environ.get("ROCM_PATH") or "/opt/rocm"
    out += [("hip", "libamdhip64.so"), ("hip", os.path.join(rocm, "lib", "libamdhip64.so"))]
    return out


def runtime() -> GPURuntime:
    """The GPU runtime (loaded once); RuntimeError when this host has none."""
    global _runtime, _runtime_error
    with _lock:
        if _runtime is not None:
            return _runtime
        if _runtime_error is None:
            for prefix, name in _candidates():
                if os.sep in name and not os.path.exists(name):
                    continue
                try:
                    lib = ctypes.CDLL(name)
                    _runtime = GPURuntime(lib, prefix, name)
                    return _runtime
                except (OSError, AttributeError):
                    continue
            _runtime_error = ("no CUDA or HIP runtime library on this host (looked for "
                              "libcudart.so* on the loader path, in the nvidia-* wheels and "
                              "CUDA_HOME, and for libamdhip64.so in ROCM_PATH)")
        raise RuntimeError(_runtime_error)


def _no_gpu(rt: GPURuntime, why: Optional[str]) -> str:
    """Why the runtime sees no GPU, worded for the user."""
    if rt.prefix == "cuda":
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError:
            return (f"there is no NVIDIA driver (libcuda.so.1 cannot be loaded; the CUDA runtime "
                    f"{rt.path} says: {why or '0 devices'})")
    return f"the {rt.kind} runtime ({rt.path}) finds none: {why or '0 devices'}"


def _check_device(what: str, device: int) -> GPURuntime:
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
    ptr = ctypes.c_void_p()
    with rt.on_device(what, device):
        rt.call(f"{what}({size}, device={device})", "Malloc", ctypes.byref(ptr), size)
    addr = ptr.value or 0
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
    rt = runtime()
    with rt.on_device("free_gpu_memory", block[0]):
        rt.call("free_gpu_memory", "Free", ctypes.c_void_p(ptr))


def gpu_block(addr: int, length: int) -> Optional[Tuple[int, int, int]]:
    """(base, device, size) of the allocate_gpu_memory block overlapping [addr, addr+length),
    None when there is none."""
    with _lock:
        for base, (dev, size) in _blocks.items():
            if addr < base + size and base < addr + max(length, 1):
                return base, dev, size
    return None


def copy_to_gpu(ptr: int, data: bytes) -> None:
    """Copies host bytes to device memory (a helper for tests and examples)."""
    rt = runtime()
    buf = ctypes.create_string_buffer(data, len(data))
    rt.call("copy_to_gpu", "Memcpy", ctypes.c_void_p(ptr), buf, len(data), _MEMCPY_H2D)


def copy_from_gpu(ptr: int, length: int) -> bytes:
    """Copies device memory into new bytes."""
    rt = runtime()
    buf = ctypes.create_string_buffer(length)
    rt.call("copy_from_gpu", "Memcpy", buf, ctypes.c_void_p(ptr), length, _MEMCPY_D2H)
    return buf.raw


def stream_synchronize(what: str, stream_ptr: int) -> None:
    """Waits for the work queued on a CUDA stream (0: the legacy default stream)."""
    if not isinstance(stream_ptr, int) or stream_ptr < 0:
        raise ValueError(f"{what}: stream_ptr must be an int (torch: stream.cuda_stream), "
                         f"got {stream_ptr!r}")
    try:
        rt = runtime()
    except RuntimeError as e:
        raise RuntimeError(f"{what} needs CUDA: {e}") from None
    n, why = rt.device_count()
    if n == 0:
        raise RuntimeError(f"{what} needs CUDA: no GPU here: {_no_gpu(rt, why)}")
    rt.call(what, "StreamSynchronize", ctypes.c_void_p(stream_ptr))
