"""``mooncake._store_data``: the store's value calls (``DataMixin``) — put, upsert (insert or
replace), get (into new bytes, library memory or caller buffers), multi-buffer transfers,
queries (``is_exist``, ``get_size``) and removal."""

from __future__ import annotations

import logging
from typing import List, Optional, Sequence

from ._store_abi import (ErrorCode, _batch_alloc_c, _buffer, _cfg, _get_alloc_c, _get_slot, _i32, _i64, _key, _keys,
                         _lib, _u64, _vp, byref)
from ._store_memory import BufferHandle
from ._store_types import ReplicateConfig

log = logging.getLogger("mooncake.store")


class DataMixin:
    """Put, upsert, get, query and remove calls of ``MooncakeDistributedStore``."""

    def _refuse(self, what: str, config: Optional[ReplicateConfig] = None, n: int = 1) -> int:
        """The code a copying call returns without running (0: go ahead)."""
        if self._no_buffer and self._h:
            log.error("%s: this store was set up with local_buffer_size=0, so it has no local buffer to copy "
                      "through; use the zero-copy calls (put_from, get_into) or set a local_buffer_size", what)
            return ErrorCode.INVALID_PARAMS
        if config is not None and not config._groups_ok(n):
            log.error("%s: ReplicateConfig.group_ids has %d entries for %d object(s)", what, len(config.group_ids), n)
            return ErrorCode.INVALID_PARAMS
        return 0

    # ---- put ----
    def put(self, key: str, value, config: Optional[ReplicateConfig] = None) -> int:
        rc = self._refuse("put", config)
        if rc:
            return rc
        addr, n, keep = _buffer(value)
        return _lib().mc_store_put(self._h, _key(key), addr, n, _cfg(config))

    def put_parts(self, key: str, *parts, config: Optional[ReplicateConfig] = None) -> int:
        return self._put_parts(key, [_buffer(p) for p in parts], config)

    def _put_parts(self, key, bufs, config, upsert: bool = False) -> int:
        rc = self._refuse("upsert_parts" if upsert else "put_parts", config)
        if rc:
            return rc
        n = len(bufs)
        ptrs = (_vp * max(n, 1))(*[b[0] for b in bufs])
        lens = (_u64 * max(n, 1))(*[b[1] for b in bufs])
        l = _lib()
        fn = l.mc_store_upsert_parts if upsert else l.mc_store_put_parts
        return fn(self._h, _key(key), ptrs, lens, n, _cfg(config))

    def put_batch(self, keys: Sequence[str], values: Sequence, config: Optional[ReplicateConfig] = None) -> int:
        """Puts values[i] under keys[i]; 0 when every put succeeded, else the first failure's code."""
        res = self._batch_put(keys, values, config)
        if isinstance(res, int):
            return res
        return next((r for r in res if r != 0), 0)

    def _batch_put(self, keys, values, config, upsert: bool = False):
        if len(keys) != len(values):
            what = "upsert_batch" if upsert else "put_batch"
            raise ValueError(f"{what}: {len(keys)} keys but {len(values)} values")
        rc = self._refuse("upsert_batch" if upsert else "put_batch", config, len(keys))
        if rc:
            return rc
        n = len(keys)
        karr, keep_k = _keys(keys)
        bufs = [_buffer(v) for v in values]
        ptrs = (_vp * max(n, 1))(*[b[0] for b in bufs])
        lens = (_u64 * max(n, 1))(*[b[1] for b in bufs])
        out = (_i32 * max(n, 1))()
        l = _lib()
        fn = l.mc_store_batch_upsert if upsert else l.mc_store_batch_put
        rc = fn(self._h, karr, ptrs, lens, n, _cfg(config), out)
        if rc != 0:
            return rc
        return list(out[:n])

    def put_from(self, key: str, buffer_ptr: int, size: int, config: Optional[ReplicateConfig] = None) -> int:
        """Stores ``size`` bytes at ``buffer_ptr`` (zero-copy when registered with register_buffer)."""
        if config is not None and not config._groups_ok(1):
            return self._refuse("put_from", config)
        return _lib().mc_store_put_from(self._h, _key(key), int(buffer_ptr), int(size), _cfg(config))

    def batch_put_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int],
                       config: Optional[ReplicateConfig] = None) -> List[int]:
        return self._batch_put_from(keys, buffer_ptrs, sizes, config, False)

    def _batch_put_from(self, keys, buffer_ptrs, sizes, config, upsert: bool) -> List[int]:
        n = len(keys)
        if len(buffer_ptrs) != n or len(sizes) != n:
            log.error("%s: %d keys, %d buffers, %d sizes", "batch_upsert_from" if upsert else "batch_put_from",
                      n, len(buffer_ptrs), len(sizes))
            return [ErrorCode.INVALID_PARAMS] * n
        if config is not None and not config._groups_ok(n):
            return [self._refuse("batch_put_from", config, n)] * n
        karr, keep = _keys(keys)
        out = (_i32 * max(n, 1))()
        l = _lib()
        fn = l.mc_store_batch_upsert_from if upsert else l.mc_store_batch_put_from
        rc = fn(self._h, karr, (_u64 * max(n, 1))(*map(int, buffer_ptrs)),
                (_u64 * max(n, 1))(*map(int, sizes)), n, _cfg(config), out)
        if rc != 0:
            return [rc] * n
        return list(out[:n])

    # ---- upsert: insert or replace ----
    # The master keeps the old value readable while the new one is written and swaps them when
    # it is complete: a reader gets the whole old value or the whole new one, never a mix, and a
    # failed upsert leaves the old value in place.
    def upsert(self, key: str, value, config: Optional[ReplicateConfig] = None) -> int:
        """Stores value under key, replacing the key's value when it exists. 0 or a negative code."""
        rc = self._refuse("upsert", config)
        if rc:
            return rc
        addr, n, keep = _buffer(value)
        return _lib().mc_store_upsert(self._h, _key(key), addr, n, _cfg(config))

    def upsert_parts(self, key: str, *parts, config: Optional[ReplicateConfig] = None) -> int:
        """upsert of the concatenation of parts (bytes-like objects)."""
        return self._put_parts(key, [_buffer(p) for p in parts], config, upsert=True)

    def upsert_from(self, key: str, buffer_ptr: int, size: int, config: Optional[ReplicateConfig] = None) -> int:
        """upsert of ``size`` bytes at ``buffer_ptr`` (zero-copy when registered)."""
        if config is not None and not config._groups_ok(1):
            return self._refuse("upsert_from", config)
        return _lib().mc_store_upsert_from(self._h, _key(key), int(buffer_ptr), int(size), _cfg(config))

    def upsert_batch(self, keys: Sequence[str], values: Sequence, config: Optional[ReplicateConfig] = None) -> int:
        """upsert of values[i] under keys[i]; 0 when every one succeeded, else the first failure's code."""
        res = self._batch_put(keys, values, config, upsert=True)
        if isinstance(res, int):
            return res
        return next((r for r in res if r != 0), 0)

    def batch_upsert_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int],
                          config: Optional[ReplicateConfig] = None) -> List[int]:
        """upsert_from for many keys; one code per key."""
        return self._batch_put_from(keys, buffer_ptrs, sizes, config, True)

    # ---- get ----
    def get(self, key: str) -> bytes:
        """The value of key, or b"" when it is missing or cannot be read."""
        if self._refuse("get"):
            return b""
        n = _u64()
        slot = _get_slot
        slot.value = None
        rc = _lib().mc_store_get_with(self._h, _key(key), _get_alloc_c, None, byref(n))
        b, slot.value = slot.value, None
        if rc != 0 or b is None or n.value != len(b):
            return b""
        return b

    def get_batch(self, keys: Sequence[str]) -> List[bytes]:
        n = len(keys)
        if n == 0:
            return []
        if self._refuse("get_batch"):
            return [b""] * n
        karr, keep = _keys(keys)
        lens = (_u64 * n)()
        res = (_i32 * n)()
        vals: List[bytes] = [b""] * n
        slot = _get_slot
        slot.batch = vals
        try:
            rc = _lib().mc_store_batch_get_with(self._h, karr, n, _batch_alloc_c, None, lens, res)
        finally:
            slot.batch = None
        if rc != 0:
            return [b""] * n
        for i in range(n):
            if res[i] != 0 or len(vals[i]) != lens[i]:
                vals[i] = b""  # failed after its bytes were made: they hold no value
        return vals

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Reads key into the buffer; bytes read or a negative code."""
        return _lib().mc_store_get_into(self._h, _key(key), int(buffer_ptr), int(size))

    def batch_get_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> List[int]:
        n = len(keys)
        if len(buffer_ptrs) != n or len(sizes) != n:
            return [ErrorCode.INVALID_PARAMS] * n
        if n == 0:
            return []
        karr, keep = _keys(keys)
        out = (_i64 * n)()
        rc = _lib().mc_store_batch_get_into(self._h, karr, (_u64 * n)(*map(int, buffer_ptrs)),
                                            (_u64 * n)(*map(int, sizes)), n, out)
        if rc != 0:
            return [rc] * n
        return list(out)

    # ---- zero-copy buffers over library memory ----
    def get_buffer(self, key: str) -> Optional["BufferHandle"]:
        """The value of key as a BufferHandle (``ptr()``, ``size()``, the buffer protocol) over
        memory the library allocated for it: no copy into Python objects; freed when the handle
        (and every view of it) is gone. None when the key is missing or unreadable."""
        if self._refuse("get_buffer"):
            return None
        out = _vp()
        n = _u64()
        rc = _lib().mc_store_get(self._h, _key(key), byref(out), byref(n))
        if rc != 0 or not out.value:
            return None
        return BufferHandle._wrap(out.value, n.value)

    def batch_get_buffer(self, keys: Sequence[str]) -> List[Optional["BufferHandle"]]:
        """get_buffer for several keys; None for each key missing."""
        n = len(keys)
        if n == 0:
            return []
        if self._refuse("batch_get_buffer"):
            return [None] * n
        karr, keep = _keys(keys)
        outs = (_vp * n)()
        lens = (_u64 * n)()
        res = (_i32 * n)()
        l = _lib()
        if l.mc_store_batch_get(self._h, karr, n, outs, lens, res) != 0:
            return [None] * n
        handles: List[Optional[BufferHandle]] = []
        for i in range(n):
            if res[i] == 0 and outs[i]:
                handles.append(BufferHandle._wrap(outs[i], lens[i]))
            else:
                if outs[i]:
                    l.mc_store_free(outs[i])
                handles.append(None)
        return handles

    # ---- multi-buffer transfers ----
    def batch_put_from_multi_buffers(self, keys: Sequence[str], all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     config: Optional[ReplicateConfig] = None) -> List[int]:
        """Stores, for each key, the concatenation of its buffers (zero-copy where registered);
        one code per key."""
        n = len(keys)
        if len(all_buffer_ptrs) != n or len(all_sizes) != n:
            log.error("batch_put_from_multi_buffers: %d keys, %d buffer lists, %d size lists", n,
                      len(all_buffer_ptrs), len(all_sizes))
            return [ErrorCode.INVALID_PARAMS] * n
        if n == 0:
            return []
        if config is not None and not config._groups_ok(n):
            return [self._refuse("batch_put_from_multi_buffers", config, n)] * n
        counts = []
        addrs: List[int] = []
        sizes: List[int] = []
        bad = set()
        for i in range(n):
            if len(all_buffer_ptrs[i]) != len(all_sizes[i]):
                bad.add(i)
                counts.append(0)
                continue
            counts.append(len(all_sizes[i]))
            addrs.extend(map(int, all_buffer_ptrs[i]))
            sizes.extend(map(int, all_sizes[i]))
        karr, keep = _keys(keys)
        t = max(len(addrs), 1)
        out = (_i32 * n)()
        rc = _lib().mc_store_batch_put_from_buffers(self._h, karr, n, (_i32 * n)(*counts), (_u64 * t)(*addrs),
                                                    (_u64 * t)(*sizes), _cfg(config), out)
        if rc != 0:
            return [rc] * n
        return [ErrorCode.INVALID_PARAMS if i in bad else out[i] for i in range(n)]

    def batch_get_into_multi_buffers(self, keys: Sequence[str], all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     prefer_alloc_in_same_node: bool = False) -> List[int]:
        """Reads each key's value into its buffers in order; per key the bytes read or a
        negative code (BUFFER_OVERFLOW when the buffers are too small).
        ``prefer_alloc_in_same_node`` is accepted (upstream uses it to batch transfers from one
        segment; every transfer here already goes to the nearest replica)."""
        n = len(keys)
        if len(all_buffer_ptrs) != n or len(all_sizes) != n:
            log.error("batch_get_into_multi_buffers: %d keys, %d buffer lists, %d size lists", n,
                      len(all_buffer_ptrs), len(all_sizes))
            return [ErrorCode.INVALID_PARAMS] * n
        l = _lib()
        out = []
        for key, ptrs, sizes in zip(keys, all_buffer_ptrs, all_sizes):
            m = len(ptrs)
            if len(sizes) != m:
                out.append(ErrorCode.INVALID_PARAMS)
                continue
            t = max(m, 1)
            out.append(l.mc_store_get_into_buffers(self._h, _key(key), m, (_u64 * t)(*map(int, ptrs)),
                                                   (_u64 * t)(*map(int, sizes))))
        return out

    def put_from_with_metadata(self, key: str, buffer_ptr: int, metadata_buffer_ptr: int, size: int,
                               metadata_size: int, config: Optional[ReplicateConfig] = None) -> int:
        """Stores ``metadata_size`` bytes at ``metadata_buffer_ptr`` followed by ``size`` bytes at
        ``buffer_ptr`` as one value (upstream's order: metadata first). As upstream's: a zero
        ``size`` stores nothing and returns 0; ``prefer_alloc_in_same_node`` is refused."""
        if config is not None and config.prefer_alloc_in_same_node:
            log.error("put_from_with_metadata: prefer_alloc_in_same_node is not supported (as upstream's)")
            return ErrorCode.INVALID_PARAMS
        if size == 0:
            log.warning("put_from_with_metadata: empty data for key %r; nothing stored", key)
            return 0
        if config is not None and not config._groups_ok(1):
            return self._refuse("put_from_with_metadata", config)
        bufs = [(int(metadata_buffer_ptr), int(metadata_size), None), (int(buffer_ptr), int(size), None)]
        bufs = [b for b in bufs if b[1] > 0]
        if any(b[0] == 0 for b in bufs):
            log.error("put_from_with_metadata: a NULL buffer")
            return ErrorCode.INVALID_PARAMS
        n = len(bufs)
        return _lib().mc_store_put_parts(self._h, _key(key), (_vp * n)(*[b[0] for b in bufs]),
                                         (_u64 * n)(*[b[1] for b in bufs]), n, _cfg(config))

    # ---- queries and removal ----
    def is_exist(self, key: str) -> int:
        return _lib().mc_store_is_exist(self._h, _key(key))

    def batch_is_exist(self, keys: Sequence[str]) -> List[int]:
        n = len(keys)
        if n == 0:
            return []
        karr, keep = _keys(keys)
        out = (_i32 * n)()
        rc = _lib().mc_store_batch_is_exist(self._h, karr, n, out)
        return [rc] * n if rc != 0 else list(out)

    def get_size(self, key: str) -> int:
        return _lib().mc_store_get_size(self._h, _key(key))

    def remove(self, key: str, force: bool = False) -> int:
        return _lib().mc_store_remove(self._h, _key(key), int(bool(force)))

    def batch_remove(self, keys: Sequence[str], force: bool = False) -> List[int]:
        n = len(keys)
        if n == 0:
            return []
        karr, keep = _keys(keys)
        out = (_i32 * n)()
        rc = _lib().mc_store_batch_remove(self._h, karr, n, int(bool(force)), out)
        return [rc] * n if rc != 0 else list(out)

    def remove_by_regex(self, regex_pattern: Optional[str] = None, force: bool = False, *,
                        pattern: Optional[str] = None) -> int:
        """Removes keys matching the (RE2) pattern (``regex_pattern``, upstream's name; ``pattern``
        also taken); returns how many, or a negative code. Leased and hard-pinned keys stay
        unless ``force``."""
        if (regex_pattern is None) == (pattern is None):
            raise TypeError("remove_by_regex: give the pattern once (regex_pattern=, or pattern=)")
        p = regex_pattern if pattern is None else pattern
        return _lib().mc_store_remove_by_regex(self._h, p.encode(), int(bool(force)))

    def remove_all(self, force: Optional[bool] = None) -> int:
        """Removes every key of this store's tenant; returns how many. ``force=False`` leaves the
        keys a plain remove would refuse (leased to a reader, hard-pinned), as upstream's
        ``remove_all(force=False)``; ``force=True`` or no argument (upstream's older
        ``remove_all()``) removes them too. Puts in progress are left alone."""
        return _lib().mc_store_remove_all_ex(self._h, int(force is False))
