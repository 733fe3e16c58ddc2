"""``mooncake._store_ranged``: ranged reads — ``get_into_ranges`` and upstream's session-based
ranged reads: ``RangedReadSnapshot`` (replica lists and read leases of some keys),
``RangedReadTemplate`` (geometry without an object) and ``RangedReadPlan`` (templates appended
to objects), with the store calls that make and use them (``RangedReadMixin``)."""

from __future__ import annotations

import array
import logging
import weakref
from typing import List, Sequence

from ._store_abi import ErrorCode, _cs, _i64, _key, _keys, _lib, _lib_message, _u64, _u8, byref

log = logging.getLogger("mooncake.store")


def _u64s(values, error: str) -> array.array:
    """values as an array of uint64 (C speed); a value outside [0, 2**64) raises ValueError(error)."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"want a sequence of integers, got {type(values).__name__}")
    try:
        return array.array("Q", values)
    except OverflowError:
        raise ValueError(f"{error}: a value outside [0, 2**64)") from None


def _addr(a: array.array):
    return a.buffer_info()[0] if len(a) else None


class _Frozen:
    """Immutable handle objects of the library: made by the store, never by their constructor,
    not copyable or picklable (the handle is this process's)."""

    __slots__ = ()

    def __init__(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} objects are made by MooncakeDistributedStore.{self._MAKER}")

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self):
        raise TypeError(f"{type(self).__name__} cannot be copied or pickled: it is a handle of this process")

    @classmethod
    def _new(cls, **fields):
        obj = object.__new__(cls)
        for k, v in fields.items():
            object.__setattr__(obj, k, v)
        return obj


class RangedReadSnapshot(_Frozen):
    """A caller-owned snapshot of the replica lists (and read leases) of some keys, from
    ``MooncakeDistributedStore.prepare_get_into_ranges_snapshot``, for any number of
    ``get_into_ranges_from_snapshot`` / ``_from_template`` / ``_from_plan`` batches of the store
    that made it. A batch that starts when half the lease has passed queries the keys again.
    ``keys`` is the distinct keys, in order; ``close()`` releases it (also when collected)."""

    __slots__ = ("_h", "_store", "_keys", "__weakref__")
    _MAKER = "prepare_get_into_ranges_snapshot"

    @property
    def keys(self) -> tuple:
        return self._keys

    @property
    def closed(self) -> bool:
        return not self._h

    def close(self) -> None:
        h = self._h
        if h:
            object.__setattr__(self, "_h", 0)
            _lib().mc_store_snapshot_free(h)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if not self._h else f"{len(self._keys)} keys"
        return f"<RangedReadSnapshot {state}>"

    def _handle_for(self, store) -> int:
        if not self._h:
            raise ValueError("this RangedReadSnapshot is closed")
        if self._store() is not store:
            raise ValueError("this RangedReadSnapshot was prepared by another Store; "
                             "prepare one with this store's prepare_get_into_ranges_snapshot")
        return self._h


def _check_snapshot(snapshot) -> RangedReadSnapshot:
    if not isinstance(snapshot, RangedReadSnapshot):
        raise TypeError(f"want a RangedReadSnapshot, got {type(snapshot).__name__}")
    return snapshot


class RangedReadTemplate(_Frozen):
    """Immutable ranged-read geometry from ``prepare_get_into_ranges_template``: destination
    offsets, source offsets and sizes, with no object, address or lease, so one template serves
    any store and concurrent reads. ``range_count``: its ranges; ``total_bytes``: their sum."""

    __slots__ = ("_h", "_n", "_bytes")
    _MAKER = "prepare_get_into_ranges_template"

    @property
    def range_count(self) -> int:
        return self._n

    @property
    def total_bytes(self) -> int:
        return self._bytes

    def __del__(self):
        h = getattr(self, "_h", 0)
        if h:
            try:
                _lib().mc_store_range_template_free(h)
            except Exception:
                pass

    def __repr__(self) -> str:
        return f"RangedReadTemplate(range_count={self._n}, total_bytes={self._bytes})"


