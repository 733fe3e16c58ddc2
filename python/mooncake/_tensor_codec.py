"""``mooncake._tensor_codec``: the stored tensor format (see ``mooncake.store_tensor``'s
docstring): encoding tensors and nested lists / tuples / dicts of them into one object,
decoding it (copying or over the caller's memory), and safetensors files."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import struct
from typing import Any, Dict, Optional, Tuple

log = logging.getLogger("mooncake.store")

_MAGIC = b"MCT1"
_ALIGN = 64
_OK = 0
_INVALID_PARAMS = -600
_BUFFER_OVERFLOW = -10
_OBJECT_NOT_FOUND = -704


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is a test dependency
        raise ImportError("the Mooncake Store tensor calls need PyTorch: pip install torch") from e
    return torch


def _require_cuda(what: str):
    torch = _torch()
    if not torch.cuda.is_available():
        raise RuntimeError(f"{what} needs CUDA, but torch.cuda.is_available() is False on this machine "
                           f"(no CUDA device, or a CPU-only build of torch {torch.__version__})")
    return torch


# ---- encoding ---------------------------------------------------------------------------------

def _flatten(obj, tensors: list, what: str):
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        if t.device.type != "cpu":
            t = t.cpu()  # CUDA (or other device) tensors are staged through host memory
        t = t.contiguous()
        tensors.append(t)
        return {"t": [str(t.dtype).replace("torch.", ""), list(t.shape), 0, t.numel() * t.element_size()]}
    if isinstance(obj, list):
        return {"l": [_flatten(x, tensors, what) for x in obj]}
    if isinstance(obj, tuple):
        return {"u": [_flatten(x, tensors, what) for x in obj]}
    if isinstance(obj, dict):
        for k in obj:
            if not isinstance(k, str):
                raise TypeError(f"{what}: dict keys must be str, got {type(k).__name__}")
        return {"d": [[k, _flatten(v, tensors, what)] for k, v in obj.items()]}
    raise TypeError(f"{what}: expected a tensor or a list/tuple/dict of tensors, got {type(obj).__name__}")


class _Encoded:
    """A value in the stored format, as parts (bytes, or tensors' host memory) without a copy."""

    __slots__ = ("parts", "size", "keep")

    def __init__(self, parts, size, keep):
        self.parts, self.size, self.keep = parts, size, keep

    def buffers(self) -> list:
        """The parts as bytes-like objects (ctypes arrays over tensor memory: no copy)."""
        out = []
        for p in self.parts:
            if isinstance(p, bytes):
                out.append(p)
            else:
                addr, n, _t = p
                out.append((ctypes.c_char * n).from_address(addr))
        return out

    def tobytes(self) -> bytes:
        return b"".join(p if isinstance(p, bytes) else ctypes.string_at(p[0], p[1]) for p in self.parts)

    def write_to(self, ptr: int) -> None:
        pos = 0
        for p in self.parts:
            if isinstance(p, bytes):
                ctypes.memmove(ptr + pos, p, len(p))
                pos += len(p)
            else:
                ctypes.memmove(ptr + pos, p[0], p[1])
                pos += p[1]


def _encode(obj, what: str = "put_tensor", parallel: Optional[dict] = None) -> _Encoded:
    tensors: list = []
    tree = _flatten(obj, tensors, what)
    if parallel is not None:
        tree["p"] = parallel
    leaves = []

    def walk(n):
        if "t" in n:
            leaves.append(n)
        for v in n.get("l", []) + n.get("u", []):
            walk(v)
        for _, v in n.get("d", []):
            walk(v)
    walk(tree)
    off = 0
    for leaf in leaves:
        leaf["t"][2] = off
        off += (leaf["t"][3] + _ALIGN - 1) // _ALIGN * _ALIGN
    header = json.dumps(tree, separators=(",", ":")).encode()
    head_len = 8 + len(header)
    pad = (-head_len) % _ALIGN
    prefix = _MAGIC + struct.pack("<I", len(header)) + header + b"\0" * pad
    parts: list = [prefix]
    pos = 0
    for leaf, t in zip(leaves, tensors):
        start = leaf["t"][2]
        if start > pos:
            parts.append(b"\0" * (start - pos))
        n = leaf["t"][3]
        if n:
            parts.append((t.data_ptr(), n, t))
        pos = start + n
    return _Encoded(parts, len(prefix) + pos, tensors)


def encode_tensor(obj) -> bytes:
    """The stored form of a tensor (or list/tuple/dict of tensors) as bytes."""
    return _encode(obj, "encode_tensor").tobytes()


def tensor_object_size(obj) -> int:
    """How many bytes the stored form of ``obj`` takes (the ``size`` for ``put_tensor_from``)."""
    return _encode(obj, "tensor_object_size").size


def serialize_tensor_into(obj, buffer_ptr: int, size: int) -> int:
    """Writes the stored form of ``obj`` at ``buffer_ptr`` (``size`` bytes available) and returns
    its length, ready for ``put_tensor_from``. Raises ValueError when it does not fit."""
    enc = _encode(obj, "serialize_tensor_into")
    if enc.size > int(size):
        raise ValueError(f"serialize_tensor_into: the tensor object needs {enc.size} bytes, the buffer has {size}")
    if not buffer_ptr:
        raise ValueError("serialize_tensor_into: buffer_ptr is 0")
    enc.write_to(int(buffer_ptr))
    return enc.size


# ---- decoding ---------------------------------------------------------------------------------

def _parse_header(addr: int, length: int, what: str) -> Tuple[dict, int]:
    if length < 8 or ctypes.string_at(addr, 4) != _MAGIC:
        raise ValueError(f"{what}: the value is not a tensor object stored by put_tensor (no MCT1 header)")
    (hl,) = struct.unpack("<I", ctypes.string_at(addr + 4, 4))
    if 8 + hl > length:
        raise ValueError(f"{what}: truncated tensor object ({length} bytes, header says {8 + hl}+)")
    try:
        tree = json.loads(ctypes.string_at(addr + 8, hl))
    except ValueError as e:
        raise ValueError(f"{what}: corrupt tensor object header: {e}") from None
    if not isinstance(tree, dict):
        raise ValueError(f"{what}: corrupt tensor object header")
    return tree, 8 + hl + ((-(8 + hl)) % _ALIGN)


def _build(tree: dict, addr: int, length: int, base: int, copy: bool, keep, what: str):
    torch = _torch()

    def build(n):
        if not isinstance(n, dict):
            raise ValueError(f"{what}: corrupt tensor object header")
        if "t" in n:
            try:
                dtype_name, shape, off, nbytes = n["t"]
                dtype = getattr(torch, str(dtype_name))
                if not isinstance(dtype, torch.dtype):
                    raise AttributeError(dtype_name)
                shape = [int(s) for s in shape]
                off, nbytes = int(off), int(nbytes)
            except (AttributeError, ValueError, TypeError):
                raise ValueError(f"{what}: corrupt tensor entry {n['t']!r}") from None
            numel = 1
            for s in shape:
                if s < 0:
                    raise ValueError(f"{what}: negative dimension in {shape}")
                numel *= s
            esize = torch.empty((), dtype=dtype).element_size()
            if numel * esize != nbytes or off < 0 or base + off + nbytes > length:
                raise ValueError(f"{what}: truncated or inconsistent tensor object "
                                 f"({dtype_name}{shape}: {nbytes} bytes at {base + off}, object {length} bytes)")
            if copy or nbytes == 0:
                t = torch.empty(shape, dtype=dtype)
                if nbytes:
                    ctypes.memmove(t.data_ptr(), addr + base + off, nbytes)
                return t
            arr = (ctypes.c_char * nbytes).from_address(addr + base + off)
            t = torch.frombuffer(arr, dtype=torch.uint8).view(dtype).reshape(shape)
            t._mooncake_keep = (arr, keep)  # the tensor views caller memory: keep its owner alive
            return t
        if "l" in n:
            return [build(x) for x in n["l"]]
        if "u" in n:
            return tuple(build(x) for x in n["u"])
        if "d" in n:
            return {k: build(v) for k, v in n["d"]}
        raise ValueError(f"{what}: corrupt tensor object header")
    return build(tree)


def _decode_bytes(data: bytes, what: str = "get_tensor"):
    addr = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value or 0
    tree, base = _parse_header(addr, len(data), what)
    return _build(tree, addr, len(data), base, True, None, what)


def decode_tensor(data: bytes):
    """Rebuilds what ``encode_tensor`` (or ``put_tensor``) stored."""
    return _decode_bytes(bytes(data), "decode_tensor")


def _decode_at(ptr: int, length: int, what: str, copy: bool = False, keep=None):
    tree, base = _parse_header(ptr, length, what)
    return _build(tree, ptr, length, base, copy, keep, what)


def _parallel_of(data_or_ptr, length: int, what: str) -> Optional[dict]:
    if isinstance(data_or_ptr, bytes):
        addr = ctypes.cast(ctypes.c_char_p(data_or_ptr), ctypes.c_void_p).value or 0
    else:
        addr = data_or_ptr
    tree, _ = _parse_header(addr, length, what)
    return tree.get("p")


# ---- safetensors ------------------------------------------------------------------------------

_ST_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
    "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
    "complex64": "C64",
}
_ST_BACK = {v: k for k, v in _ST_DTYPES.items()}


