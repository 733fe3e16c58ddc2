"""``mooncake._store_data``: the store's value calls (``DataMixin``) — put, upsert (insert or
replace), get (into new bytes, library memory or caller buffers), multi-buffer transfers,
queries (``is_exist``, ``get_size``) and removal."""

from __future__ import annotations

import logging
from typing import List, Optional, Sequence

from . import _store_abi as _abi
from ._store_abi import ErrorCode, _buffer, _lib
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
    # Every put and upsert is one item list through _abi.put (mc_store_put); a value is its
    # buffers as (address, length) pairs.
    def _put_one(self, what: str, key: str, bufs, config: Optional[ReplicateConfig], upsert: bool) -> int:
        rc = self._refuse(what, config)
        return rc or _abi.put(self._h, [key], [bufs], config, upsert)[0]

    def put(self, key: str, value, config: Optional[ReplicateConfig] = None) -> int:
        return self._put_one("put", key, [_buffer(value)], config, False)

    def put_parts(self, key: str, *parts, config: Optional[ReplicateConfig] = None) -> int:
        return self._put_one("put_parts", key, [_buffer(p) for p in parts], config, False)

    def put_batch(self, keys: Sequence[str], values: Sequence, config: Optional[ReplicateConfig] = None) -> int:
        """Puts values[i] under keys[i]; 0 when every put succeeded, else the first failure's code."""
        res = self._batch_put(keys, values, config)
        if isinstance(res, int):
            return res
        return next((r for r in res if r != 0), 0)

    def _batch_put(self, keys, values, config, upsert: bool = False):
        what = "upsert_batch" if upsert else "put_batch"
        if len(keys) != len(values):
            raise ValueError(f"{what}: {len(keys)} keys but {len(values)} values")
        rc = self._refuse(what, config, len(keys))
        if rc:
            return rc
        return _abi.put(self._h, keys, [[_buffer(v)] for v in values], config, upsert)

    def put_from(self, key: str, buffer_ptr: int, size: int, config: Optional[ReplicateConfig] = None) -> int:
        """Stores ``size`` bytes at ``buffer_ptr`` (zero-copy when registered with register_buffer)."""
        if config is not None and not config._groups_ok(1):
            return self._refuse("put_from", config)
        return _abi.put(self._h, [key], [[(buffer_ptr, size)]], config)[0]

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
        return _abi.put(self._h, keys, [[b] for b in zip(buffer_ptrs, sizes)], config, upsert)

    # ---- upsert: insert or replace ----
    # The master keeps the old value readable while the new one is written and swaps them when
    # it is complete: a reader gets the whole old value or the whole new one, never a mix, and a
    # failed upsert leaves the old value in place.
    def upsert(self, key: str, value, config: Optional[ReplicateConfig] = None) -> int:
        """Stores value under key, replacing the key's value when it exists. 0 or a negative code."""
        return self._put_one("upsert", key, [_buffer(value)], config, True)

    def upsert_parts(self, key: str, *parts, config: Optional[ReplicateConfig] = None) -> int:
        """upsert of the concatenation of parts (bytes-like objects)."""
        return self._put_one("upsert_parts", key, [_buffer(p) for p in parts], config, True)

    def upsert_from(self, key: str, buffer_ptr: int, size: int, config: Optional[ReplicateConfig] = None) -> int:
        """upsert of ``size`` bytes at ``buffer_ptr`` (zero-copy when registered)."""
        if config is not None and not config._groups_ok(1):
            return self._refuse("upsert_from", config)
        return _abi.put(self._h, [key], [[(buffer_ptr, size)]], config, True)[0]

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
    # Every get is one item list through _abi.get (mc_store_get): into new bytes, library memory
    # or the caller's buffers.
    def get(self, key: str) -> bytes:
        """The value of key, or b"" when it is missing or cannot be read."""
        if self._refuse("get"):
            return b""
        return _abi.get(self._h, [key], memory=_abi.BYTES)[0][0] or b""

    def get_batch(self, keys: Sequence[str]) -> List[bytes]:
        n = len(keys)
        if n == 0:
            return []
        if self._refuse("get_batch"):
            return [b""] * n
        return [v or b"" for v in _abi.get(self._h, keys, memory=_abi.BYTES)[0]]

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        """Reads key into the buffer; bytes read or a negative code."""
        return _sizes_or_codes(*_abi.get(self._h, [key], [[(buffer_ptr, size)]]))[0]

    def batch_get_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> List[int]:
        n = len(keys)
        if len(buffer_ptrs) != n or len(sizes) != n:
            return [ErrorCode.INVALID_PARAMS] * n
        return _sizes_or_codes(*_abi.get(self._h, keys, [[b] for b in zip(buffer_ptrs, sizes)]))

    # ---- zero-copy buffers over library memory ----
    def get_buffer(self, key: str) -> Optional["BufferHandle"]:
        """The value of key as a BufferHandle (``ptr()``, ``size()``, the buffer protocol) over
        memory the library allocated for it: no copy into Python objects; freed when the handle
        (and every view of it) is gone. None when the key is missing or unreadable."""
        if self._refuse("get_buffer"):
            return None
        return self.batch_get_buffer([key])[0]

    def batch_get_buffer(self, keys: Sequence[str]) -> List[Optional["BufferHandle"]]:
        """get_buffer for several keys; None for each key missing."""
        n = len(keys)
        if n == 0:
            return []
        if self._refuse("batch_get_buffer"):
            return [None] * n
        return [BufferHandle._wrap(*m) if m else None for m in _abi.get(self._h, keys, memory=_abi.MALLOC)[0]]

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
        return _multi(keys, all_buffer_ptrs, all_sizes, lambda ks, ps: _abi.put(self._h, ks, ps, config))

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
        return _multi(keys, all_buffer_ptrs, all_sizes,
                      lambda ks, ps: _sizes_or_codes(*_abi.get(self._h, ks, ps)))

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
        bufs = [(int(metadata_buffer_ptr), int(metadata_size)), (int(buffer_ptr), int(size))]
        bufs = [b for b in bufs if b[1] > 0]
        if any(b[0] == 0 for b in bufs):
            log.error("put_from_with_metadata: a NULL buffer")
            return ErrorCode.INVALID_PARAMS
        return _abi.put(self._h, [key], [bufs], config)[0]

    # ---- queries and removal ----
    # is_exist, batch_is_exist and get_size are one call (_abi.is_exist: sizes, 0 for a missing
    # key); remove and batch_remove another (_abi.remove).
    def is_exist(self, key: str) -> int:
        return self.batch_is_exist([key])[0]

    def batch_is_exist(self, keys: Sequence[str]) -> List[int]:
        return [r if r < 0 else int(r > 0) for r in _abi.is_exist(self._h, keys)]

    def get_size(self, key: str) -> int:
        r = _abi.is_exist(self._h, [key])[0]
        return r if r != 0 else ErrorCode.OBJECT_NOT_FOUND

    def remove(self, key: str, force: bool = False) -> int:
        return _abi.remove(self._h, [key], force)[0]

    def batch_remove(self, keys: Sequence[str], force: bool = False) -> List[int]:
        return _abi.remove(self._h, keys, force)

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
        return _abi.remove_all(self._h, force is False)


def _sizes_or_codes(sizes, codes) -> List[int]:
    """Per item of a get into buffers: the bytes read, or its negative code."""
    return [c or z for z, c in zip(sizes, codes)]


def _multi(keys, all_buffer_ptrs, all_sizes, call) -> List[int]:
    """call(keys, parts) on the keys whose buffer and size lists match (their buffers as
    (address, length) pairs); INVALID_PARAMS for the others."""
    good = [i for i in range(len(keys)) if len(all_buffer_ptrs[i]) == len(all_sizes[i])]
    out = [ErrorCode.INVALID_PARAMS] * len(keys)
    res = call([keys[i] for i in good], [list(zip(all_buffer_ptrs[i], all_sizes[i])) for i in good])
    for i, r in zip(good, res):
        out[i] = r
    return out