class RangedReadPlan(_Frozen):
    """A destination-run program from ``prepare_get_into_ranges_plan``: templates appended to
    objects named by (region, suffix). ``range_count``: its ranges; ``object_count``: its
    distinct objects."""

    __slots__ = ("_h", "_n", "_objects")
    _MAKER = "prepare_get_into_ranges_plan"

    @property
    def range_count(self) -> int:
        return self._n

    @property
    def object_count(self) -> int:
        return self._objects

    def __del__(self):
        h = getattr(self, "_h", 0)
        if h:
            try:
                _lib().mc_store_range_plan_free(h)
            except Exception:
                pass

    def __repr__(self) -> str:
        return f"RangedReadPlan(range_count={self._n}, object_count={self._objects})"


def _handles(objs, cls, what: str) -> array.array:
    """The library handles of a sequence of cls objects (None: 0, which the library refuses)."""
    if isinstance(objs, (str, bytes)) or not isinstance(objs, Sequence):
        raise TypeError(f"{what}: want a list of {cls.__name__}, got {type(objs).__name__}")
    out = array.array("Q", bytes(8 * len(objs)))
    for i, o in enumerate(objs):
        if o is None:
            continue
        if not isinstance(o, cls):
            raise TypeError(f"{what}[{i}]: want a {cls.__name__}, got {type(o).__name__}")
        out[i] = o._h
    return out


