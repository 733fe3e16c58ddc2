"""``mooncake._structured_types``: the value types of ``mooncake.structured_object_store``
(payloads, slices, policies, refs, read specs and results, ``tensor_object_buffer``,
``raw_destination``) and the per-leaf codecs (encoding a member tree into leaves, decoding a
leaf, rebuilding the tree)."""

from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

_FORMAT = 1
_JSON_SCALARS = (int, float, bool, str, type(None))


# ---- public value types -----------------------------------------------------------------------

@dataclass
class StructuredObjectPayload:
    """An object to write: ``buffers`` (member name -> leaf or nested dict/list of leaves) and
    ``metadata`` (JSON-able, returned with every read)."""
    buffers: Dict[str, Any] = field(default_factory=dict)
    metadata: Dict[str, Any] = field(default_factory=dict)


@dataclass
class StructuredMemberSlice:
    """``[start:end]`` along ``axis`` of one ndarray/tensor member."""
    axis: int = 0
    start: Optional[int] = None
    end: Optional[int] = None


@dataclass
class BundleTransferPolicy:
    """``copy_mode``: "auto" (payloads written in one ``batch_put_from`` straight from their own
    memory — arrays and tensors without a copy; ``put`` when the store lacks it), "copy" (one
    ``put`` per payload), "zero_copy" (every payload must be a ``tensor_object_buffer``)."""
    copy_mode: str = "auto"

    def __post_init__(self):
        if self.copy_mode not in ("auto", "copy", "zero_copy"):
            raise ValueError(f"BundleTransferPolicy: copy_mode must be 'auto', 'copy' or 'zero_copy', "
                             f"got {self.copy_mode!r}")


class tensor_object_buffer:  # noqa: N801 - upstream's name
    """A caller buffer holding one serialized tensor object (``[header][tensor data]``, the
    layout of ``get_tensor_into``), ``size`` bytes at ``ptr``; ``owner`` keeps it alive. As a
    read destination, the tensor is read into it."""

    def __init__(self, ptr: int, size: int, owner: Any = None, batch_size: Optional[int] = None):
        if not isinstance(ptr, int) or ptr <= 0 or not isinstance(size, int) or size <= 0:
            raise ValueError(f"tensor_object_buffer: want a non-null ptr and a positive size, got {ptr!r}, {size!r}")
        self.ptr, self.size, self.owner, self.batch_size = ptr, size, owner, batch_size


class raw_destination:  # noqa: N801 - upstream's name
    """A caller buffer (``size`` bytes at ``ptr``) to read a bytes member into."""

    def __init__(self, ptr: int, size: int, owner: Any = None, pre_registered: bool = True):
        if not isinstance(ptr, int) or ptr <= 0 or not isinstance(size, int) or size < 0:
            raise ValueError(f"raw_destination: want a non-null ptr and a size >= 0, got {ptr!r}, {size!r}")
        self.ptr, self.size, self.owner, self.pre_registered = ptr, size, owner, pre_registered
        self.nbytes = 0


@dataclass
class StructuredObjectRef:
    """Where a structured object lives: its manifest key and (cached) manifest."""
    manifest_key: str
    manifest: Dict[str, Any]

    @property
    def object_id(self) -> str:
        return self.manifest["object_id"]


@dataclass
class StructuredReadResult:
    objects: Dict[str, Any]
    metadata: Dict[str, Any]


