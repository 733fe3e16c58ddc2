"""``mooncake._structured_bundle``: a bundle is one metadata payload plus named buffer payloads,
each split into chunks of at most ``chunk_bytes`` (one store key each), and a JSON manifest key
naming them all. Keys: ``<prefix>/<partition>/<hex>/{manifest,meta,buffer/<name>}`` (plus
``/chunk/<i>`` when a payload has several chunks). The manifest is written last and removed with
everything else; a failed write removes what it wrote and raises the first error."""

from __future__ import annotations

import ctypes
import json
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ._structured_config import _check_status, _cleanup_keys, batch_put_from_with_config, put_with_config
from ._structured_refs import BundleTransferPolicy, RemoteBundleRef


@dataclass(frozen=True)
class _TensorPayload:
    tensor: Any


@dataclass(frozen=True)
class _TensorObjectBufferPayload:
    """A serialized tensor object in caller memory (written with ``put_tensor_from``)."""

    ptr: int
    size: int
    owner: Any
    batch_size: Optional[int] = None

    def __len__(self) -> int:
        if self.batch_size is None:
            raise TypeError("a tensor object buffer needs batch_size to be used in a DataProto")
        return self.batch_size


@dataclass(frozen=True)
class _MultiBufferPayload:
    """One payload made of several buffers, stored back to back."""

    buffers: Tuple[memoryview, ...]
    owners: Tuple[Any, ...] = ()
    dtype: Optional[str] = None
    shape: Optional[Tuple[int, ...]] = None

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.buffers)


@dataclass(frozen=True)
class _DirectCopyPayload:
    """Arrays copied straight into pool memory when written (no joined copy first)."""

    arrays: List[np.ndarray]
    total_bytes: int
    dtype: Optional[str] = None
    shape: Optional[Tuple[int, ...]] = None

    @property
    def nbytes(self) -> int:
        return self.total_bytes

    @staticmethod
    def from_flat_arrays(arrays: List[np.ndarray], dtype: Any, total_elems: int) -> "_DirectCopyPayload":
        return _DirectCopyPayload(arrays=arrays, total_bytes=sum(a.nbytes for a in arrays),
                                  dtype=np.dtype(dtype).str, shape=(total_elems,))


@dataclass
class _RawDestinationBuffer:
    ptr: int
    size: int
    owner: Any
    pre_registered: bool = False


def tensor_object_buffer(ptr: int, size: int, owner: Any = None, batch_size: Optional[int] = None):
    """A member (or read destination) that is a serialized tensor object at ``ptr``."""
    return _TensorObjectBufferPayload(ptr=int(ptr), size=int(size), owner=owner, batch_size=batch_size)


def raw_destination(ptr: int, size: int, owner: Any = None, pre_registered: bool = False):
    """Caller memory (``size`` bytes at ``ptr``) to read a tensor member into."""
    return _RawDestinationBuffer(ptr=int(ptr), size=int(size), owner=owner, pre_registered=pre_registered)


def concat_arrays_into(arrays: Sequence[np.ndarray], ptr: int, expected: int, start: int, count: int) -> int:
    """Copy ``arrays[start:start+count]`` back to back to ``ptr``; returns the bytes copied."""
    pos = 0
    for arr in arrays[start:start + count]:
        a = np.ascontiguousarray(arr)
        if pos + a.nbytes > expected:
            break
        if a.nbytes:
            ctypes.memmove(ptr + pos, a.ctypes.data, a.nbytes)
        pos += a.nbytes
    return pos


# ---- small helpers ----------------------------------------------------------------------------

def _bytes_view(value: Any, name: str) -> memoryview:
    try:
        view = memoryview(value)
    except TypeError as err:
        raise TypeError(f"{name} must be bytes-like, got {type(value).__name__}") from err
    if not view.contiguous:
        view = memoryview(view.tobytes())
    return view.cast("B") if view.ndim != 1 or view.format != "B" else view


def _split_view(view: memoryview, size: int) -> List[memoryview]:
    return [view] if len(view) == 0 else [view[i:i + size] for i in range(0, len(view), size)]


def _split_multi_buffer_payload(buffers: Sequence[memoryview], size: int) -> List[List[memoryview]]:
    """Pack the buffers, in order, into groups of exactly ``size`` bytes (the last may be short);
    a buffer crossing a boundary is split."""
    if len(buffers) == 1:
        return [[c] for c in _split_view(buffers[0], size)]
    groups: List[List[memoryview]] = []
    cur: List[memoryview] = []
    room = size
    for buf in buffers:
        buf = _bytes_view(buf, "buffer")
        while len(buf):
            part, buf = buf[:room], buf[room:]
            cur.append(part)
            room -= len(part)
            if room == 0:
                groups.append(cur)
                cur, room = [], size
    if cur:
        groups.append(cur)
    return groups


