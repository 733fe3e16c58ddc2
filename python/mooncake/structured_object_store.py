"""``mooncake.structured_object_store``: one logical object made of many named members.

``MooncakeBundleTransfer(store, key_prefix)`` writes a ``StructuredObjectPayload`` (``buffers``:
named members; ``metadata``: small JSON-able dict) as one store key per leaf plus a manifest key.
Members may be nested dicts / lists / tuples; every leaf is stored under its own key with its own
codec:

=================  =========================================================================
codec              leaf
=================  =========================================================================
``bytes``          bytes / bytearray / memoryview (raw)
``str``            str (UTF-8)
``json``           a subtree with no arrays, tensors or bytes (numbers, bools, None, strings,
                   lists and dicts of them): one JSON leaf
``ndarray``        numeric numpy array: C-order bytes, dtype and shape in the manifest
``object_array``   numpy object array of JSON-able values (e.g. per-row strings)
``tensor``         torch.Tensor (any dtype, CUDA staged to the CPU): raw bytes, dtype, shape
``tensor_object``  ``tensor_object_buffer``: a serialized tensor object written with put_tensor_from
=================  =========================================================================

The manifest (``<prefix>/<object_id>/manifest``) is written last and removed first, so a reader
never sees an object whose leaves are not all there; a failed write removes the leaves it wrote
and raises. Reads start from ``read_spec(ref)`` (everything), narrowed with
``select_members([...])`` (top-level names or ``a/b/0`` leaf paths) and
``slice_member(name, axis, start, end)`` (ndarray / tensor leaves), then ``materialize`` (new
objects) or ``materialize_into`` (caller-owned arrays filled in place). Axis-0 slices read only
their byte range when the store has ``get_into_ranges``.

``put_bundle`` / ``get_bundle`` / ``remove_bundle`` are the raw form (a manifest dict plus named
byte payloads). ``put_dataproto`` / ``get_dataproto`` / ``append_dataproto_fields`` /
``cleanup_dataproto`` store DataProto-like objects (``batch``, ``non_tensor_batch``,
``meta_info``) as one structured object per stage, with row selection; ``export_dataproto_ref`` /
``import_dataproto_ref`` turn the handle into JSON-safe data and back.

Neither torch nor numpy is imported unless a member needs it.
"""

from __future__ import annotations

import ctypes
import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

__all__ = [
    "MooncakeBundleTransfer", "StructuredObjectPayload", "StructuredMemberSlice", "StructuredObjectRef",
    "StructuredReadSpec", "StructuredReadResult", "BundleTransferPolicy", "BundleRef", "tensor_object_buffer",
    "raw_destination", "MooncakeDataProtoRef", "export_dataproto_ref", "import_dataproto_ref",
]

log = logging.getLogger("mooncake.structured_object_store")

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


# ---- the facade -------------------------------------------------------------------------------

