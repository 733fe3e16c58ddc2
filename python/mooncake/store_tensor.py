"""``mooncake.store_tensor``: the tensor methods of ``MooncakeDistributedStore``.

``TensorMixin`` holds every tensor call of upstream Mooncake's Python API; the store class
inherits it and provides the byte-level calls it builds on (``put_parts``, ``upsert_parts``,
``get``, ``get_into``, ``put_from``, ...). torch is imported only when a tensor call runs.

Stored format (one object per key, also the layout that ``get_tensor_into`` leaves in a buffer
and ``put_tensor_from`` expects)::

    b"MCT1" | u32 little-endian header length | header JSON | zero padding to 64 bytes |
    tensor bytes, each starting at a 64-byte-aligned offset from the data start

The header is a tree: ``{"t": [dtype, shape, offset, nbytes]}`` for a tensor, ``{"l": [...]}``
a list, ``{"u": [...]}`` a tuple, ``{"d": [[key, node], ...]}`` a dict with string keys. A shard
written through the tensor-parallel calls carries ``"p"`` (its ``TensorParallelism``) beside
``"t"`` in the root node; readers that do not know ``"p"`` ignore it.

Tensor parallelism: a tensor split ``tp_size`` ways along ``split_dim`` is stored as keys
``<key>_tp_<rank>`` (upstream's names); shards follow ``torch.tensor_split``: every rank gets
``n // tp_size`` rows of that dimension and the first ``n % tp_size`` ranks one more, so the
shards concatenated in rank order are the tensor again, byte for byte. Multi-axis shards
(``TensorParallelism`` with dp/ep/pp axes) are stored under ``<key>`` followed by
``_<kind>_<rank>`` for each axis in order (``_e<expert_id>`` / ``_s<stage_id>`` when set).

CUDA: tensors on a CUDA device are staged through host memory (copied to the CPU before a put);
reads return CPU tensors, and ``get_tensor_into_cuda`` copies a stored tensor into a
caller-owned (CPU or CUDA) tensor. Without a CUDA-enabled torch, the CUDA calls raise a
RuntimeError that says so.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ["TensorMixin", "ParallelAxis", "TensorParallelism", "ReadTarget",
           "tensor_object_size", "serialize_tensor_into", "encode_tensor", "decode_tensor"]

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


# ---- parallelism types ------------------------------------------------------------------------

_KINDS = ("tp", "dp", "ep", "pp")


class ParallelAxis:
    """One axis of a shard's identity: ``kind`` ("tp", "dp", "ep", "pp"), ``rank`` of ``size``,
    ``split_dim`` (the tensor dimension a TP axis splits; 0 when None), and optional
    ``expert_id`` (EP) / ``stage_id`` (PP)."""

    def __init__(self, kind: str = "tp", rank: int = 0, size: int = 1, split_dim: Optional[int] = None,
                 expert_id: Optional[int] = None, stage_id: Optional[int] = None):
        self.kind, self.rank, self.size = kind, rank, size
        self.split_dim, self.expert_id, self.stage_id = split_dim, expert_id, stage_id

    def __repr__(self) -> str:
        extra = "".join(f", {n}={getattr(self, n)}" for n in ("split_dim", "expert_id", "stage_id")
                        if getattr(self, n) is not None)
        return f"ParallelAxis(kind={self.kind!r}, rank={self.rank}, size={self.size}{extra})"

    def __eq__(self, other) -> bool:
        return isinstance(other, ParallelAxis) and self._json() == other._json()

    def _check(self, what: str) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"{what}: ParallelAxis.kind must be one of {list(_KINDS)}, got {self.kind!r}")
        for n in ("rank", "size"):
            v = getattr(self, n)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{what}: ParallelAxis.{n} must be an int, got {type(v).__name__}")
        if self.size < 1:
            raise ValueError(f"{what}: ParallelAxis.size must be >= 1, got {self.size}")
        if not 0 <= self.rank < self.size:
            raise ValueError(f"{what}: ParallelAxis.rank {self.rank} is outside [0, {self.size})")
        for n in ("split_dim", "expert_id", "stage_id"):
            v = getattr(self, n)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise TypeError(f"{what}: ParallelAxis.{n} must be an int or None, got {type(v).__name__}")

    def _json(self) -> dict:
        d = {"kind": self.kind, "rank": self.rank, "size": self.size}
        for n in ("split_dim", "expert_id", "stage_id"):
            if getattr(self, n) is not None:
                d[n] = getattr(self, n)
        return d

    @classmethod
    def _from_json(cls, d: dict) -> "ParallelAxis":
        return cls(d["kind"], d["rank"], d["size"], d.get("split_dim"), d.get("expert_id"), d.get("stage_id"))


class TensorParallelism:
    """An ordered list of ``ParallelAxis`` naming one stored or requested shard."""

    def __init__(self, axes: Optional[Sequence[ParallelAxis]] = None):
        self.axes = list(axes or [])

    def __repr__(self) -> str:
        return f"TensorParallelism(axes={self.axes!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorParallelism) and self.axes == other.axes

    def _check(self, what: str) -> None:
        if not isinstance(self.axes, (list, tuple)) or not self.axes:
            raise ValueError(f"{what}: TensorParallelism.axes must be a non-empty list of ParallelAxis")
        seen = set()
        for a in self.axes:
            if not isinstance(a, ParallelAxis):
                raise TypeError(f"{what}: TensorParallelism.axes holds a {type(a).__name__}, want ParallelAxis")
            a._check(what)
            if a.kind in seen:
                raise ValueError(f"{what}: axis kind {a.kind!r} appears twice in {self!r}")
            seen.add(a.kind)

    def _tp(self) -> Optional[ParallelAxis]:
        return next((a for a in self.axes if a.kind == "tp"), None)

    def _suffix(self) -> str:
        s = ""
        for a in self.axes:
            s += f"_{a.kind}_{a.rank}"
            if a.expert_id is not None:
                s += f"_e{a.expert_id}"
            if a.stage_id is not None:
                s += f"_s{a.stage_id}"
        return s

    def _json(self) -> dict:
        return {"axes": [a._json() for a in self.axes]}

    @classmethod
    def _from_json(cls, d: dict) -> "TensorParallelism":
        return cls([ParallelAxis._from_json(a) for a in d.get("axes", [])])

    def _with_tp_rank(self, rank: int) -> "TensorParallelism":
        axes = []
        for a in self.axes:
            b = ParallelAxis(a.kind, a.rank, a.size, a.split_dim, a.expert_id, a.stage_id)
            if b.kind == "tp":
                b.rank = rank
            axes.append(b)
        return TensorParallelism(axes)


class ReadTarget:
    """What a parallel read returns: ``mode`` "as_stored" (the stored object, at the shard key
    when ``parallelism`` is given), "shard" (the shard ``parallelism`` names, cut from the full
    tensor when only that is stored), or "full" (the full tensor, rebuilt from TP shards when it
    was stored split)."""

    MODES = ("as_stored", "shard", "full")

    def __init__(self, mode: str = "as_stored", parallelism: Optional[TensorParallelism] = None):
        self.mode, self.parallelism = mode, parallelism

    def __repr__(self) -> str:
        return f"ReadTarget(mode={self.mode!r}, parallelism={self.parallelism!r})"

    def _check(self, what: str) -> None:
        if self.mode not in self.MODES:
            raise ValueError(f"{what}: ReadTarget.mode must be one of {list(self.MODES)}, got {self.mode!r}")
        if self.parallelism is not None:
            if not isinstance(self.parallelism, TensorParallelism):
                raise TypeError(f"{what}: ReadTarget.parallelism must be a TensorParallelism or None")
            self.parallelism._check(what)
        elif self.mode == "shard":
            raise ValueError(f"{what}: ReadTarget(mode='shard') needs parallelism naming the shard")


def _tp_key(key: str, rank: int) -> str:
    return f"{key}_tp_{rank}"


def _check_key(key, what: str) -> str:
    if isinstance(key, bytes):
        key = key.decode("utf-8")
    if not isinstance(key, str):
        raise TypeError(f"{what}: key must be str, not {type(key).__name__}")
    if not key:
        raise ValueError(f"{what}: key is empty")
    return key


def _check_tensor(t, what: str):
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    return t


def _check_int(v, name: str, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what}: {name} must be an int, got {type(v).__name__}")
    return v


def _check_tp(tensor, tp_rank, tp_size, split_dim, what: str) -> int:
    """Validates TP arguments; returns split_dim normalised to >= 0 (tensor may be None)."""
    _check_int(tp_rank, "tp_rank", what)
    _check_int(tp_size, "tp_size", what)
    _check_int(split_dim, "split_dim", what)
    if tp_size < 1:
        raise ValueError(f"{what}: tp_size must be >= 1, got {tp_size}")
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"{what}: tp_rank {tp_rank} is outside [0, {tp_size})")
    if tensor is None:
        return split_dim
    nd = tensor.dim()
    if tp_size > 1 and nd == 0:
        raise ValueError(f"{what}: a 0-d tensor cannot be split into {tp_size} TP shards")
    if nd and not -nd <= split_dim < nd:
        raise ValueError(f"{what}: split_dim {split_dim} is out of range for a {nd}-d tensor of shape {list(tensor.shape)}")
    return split_dim % nd if nd else 0


def _split(tensor, tp_size: int, split_dim: int) -> list:
    torch = _torch()
    return list(torch.tensor_split(tensor.detach(), tp_size, dim=split_dim))


def _same_len(what: str, **seqs) -> int:
    lens = {k: len(v) for k, v in seqs.items()}
    if len(set(lens.values())) > 1:
        raise ValueError(f"{what}: lengths differ: " + ", ".join(f"{k}={n}" for k, n in lens.items()))
    return next(iter(lens.values()), 0)


def _check_cfg(config, what: str):
    if config is not None and not hasattr(config, "_c"):
        raise TypeError(f"{what}: config must be a ReplicateConfig or None, got {type(config).__name__}")
    return config


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


# ---- the mixin --------------------------------------------------------------------------------

class TensorMixin:
    """Tensor calls of ``MooncakeDistributedStore`` (see the module docstring for formats)."""

    # -- plumbing --
    def _t_put(self, key: str, enc: _Encoded, config, upsert: bool) -> int:
        bufs = enc.buffers()
        if upsert:
            return self.upsert_parts(key, *bufs, config=config)
        return self.put_parts(key, *bufs, config=config)

    def _t_put_many(self, keys: List[str], encs: List[_Encoded], config, upsert: bool, atomic: bool) -> List[int]:
        """Writes each value; with ``atomic`` a failure removes what this call wrote (puts only;
        keys that existed before the call are left alone: puts are write-once)."""
        existed = self.batch_is_exist(keys) if atomic and not upsert else [0] * len(keys)
        codes = []
        for k, e in zip(keys, encs):
            codes.append(self._t_put(k, e, config, upsert))
            if codes[-1] != 0 and atomic:
                break
        if atomic and not upsert and any(c != 0 for c in codes):
            for k, c, ex in zip(keys, codes, existed):
                if c == 0 and ex != 1:
                    self.remove(k, True)
            codes += [codes[-1]] * (len(keys) - len(codes))
        return codes

    def _t_get_object(self, key: str):
        data = self.get(key)
        if not data:
            return None, None
        return data, _parallel_of(data, len(data), "get_tensor")

    # -- plain --
    def put_tensor(self, key: str, tensor, config=None) -> int:
        """Stores a tensor (or a list/tuple/dict of tensors). 0 or a negative code."""
        key = _check_key(key, "put_tensor")
        return self._t_put(key, _encode(tensor, "put_tensor"), _check_cfg(config, "put_tensor"), False)

    def pub_tensor(self, key: str, tensor, config=None) -> int:
        """put_tensor with a ReplicateConfig (upstream's "publish")."""
        key = _check_key(key, "pub_tensor")
        return self._t_put(key, _encode(tensor, "pub_tensor"), _check_cfg(config, "pub_tensor"), False)

    def upsert_tensor(self, key: str, tensor, config=None) -> int:
        """Stores the tensor, replacing a value already under key."""
        key = _check_key(key, "upsert_tensor")
        return self._t_put(key, _encode(tensor, "upsert_tensor"), _check_cfg(config, "upsert_tensor"), True)

    def upsert_pub_tensor(self, key: str, tensor, config=None) -> int:
        key = _check_key(key, "upsert_pub_tensor")
        return self._t_put(key, _encode(tensor, "upsert_pub_tensor"), _check_cfg(config, "upsert_pub_tensor"), True)

    def get_tensor(self, key: str):
        """The tensor (or list/tuple/dict) stored under key, on the CPU; None on a miss."""
        data = self.get(_check_key(key, "get_tensor"))
        if not data:
            return None
        return _decode_bytes(data)

    def _t_batch_put(self, keys, tensors, config, upsert: bool, what: str) -> List[int]:
        n = _same_len(what, keys=keys, tensors=tensors)
        keys = [_check_key(k, what) for k in keys]
        _check_cfg(config, what)
        encs = [_encode(t, what) for t in tensors]  # every argument checked before any write
        if upsert:
            return [self._t_put(k, e, config, True) for k, e in zip(keys, encs)]
        if n == 0:
            return []
        blobs = [e.tobytes() for e in encs]
        ptrs = [ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value for b in blobs]
        return self.batch_put_from(keys, ptrs, [len(b) for b in blobs], config)

    def batch_put_tensor(self, keys: Sequence[str], tensors_list: Sequence, config=None) -> List[int]:
        return self._t_batch_put(keys, tensors_list, config, False, "batch_put_tensor")

    def batch_pub_tensor(self, keys: Sequence[str], tensors_list: Sequence, config=None) -> List[int]:
        return self._t_batch_put(keys, tensors_list, config, False, "batch_pub_tensor")

    def batch_upsert_tensor(self, keys: Sequence[str], tensors: Sequence, config=None) -> List[int]:
        return self._t_batch_put(keys, tensors, config, True, "batch_upsert_tensor")

    def batch_upsert_pub_tensor(self, keys: Sequence[str], tensors: Sequence, config=None) -> List[int]:
        return self._t_batch_put(keys, tensors, config, True, "batch_upsert_pub_tensor")

    def batch_get_tensor(self, keys: Sequence[str]) -> list:
        keys = [_check_key(k, "batch_get_tensor") for k in keys]
        return [(_decode_bytes(v, "batch_get_tensor") if v else None) for v in self.get_batch(keys)]

    # -- zero copy --
    def put_tensor_from(self, key: str, buffer_ptr: int, size: int, config=None) -> int:
        """Stores the tensor object (the layout get_tensor_into leaves) of ``size`` bytes at
        ``buffer_ptr``. Raises ValueError when the bytes are not a tensor object."""
        key = _check_key(key, "put_tensor_from")
        _decode_at(int(buffer_ptr), int(size), "put_tensor_from")
        return self.put_from(key, int(buffer_ptr), int(size), _check_cfg(config, "put_tensor_from"))

    def upsert_tensor_from(self, key: str, buffer_ptr: int, size: int, config=None) -> int:
        key = _check_key(key, "upsert_tensor_from")
        _decode_at(int(buffer_ptr), int(size), "upsert_tensor_from")
        return self.upsert_from(key, int(buffer_ptr), int(size), _check_cfg(config, "upsert_tensor_from"))

    def _t_batch_from(self, keys, buffer_ptrs, sizes, config, upsert: bool, what: str) -> List[int]:
        _same_len(what, keys=keys, buffer_ptrs=buffer_ptrs, sizes=sizes)
        keys = [_check_key(k, what) for k in keys]
        for p, s in zip(buffer_ptrs, sizes):
            _decode_at(int(p), int(s), what)
        _check_cfg(config, what)
        if not keys:
            return []
        if upsert:
            return self.batch_upsert_from(keys, [int(p) for p in buffer_ptrs], [int(s) for s in sizes], config)
        return self.batch_put_from(keys, [int(p) for p in buffer_ptrs], [int(s) for s in sizes], config)

    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes, config=None) -> List[int]:
        return self._t_batch_from(keys, buffer_ptrs, sizes, config, False, "batch_put_tensor_from")

    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes, config=None) -> List[int]:
        return self._t_batch_from(keys, buffer_ptrs, sizes, config, True, "batch_upsert_tensor_from")

    def _t_into(self, key: str, buffer_ptr: int, size: int, what: str):
        n = self.get_into(key, int(buffer_ptr), int(size))
        if n == _BUFFER_OVERFLOW:
            need = self.get_size(key)
            raise ValueError(f"{what}: the buffer of {size} bytes is smaller than {key!r}'s {need} bytes")
        if n < 0:
            return None
        return _decode_at(int(buffer_ptr), n, what)

    def get_tensor_into(self, key: str, buffer_ptr: int, size: int):
        """Reads key's tensor object into the buffer and returns a tensor that views it (no copy;
        valid while the buffer is). None on a miss; ValueError when the buffer is too small."""
        return self._t_into(_check_key(key, "get_tensor_into"), buffer_ptr, size, "get_tensor_into")

    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes) -> list:
        n = _same_len("batch_get_tensor_into", keys=keys, buffer_ptrs=buffer_ptrs, sizes=sizes)
        keys = [_check_key(k, "batch_get_tensor_into") for k in keys]
        if n == 0:
            return []
        res = self.batch_get_into(keys, [int(p) for p in buffer_ptrs], [int(s) for s in sizes])
        out = []
        for k, p, s, r in zip(keys, buffer_ptrs, sizes, res):
            if r == _BUFFER_OVERFLOW:
                raise ValueError(f"batch_get_tensor_into: the buffer of {s} bytes is smaller than "
                                 f"{k!r}'s {self.get_size(k)} bytes")
            out.append(_decode_at(int(p), r, "batch_get_tensor_into") if r >= 0 else None)
        return out

    # -- CUDA --
    def _t_into_tensor(self, key: str, dst, what: str) -> int:
        torch = _torch()
        if not isinstance(dst, torch.Tensor) and not hasattr(dst, "data_ptr"):
            raise TypeError(f"{what}: the destination must be a torch.Tensor, got {type(dst).__name__}")
        if dst.device.type == "cuda":
            _require_cuda(what)
        elif dst.device.type != "cpu":
            raise ValueError(f"{what}: destination on device {dst.device} (only cpu and cuda are supported)")
        if not dst.is_contiguous():
            raise ValueError(f"{what}: the destination tensor must be contiguous")
        size = self.get_size(key)
        if size < 0:
            return size
        stage = torch.empty(size, dtype=torch.uint8, pin_memory=dst.device.type == "cuda")
        n = self.get_into(key, stage.data_ptr(), size)
        if n < 0:
            return n
        src = _decode_at(stage.data_ptr(), n, what, keep=stage)
        if not isinstance(src, torch.Tensor):
            raise ValueError(f"{what}: {key!r} holds a {type(src).__name__} of tensors, not one tensor")
        if src.dtype != dst.dtype:
            raise ValueError(f"{what}: {key!r} holds {src.dtype}, the destination is {dst.dtype}")
        if src.numel() > dst.numel():
            raise ValueError(f"{what}: {key!r} holds {src.numel()} elements, the destination has room for {dst.numel()}")
        flat = dst.view(-1)[:src.numel()]
        flat.copy_(src.reshape(-1), non_blocking=False)
        return src.numel() * src.element_size()

    def get_tensor_into_cuda(self, key: str, dst) -> int:
        """Copies key's tensor into ``dst`` (a contiguous CPU or CUDA tensor of the same dtype, at
        least as many elements), staged through pinned host memory. Returns the bytes copied or a
        negative code (OBJECT_NOT_FOUND, ...)."""
        return self._t_into_tensor(_check_key(key, "get_tensor_into_cuda"), dst, "get_tensor_into_cuda")

    def batch_get_tensor_into_cuda(self, keys: Sequence[str], dsts: Sequence) -> List[int]:
        _same_len("batch_get_tensor_into_cuda", keys=keys, dsts=dsts)
        return [self._t_into_tensor(_check_key(k, "batch_get_tensor_into_cuda"), d, "batch_get_tensor_into_cuda")
                for k, d in zip(keys, dsts)]

    # -- tensor parallelism (legacy TP wrappers) --
    def _t_tp_encs(self, key: str, tensor, tp_size: int, split_dim: int, what: str):
        full_shape = list(tensor.shape)
        keys, encs = [], []
        for r, shard in enumerate(_split(tensor, tp_size, split_dim)):
            p = {"axes": [{"kind": "tp", "rank": r, "size": tp_size, "split_dim": split_dim}],
                 "full_shape": full_shape}
            keys.append(_tp_key(key, r))
            encs.append(_encode(shard, what, p))
        return keys, encs

    def _t_put_tp(self, key, tensor, config, tp_rank, tp_size, split_dim, upsert, what) -> int:
        key = _check_key(key, what)
        _check_tensor(tensor, what)
        split_dim = _check_tp(tensor, tp_rank, tp_size, split_dim, what)
        _check_cfg(config, what)
        if tp_size == 1:
            return self._t_put(key, _encode(tensor, what), config, upsert)
        keys, encs = self._t_tp_encs(key, tensor, tp_size, split_dim, what)
        codes = self._t_put_many(keys, encs, config, upsert, atomic=True)
        return next((c for c in codes if c != 0), 0)

    def put_tensor_with_tp(self, key: str, tensor, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0,
                           config=None) -> int:
        """Splits the full tensor into ``tp_size`` shards along ``split_dim`` and stores every
        shard as ``<key>_tp_<rank>`` (tp_rank is accepted as upstream does and does not choose
        what is written). All shards or none: a failure removes the shards this call wrote."""
        return self._t_put_tp(key, tensor, config, tp_rank, tp_size, split_dim, False, "put_tensor_with_tp")

    def pub_tensor_with_tp(self, key: str, tensor, config=None, tp_rank: int = 0, tp_size: int = 1,
                           split_dim: int = 0) -> int:
        return self._t_put_tp(key, tensor, config, tp_rank, tp_size, split_dim, False, "pub_tensor_with_tp")

    def upsert_tensor_with_tp(self, key: str, tensor, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0,
                              config=None) -> int:
        return self._t_put_tp(key, tensor, config, tp_rank, tp_size, split_dim, True, "upsert_tensor_with_tp")

    def upsert_pub_tensor_with_tp(self, key: str, tensor, config=None, tp_rank: int = 0, tp_size: int = 1,
                                  split_dim: int = 0) -> int:
        return self._t_put_tp(key, tensor, config, tp_rank, tp_size, split_dim, True, "upsert_pub_tensor_with_tp")

    def _t_batch_put_tp(self, base_keys, tensors, config, tp_rank, tp_size, split_dim, upsert, what) -> List[int]:
        _same_len(what, base_keys=base_keys, tensors_list=tensors)
        base_keys = [_check_key(k, what) for k in base_keys]
        for t in tensors:
            _check_tensor(t, what)
            _check_tp(t, tp_rank, tp_size, split_dim, what)
        return [self._t_put_tp(k, t, config, tp_rank, tp_size, split_dim, upsert, what)
                for k, t in zip(base_keys, tensors)]

    def batch_put_tensor_with_tp(self, base_keys, tensors_list, tp_rank: int = 0, tp_size: int = 1,
                                 split_dim: int = 0, config=None) -> List[int]:
        return self._t_batch_put_tp(base_keys, tensors_list, config, tp_rank, tp_size, split_dim, False,
                                    "batch_put_tensor_with_tp")

    def batch_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank: int = 0, tp_size: int = 1,
                                 split_dim: int = 0) -> List[int]:
        return self._t_batch_put_tp(base_keys, tensors_list, config, tp_rank, tp_size, split_dim, False,
                                    "batch_pub_tensor_with_tp")

    def batch_upsert_tensor_with_tp(self, base_keys, tensors_list, tp_rank: int = 0, tp_size: int = 1,
                                    split_dim: int = 0, config=None) -> List[int]:
        return self._t_batch_put_tp(base_keys, tensors_list, config, tp_rank, tp_size, split_dim, True,
                                    "batch_upsert_tensor_with_tp")

    def batch_upsert_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank: int = 0,
                                        tp_size: int = 1, split_dim: int = 0) -> List[int]:
        return self._t_batch_put_tp(base_keys, tensors_list, config, tp_rank, tp_size, split_dim, True,
                                    "batch_upsert_pub_tensor_with_tp")

    def _t_tp_from(self, key, buffer_ptr, size, tp_rank, tp_size, split_dim, config, upsert, what) -> int:
        key = _check_key(key, what)
        _check_tp(None, tp_rank, tp_size, split_dim, what)
        t = _decode_at(int(buffer_ptr), int(size), what)
        if tp_size == 1:
            fn = self.upsert_from if upsert else self.put_from
            return fn(key, int(buffer_ptr), int(size), _check_cfg(config, what))
        return self._t_put_tp(key, _check_tensor(t, what), config, tp_rank, tp_size, split_dim, upsert, what)

    def put_tensor_with_tp_from(self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0, tp_size: int = 1,
                                split_dim: int = 0, config=None) -> int:
        """put_tensor_with_tp of the full tensor object at buffer_ptr (the get_tensor_into layout)."""
        return self._t_tp_from(key, buffer_ptr, size, tp_rank, tp_size, split_dim, config, False,
                               "put_tensor_with_tp_from")

    def upsert_tensor_with_tp_from(self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0,
                                   tp_size: int = 1, split_dim: int = 0, config=None) -> int:
        return self._t_tp_from(key, buffer_ptr, size, tp_rank, tp_size, split_dim, config, True,
                               "upsert_tensor_with_tp_from")

    def _t_batch_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank, tp_size, split_dim, config, upsert, what):
        _same_len(what, base_keys=base_keys, buffer_ptrs=buffer_ptrs, sizes=sizes)
        _check_tp(None, tp_rank, tp_size, split_dim, what)
        for p, s in zip(buffer_ptrs, sizes):
            _check_tensor(_decode_at(int(p), int(s), what), what)
        return [self._t_tp_from(k, p, s, tp_rank, tp_size, split_dim, config, upsert, what)
                for k, p, s in zip(base_keys, buffer_ptrs, sizes)]

    def batch_put_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank: int = 0, tp_size: int = 1,
                                      split_dim: int = 0, config=None) -> List[int]:
        return self._t_batch_tp_from(base_keys, buffer_ptrs, sizes, tp_rank, tp_size, split_dim, config, False,
                                     "batch_put_tensor_with_tp_from")

    def batch_upsert_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank: int = 0, tp_size: int = 1,
                                         split_dim: int = 0, config=None) -> List[int]:
        return self._t_batch_tp_from(base_keys, buffer_ptrs, sizes, tp_rank, tp_size, split_dim, config, True,
                                     "batch_upsert_tensor_with_tp_from")

    def get_tensor_with_tp(self, key: str, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0):
        """The shard ``<key>_tp_<tp_rank>`` (``key`` itself when tp_size is 1); None on a miss."""
        key = _check_key(key, "get_tensor_with_tp")
        _check_tp(None, tp_rank, tp_size, split_dim, "get_tensor_with_tp")
        return self.get_tensor(key if tp_size == 1 else _tp_key(key, tp_rank))

    def batch_get_tensor_with_tp(self, base_keys, tp_rank: int = 0, tp_size: int = 1) -> list:
        _check_tp(None, tp_rank, tp_size, 0, "batch_get_tensor_with_tp")
        keys = [_check_key(k, "batch_get_tensor_with_tp") for k in base_keys]
        return self.batch_get_tensor(keys if tp_size == 1 else [_tp_key(k, tp_rank) for k in keys])

    def get_tensor_with_tp_into(self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0, tp_size: int = 1,
                                split_dim: int = 0):
        key = _check_key(key, "get_tensor_with_tp_into")
        _check_tp(None, tp_rank, tp_size, split_dim, "get_tensor_with_tp_into")
        return self._t_into(key if tp_size == 1 else _tp_key(key, tp_rank), buffer_ptr, size,
                            "get_tensor_with_tp_into")

    def batch_get_tensor_with_tp_into(self, base_keys, buffer_ptrs, sizes, tp_rank: int = 0,
                                      tp_size: int = 1) -> list:
        _check_tp(None, tp_rank, tp_size, 0, "batch_get_tensor_with_tp_into")
        keys = [_check_key(k, "batch_get_tensor_with_tp_into") for k in base_keys]
        return self.batch_get_tensor_into(keys if tp_size == 1 else [_tp_key(k, tp_rank) for k in keys],
                                          buffer_ptrs, sizes)

    # -- unified parallelism --
    def _t_par_plan(self, key, tensor, parallelism, writer_partition, what):
        """(store key, tensor to store, header "p") for a parallel write; checks every argument."""
        key = _check_key(key, what)
        _check_tensor(tensor, what)
        if parallelism is not None and writer_partition is not None:
            raise ValueError(f"{what}: give parallelism or writer_partition, not both")
        if writer_partition is not None:
            try:
                rank, size, split_dim = writer_partition
            except (TypeError, ValueError):
                raise ValueError(f"{what}: writer_partition must be (rank, size, split_dim), "
                                 f"got {writer_partition!r}") from None
            split_dim = _check_tp(tensor, rank, size, split_dim, what)
            parallelism = TensorParallelism([ParallelAxis("tp", rank, size, split_dim)])
            shard = _split(tensor, size, split_dim)[rank]
            p = parallelism._json()
            p["full_shape"] = list(tensor.shape)
            return key + parallelism._suffix(), shard, p
        if parallelism is None:
            return key, tensor, None
        if not isinstance(parallelism, TensorParallelism):
            raise TypeError(f"{what}: parallelism must be a TensorParallelism or None, got {type(parallelism).__name__}")
        parallelism._check(what)
        tp = parallelism._tp()
        p = parallelism._json()
        if tp is not None and len(parallelism.axes) > 1:
            # TP inside a multi-axis layout: the caller passes the full tensor; store its TP shard
            sd = _check_tp(tensor, tp.rank, tp.size, 0 if tp.split_dim is None else tp.split_dim, what)
            p["full_shape"] = list(tensor.shape)
            for a in p["axes"]:
                if a["kind"] == "tp":
                    a["split_dim"] = sd
            return key + parallelism._suffix(), _split(tensor, tp.size, sd)[tp.rank], p
        if tp is not None:
            # single-axis TP: the tensor is the shard already (upstream's compatibility rule)
            sd = 0 if tp.split_dim is None else tp.split_dim
            if tensor.dim() == 0 and tp.size > 1:
                raise ValueError(f"{what}: a 0-d tensor cannot be a TP shard")
            if tensor.dim() and not -tensor.dim() <= sd < tensor.dim():
                raise ValueError(f"{what}: split_dim {sd} is out of range for a {tensor.dim()}-d shard")
            p["axes"][0]["split_dim"] = sd % tensor.dim() if tensor.dim() else 0
        return key + parallelism._suffix(), tensor, p

    def _t_put_par(self, key, tensor, parallelism, config, writer_partition, upsert, what) -> int:
        skey, t, p = self._t_par_plan(key, tensor, parallelism, writer_partition, what)
        return self._t_put(skey, _encode(t, what, p), _check_cfg(config, what), upsert)

    def put_tensor_with_parallelism(self, key: str, tensor, parallelism: Optional[TensorParallelism] = None,
                                    config=None, writer_partition=None) -> int:
        """Stores a full tensor (parallelism None), the shard a ``TensorParallelism`` names, or
        the shard ``writer_partition=(rank, size, split_dim)`` cuts from a full tensor."""
        return self._t_put_par(key, tensor, parallelism, config, writer_partition, False,
                               "put_tensor_with_parallelism")

    def upsert_tensor_with_parallelism(self, key: str, tensor, parallelism: Optional[TensorParallelism] = None,
                                       config=None, writer_partition=None) -> int:
        return self._t_put_par(key, tensor, parallelism, config, writer_partition, True,
                               "upsert_tensor_with_parallelism")

    def _t_batch_par(self, keys, tensors, parallelisms, config, writer_partitions, upsert, what) -> List[int]:
        n = _same_len(what, keys=keys, tensors=tensors)
        if parallelisms is not None:
            _same_len(what, keys=keys, parallelisms=parallelisms)
        if writer_partitions is not None:
            _same_len(what, keys=keys, writer_partitions=writer_partitions)
        plans = [self._t_par_plan(keys[i], tensors[i], parallelisms[i] if parallelisms is not None else None,
                                  writer_partitions[i] if writer_partitions is not None else None, what)
                 for i in range(n)]
        _check_cfg(config, what)
        return [self._t_put(k, _encode(t, what, p), config, upsert) for k, t, p in plans]

    def batch_put_tensor_with_parallelism(self, keys, tensors, parallelisms=None, config=None,
                                          writer_partitions=None) -> List[int]:
        return self._t_batch_par(keys, tensors, parallelisms, config, writer_partitions, False,
                                 "batch_put_tensor_with_parallelism")

    def batch_upsert_tensor_with_parallelism(self, keys, tensors, parallelisms=None, config=None,
                                             writer_partitions=None) -> List[int]:
        return self._t_batch_par(keys, tensors, parallelisms, config, writer_partitions, True,
                                 "batch_upsert_tensor_with_parallelism")

    def _t_par_from(self, key, buffer_ptr, size, parallelism, config, writer_partition, upsert, what) -> int:
        t = _decode_at(int(buffer_ptr), int(size), what)
        if parallelism is None and writer_partition is None:
            key = _check_key(key, what)
            fn = self.upsert_from if upsert else self.put_from
            return fn(key, int(buffer_ptr), int(size), _check_cfg(config, what))
        return self._t_put_par(key, t, parallelism, config, writer_partition, upsert, what)

    def put_tensor_with_parallelism_from(self, key: str, buffer_ptr: int, size: int, parallelism=None,
                                         config=None, writer_partition=None) -> int:
        return self._t_par_from(key, buffer_ptr, size, parallelism, config, writer_partition, False,
                                "put_tensor_with_parallelism_from")

    def upsert_tensor_with_parallelism_from(self, key: str, buffer_ptr: int, size: int, parallelism=None,
                                            config=None, writer_partition=None) -> int:
        return self._t_par_from(key, buffer_ptr, size, parallelism, config, writer_partition, True,
                                "upsert_tensor_with_parallelism_from")

    def _t_batch_par_from(self, keys, buffer_ptrs, sizes, parallelisms, config, writer_partitions, upsert, what):
        n = _same_len(what, keys=keys, buffer_ptrs=buffer_ptrs, sizes=sizes)
        for p, s in zip(buffer_ptrs, sizes):
            _decode_at(int(p), int(s), what)
        return [self._t_par_from(keys[i], buffer_ptrs[i], sizes[i],
                                 parallelisms[i] if parallelisms is not None else None, config,
                                 writer_partitions[i] if writer_partitions is not None else None, upsert, what)
                for i in range(n)]

    def batch_put_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms=None, config=None,
                                               writer_partitions=None) -> List[int]:
        return self._t_batch_par_from(keys, buffer_ptrs, sizes, parallelisms, config, writer_partitions, False,
                                      "batch_put_tensor_with_parallelism_from")

    def batch_upsert_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms=None, config=None,
                                                  writer_partitions=None) -> List[int]:
        return self._t_batch_par_from(keys, buffer_ptrs, sizes, parallelisms, config, writer_partitions, True,
                                      "batch_upsert_tensor_with_parallelism_from")

    def _t_read(self, key: str, target: Optional[ReadTarget], what: str):
        key = _check_key(key, what)
        if target is None:
            target = ReadTarget()
        if not isinstance(target, ReadTarget):
            raise TypeError(f"{what}: target must be a ReadTarget or None, got {type(target).__name__}")
        target._check(what)
        par = target.parallelism
        if target.mode == "as_stored":
            return self.get_tensor(key + par._suffix() if par is not None else key)
        if target.mode == "shard":
            got = self.get_tensor(key + par._suffix())
            if got is not None:
                return got
            full = self.get_tensor(key)
            if full is None:
                return None
            torch = _torch()
            if not isinstance(full, torch.Tensor):
                raise ValueError(f"{what}: {key!r} holds a {type(full).__name__} of tensors, not one tensor")
            tp = par._tp()
            if tp is None:
                return full
            sd = _check_tp(full, tp.rank, tp.size, 0 if tp.split_dim is None else tp.split_dim, what)
            return _split(full, tp.size, sd)[tp.rank].clone()
        # full
        full = self.get_tensor(key)
        if full is not None:
            return full
        template = par if par is not None else TensorParallelism([ParallelAxis("tp", 0, 1)])
        if template._tp() is None:
            return self.get_tensor(key + template._suffix())
        first_key = key + template._with_tp_rank(0)._suffix()
        data, p = self._t_get_object(first_key)
        if data is None:
            return None
        tp0 = next((a for a in (p or {}).get("axes", []) if a.get("kind") == "tp"), None)
        if tp0 is None:
            raise ValueError(f"{what}: {first_key!r} carries no TP layout; it was not written as a TP shard")
        size, sd = int(tp0["size"]), int(tp0.get("split_dim") or 0)
        keys = [key + template._with_tp_rank(r)._suffix() for r in range(size)]
        shards = [_decode_bytes(data, what)] + self.batch_get_tensor(keys[1:])
        missing = [k for k, s in zip(keys, shards) if s is None]
        if missing:
            log.error("%s: %r cannot be rebuilt: shard(s) %s are missing", what, key, missing)
            return None
        torch = _torch()
        out = torch.cat(shards, dim=sd)
        if p.get("full_shape") is not None and list(out.shape) != list(p["full_shape"]):
            raise ValueError(f"{what}: {key!r}'s shards join to {list(out.shape)}, the layout says {p['full_shape']}")
        return out

    def get_tensor_with_parallelism(self, key: str, target: Optional[ReadTarget] = None):
        """Reads per ``target`` (see ReadTarget); None when the object(s) are missing."""
        return self._t_read(key, target, "get_tensor_with_parallelism")

    def batch_get_tensor_with_parallelism(self, keys, targets=None) -> list:
        if targets is not None:
            _same_len("batch_get_tensor_with_parallelism", keys=keys, targets=targets)
        return [self._t_read(k, targets[i] if targets is not None else None, "batch_get_tensor_with_parallelism")
                for i, k in enumerate(keys)]

    def _t_read_into(self, key, buffer_ptr, size, target, what):
        key = _check_key(key, what)
        if target is None or (target.mode == "as_stored"):
            if target is not None:
                target._check(what)
            par = target.parallelism if target is not None else None
            return self._t_into(key + par._suffix() if par is not None else key, buffer_ptr, size, what)
        t = self._t_read(key, target, what)
        if t is None:
            return None
        n = serialize_tensor_into(t, int(buffer_ptr), int(size))
        return _decode_at(int(buffer_ptr), n, what)

    def get_tensor_with_parallelism_into(self, key: str, buffer_ptr: int, size: int, target=None):
        """get_tensor_with_parallelism leaving the tensor object in the caller's buffer; the
        returned tensor views it."""
        return self._t_read_into(key, buffer_ptr, size, target, "get_tensor_with_parallelism_into")

    def batch_get_tensor_with_parallelism_into(self, keys, buffer_ptrs, sizes, targets=None) -> list:
        what = "batch_get_tensor_with_parallelism_into"
        _same_len(what, keys=keys, buffer_ptrs=buffer_ptrs, sizes=sizes)
        if targets is not None:
            _same_len(what, keys=keys, targets=targets)
        return [self._t_read_into(k, p, s, targets[i] if targets is not None else None, what)
                for i, (k, p, s) in enumerate(zip(keys, buffer_ptrs, sizes))]

    # -- safetensors --
    def save_tensor_to_safetensor(self, key: str, file_name: Optional[str] = None,
                                  tensor_name: Optional[str] = None) -> int:
        """Writes key's tensor (or dict of tensors) to a safetensors file (default
        ``<key>.safetensors``); 0, or OBJECT_NOT_FOUND when the key is missing. The file appears
        whole or not at all."""
        key = _check_key(key, "save_tensor_to_safetensor")
        t = self.get_tensor(key)
        if t is None:
            return _OBJECT_NOT_FOUND
        torch = _torch()
        if isinstance(t, torch.Tensor):
            tensors = {tensor_name or key: t}
        elif isinstance(t, dict) and all(isinstance(v, torch.Tensor) for v in t.values()):
            tensors = t
        else:
            raise ValueError(f"save_tensor_to_safetensor: {key!r} holds a {type(t).__name__}; safetensors "
                             "stores one tensor or a flat dict of tensors")
        _write_safetensors(os.fspath(file_name or f"{key}.safetensors"), tensors, {"format": "pt"})
        return _OK

    def load_tensor_from_safetensor(self, key: Optional[str] = None, file_name: Optional[str] = None,
                                    tensor_name: Optional[str] = None, config=None):
        """Reads a safetensors file and stores it under ``key`` (default: the file's only tensor
        name); returns what was stored (a tensor, or a dict for several tensors), or None when the
        file is missing or the put fails. ``load_tensor_from_safetensor(path)`` works as well."""
        if file_name is None and key is not None and os.path.exists(os.fspath(key)):
            key, file_name = None, key
        if file_name is None:
            if key is None:
                raise ValueError("load_tensor_from_safetensor: give a key or a file_name")
            file_name = f"{key}.safetensors"
        try:
            tensors, _meta = _read_safetensors(os.fspath(file_name))
        except FileNotFoundError:
            log.error("load_tensor_from_safetensor: %s was not found", file_name)
            return None
        if tensor_name is not None:
            if tensor_name not in tensors:
                raise KeyError(f"load_tensor_from_safetensor: {file_name} has no tensor {tensor_name!r} "
                               f"(it has {sorted(tensors)})")
            value = tensors[tensor_name]
        elif len(tensors) == 1:
            (tensor_name, value), = tensors.items()
        elif key is not None and key in tensors:
            value = tensors[key]
        else:
            value = tensors
        if key is None:
            if not isinstance(tensor_name, str):
                raise ValueError(f"load_tensor_from_safetensor: {file_name} holds {len(tensors)} tensors; give a key")
            key = tensor_name
        rc = self.put_tensor(key, value, config)
        if rc != 0:
            log.error("load_tensor_from_safetensor: storing %r failed with %d", key, rc)
            return None
        return value