def _validate_chunk_bytes(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"chunk_bytes must be a positive integer, got {value!r}")
    return value


def _normalize_key_prefix(prefix: Any) -> str:
    out = prefix.strip("/") if isinstance(prefix, str) else ""
    if not out or any(ord(c) < 32 for c in out):
        raise ValueError(f"key_prefix must be a non-empty key prefix, got {prefix!r}")
    return out


def _validate_key_segment(value: Any, what: str) -> None:
    if not isinstance(value, str) or not value or "/" in value or any(ord(c) < 32 for c in value):
        raise ValueError(f"invalid bundle {what}: {value!r}")


def _encode_json_dict(value: Mapping[str, Any], what: str) -> bytes:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except TypeError as err:
        raise TypeError(f"{what} must be JSON-serializable: {err}") from err
    except ValueError as err:
        raise ValueError(f"{what} must be JSON-serializable: {err}") from err


def _decode_json_dict(data: Any, what: str) -> Dict[str, Any]:
    try:
        out = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{what} is not valid JSON: {err}") from err
    if not isinstance(out, dict):
        raise ValueError(f"{what} must be a JSON object")
    return out


def _encode_manifest(manifest: Mapping[str, Any]) -> bytes:
    return _encode_json_dict(manifest, "bundle manifest")


def _decode_manifest(data: Any) -> Dict[str, Any]:
    return _decode_json_dict(data, "bundle manifest")


def _chunked_spec(key: str, keys: Sequence[str], sizes: Sequence[int]) -> Dict[str, Any]:
    return {"key": key, "bytes": int(sum(sizes)), "chunks": [{"key": k, "bytes": int(n)} for k, n in zip(keys, sizes)]}


def _chunk_keys(key: str, n: int) -> List[str]:
    return [key] if n == 1 else [f"{key}/chunk/{i}" for i in range(n)]