class StructuredReadSpec:
    """What to read of one structured object; narrowing calls return a new spec."""

    def __init__(self, ref: StructuredObjectRef, members: Optional[List[str]] = None,
                 slices: Optional[Dict[str, StructuredMemberSlice]] = None):
        self.ref, self.members = ref, members
        self.slices: Dict[str, StructuredMemberSlice] = dict(slices or {})

    def _leaves(self) -> Dict[str, dict]:
        return self.ref.manifest["leaves"]

    def select_members(self, names: Sequence[str]) -> "StructuredReadSpec":
        if isinstance(names, str):
            raise TypeError("select_members: want a list of member names, got a str")
        leaves = self._leaves()
        for n in names:
            if not any(p == n or p.startswith(n + "/") for p in leaves):
                raise KeyError(f"select_members: no member {n!r} (members: {sorted(self.ref.manifest['members'])})")
        return StructuredReadSpec(self.ref, list(names), self.slices)

    def slice_member(self, name: str, axis: int = 0, start: Optional[int] = None,
                     end: Optional[int] = None) -> "StructuredReadSpec":
        leaf = self._leaves().get(name)
        if leaf is None:
            raise KeyError(f"slice_member: no leaf {name!r}")
        if leaf["codec"] not in ("ndarray", "tensor"):
            raise ValueError(f"slice_member: {name!r} is a {leaf['codec']} member; only ndarray and tensor "
                             "members can be sliced")
        nd = len(leaf["shape"])
        if not isinstance(axis, int) or not -nd <= axis < nd:
            raise ValueError(f"slice_member: axis {axis!r} is out of range for {name!r} of shape {leaf['shape']}")
        slices = dict(self.slices)
        slices[name] = StructuredMemberSlice(axis % nd, start, end)
        return StructuredReadSpec(self.ref, self.members, slices)

    def selected_leaves(self) -> List[str]:
        leaves = self._leaves()
        if self.members is None:
            return list(leaves)
        return [p for p in leaves if any(p == n or p.startswith(n + "/") for n in self.members)]


@dataclass
class BundleRef:
    manifest_key: str
    manifest: Dict[str, Any]


# ---- helpers ----------------------------------------------------------------------------------

def _is_numpy(x) -> bool:
    return type(x).__module__ == "numpy" and hasattr(x, "dtype") and hasattr(x, "shape")


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "dtype") and hasattr(x, "data_ptr")


def _jsonable(x) -> bool:
    if isinstance(x, _JSON_SCALARS):
        return True
    if isinstance(x, (list, tuple)):
        return all(_jsonable(v) for v in x)
    if isinstance(x, dict):
        return all(isinstance(k, str) and _jsonable(v) for k, v in x.items())
    return False


def _addr(b: bytes) -> int:
    return ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value or 0


class _Leaf:
    """One leaf to write: its manifest entry and a way to get its bytes."""

    def __init__(self, entry: dict, data: Optional[bytes] = None, tob: Optional[tensor_object_buffer] = None,
                 keep=None, ptr: int = 0, nbytes: int = 0):
        self.entry, self.data, self.tob, self.keep, self.ptr, self.nbytes = entry, data, tob, keep, ptr, nbytes


def _encode_leaf(path: str, x) -> _Leaf:
    if isinstance(x, tensor_object_buffer):
        from .store_tensor import _decode_at
        t = _decode_at(x.ptr, x.size, f"member {path!r}")
        return _Leaf({"codec": "tensor_object", "nbytes": x.size, "dtype": str(t.dtype).replace("torch.", ""),
                      "shape": list(t.shape), "batch_size": x.batch_size}, tob=x)
    if isinstance(x, (bytes, bytearray, memoryview)):
        b = bytes(x)
        return _Leaf({"codec": "bytes", "nbytes": len(b)}, b)
    if isinstance(x, str):
        b = x.encode("utf-8")
        return _Leaf({"codec": "str", "nbytes": len(b)}, b)
    if _is_torch(x):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        n = t.numel() * t.element_size()
        return _Leaf({"codec": "tensor", "nbytes": n, "dtype": str(t.dtype).replace("torch.", ""),
                      "shape": list(t.shape)}, keep=t, ptr=t.data_ptr() if n else 0, nbytes=n)
    if _is_numpy(x):
        import numpy as np
        a = np.asarray(x)
        if a.dtype.kind in "biufc":
            a = np.ascontiguousarray(a)
            return _Leaf({"codec": "ndarray", "nbytes": a.nbytes, "dtype": a.dtype.str, "shape": list(a.shape)},
                         keep=a, ptr=a.ctypes.data if a.nbytes else 0, nbytes=a.nbytes)
        if a.dtype.kind == "O" or a.dtype.kind in "US":
            items = [v.item() if _is_numpy(v) and getattr(v, "shape", None) == () else v for v in a.ravel().tolist()]
            if not _jsonable(items):
                raise TypeError(f"member {path!r}: an object array whose values are not JSON-like "
                                "(numbers, strings, None, lists, dicts) has no codec")
            b = json.dumps(items).encode()
            return _Leaf({"codec": "object_array", "nbytes": len(b), "shape": list(a.shape),
                          "dtype": a.dtype.str}, b)
        raise TypeError(f"member {path!r}: numpy dtype {a.dtype} has no codec")
    if _jsonable(x):
        b = json.dumps(x).encode()
        return _Leaf({"codec": "json", "nbytes": len(b)}, b)
    raise TypeError(f"member {path!r}: {type(x).__name__} has no codec (want bytes, str, numpy arrays, "
                    "torch tensors, tensor_object_buffer, JSON-like values, or dicts/lists of them)")