class RangedReadMixin:
    """Ranged-read calls of ``MooncakeDistributedStore``."""

    # ---- ranged reads, one call per key ----
    def get_into_ranges(self, buffer_ptrs: Sequence[int], all_keys: Sequence[Sequence[str]],
                        all_dst_offsets: Sequence[Sequence[Sequence[int]]],
                        all_src_offsets: Sequence[Sequence[Sequence[int]]],
                        all_sizes: Sequence[Sequence[Sequence[int]]]) -> List[List[List[int]]]:
        """Reads byte ranges of objects into registered buffers (upstream's buffer-major shape):
        for each (buffer i, key j, fragment k), ``all_sizes[i][j][k]`` bytes from offset
        ``all_src_offsets[i][j][k]`` of ``all_keys[i][j]`` land at
        ``buffer_ptrs[i] + all_dst_offsets[i][j][k]``. Returns results[i][j][k]: bytes read or a
        negative code (a shape mismatch gives INVALID_PARAMS for the entries concerned). Each
        buffer must lie in memory registered with register_buffer; bounds are checked against
        it and against the object's size. Needs a memory replica, as upstream's."""
        nb = len(buffer_ptrs)
        top_ok = len(all_keys) == nb and len(all_dst_offsets) == nb and len(all_src_offsets) == nb and len(all_sizes) == nb
        out: List[List[List[int]]] = []
        l = _lib()
        for i in range(len(all_keys)):
            row: List[List[int]] = []
            keys_i = all_keys[i]
            for j, key in enumerate(keys_i):
                try:
                    dsts, srcs, sizes = all_dst_offsets[i][j], all_src_offsets[i][j], all_sizes[i][j]
                except (IndexError, TypeError):
                    row.append([ErrorCode.INVALID_PARAMS])
                    continue
                m = len(sizes)
                if not top_ok or len(dsts) != m or len(srcs) != m:
                    log.error("get_into_ranges: buffer %d key %r: %d dst offsets, %d src offsets, %d sizes",
                              i, key, len(dsts), len(srcs), m)
                    row.append([ErrorCode.INVALID_PARAMS] * max(m, 1))
                    continue
                if m == 0:
                    row.append([])
                    continue
                base = int(buffer_ptrs[i])
                res = (_i64 * m)()
                rc = l.mc_store_get_ranges(self._h, _key(key), m, (_u64 * m)(*map(int, srcs)),
                                           (_u64 * m)(*[base + int(d) for d in dsts]), (_u64 * m)(*map(int, sizes)), res)
                row.append([rc] * m if rc != 0 else list(res))
            out.append(row)
        return out

    # ---- session-based ranged reads (upstream's RangedReadSnapshot, templates and plans) ----
    # Capabilities, as upstream's attributes: plans (and templates) are offered, and
    # allow_staging=True reads objects without a memory copy (G3 / SSD offload files) through a
    # staging buffer.
    supports_planned_range_reads = True
    supports_ranged_read_staging = True

    def prepare_get_into_ranges_snapshot(self, keys: Sequence[str]) -> RangedReadSnapshot:
        """Queries the replicas of every distinct key once (the master grants each a read lease)
        and returns a RangedReadSnapshot for ``get_into_ranges_from_snapshot``,
        ``get_into_ranges_from_template`` and ``get_into_ranges_from_plan``. Missing keys are
        allowed: reads of them fail later (a negative code, or False). While the lease holds,
        reads return the bytes the keys had when the snapshot was taken, even after an upsert;
        a batch that starts when half the lease (``--default_kv_lease_ttl``) has passed queries
        every key again first, and no read runs on a descriptor whose lease is over."""
        if isinstance(keys, (str, bytes)):
            raise TypeError("prepare_get_into_ranges_snapshot(keys): want a list of keys, not one key")
        if not self._h:
            raise RuntimeError("prepare_get_into_ranges_snapshot: the store is not set up: call setup() first")
        arr, enc = _keys(list(keys))
        out = _u64()
        rc = _lib().mc_store_snapshot_prepare(self._h, arr, len(enc), byref(out))
        if rc != 0:
            raise RuntimeError(f"prepare_get_into_ranges_snapshot: {_lib_message()}")
        distinct = tuple(dict.fromkeys(k.decode("utf-8", "surrogateescape") for k in enc))
        return RangedReadSnapshot._new(_h=out.value, _store=weakref.ref(self), _keys=distinct)

    def get_into_ranges_from_snapshot(self, snapshot: RangedReadSnapshot, buffer_ptrs: Sequence[int],
                                      all_keys: Sequence[Sequence[str]],
                                      all_dst_offsets: Sequence[Sequence[Sequence[int]]],
                                      all_src_offsets: Sequence[Sequence[Sequence[int]]],
                                      all_sizes: Sequence[Sequence[Sequence[int]]],
                                      allow_staging: bool = False) -> List[List[List[int]]]:
        """``get_into_ranges`` (same arguments after the snapshot, same result: bytes read or a
        negative code per (buffer, key, fragment)) through the snapshot's replica descriptors,
        without asking the master again while its lease holds; one library call per batch. A
        key the snapshot was not prepared with gives INVALID_PARAMS; a snapshot of another store
        raises ValueError. ``allow_staging`` (keyword, an extension: upstream's binding shows six
        arguments) reads objects without a memory copy through a staging buffer, as in
        ``get_into_ranges_from_template``."""
        h = _check_snapshot(snapshot)._handle_for(self)
        nb = len(buffer_ptrs)
        top_ok = len(all_keys) == nb and len(all_dst_offsets) == nb and len(all_src_offsets) == nb and len(all_sizes) == nb
        out: List[List[List[int]]] = []
        keys: List[bytes] = []
        counts = array.array("q")
        srcs, dsts, sizes = array.array("Q"), array.array("Q"), array.array("Q")
        places = []  # (row, position in the row) of each group sent
        for i in range(len(all_keys)):
            row: List[List[int]] = []
            for j, key in enumerate(all_keys[i]):
                try:
                    d, sr, sz = all_dst_offsets[i][j], all_src_offsets[i][j], all_sizes[i][j]
                except (IndexError, TypeError):
                    row.append([ErrorCode.INVALID_PARAMS])
                    continue
                m = len(sz)
                if not top_ok or len(d) != m or len(sr) != m:
                    log.error("get_into_ranges_from_snapshot: buffer %d key %r: %d dst offsets, %d src offsets, %d sizes",
                              i, key, len(d), len(sr), m)
                    row.append([ErrorCode.INVALID_PARAMS] * max(m, 1))
                    continue
                if m == 0:
                    row.append([])
                    continue
                try:
                    base = int(buffer_ptrs[i])
                    g_dst = array.array("Q", [base + int(x) for x in d])
                    g_src, g_size = array.array("Q", sr), array.array("Q", sz)
                    k = _key(key)
                except (OverflowError, TypeError, ValueError) as e:
                    log.error("get_into_ranges_from_snapshot: buffer %d key %r: %s", i, key, e)
                    row.append([ErrorCode.INVALID_PARAMS] * m)
                    continue
                keys.append(k)
                counts.append(m)
                dsts.extend(g_dst)
                srcs.extend(g_src)
                sizes.extend(g_size)
                places.append((len(out), len(row)))
                row.append([])
            out.append(row)
        if not keys:
            return out
        if not self._h:
            codes = [ErrorCode.INVALID_PARAMS] * len(sizes)
        else:
            res = array.array("q", bytes(8 * len(sizes)))
            karr = (_cs * len(keys))(*keys)
            rc = _lib().mc_store_snapshot_get_ranges(self._h, h, len(keys), karr, _addr(counts), _addr(srcs), _addr(dsts),
                                                     _addr(sizes), int(bool(allow_staging)), _addr(res))
            if rc == ErrorCode.INVALID_PARAMS:
                raise ValueError(_lib_message())
            codes = [rc] * len(sizes) if rc != 0 else res.tolist()
        pos = 0
        for (r, c), m in zip(places, counts):
            out[r][c] = codes[pos:pos + m]
            pos += m
        return out

    def prepare_get_into_ranges_template(self, destinations: Sequence[int], sources: Sequence[int],
                                         sizes: Sequence[int]) -> RangedReadTemplate:
        """An immutable RangedReadTemplate of ranges (``destinations[i]``, ``sources[i]``,
        ``sizes[i]``), for ``get_into_ranges_from_template`` and ``prepare_get_into_ranges_plan``.
        ValueError "Invalid ranged-read template shape" (empty, lengths differ, more than
        1,000,000 ranges) or "Ranged-read template exceeds bounds" (a size of 0, more than 2**40
        bytes in all, an offset + size past 2**64)."""
        err = "Ranged-read template exceeds bounds"
        d, s, z = _u64s(destinations, err), _u64s(sources, err), _u64s(sizes, err)
        out = _u64()
        rc = _lib().mc_store_range_template_create(_addr(d), len(d), _addr(s), len(s), _addr(z), len(z), byref(out))
        if rc != 0:
            raise ValueError(_lib_message())
        return RangedReadTemplate._new(_h=out.value, _n=len(z), _bytes=sum(z))

    def get_into_ranges_from_template(self, snapshot: RangedReadSnapshot, templates: Sequence[RangedReadTemplate],
                                      buffer_ptrs: Sequence[int], buffer_indices: Sequence[int], keys: Sequence[str],
                                      translations: Sequence[int], allow_staging: bool = False) -> List[bool]:
        """Row i reads ``templates[i]`` from object ``keys[i]`` into
        ``buffer_ptrs[buffer_indices[i]]`` with every destination moved by ``translations[i]``
        bytes (buffers registered with register_buffer), through the snapshot. One bool per row:
        True when every range read its whole size. A missing key, a destination past the
        registered buffer holding ``buffer_ptrs[buffer_indices[i]]`` (even where another
        registered buffer follows it) or a source past the object gives False (and, as they are
        known before reading, leaves the row's destination untouched); bytes outside the ranges
        are never written. ValueError "Ranged-read template batch shape differs" (lengths, more than
        100,000 rows or buffers) or "Ranged-read template batch exceeds bounds" (a None
        template, an index past the buffers, a translation overflowing 64 bits, more than
        1,000,000 ranges or 2**40 bytes in all); "another Store" for a snapshot of another
        store."""
        h = _check_snapshot(snapshot)._handle_for(self)
        err = "Ranged-read template batch exceeds bounds"
        t = _handles(templates, RangedReadTemplate, "templates")
        bufs, idx, tr = _u64s(buffer_ptrs, err), _u64s(buffer_indices, err), _u64s(translations, err)
        karr, enc = _keys(list(keys))
        ok = (_u8 * max(len(enc), 1))()
        if not self._h:
            return [False] * len(enc)
        rc = _lib().mc_store_snapshot_read_templates(self._h, h, _addr(t), len(t), _addr(bufs), len(bufs), _addr(idx), len(idx),
                                                      karr, len(enc), _addr(tr), len(tr), int(bool(allow_staging)), ok)
        if rc == ErrorCode.INVALID_PARAMS:
            raise ValueError(_lib_message())
        if rc != 0:
            return [False] * len(enc)
        return [bool(x) for x in ok[:len(enc)]]

    def prepare_get_into_ranges_plan(self, templates: Sequence[RangedReadTemplate], suffixes: Sequence[str],
                                     regions: Sequence[int]) -> RangedReadPlan:
        """A RangedReadPlan: row i appends ``templates[i]`` to the object named by
        (``regions[i]``, ``suffixes[i]``); a page read with prefix p reads object p + suffix into
        buffer ``region``. Each template's ranges must tile its destination without gaps, and a
        later row of the same object must start at or after the end of the previous one.
        ValueError "Invalid ranged-read plan shape" (empty, more than 100,000 rows, lengths
        differ), "Ranged-read plan exceeds bounds" (a None template, more than 1,000,000 ranges
        or 2**40 bytes, a region of 100,000 or more), "Plan run destination is not contiguous",
        "Plan object destinations are not ordered"."""
        t = _handles(templates, RangedReadTemplate, "templates")
        r = _u64s(regions, "Ranged-read plan exceeds bounds")
        sarr, enc = _keys(list(suffixes))
        out, ranges, objects = _u64(), _u64(), _u64()
        rc = _lib().mc_store_range_plan_create(_addr(t), len(t), sarr, len(enc), _addr(r), len(r), byref(out),
                                               byref(ranges), byref(objects))
        if rc != 0:
            raise ValueError(_lib_message())
        return RangedReadPlan._new(_h=out.value, _n=ranges.value, _objects=objects.value)

    def get_into_ranges_from_plan(self, snapshot: RangedReadSnapshot, plans: Sequence[RangedReadPlan],
                                  buffer_ptrs: Sequence[int], prefixes: Sequence[str],
                                  translations: Sequence[Sequence[int]], allow_staging: bool = False) -> List[bool]:
        """Page i runs ``plans[i]`` through the snapshot: each object (region, suffix) of the
        plan is read from key ``prefixes[i] + suffix`` into ``buffer_ptrs[region]`` moved by
        ``translations[i][region]`` (one translation per buffer). One bool per page: True when
        every range of every object read its whole size. ValueError "Ranged-read plan batch
        shape differs" (more than 100,000 plans or buffers, prefixes or translations not one per
        plan), "Ranged-read plan batch exceeds bounds" (a None plan, a translation row not one
        per buffer, more than 1,000,000 ranges, 2**40 bytes or 100,000 objects in all),
        "Ranged-read plan translation exceeds bounds" (an object region past the buffers, a
        translation overflowing 64 bits); "another Store" for a snapshot of another store."""
        h = _check_snapshot(snapshot)._handle_for(self)
        p = _handles(plans, RangedReadPlan, "plans")
        bufs = _u64s(buffer_ptrs, "Ranged-read plan batch exceeds bounds")
        parr, enc = _keys(list(prefixes))
        if isinstance(translations, (str, bytes)):
            raise TypeError("translations: want a list of lists of integers, got a string")
        counts, flat = array.array("q"), array.array("Q")
        for row in translations:
            a = _u64s(row, "Ranged-read plan translation exceeds bounds")
            counts.append(len(a))
            flat.extend(a)
        ok = (_u8 * max(len(p), 1))()
        if not self._h:
            return [False] * len(p)
        rc = _lib().mc_store_snapshot_read_plans(self._h, h, _addr(p), len(p), _addr(bufs), len(bufs), parr, len(enc),
                                                  _addr(counts), len(counts), _addr(flat), int(bool(allow_staging)), ok)
        if rc == ErrorCode.INVALID_PARAMS:
            raise ValueError(_lib_message())
        if rc != 0:
            return [False] * len(p)
        return [bool(x) for x in ok[:len(p)]]
