"""``mooncake._structured_transport``: moving a bundle's payload bytes in and out of the store.

A payload is a list of chunks (``{"key", "bytes"}``), each one store key. Writes go through a
``BufferPool`` lease and ``batch_put_from`` when a pool is there (one lease per chunk, released
right after its put), through ``put`` otherwise. Reads prefer the zero-copy calls
(``batch_get_into``, ``get_into``, ``get_into_ranges`` into memory registered with
``register_buffer``) and fall back to ``get``. Every store call works with any object that has
the methods used (the store, or a test double); a missing method is a slower path, not an error.
"""

from __future__ import annotations

import ctypes
import weakref
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ._structured_config import (DUPLICATE_REGISTRATION, _check_status, _cleanup_keys, _config_for_grouped_keys,
                                 batch_put_from_with_config, call_write, log, put_with_config)
from ._structured_refs import AUTO_PARALLEL_MIN_BYTES, AUTO_PARALLEL_MIN_CHUNKS, BundleTransferPolicy

Fragment = Tuple[str, int, int, int, int]  # key, chunk bytes, destination offset, offset in chunk, size


def _close_pool(pool: Any) -> None:
    try:
        pool.close()
    except Exception as err:  # leases still held by results, or the store is closed already
        log.info("structured object store: BufferPool not closed: %s", err)


class _PoolLeaseOwner:
    """Holds one pool lease for the arrays built over it; releases it once."""

    def __init__(self, lease: Any) -> None:
        self.lease = lease
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.lease.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:
            pass


class _PoolBackedNdarray(np.ndarray):
    """An ndarray over a pool lease; ``release_result`` (or garbage collection of the owner)
    gives the lease back. Views share the owner, so keep the array alive while they are used."""

    def __new__(cls, owner: _PoolLeaseOwner, dtype: np.dtype, shape: Tuple[int, ...]) -> "_PoolBackedNdarray":
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        raw = (ctypes.c_uint8 * (count * dtype.itemsize)).from_address(owner.lease.ptr)
        arr = np.frombuffer(raw, dtype=np.uint8).view(dtype).reshape(shape).view(cls)
        arr._mooncake_pool_owner = owner
        return arr

    def __array_finalize__(self, obj: Any) -> None:
        if obj is not None:
            self._mooncake_pool_owner = getattr(obj, "_mooncake_pool_owner", None)


