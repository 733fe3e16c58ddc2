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
from dataclasses import dataclass, field  # noqa: F401  (as before)
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

# The value types and leaf codecs, and the DataProto calls, live in their own modules; every
# name stays importable from here.
from ._structured_dataproto import (DataProtoMixin, MooncakeDataProtoRef, _dataproto_parts, _rows,  # noqa: F401
                                    _take, export_dataproto_ref, import_dataproto_ref)
from ._structured_types import (_FORMAT, _JSON_SCALARS, BundleRef, BundleTransferPolicy, StructuredMemberSlice,  # noqa: F401
                                StructuredObjectPayload, StructuredObjectRef, StructuredReadResult,
                                StructuredReadSpec, _addr, _build, _decode_leaf, _encode_leaf, _flatten, _is_numpy,
                                _is_torch, _jsonable, _Leaf, _slice_shape, _wanted, raw_destination,
                                tensor_object_buffer)

__all__ = [
    "MooncakeBundleTransfer", "StructuredObjectPayload", "StructuredMemberSlice", "StructuredObjectRef",
    "StructuredReadSpec", "StructuredReadResult", "BundleTransferPolicy", "BundleRef", "tensor_object_buffer",
    "raw_destination", "MooncakeDataProtoRef", "export_dataproto_ref", "import_dataproto_ref",
]

log = logging.getLogger("mooncake.structured_object_store")

# Public names defined in the _structured_* modules keep this module as theirs (repr, pickling, help()), as
# before they moved.
for _name in [n for n in globals() if not n.startswith("_")]:
    if getattr(globals()[_name], "__module__", "").startswith("mooncake._structured_"):
        globals()[_name].__module__ = __name__
del _name


# ---- the facade -------------------------------------------------------------------------------

class MooncakeBundleTransfer(DataProtoMixin):
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


def m_key(ref, transfer: MooncakeBundleTransfer) -> str:
    if isinstance(ref, BundleRef):
        return ref.manifest_key
    return ref if ref.endswith("/manifest") else transfer._keys(ref)[1]