def _flatten(path: str, x, leaves: Dict[str, _Leaf]):
    """Structure node for x, filling leaves (path -> _Leaf)."""
    if isinstance(x, dict) and not _jsonable(x):
        for k in x:
            if not isinstance(k, str) or not k or "/" in k:
                raise ValueError(f"member {path!r}: dict keys must be non-empty str without '/', got {k!r}")
        return {"d": [[k, _flatten(f"{path}/{k}", v, leaves)] for k, v in x.items()]}
    if isinstance(x, (list, tuple)) and not _jsonable(x):
        return {"l" if isinstance(x, list) else "u": [_flatten(f"{path}/{i}", v, leaves) for i, v in enumerate(x)]}
    leaves[path] = _encode_leaf(path, x)
    return {"x": path}


def _decode_leaf(entry: dict, data: bytes, sl: Optional[StructuredMemberSlice], path: str):
    codec = entry["codec"]
    if len(data) != entry["nbytes"] and sl is None:
        raise ValueError(f"member {path!r}: stored {len(data)} bytes, the manifest says {entry['nbytes']}")
    if codec == "bytes":
        return data
    if codec == "str":
        return data.decode("utf-8")
    if codec == "json":
        return json.loads(data)
    if codec == "object_array":
        import numpy as np
        flat = json.loads(data)
        if entry["dtype"] != "|O":
            return np.array(flat, dtype=np.dtype(entry["dtype"])).reshape(entry["shape"])
        out = np.empty(len(flat), dtype=object)
        for i, v in enumerate(flat):
            out[i] = v
        return out.reshape(entry["shape"])
    if codec == "ndarray":
        import numpy as np
        a = np.frombuffer(data, dtype=np.dtype(entry["dtype"])).reshape(entry["shape"]).copy()
        return a
    if codec == "tensor":
        import torch
        dtype = getattr(torch, entry["dtype"])
        t = torch.empty(entry["shape"], dtype=dtype)
        if len(data):
            ctypes.memmove(t.data_ptr(), data, len(data))
        return t
    raise ValueError(f"member {path!r}: unknown codec {codec!r}")


def _build(node, values: Dict[str, Any], keep: Optional[set]):
    if "x" in node:
        return values[node["x"]]
    if "d" in node:
        out = {}
        for k, v in node["d"]:
            if _wanted(v, keep):
                out[k] = _build(v, values, keep)
        return out
    items = [_build(v, values, keep) for v in node["l" if "l" in node else "u"] if _wanted(v, keep)]
    return items if "l" in node else tuple(items)


def _wanted(node, keep: Optional[set]) -> bool:
    if keep is None:
        return True
    if "x" in node:
        return node["x"] in keep
    kids = node.get("d")
    kids = [v for _, v in kids] if kids is not None else node.get("l", node.get("u", []))
    return any(_wanted(v, keep) for v in kids)


def _slice_shape(shape, sl: StructuredMemberSlice) -> Tuple[list, int, int]:
    start, stop, _ = slice(sl.start, sl.end).indices(shape[sl.axis])
    stop = max(stop, start)
    out = list(shape)
    out[sl.axis] = stop - start
    return out, start, stop