def _write_safetensors(path: str, tensors: Dict[str, Any], metadata: Optional[Dict[str, str]] = None) -> None:
    header: Dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    off = 0
    order = []
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        dt = str(t.dtype).replace("torch.", "")
        if dt not in _ST_DTYPES:
            raise ValueError(f"save_tensor_to_safetensor: dtype {t.dtype} has no safetensors name")
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _ST_DTYPES[dt], "shape": list(t.shape), "data_offsets": [off, off + n]}
        order.append((t, n))
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((-len(hb)) % 8)  # the format pads the header with spaces to 8 bytes
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for t, n in order:
            if n:
                f.write(ctypes.string_at(t.data_ptr(), n))
    os.replace(tmp, path)  # nothing half-written under the final name


def _read_safetensors(path: str) -> Tuple[Dict[str, Any], Dict[str, str]]:
    torch = _torch()
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
    (hl,) = struct.unpack("<Q", raw[:8])
    if 8 + hl > len(raw):
        raise ValueError(f"{path}: not a safetensors file (header length {hl} exceeds the file)")
    try:
        header = json.loads(raw[8:8 + hl])
    except ValueError as e:
        raise ValueError(f"{path}: corrupt safetensors header: {e}") from None
    base = 8 + hl
    meta = header.pop("__metadata__", None) or {}
    out = {}
    for name, info in header.items():
        dt = _ST_BACK.get(info.get("dtype"))
        if dt is None or not hasattr(torch, dt):
            raise ValueError(f"{path}: tensor {name!r} has an unsupported dtype {info.get('dtype')!r}")
        dtype = getattr(torch, dt)
        shape = [int(s) for s in info["shape"]]
        a, b = (int(x) for x in info["data_offsets"])
        t = torch.empty(shape, dtype=dtype)
        n = t.numel() * t.element_size()
        if b - a != n or base + b > len(raw) or a < 0:
            raise ValueError(f"{path}: tensor {name!r} has inconsistent offsets {[a, b]} for {dt}{shape}")
        if n:
            ctypes.memmove(t.data_ptr(), raw[base + a:base + b], n)
        out[name] = t
    return out, meta