def buffer_ptr(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return int(value.ctypes.data)
    return ctypes.addressof(ctypes.c_char.from_buffer(value))


def buffer_nbytes(value: Any) -> int:
    return int(value.nbytes) if isinstance(value, np.ndarray) else len(value)


def group_nbytes(group: Sequence[Any]) -> int:
    return sum(len(part) if not isinstance(part, memoryview) else part.nbytes for part in group)


def copy_parts(parts: Sequence[Any], ptr: int) -> int:
    """Copy the byte buffers ``parts`` one after another to address ``ptr``; returns the bytes."""
    pos = 0
    for part in parts:
        src = np.frombuffer(part, dtype=np.uint8) if not isinstance(part, np.ndarray) else part.reshape(-1).view(np.uint8)
        if src.size:
            ctypes.memmove(ptr + pos, src.ctypes.data, src.size)
        pos += src.size
    return pos


def range_fragments(chunks: Sequence[Mapping[str, Any]], offset: int, length: int,
                    dst_offset: int = 0) -> List[Fragment]:
    """The pieces of chunks that bytes ``[offset, offset+length)`` of the payload cover."""
    out: List[Fragment] = []
    if length <= 0:
        return out
    start = 0
    end = offset + length
    for chunk in chunks:
        size = int(chunk["bytes"])
        lo, hi = max(offset, start), min(end, start + size)
        if lo < hi:
            out.append((chunk["key"], size, dst_offset + lo - offset, lo - start, hi - lo))
        start += size
        if start >= end:
            break
    if start < end:
        raise ValueError(f"payload range [{offset}, {end}) is out of range ({start} bytes)")
    return out


class _MooncakePayloadTransport:
    def __init__(self, store: Any, buffer_pool: Any = None) -> None:
        self._store = store
        self._buffer_pool = buffer_pool
        for name in ("batch_put_from", "put_tensor_from", "batch_get_into", "get_into", "get_into_ranges",
                     "register_buffer", "unregister_buffer"):
            setattr(self, "_" + name, getattr(store, name, None))

    # ---- the pool ----------------------------------------------------------------------------

    def _ensure_buffer_pool(self) -> Any:
        """The pool given, or one made over our own MooncakeDistributedStore (None otherwise).
        A pool made here is closed (its memory unregistered) when this transport is collected,
        if no result still holds one of its leases."""
        if self._buffer_pool is None:
            try:
                from .store import MooncakeDistributedStore
                if isinstance(self._store, MooncakeDistributedStore):
                    from .buffer_pool import BufferPool
                    self._buffer_pool = BufferPool(self._store)
                    weakref.finalize(self, _close_pool, self._buffer_pool)
            except Exception as err:
                log.warning("structured object store: no BufferPool over the store (%s); using plain puts", err)
                return None
        return self._buffer_pool

    def _has_buffer_registration_support(self) -> bool:
        return callable(self._register_buffer) and callable(self._unregister_buffer)

    # ---- writes ------------------------------------------------------------------------------

    def _resolve_buffer_group_put_mode(self, groups: Sequence[Sequence[Any]],
                                       policy: BundleTransferPolicy) -> str:
        if policy.put_mode in ("batch", "parallel"):
            return policy.put_mode
        workers = min(policy.max_inflight_put, len(groups))
        if (workers < 2 or len(groups) < AUTO_PARALLEL_MIN_CHUNKS
                or sum(group_nbytes(g) for g in groups) < AUTO_PARALLEL_MIN_BYTES):
            return "batch"
        return "parallel"

    def put_multi_buffer_payload_chunks(self, keys: Sequence[str], groups: Sequence[Sequence[memoryview]],
                                        policy: BundleTransferPolicy, config: Any = None) -> List[str]:
        """Write chunk ``i`` (the concatenation of ``groups[i]``) under ``keys[i]``; on failure
        the chunks written are removed and the error raised."""
        if policy.copy_mode == "zero_copy":
            raise RuntimeError("zero-copy put requires tensor-object buffers")
        if policy.copy_mode == "copy" or self._ensure_buffer_pool() is None or not callable(self._batch_put_from):
            return self._put_chunks_direct(keys, [b"".join(bytes(p) for p in g) if len(g) != 1 else g[0]
                                                  for g in groups], config)
        if all(len(g) == 1 for g in groups) or self._resolve_buffer_group_put_mode(groups, policy) == "batch":
            self.batch_put_buffer_groups_from(keys, groups, config)
            return list(keys)
        return self._put_groups_parallel(list(keys), list(groups), policy.max_inflight_put, config)

    def _put_chunks_direct(self, keys: Sequence[str], chunks: Sequence[Any], config: Any) -> List[str]:
        written: List[str] = []
        try:
            for key, chunk in zip(keys, chunks):
                _check_status(put_with_config(self._store, key, chunk, config), "put", key)
                written.append(key)
        except Exception:
            _cleanup_keys(self._store, written, strict=False)
            raise
        return list(keys)

    def batch_put_buffer_groups_from(self, keys: Sequence[str], groups: Sequence[Sequence[Any]],
                                     config: Any = None) -> None:
        """One pool lease per chunk: copy the group in, ``batch_put_from`` it, release."""
        if not callable(self._batch_put_from):
            raise RuntimeError("batch_put_from is unavailable")
        pool = self._buffer_pool
        for key, group in zip(keys, groups):
            size = group_nbytes(group)
            lease = pool.acquire(size)
            try:
                copy_parts(group, lease.ptr)
                results = batch_put_from_with_config(self._batch_put_from, [key], [lease.ptr], [size], config)
                self._check_batch_results(results, [key], "batch_put_from")
            except Exception:
                _cleanup_keys(self._store, keys, strict=False)
                raise
            finally:
                lease.release()

    @staticmethod
    def _check_batch_results(results: Sequence[Any], keys: Sequence[str], op: str) -> None:
        if len(results) != len(keys):
            raise RuntimeError(f"{op} returned {len(results)} results for {len(keys)} chunks")
        for key, rc in zip(keys, results):
            _check_status(rc, op, key)

    def _put_groups_parallel(self, keys: List[str], groups: List[Sequence[Any]], workers: int,
                             config: Any) -> List[str]:
        n = max(1, min(workers, len(groups)))
        step = (len(groups) + n - 1) // n
        parts = [(keys[i:i + step], groups[i:i + step]) for i in range(0, len(groups), step)]
        with ThreadPoolExecutor(max_workers=len(parts)) as pool:
            futures = [pool.submit(self.batch_put_buffer_groups_from, k, g, config) for k, g in parts]
            errors = []
            for f in futures:
                try:
                    f.result()
                except Exception as err:
                    errors.append(err)
        if errors:
            _cleanup_keys(self._store, keys, strict=False)
            raise errors[0]
        return keys

    def put_from(self, key: str, ptr: int, size: int, config: Any = None) -> None:
        config = _config_for_grouped_keys(config, 1)
        put_tensor_from = self._put_tensor_from
        put_from = getattr(self._store, "put_from", None)
        if config is None and callable(put_tensor_from):
            rc = put_tensor_from(key, ptr, size)
        elif callable(put_from):
            rc = call_write(put_from, key, ptr, size, config=config)
        else:
            raise RuntimeError("put_from is unavailable")
        _check_status(rc, "put_from", key)

    def put_tensor_direct(self, key: str, tensor: Any, config: Any = None) -> Optional[dict]:
        """``put_tensor`` (``pub_tensor`` with a config) of a whole tensor; None when the store has
        neither."""
        fn = getattr(self._store, "put_tensor" if config is None else "pub_tensor", None)
        if not callable(fn):
            return None
        _check_status(call_write(fn, key, tensor, config=_config_for_grouped_keys(config, 1)), "put_tensor", key)
        from ._structured_tensors import tensor_object_header_size

        header = tensor_object_header_size(tensor)
        nbytes = header + int(tensor.numel() * tensor.element_size())
        return {"key": key, "kind": "tensor", "bytes": nbytes, "dtype": str(tensor.dtype),
                "shape": list(tensor.shape), "chunks": [{"key": key, "bytes": nbytes}], "metadata_bytes": header}

    # ---- reads -------------------------------------------------------------------------------

    @contextmanager
    def _registered(self, dest: Any, label: str, pre_registered: bool = False) -> Iterator[int]:
        ptr = buffer_ptr(dest)
        size = buffer_nbytes(dest)
        if pre_registered or size == 0:
            yield ptr
            return
        rc = self._register_buffer(ptr, size)
        if rc == DUPLICATE_REGISTRATION:
            yield ptr
            return
        _check_status(rc, "register_buffer", label)
        ok = False
        try:
            yield ptr
            ok = True
        finally:
            try:
                _check_status(self._unregister_buffer(ptr), "unregister_buffer", label)
            except Exception:
                if ok:
                    raise

    def read_payload(self, spec: Mapping[str, Any]) -> bytes:
        total = int(spec["bytes"])
        if total == 0:
            return b""
        out = bytearray(total)
        self.read_payload_into(spec, out)
        return bytes(out)

    def read_payload_into(self, spec: Mapping[str, Any], dest: Any) -> None:
        chunks = spec["chunks"]
        if callable(self._batch_get_into) and self._has_buffer_registration_support():
            with self._registered(dest, "bundle payload") as base:
                keys, ptrs, sizes, pos = [], [], [], 0
                for c in chunks:
                    keys.append(c["key"])
                    ptrs.append(base + pos)
                    sizes.append(int(c["bytes"]))
                    pos += int(c["bytes"])
                got = self._batch_get_into(keys, ptrs, sizes)
                if len(got) != len(keys):
                    raise RuntimeError(f"batch_get_into returned {len(got)} results for {len(keys)} chunks")
                for key, want, n in zip(keys, sizes, got):
                    if n != want:
                        raise RuntimeError(f"batch_get_into failed for {key}: expected {want}, got {n}")
            return
        self._copy_range(chunks, dest, 0, int(spec["bytes"]))

    def _get_chunk(self, key: str, size: int) -> bytes:
        data = self._store.get(key)
        if len(data) != size:
            raise RuntimeError(f"get failed for {key}: expected {size} bytes, got {len(data)}")
        return data

    def _copy_range(self, chunks: Sequence[Mapping[str, Any]], dest: Any, offset: int, length: int,
                    dst_offset: int = 0) -> None:
        """Read bytes ``[offset, offset+length)`` with ``get`` into ``dest`` at ``dst_offset``."""
        view = dest.view(np.uint8).reshape(-1) if isinstance(dest, np.ndarray) else dest
        for key, size, d, s, n in range_fragments(chunks, offset, length, dst_offset):
            data = self._get_chunk(key, size)
            if isinstance(view, np.ndarray):
                view[d:d + n] = np.frombuffer(data, dtype=np.uint8, count=n, offset=s)
            else:
                view[d:d + n] = data[s:s + n]

    def _ranges_into_ptr(self, chunks: Sequence[Mapping[str, Any]], base: int,
                         ranges: Sequence[Tuple[int, int, int]], allow_get_into: bool = False) -> bool:
        """Read ``ranges`` ((payload offset, destination offset, length)) into registered memory
        at ``base`` in one ``get_into_ranges`` (or one ``get_into`` for a whole one-chunk payload);
        False when the store has neither."""
        if (allow_get_into and len(ranges) == 1 and len(chunks) == 1 and ranges[0][0] == 0
                and callable(self._get_into) and int(chunks[0]["bytes"]) == ranges[0][2]):
            want = ranges[0][2]
            n = self._get_into(chunks[0]["key"], base + ranges[0][1], want)
            if n != want:
                raise RuntimeError(f"get_into failed for {chunks[0]['key']}: expected {want}, got {n}")
            return True
        if not callable(self._get_into_ranges):
            return False
        frags: List[Fragment] = []
        for src, dst, n in ranges:
            frags.extend(range_fragments(chunks, src, n, dst))
        if not frags:
            return True
        keys = [f[0] for f in frags]
        sizes = [[f[4]] for f in frags]
        got = self._get_into_ranges([base], [keys], [[[f[2]] for f in frags]], [[[f[3]] for f in frags]], [sizes])
        if len(got) != 1 or len(got[0]) != len(keys):
            raise RuntimeError(f"get_into_ranges returned a result of the wrong shape for {len(keys)} chunks")
        for key, want, n in zip(keys, sizes, got[0]):
            if list(n) != want:
                raise RuntimeError(f"get_into_ranges failed for {key}: expected {want}, got {list(n)}")
        return True

    def read_ranges_into(self, spec: Mapping[str, Any], dest: Any, ranges: Sequence[Tuple[int, int, int]],
                         pre_registered: bool = False, allow_get_into: bool = False) -> None:
        """Read ``ranges`` of the payload into ``dest`` (ndarray or bytearray)."""
        ranges = [r for r in ranges if r[2] > 0]
        if not ranges:
            return
        chunks = spec["chunks"]
        if self._has_buffer_registration_support():
            with self._registered(dest, "structured payload", pre_registered) as base:
                if self._ranges_into_ptr(chunks, base, ranges, allow_get_into):
                    return
        for src, dst, n in ranges:
            self._copy_range(chunks, dest, src, n, dst)

    def read_payload_range(self, spec: Mapping[str, Any], offset: int, length: int) -> bytes:
        if length == 0:
            return b""
        out = bytearray(length)
        self.read_ranges_into(spec, out, [(offset, 0, length)])
        return bytes(out)

    def read_range_into_ptr(self, spec: Mapping[str, Any], ptr: int, dst_offset: int, offset: int,
                            length: int, pre_registered: bool = False) -> None:
        """Into caller memory at ``ptr`` (registered around the read unless ``pre_registered``)."""
        if not length:
            return
        if pre_registered and self._ranges_into_ptr(spec["chunks"], ptr, [(offset, dst_offset, length)]):
            return
        window = (ctypes.c_char * (dst_offset + length)).from_address(ptr)
        self.read_ranges_into(spec, window, [(offset, dst_offset, length)])

    def read_payload_range_into_pool_array(self, spec: Mapping[str, Any], dtype: np.dtype,
                                           shape: Tuple[int, ...], offset: int) -> Optional[np.ndarray]:
        """A pool-backed array of ``shape`` read from ``offset``; None without a pool or a
        ranged read."""
        nbytes = (int(np.prod(shape, dtype=np.int64)) if shape else 1) * dtype.itemsize
        if nbytes == 0:
            return np.empty(shape, dtype=dtype)
        pool = self._ensure_buffer_pool()
        if pool is None or not callable(self._get_into_ranges):
            return None
        try:
            lease = pool.acquire(nbytes)
        except (RuntimeError, MemoryError, ValueError):
            return None
        owner = _PoolLeaseOwner(lease)
        try:
            if not self._ranges_into_ptr(spec["chunks"], lease.ptr, [(offset, 0, nbytes)]):
                owner.release()
                return None
            return _PoolBackedNdarray(owner, np.dtype(dtype), tuple(shape))
        except Exception:
            owner.release()
            raise

    def read_tensor_payload(self, spec: Mapping[str, Any]) -> Any:
        fn = getattr(self._store, "get_tensor", None)
        if not callable(fn):
            raise RuntimeError("structured tensor payload: the store does not support get_tensor")
        return fn(spec["key"])