class MooncakeBundleTransfer:
    """Structured objects, bundles and DataProto-like objects over a MooncakeDistributedStore."""

    def __init__(self, store, key_prefix: str = "mooncake/structured", policy: Optional[BundleTransferPolicy] = None):
        if not hasattr(store, "put") or not hasattr(store, "get"):
            raise TypeError(f"MooncakeBundleTransfer: store must be a MooncakeDistributedStore, got {type(store).__name__}")
        if not isinstance(key_prefix, str) or not key_prefix:
            raise ValueError("MooncakeBundleTransfer: key_prefix must be a non-empty str")
        self.store = store
        self.key_prefix = key_prefix.rstrip("/")
        self.policy = policy or BundleTransferPolicy()

    # ---- writing ----
    def _keys(self, object_id: str) -> Tuple[str, str]:
        base = f"{self.key_prefix}/{object_id}"
        return base, f"{base}/manifest"

    def _write_leaves(self, base: str, leaves: Dict[str, _Leaf], policy: BundleTransferPolicy) -> Dict[str, str]:
        """Writes every leaf; returns path -> key. On failure removes what it wrote and raises."""
        # an empty leaf (b"", a 0-element array) has no key: the store keeps no empty values
        keys = {p: (f"{base}/{i}" if lf.entry["nbytes"] else None) for i, (p, lf) in enumerate(leaves.items())}
        if policy.copy_mode == "zero_copy":
            bad = [p for p, lf in leaves.items() if lf.tob is None]
            if bad:
                raise ValueError(f"copy_mode='zero_copy' needs every payload as a tensor_object_buffer; "
                                 f"{bad} are not")
        written: List[str] = []
        try:
            plain = []
            for p, lf in leaves.items():
                k = keys[p]
                if lf.tob is not None:
                    rc = self.store.put_tensor_from(k, lf.tob.ptr, lf.tob.size)
                    self._check(rc, f"put_tensor_from({k!r})")
                    written.append(k)
                elif k is not None:
                    plain.append((p, lf))
            if not plain:
                return keys
            if policy.copy_mode == "auto" and hasattr(self.store, "batch_put_from"):
                bufs = [(lf.data, _addr(lf.data), len(lf.data)) if lf.data is not None else (lf.keep, lf.ptr, lf.nbytes)
                        for _, lf in plain]
                pk = [keys[p] for p, _ in plain]
                codes = self.store.batch_put_from(pk, [b[1] for b in bufs], [b[2] for b in bufs])
                for k, c in zip(pk, codes):
                    if c == 0:
                        written.append(k)
                for k, c in zip(pk, codes):
                    self._check(c, f"batch_put_from({k!r})")
            else:
                for p, lf in plain:
                    k = keys[p]
                    v = lf.data if lf.data is not None else ctypes.string_at(lf.ptr, lf.nbytes)
                    self._check(self.store.put(k, v), f"put({k!r})")
                    written.append(k)
        except BaseException:
            for k in written:
                self.store.remove(k, True)
            raise
        return keys

    @staticmethod
    def _check(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"MooncakeBundleTransfer: {what} failed with error code {rc}")

    def put_structured_object(self, payload: StructuredObjectPayload, policy: Optional[BundleTransferPolicy] = None,
                              object_id: Optional[str] = None) -> StructuredObjectRef:
        """Writes the payload's members (each leaf its own key) and then its manifest."""
        if not isinstance(payload, StructuredObjectPayload):
            raise TypeError(f"put_structured_object: want a StructuredObjectPayload, got {type(payload).__name__}")
        if not isinstance(payload.buffers, dict) or not payload.buffers:
            raise ValueError("put_structured_object: payload.buffers must be a non-empty dict of members")
        if not _jsonable(payload.metadata or {}):
            raise TypeError("put_structured_object: metadata must be JSON-like (numbers, strings, lists, dicts)")
        policy = policy or self.policy
        leaves: Dict[str, _Leaf] = {}
        members = {}
        for name, value in payload.buffers.items():
            if not isinstance(name, str) or not name or "/" in name:
                raise ValueError(f"put_structured_object: member names must be non-empty str without '/', got {name!r}")
            members[name] = _flatten(name, value, leaves)
        object_id = object_id or uuid.uuid4().hex
        base, mkey = self._keys(object_id)
        keys = self._write_leaves(base, leaves, policy)
        manifest = {"format": _FORMAT, "kind": "structured", "object_id": object_id,
                    "metadata": payload.metadata or {}, "members": members,
                    "leaves": {p: dict(lf.entry, key=keys[p]) for p, lf in leaves.items()}}
        try:
            self._check(self.store.put(mkey, json.dumps(manifest).encode()), f"put({mkey!r})")
        except BaseException:
            for k in keys.values():
                self.store.remove(k, True)
            raise
        return StructuredObjectRef(mkey, manifest)

    def get_structured_ref(self, object_id_or_key: str) -> Optional[StructuredObjectRef]:
        """The ref of a stored object (by object id or manifest key); None when missing."""
        mkey = object_id_or_key if object_id_or_key.endswith("/manifest") else self._keys(object_id_or_key)[1]
        raw = self.store.get(mkey)
        if not raw:
            return None
        return StructuredObjectRef(mkey, json.loads(raw))

    def remove_structured_object(self, ref: Union[StructuredObjectRef, str]) -> int:
        """Removes the manifest (first) and the leaves; returns how many keys were removed."""
        if isinstance(ref, str):
            ref = self.get_structured_ref(ref)
            if ref is None:
                return 0
        n = 0
        if self.store.remove(ref.manifest_key, True) == 0:
            n += 1
        for leaf in ref.manifest["leaves"].values():
            if leaf["key"] is not None and self.store.remove(leaf["key"], True) == 0:
                n += 1
        return n

    # ---- reading ----
    def read_spec(self, ref: Union[StructuredObjectRef, str]) -> StructuredReadSpec:
        """A spec that reads the whole object; narrow it with select_members / slice_member."""
        if isinstance(ref, str):
            got = self.get_structured_ref(ref)
            if got is None:
                raise KeyError(f"read_spec: no structured object {ref!r}")
            ref = got
        return StructuredReadSpec(ref)

    def _fetch(self, spec: StructuredReadSpec, paths: List[str]) -> Dict[str, bytes]:
        """The bytes of each leaf (only the sliced range for axis-0 slices when ranges work)."""
        leaves = spec._leaves()
        out: Dict[str, bytes] = {}
        whole = []
        for p in paths:
            e = leaves[p]
            sl = spec.slices.get(p)
            if e["codec"] == "tensor_object":
                continue
            if e["key"] is None:
                out[p] = b""
                continue
            if sl is not None and sl.axis == 0 and hasattr(self.store, "get_into_ranges"):
                shape, start, stop = _slice_shape(e["shape"], sl)
                row = e["nbytes"] // e["shape"][0] if e["shape"][0] else 0
                n = (stop - start) * row
                if n == 0:
                    out[p] = b""
                    continue
                buf = ctypes.create_string_buffer(n)
                try:
                    res = self.store.get_into_ranges([ctypes.addressof(buf)], [[e["key"]]], [[[0]]],
                                                     [[[start * row]]], [[[n]]])
                except Exception as exc:  # a store that cannot serve ranges here: read it whole
                    log.debug("get_into_ranges(%r) failed (%s); reading the whole leaf", e["key"], exc)
                    res = None
                if res and res[0] and res[0][0] and res[0][0][0] == n:
                    out[p] = buf.raw
                    continue
            whole.append(p)
        if whole:
            vals = self.store.get_batch([leaves[p]["key"] for p in whole])
            for p, v in zip(whole, vals):
                if not v and leaves[p]["nbytes"]:
                    raise KeyError(f"materialize: leaf {p!r} ({leaves[p]['key']!r}) is missing from the store")
                out[p] = v
        return out

    def _value(self, spec: StructuredReadSpec, p: str, data: Optional[bytes], dest=None):
        e = spec._leaves()[p]
        sl = spec.slices.get(p)
        if e["codec"] == "tensor_object":
            if isinstance(dest, tensor_object_buffer):
                t = self.store.get_tensor_into(e["key"], dest.ptr, dest.size)
            else:
                t = self.store.get_tensor(e["key"])
            if t is None:
                raise KeyError(f"materialize: leaf {p!r} ({e['key']!r}) is missing from the store")
            return t
        if sl is not None and e["codec"] in ("ndarray", "tensor"):
            shape, start, stop = _slice_shape(e["shape"], sl)
            if sl.axis == 0 and len(data) == (stop - start) * (e["nbytes"] // e["shape"][0] if e["shape"][0] else 0) \
                    and len(data) != e["nbytes"]:
                return _decode_leaf(dict(e, shape=shape, nbytes=len(data)), data, None, p)
            full = _decode_leaf(e, data, None, p)
            idx = [slice(None)] * len(e["shape"])
            idx[sl.axis] = slice(start, stop)
            v = full[tuple(idx)]
            return v.copy() if e["codec"] == "ndarray" else v.clone()
        return _decode_leaf(e, data, None, p)

    def materialize(self, spec: StructuredReadSpec) -> StructuredReadResult:
        """New objects for the spec's members (nested as written), and the object's metadata."""
        paths = spec.selected_leaves()
        data = self._fetch(spec, paths)
        values = {p: self._value(spec, p, data.get(p)) for p in paths}
        keep = set(paths) if spec.members is not None else None
        objects = {}
        for name, node in spec.ref.manifest["members"].items():
            if _wanted(node, keep):
                objects[name] = _build(node, values, keep)
        return StructuredReadResult(objects, dict(spec.ref.manifest.get("metadata", {})))

    def materialize_into(self, spec: StructuredReadSpec, destinations: Dict[str, Any]) -> StructuredReadResult:
        """Like materialize, filling caller-owned arrays/tensors (by leaf path) in place; those
        entries of the result are the destination objects themselves."""
        paths = spec.selected_leaves()
        leaves = spec._leaves()
        for name in destinations:
            if name not in paths:
                raise KeyError(f"materialize_into: {name!r} is not a selected leaf (selected: {paths})")
        data = self._fetch(spec, [p for p in paths if not isinstance(destinations.get(p), tensor_object_buffer)])
        values = {}
        for p in paths:
            dest = destinations.get(p)
            if dest is None or isinstance(dest, tensor_object_buffer):
                values[p] = self._value(spec, p, data.get(p), dest)
                continue
            v = self._value(spec, p, data[p])
            if isinstance(dest, raw_destination):
                if leaves[p]["codec"] not in ("bytes", "str"):
                    raise TypeError(f"materialize_into: raw_destination is for bytes members; {p!r} is {leaves[p]['codec']}")
                b = v.encode() if isinstance(v, str) else v
                if len(b) > dest.size:
                    raise ValueError(f"materialize_into: {p!r} has {len(b)} bytes, the destination {dest.size}")
                ctypes.memmove(dest.ptr, b, len(b))
                dest.nbytes = len(b)
                values[p] = dest
                continue
            if leaves[p]["codec"] not in ("ndarray", "tensor"):
                raise TypeError(f"materialize_into: {p!r} is a {leaves[p]['codec']} member; destinations are for "
                                "ndarray and tensor members (use materialize)")
            if list(dest.shape) != list(v.shape) or str(dest.dtype) != str(v.dtype):
                raise ValueError(f"materialize_into: {p!r} reads as {v.dtype}{list(v.shape)}, the destination "
                                 f"is {dest.dtype}{list(dest.shape)}")
            dest[...] = v
            values[p] = dest
        keep = set(paths) if spec.members is not None else None
        objects = {name: _build(node, values, keep) for name, node in spec.ref.manifest["members"].items()
                   if _wanted(node, keep)}
        return StructuredReadResult(objects, dict(spec.ref.manifest.get("metadata", {})))

    # ---- raw bundles ----
    def put_bundle(self, payloads: Dict[str, Union[bytes, bytearray, memoryview]],
                   manifest: Optional[Dict[str, Any]] = None, bundle_id: Optional[str] = None,
                   policy: Optional[BundleTransferPolicy] = None) -> BundleRef:
        """Writes named byte payloads and a JSON-like manifest; all or nothing."""
        if not isinstance(payloads, dict):
            raise TypeError("put_bundle: payloads must be a dict of name -> bytes")
        for k, v in payloads.items():
            if not isinstance(k, str) or not k or "/" in k:
                raise ValueError(f"put_bundle: payload names must be non-empty str without '/', got {k!r}")
            if not isinstance(v, (bytes, bytearray, memoryview)):
                raise TypeError(f"put_bundle: payload {k!r} is a {type(v).__name__}, want bytes")
        if not _jsonable(manifest or {}):
            raise TypeError("put_bundle: manifest must be JSON-like")
        policy = policy or self.policy
        if policy.copy_mode == "zero_copy":
            raise ValueError("put_bundle: copy_mode='zero_copy' is for tensor_object_buffer members; bundles carry bytes")
        bundle_id = bundle_id or uuid.uuid4().hex
        base, mkey = self._keys(bundle_id)
        leaves = {k: _Leaf({"codec": "bytes", "nbytes": len(bytes(v))}, bytes(v)) for k, v in payloads.items()}
        keys = self._write_leaves(base, leaves, policy)
        m = {"format": _FORMAT, "kind": "bundle", "object_id": bundle_id, "manifest": manifest or {},
             "payloads": {k: {"key": keys[k], "nbytes": leaves[k].entry["nbytes"]} for k in payloads}}
        try:
            self._check(self.store.put(mkey, json.dumps(m).encode()), f"put({mkey!r})")
        except BaseException:
            for k in keys.values():
                self.store.remove(k, True)
            raise
        return BundleRef(mkey, m)

    def get_bundle(self, ref: Union[BundleRef, str], names: Optional[Sequence[str]] = None
                   ) -> Tuple[Dict[str, Any], Dict[str, bytes]]:
        """(manifest, {name: bytes}) of a bundle (all payloads, or ``names``)."""
        m = self._bundle_manifest(ref)
        want = list(m["payloads"]) if names is None else list(names)
        for n in want:
            if n not in m["payloads"]:
                raise KeyError(f"get_bundle: no payload {n!r} (payloads: {sorted(m['payloads'])})")
        stored = [n for n in want if m["payloads"][n]["key"] is not None]
        got = dict(zip(stored, self.store.get_batch([m["payloads"][n]["key"] for n in stored]) if stored else []))
        vals = [got.get(n, b"") for n in want]
        out = {}
        for n, v in zip(want, vals):
            if len(v) != m["payloads"][n]["nbytes"]:
                raise KeyError(f"get_bundle: payload {n!r} is missing from the store")
            out[n] = v
        return m["manifest"], out

    def remove_bundle(self, ref: Union[BundleRef, str]) -> int:
        """Removes the bundle's manifest and payloads; returns how many keys were removed."""
        try:
            m = self._bundle_manifest(ref)
        except KeyError:
            return 0
        n = 1 if self.store.remove(m_key(ref, self), True) == 0 else 0
        for p in m["payloads"].values():
            if p["key"] is not None and self.store.remove(p["key"], True) == 0:
                n += 1
        return n

    def _bundle_manifest(self, ref) -> dict:
        if isinstance(ref, BundleRef):
            return ref.manifest
        raw = self.store.get(m_key(ref, self))
        if not raw:
            raise KeyError(f"no bundle {ref!r}")
        return json.loads(raw)

    # ---- DataProto-like objects ----
    def put_dataproto(self, data, namespace: str = "default", partition: str = "0", stage: str = "initial",
                      policy: Optional[BundleTransferPolicy] = None) -> "MooncakeDataProtoRef":
        """Stores ``data`` (``batch`` / ``non_tensor_batch`` / ``meta_info``) as one stage."""
        batch, non_tensor, meta = _dataproto_parts(data)
        ref = MooncakeDataProtoRef(stage_refs={}, field_index={}, batch_size=None, namespace=namespace,
                                   partition=partition, meta_info=dict(meta))
        return self._add_stage(ref, batch, non_tensor, meta, stage, policy, overwrite=False)

    def append_dataproto_fields(self, ref, data, stage: str, overwrite: bool = False,
                                policy: Optional[BundleTransferPolicy] = None) -> "MooncakeDataProtoRef":
        """Stores more fields as a new stage; a field name already in ``ref`` is refused unless
        ``overwrite`` (then the old stage is removed once the new one is written)."""
        ref = self._dp_ref(ref)
        batch, non_tensor, meta = _dataproto_parts(data)
        return self._add_stage(ref, batch, non_tensor, meta, stage, policy, overwrite)

    def _add_stage(self, ref, batch, non_tensor, meta, stage, policy, overwrite):
        if not isinstance(stage, str) or not stage or "/" in stage:
            raise ValueError(f"stage must be a non-empty str without '/', got {stage!r}")
        names = list(batch) + list(non_tensor)
        dup_inside = set(batch) & set(non_tensor)
        if dup_inside:
            raise ValueError(f"field name(s) {sorted(dup_inside)} are both in batch and non_tensor_batch")
        if not names:
            raise ValueError("the DataProto has no fields")
        old_stages = set()
        for n in names:
            if n in ref.field_index:
                if not overwrite:
                    raise ValueError(f"field {n!r} is already stored (stage {ref.field_index[n][0]!r}); "
                                     "pass overwrite=True to replace its stage")
                old_stages.add(ref.field_index[n][0])
        if stage in ref.stage_refs and stage not in old_stages:
            raise ValueError(f"stage {stage!r} already exists in this ref")
        sizes = {len(v) for v in list(batch.values()) + list(non_tensor.values()) if hasattr(v, "__len__")}
        if ref.batch_size is not None:
            sizes.add(ref.batch_size)
        if len(sizes) > 1:
            raise ValueError(f"fields have different batch sizes {sorted(sizes)}")
        buffers = {}
        for n, v in batch.items():
            buffers[n] = v
        for n, v in non_tensor.items():
            buffers[n] = v
        oid = f"{ref.namespace}.{ref.partition}.{stage}.{uuid.uuid4().hex[:12]}"
        sref = self.put_structured_object(StructuredObjectPayload(buffers, {"stage": stage}), policy, object_id=oid)
        new = MooncakeDataProtoRef(dict(ref.stage_refs), dict(ref.field_index), ref.batch_size, ref.namespace,
                                   ref.partition, dict(ref.meta_info), ref.global_indexes)
        for s in old_stages:
            for f in [f for f, (st, _, _) in new.field_index.items() if st == s]:
                del new.field_index[f]
            new.stage_refs.pop(s)
        new.stage_refs[stage] = sref
        for n in batch:
            new.field_index[n] = (stage, n, "batch")
        for n in non_tensor:
            new.field_index[n] = (stage, n, "non_tensor_batch")
        new.meta_info.update(meta)
        if sizes:
            new.batch_size = sizes.pop()
        for s in old_stages:  # the new stage is written: the replaced one goes
            self.remove_structured_object(ref.stage_refs[s])
        return new

    def get_dataproto(self, ref, fields: Optional[Sequence[str]] = None, batch_fields: Optional[Sequence[str]] = None,
                      non_tensor_fields: Optional[Sequence[str]] = None, meta_info_keys: Optional[Sequence[str]] = None,
                      data_cls=None, destinations: Optional[Dict[str, Any]] = None, rows=None):
        """Selected fields (all by default) as {"batch", "non_tensor_batch", "meta_info"} (or
        ``data_cls``); ``rows`` (a slice, StructuredMemberSlice or index list) picks batch rows."""
        ref = self._dp_ref(ref)
        want: List[str] = []
        if fields is None and batch_fields is None and non_tensor_fields is None:
            want = list(ref.field_index)
        for group, section in ((fields, None), (batch_fields, "batch"), (non_tensor_fields, "non_tensor_batch")):
            for f in group or []:
                if f not in ref.field_index:
                    raise KeyError(f"get_dataproto: no field {f!r} (fields: {sorted(ref.field_index)})")
                if section is not None and ref.field_index[f][2] != section:
                    raise ValueError(f"get_dataproto: {f!r} is a {ref.field_index[f][2]} field, not {section}")
                if f not in want:
                    want.append(f)
        sel, index = _rows(rows)
        out = {"batch": {}, "non_tensor_batch": {}, "meta_info": {}}
        by_stage: Dict[str, List[str]] = {}
        for f in want:
            by_stage.setdefault(ref.field_index[f][0], []).append(f)
        for stage, fs in by_stage.items():
            spec = StructuredReadSpec(ref.stage_refs[stage]).select_members([ref.field_index[f][1] for f in fs])
            leaves = spec._leaves()
            if sel is not None:
                for f in fs:
                    m = ref.field_index[f][1]
                    if m in leaves and leaves[m]["codec"] in ("ndarray", "tensor"):
                        spec = spec.slice_member(m, 0, sel.start, sel.end)
            dests = {ref.field_index[f][1]: d for f, d in (destinations or {}).items() if f in fs}
            res = self.materialize_into(spec, dests) if dests else self.materialize(spec)
            for f in fs:
                m, section = ref.field_index[f][1], ref.field_index[f][2]
                v = res.objects[m]
                if sel is not None and not (m in leaves and leaves[m]["codec"] in ("ndarray", "tensor")):
                    v = v[sel.start:sel.end]
                if index is not None:
                    v = _take(v, index)
                out[section][f] = v
        keys = list(ref.meta_info) if meta_info_keys is None else list(meta_info_keys)
        for k in keys:
            if k not in ref.meta_info:
                raise KeyError(f"get_dataproto: no meta_info key {k!r}")
            out["meta_info"][k] = ref.meta_info[k]
        if data_cls is None:
            return out
        if hasattr(data_cls, "from_dict"):
            try:
                return data_cls.from_dict(out["batch"], out["non_tensor_batch"], meta_info=out["meta_info"])
            except TypeError:
                pass
        return data_cls(batch=out["batch"], non_tensor_batch=out["non_tensor_batch"], meta_info=out["meta_info"])

    def dataproto_manifest_view(self, ref) -> Dict[str, Any]:
        """Per field: stage, section, codec, dtype, shape (from the stage manifests)."""
        ref = self._dp_ref(ref)
        view = {}
        for f, (stage, member, section) in ref.field_index.items():
            leaves = ref.stage_refs[stage].manifest["leaves"]
            e = leaves.get(member, {})
            view[f] = {"stage": stage, "section": section, "codec": e.get("codec", "nested"),
                       "dtype": e.get("dtype"), "shape": e.get("shape")}
        return view

    def cleanup_dataproto(self, ref) -> int:
        """Removes every stage object of the ref; returns how many keys were removed."""
        ref = self._dp_ref(ref)
        return sum(self.remove_structured_object(s) for s in ref.stage_refs.values())

    def _dp_ref(self, ref) -> "MooncakeDataProtoRef":
        if isinstance(ref, MooncakeDataProtoRef):
            for s, r in ref.stage_refs.items():
                if not r.manifest:
                    got = self.get_structured_ref(r.manifest_key)
                    if got is None:
                        raise KeyError(f"stage {s!r} ({r.manifest_key!r}) is missing from the store")
                    r.manifest = got.manifest
            return ref
        if isinstance(ref, dict):
            return import_dataproto_ref(ref, self)
        raise TypeError(f"want a MooncakeDataProtoRef or an exported handle, got {type(ref).__name__}")


def m_key(ref, transfer: MooncakeBundleTransfer) -> str:
    if isinstance(ref, BundleRef):
        return ref.manifest_key
    return ref if ref.endswith("/manifest") else transfer._keys(ref)[1]


# ---- DataProto helpers ------------------------------------------------------------------------

@dataclass
class MooncakeDataProtoRef:
    """DataProto routing: stage -> structured object, field -> (stage, member, section)."""
    stage_refs: Dict[str, StructuredObjectRef]
    field_index: Dict[str, Tuple[str, str, str]]
    batch_size: Optional[int] = None
    namespace: str = "default"
    partition: str = "0"
    meta_info: Dict[str, Any] = field(default_factory=dict)
    global_indexes: Optional[List[int]] = None


def export_dataproto_ref(ref: MooncakeDataProtoRef) -> Dict[str, Any]:
    """A JSON-safe handle (manifest keys, not manifests) to pass between processes."""
    return {"format": _FORMAT, "stage_refs": {s: r.manifest_key for s, r in ref.stage_refs.items()},
            "field_index": {f: list(v) for f, v in ref.field_index.items()}, "batch_size": ref.batch_size,
            "namespace": ref.namespace, "partition": ref.partition, "meta_info": ref.meta_info,
            "global_indexes": ref.global_indexes}


def import_dataproto_ref(handle: Dict[str, Any], transfer: Optional[MooncakeBundleTransfer] = None
                         ) -> MooncakeDataProtoRef:
    """The ref of an exported handle; manifests are fetched now when ``transfer`` is given, else
    by the first MooncakeBundleTransfer call that uses the ref."""
    if not isinstance(handle, dict) or "stage_refs" not in handle:
        raise ValueError("import_dataproto_ref: not an exported DataProto handle")
    stage_refs = {}
    for s, mkey in handle["stage_refs"].items():
        if transfer is not None:
            r = transfer.get_structured_ref(mkey)
            if r is None:
                raise KeyError(f"import_dataproto_ref: stage {s!r} ({mkey!r}) is missing from the store")
            stage_refs[s] = r
        else:
            stage_refs[s] = StructuredObjectRef(mkey, {})  # fetched when a transfer call uses it
    return MooncakeDataProtoRef(stage_refs, {f: tuple(v) for f, v in handle["field_index"].items()},
                                handle.get("batch_size"), handle.get("namespace", "default"),
                                handle.get("partition", "0"), dict(handle.get("meta_info") or {}),
                                handle.get("global_indexes"))


def _dataproto_parts(data):
    if isinstance(data, dict):
        if data and set(data) <= {"batch", "non_tensor_batch", "meta_info"}:
            return dict(data.get("batch") or {}), dict(data.get("non_tensor_batch") or {}), dict(data.get("meta_info") or {})
        return dict(data), {}, {}
    if hasattr(data, "batch"):
        batch = data.batch
        if batch is not None and not isinstance(batch, dict) and hasattr(batch, "keys"):
            batch = {k: batch[k] for k in batch.keys()}
        return (dict(batch or {}), dict(getattr(data, "non_tensor_batch", None) or {}),
                dict(getattr(data, "meta_info", None) or {}))
    raise TypeError(f"want a DataProto-like object (batch / non_tensor_batch / meta_info) or a dict, "
                    f"got {type(data).__name__}")


def _rows(rows):
    """(StructuredMemberSlice for a contiguous range, or None; index list, or None)."""
    if rows is None:
        return None, None
    if isinstance(rows, slice):
        if rows.step not in (None, 1):
            return None, rows  # a strided selection: read whole, then index
        return StructuredMemberSlice(0, rows.start, rows.stop), None
    if isinstance(rows, StructuredMemberSlice):
        if rows.axis != 0:
            raise ValueError("get_dataproto: rows select along axis 0 only")
        return rows, None
    idx = list(rows)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in idx):
        raise TypeError("get_dataproto: rows must be a slice, a StructuredMemberSlice or a list of ints")
    return None, idx


def _take(v, index):
    if isinstance(index, slice):
        return v[index]
    if _is_numpy(v) or _is_torch(v):
        return v[index]
    return [v[i] for i in index]