class _BundleManifestStore:
    def __init__(self, store: Any, transport: Any, key_prefix: str, default_chunk_bytes: int) -> None:
        self._store = store
        self._transport = transport
        self._key_prefix = key_prefix
        self._default_chunk_bytes = default_chunk_bytes

    def _policy(self, policy: Optional[BundleTransferPolicy], max_inflight_put: Optional[int] = None
                ) -> BundleTransferPolicy:
        p = policy or BundleTransferPolicy()
        if max_inflight_put is not None:
            p = BundleTransferPolicy(max_inflight_put=max_inflight_put, put_mode=p.put_mode, copy_mode=p.copy_mode)
        if not isinstance(p.max_inflight_put, int) or p.max_inflight_put < 1:
            raise ValueError(f"max_inflight_put must be a positive integer, got {p.max_inflight_put!r}")
        if p.put_mode not in ("auto", "batch", "parallel"):
            raise ValueError(f"unsupported put_mode: {p.put_mode!r}")
        if p.copy_mode not in ("auto", "zero_copy", "copy"):
            raise ValueError(f"unsupported copy_mode: {p.copy_mode!r}")
        return p

    def _new_base(self, partition: str) -> Tuple[str, str]:
        _validate_key_segment(partition, "partition")
        object_id = f"{partition}/{uuid.uuid4().hex}"
        return object_id, f"{self._key_prefix}/{object_id}"

    # ---- writes ------------------------------------------------------------------------------

    def put_bundle(self, meta: Any, buffers: Mapping[str, Any], partition: str, chunk_bytes: Optional[int],
                   policy: Optional[BundleTransferPolicy], max_inflight_put: Optional[int],
                   config: Any = None) -> RemoteBundleRef:
        meta_view = _bytes_view(meta, "meta")
        size = _validate_chunk_bytes(self._default_chunk_bytes if chunk_bytes is None else chunk_bytes)
        p = self._policy(policy, max_inflight_put)
        for name in buffers:
            _validate_key_segment(name, "buffer name")
        object_id, base = self._new_base(partition)
        written: List[str] = []
        try:
            meta_spec, keys = self._put_payload(f"{base}/meta", meta_view, size, _copy_policy(p), config)
            written += keys
            specs: Dict[str, Any] = {}
            for name, value in buffers.items():
                specs[name], keys = self._put_value(f"{base}/buffer/{name}", name, value, size, p, config)
                written += keys
            manifest = {"version": 1, "layout": "bundle", "object_id": object_id, "meta": meta_spec,
                        "buffers": specs}
            self._write_manifest(f"{base}/manifest", manifest, config)
        except Exception:
            _cleanup_keys(self._store, written, strict=False)
            raise
        return RemoteBundleRef(manifest_key=f"{base}/manifest", manifest=manifest)

    def _put_value(self, key: str, name: str, value: Any, size: int, p: BundleTransferPolicy,
                   config: Any) -> Tuple[Dict[str, Any], List[str]]:
        if isinstance(value, (_TensorPayload, _TensorObjectBufferPayload)):
            return self._put_tensor_payload(key, value, p, config)
        if isinstance(value, _MultiBufferPayload):
            return self._put_multi_buffer_payload(key, value, size, p, config)
        if isinstance(value, _DirectCopyPayload):
            return self._put_direct_copy_payload(key, value, size, p, config)
        return self._put_payload(key, _bytes_view(value, name), size, p, config)

    def _write_manifest(self, key: str, manifest: Dict[str, Any], config: Any) -> None:
        _check_status(put_with_config(self._store, key, _encode_manifest(manifest), config), "put", key)

    def put_bundle_manifest(self, meta: Any, buffers: Mapping[str, Any], *, partition: str,
                            chunk_bytes: Optional[int], policy: Optional[BundleTransferPolicy],
                            cleanup_keys: Optional[Sequence[str]] = None, config: Any = None) -> RemoteBundleRef:
        """A new manifest over payloads already stored (``buffers``: name -> payload spec) and a
        new meta payload; ``cleanup_keys`` are removed with it (older manifests and metas)."""
        meta_view = _bytes_view(meta, "meta")
        size = _validate_chunk_bytes(self._default_chunk_bytes if chunk_bytes is None else chunk_bytes)
        p = self._policy(policy)
        object_id, base = self._new_base(partition)
        written: List[str] = []
        try:
            meta_spec, keys = self._put_payload(f"{base}/meta", meta_view, size, _copy_policy(p), config)
            written += keys
            extra = list(dict.fromkeys(cleanup_keys or []))
            owners = {self._object_id_from_bundle_key(str(s["key"])) for s in buffers.values()}
            owners.update(self._object_id_from_bundle_key(k) for k in extra)
            manifest: Dict[str, Any] = {"version": 1, "layout": "bundle", "object_id": object_id, "meta": meta_spec,
                                        "buffers": dict(buffers), "buffer_object_ids": sorted(o for o in owners if o)}
            if extra:
                manifest["cleanup_keys"] = extra
            self._validate_manifest(manifest)
            self._write_manifest(f"{base}/manifest", manifest, config)
        except Exception:
            _cleanup_keys(self._store, written, strict=False)
            raise
        return RemoteBundleRef(manifest_key=f"{base}/manifest", manifest=manifest)

    def _put_payload(self, key: str, view: memoryview, size: int, p: BundleTransferPolicy,
                     config: Any = None) -> Tuple[Dict[str, Any], List[str]]:
        if len(view) == 0:
            return {"key": key, "bytes": 0, "chunks": []}, []
        chunks = _split_view(view, size)
        keys = _chunk_keys(key, len(chunks))
        self._transport.put_multi_buffer_payload_chunks(keys, [[c] for c in chunks], p, config)
        return _chunked_spec(key, keys, [len(c) for c in chunks]), keys

    def _put_multi_buffer_payload(self, key: str, value: _MultiBufferPayload, size: int, p: BundleTransferPolicy,
                                  config: Any = None) -> Tuple[Dict[str, Any], List[str]]:
        if value.nbytes == 0:
            return {"key": key, "bytes": 0, "chunks": []}, []
        if len(value.buffers) == 1:
            return self._put_payload(key, _bytes_view(value.buffers[0], "buffer"), size, p, config)
        groups = _split_multi_buffer_payload(value.buffers, size)
        keys = _chunk_keys(key, len(groups))
        self._transport.put_multi_buffer_payload_chunks(keys, groups, p, config)
        return _chunked_spec(key, keys, [sum(len(x) for x in g) for g in groups]), keys

    def _put_direct_copy_payload(self, key: str, value: _DirectCopyPayload, chunk_bytes: int,
                                 transfer_policy: BundleTransferPolicy, config: Any = None
                                 ) -> Tuple[Dict[str, Any], List[str]]:
        if transfer_policy.copy_mode == "zero_copy":
            raise RuntimeError("zero-copy put requires tensor-object buffers")
        if value.total_bytes == 0:
            return {"key": key, "bytes": 0, "chunks": []}, []
        arrays = value.arrays
        t = self._transport
        pool = t._ensure_buffer_pool()
        batches = _array_batches(arrays, chunk_bytes)
        if len(arrays) == 1 or pool is None or not callable(t._batch_put_from) or batches is None:
            joined = np.concatenate([np.ascontiguousarray(a).reshape(-1).view(np.uint8) for a in arrays])
            return self._put_payload(key, memoryview(joined).cast("B"), chunk_bytes, transfer_policy, config)
        from . import structured_object_store as facade
        copy_fn = facade._concat_arrays_into or concat_arrays_into
        keys = _chunk_keys(key, len(batches))
        try:
            for ck, (start, count, nbytes) in zip(keys, batches):
                lease = pool.acquire(nbytes)
                try:
                    copied = copy_fn(arrays, lease.ptr, nbytes, start, count)
                    if copied != nbytes:
                        raise RuntimeError(f"native fast-copy wrote {copied} bytes, expected {nbytes}")
                    results = batch_put_from_with_config(t._batch_put_from, [ck], [lease.ptr], [nbytes], config)
                    t._check_batch_results(results, [ck], "batch_put_from")
                finally:
                    lease.release()
        except Exception:
            _cleanup_keys(self._store, keys, strict=False)
            raise
        return _chunked_spec(key, keys, [b[2] for b in batches]), keys

    def _put_tensor_payload(self, key: str, value: Any, p: BundleTransferPolicy,
                            config: Any = None) -> Tuple[Dict[str, Any], List[str]]:
        from . import structured_object_store as facade
        from ._structured_tensors import tensor_object_bytes, torch_save_bytes

        if isinstance(value, _TensorObjectBufferPayload):
            self._transport.put_from(key, value.ptr, value.size, config)
            return {"key": key, "bytes": value.size, "chunks": [{"key": key, "bytes": value.size}]}, [key]
        if p.copy_mode == "zero_copy":
            raise ValueError("zero-copy structured tensor fields need a BufferPool tensor-object buffer")
        tensor = value.tensor
        if p.copy_mode != "copy":
            spec = self._transport.put_tensor_direct(key, tensor, config)
            if spec is not None:
                return spec, [key]
        if not facade._has_tensor_codec_helpers() or tensor.dim() == 0:
            data = torch_save_bytes(tensor)
            spec, keys = self._put_payload(key, memoryview(data), len(data) or 1, p, config)
            spec["format"] = "torch_save"
            return spec, keys
        data, header = tensor_object_bytes(tensor)
        spec, keys = self._put_payload(key, memoryview(data), len(data) or 1, p, config)
        spec["metadata_bytes"] = header
        return spec, keys

    # ---- manifests ---------------------------------------------------------------------------

    def remove_bundle(self, ref: Any) -> None:
        manifest = self.resolve_manifest(ref)
        keys = self._payload_keys(manifest) + list(manifest.get("cleanup_keys", []))
        keys.append(self._manifest_key(ref, manifest))
        _cleanup_keys(self._store, keys, strict=True)

    def manifest_key(self, ref: Any) -> str:
        return self._manifest_key(ref, self.resolve_manifest(ref))

    def payload_keys(self, spec: Mapping[str, Any]) -> List[str]:
        return [c["key"] for c in spec["chunks"]]

    def remove_keys(self, keys: Sequence[str], *, strict: bool) -> None:
        _cleanup_keys(self._store, keys, strict=strict)

    def resolve_manifest(self, ref: Any) -> Dict[str, Any]:
        if isinstance(ref, RemoteBundleRef):
            manifest = ref.manifest or _decode_manifest(self._store.get(ref.manifest_key))
        elif isinstance(ref, Mapping):
            manifest = ref.get("manifest")
            if manifest is None:
                key = ref.get("manifest_key")
                if not isinstance(key, str):
                    raise ValueError("a bundle ref must include manifest_key")
                manifest = _decode_manifest(self._store.get(key))
        else:
            raise TypeError(f"expected a RemoteBundleRef or a mapping, got {type(ref).__name__}")
        self._validate_manifest(manifest)
        return manifest

    def read_payload(self, spec: Mapping[str, Any]) -> bytes:
        return self._transport.read_payload(spec)

    def read_payload_range(self, spec: Mapping[str, Any], offset: int, length: int) -> bytes:
        return self._transport.read_payload_range(spec, offset, length)

    def _object_id_from_bundle_key(self, key: str) -> Optional[str]:
        head = f"{self._key_prefix}/"
        if not key.startswith(head):
            return None
        rest = key[len(head):]
        for tail in ("/manifest", "/meta"):
            if rest.endswith(tail):
                return rest[:-len(tail)]
        for marker in ("/meta/", "/buffer/"):
            i = rest.find(marker)
            if i > 0:
                return rest[:i]
        return None

    def _validate_manifest(self, manifest: Any) -> None:
        if not isinstance(manifest, Mapping) or manifest.get("version") != 1 or manifest.get("layout") != "bundle":
            raise ValueError("invalid bundle manifest")
        object_id = manifest.get("object_id")
        if not isinstance(object_id, str):
            raise ValueError("bundle manifest object_id must be a string")
        owners = manifest.get("buffer_object_ids", [object_id])
        if not isinstance(owners, list) or not all(isinstance(o, str) for o in owners):
            raise ValueError("bundle manifest buffer_object_ids must be a list of strings")
        bases = [f"{self._key_prefix}/{o}" for o in owners]
        self._validate_payload_spec(manifest.get("meta"), [f"{self._key_prefix}/{object_id}"])
        extra = manifest.get("cleanup_keys", [])
        if not isinstance(extra, list) or not all(
                isinstance(k, str) and any(k == f"{b}/manifest" or k.startswith(f"{b}/") for b in bases)
                for k in extra):
            raise ValueError("bundle manifest cleanup_keys are outside the bundle namespace")
        buffers = manifest.get("buffers")
        if not isinstance(buffers, dict):
            raise ValueError("bundle manifest buffers must be a dict")
        for name, spec in buffers.items():
            _validate_key_segment(name, "buffer name")
            self._validate_payload_spec(spec, bases)

    def _validate_payload_spec(self, spec: Any, bases: Sequence[str]) -> None:
        if not isinstance(spec, dict):
            raise ValueError("a bundle payload spec must be a dict")
        key = spec.get("key")
        if not isinstance(key, str) or not any(key.startswith(f"{b}/") for b in bases):
            raise ValueError("bundle payload key is outside the bundle namespace")
        total = int(spec.get("bytes", -1))
        chunks = spec.get("chunks")
        if total < 0:
            raise ValueError("bundle payload bytes must be non-negative")
        if not isinstance(chunks, list) or (total and not chunks):
            raise ValueError("bundle payload chunks are invalid")
        seen = set()
        for chunk in chunks:
            if not isinstance(chunk, dict):
                raise ValueError("a bundle chunk must be a dict")
            ck, n = chunk.get("key"), int(chunk.get("bytes", -1))
            if not isinstance(ck, str) or (ck != key and not ck.startswith(f"{key}/")):
                raise ValueError("bundle chunk key is outside the payload namespace")
            if ck in seen or n < 0:
                raise ValueError("bundle chunk keys must be unique and sizes non-negative")
            seen.add(ck)
        got = sum(int(c["bytes"]) for c in chunks)
        if got != total:
            raise ValueError(f"bundle payload chunks total {got} bytes, expected {total}")

    def _manifest_key(self, ref: Any, manifest: Mapping[str, Any]) -> str:
        expected = f"{self._key_prefix}/{manifest['object_id']}/manifest"
        key = ref.manifest_key if isinstance(ref, RemoteBundleRef) else ref.get("manifest_key")
        if key is None:
            return expected
        if key != expected:
            raise ValueError("bundle manifest_key does not match the manifest's object_id")
        return key

    def _payload_keys(self, manifest: Mapping[str, Any]) -> List[str]:
        specs = [manifest["meta"], *manifest["buffers"].values()]
        return [c["key"] for s in specs for c in s["chunks"]]


def _copy_policy(p: BundleTransferPolicy) -> BundleTransferPolicy:
    """The policy for the meta payload: always plain ``put`` (it is small)."""
    return p if p.copy_mode == "copy" else BundleTransferPolicy(p.max_inflight_put, p.put_mode, "copy")


def _array_batches(arrays: Sequence[np.ndarray], size: int) -> Optional[List[Tuple[int, int, int]]]:
    """Whole arrays grouped into chunks of at most ``size`` bytes ((start, count, bytes) each);
    None when one array alone is larger."""
    out: List[Tuple[int, int, int]] = []
    start, total = 0, 0
    for i, a in enumerate(arrays):
        if a.nbytes > size:
            return None
        if total and total + a.nbytes > size:
            out.append((start, i - start, total))
            start, total = i, 0
        total += a.nbytes
    if total:
        out.append((start, len(arrays) - start, total))
    return out
