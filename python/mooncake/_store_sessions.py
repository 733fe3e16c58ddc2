"""``mooncake._store_sessions``: transfer sessions (``SessionMixin``) — upstream's
``batch_get_session_start`` / ``batch_get_into_multi_buffer_ranges`` / ``batch_get_session_end``
and ``batch_put_session_start`` / ``batch_put_from_multi_buffer_ranges`` /
``batch_put_session_end`` / ``batch_put_session_revoke``.

A session asks the master once per object; the ranged transfers of a session (a layer at a
time, say) then go straight to the replicas. A get session holds the replica list and read lease
of its keys and serves reads until that lease ends (then LEASE_EXPIRED, and the session is
closed: start a new one); a put session reserves an object of the given full size, which ranged
writes fill and ``batch_put_session_end`` makes readable (``_revoke`` drops it). Ranges are
(local address, size, offset in the object) triples; local memory may be registered with
``register_buffer`` (moved directly) or not (through a mapping or the staging buffer).
store/client/sessions.go has the rules; docs/store.md the differences from upstream.
"""

from __future__ import annotations

import array
import logging
from typing import List, Optional, Sequence

from ._store_abi import ErrorCode, _cfg, _keys, _lib
from ._store_types import ReplicateConfig

log = logging.getLogger("mooncake.store")


def _codes(n: int) -> array.array:
    return array.array("i", bytes(4 * n))


def _addr(a: array.array) -> Optional[int]:
    return a.buffer_info()[0] if len(a) else None


class SessionMixin:
    """The transfer-session calls of MooncakeDistributedStore."""

    def batch_get_session_start(self, keys: Sequence[str]) -> List[int]:
        """Queries the replicas of ``keys`` once and opens a get session per key (replacing one
        the key had); per key 0 or a negative code (OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY while
        it is written, INVALID_REPLICA when it has no memory copy)."""
        return self._per_key_codes(
            keys, lambda karr, n, codes: _lib().mc_store_get_session_start(self._h, karr, n, codes))

    def batch_get_session_end(self, keys: Sequence[str]) -> int:
        """Closes the get sessions of ``keys`` (keys without one are ignored); 0."""
        keys = list(keys)
        if not keys or not self._h:
            return 0
        karr, enc = _keys(keys)
        return _lib().mc_store_get_session_end(self._h, karr, len(keys))

    def batch_get_into_multi_buffer_ranges(self, keys: Sequence[str], all_buffer_ptrs: Sequence[Sequence[int]],
                                           all_sizes: Sequence[Sequence[int]],
                                           all_src_offsets: Sequence[Sequence[int]]) -> List[int]:
        """Reads, per key, ``all_sizes[i][j]`` bytes from offset ``all_src_offsets[i][j]`` of
        the object into ``all_buffer_ptrs[i][j]``, through the key's get session (no master
        call). Per key the bytes read, or a negative code (no session or a range past the
        object: INVALID_PARAMS; the session's lease ended: LEASE_EXPIRED)."""
        return self._session_ranges("batch_get_into_multi_buffer_ranges", 0, keys, all_buffer_ptrs, all_sizes,
                                    all_src_offsets)

    def batch_put_session_start(self, keys: Sequence[str], sizes: Sequence[int],
                                config: Optional[ReplicateConfig] = None) -> List[int]:
        """Reserves an object of ``sizes[i]`` bytes (its full size) for each key, with
        ``config``'s placement, and opens a put session for it; per key 0 or a negative code
        (a key with a put session open: INVALID_PARAMS; a key that exists:
        OBJECT_ALREADY_EXISTS; a size of 0: INVALID_PARAMS). Until
        ``batch_put_session_end`` the object is being written (gets see REPLICA_IS_NOT_READY)."""
        keys, sizes = list(keys), list(sizes)
        n = len(keys)
        if len(sizes) != n:
            log.error("batch_put_session_start: %d keys and %d sizes", n, len(sizes))
            return [ErrorCode.INVALID_PARAMS] * n
        if n == 0:
            return []
        if config is not None and not config._groups_ok(n):
            log.error("batch_put_session_start: ReplicateConfig.group_ids has %d entries for %d keys",
                      len(config.group_ids), n)
            return [ErrorCode.INVALID_PARAMS] * n
        if not self._h:
            return [ErrorCode.INVALID_PARAMS] * n
        try:
            sz = array.array("Q", sizes)
        except (OverflowError, TypeError) as e:
            log.error("batch_put_session_start: sizes must be integers in [0, 2**64): %s", e)
            return [ErrorCode.INVALID_PARAMS] * n
        karr, enc = _keys(keys)
        codes = _codes(n)
        _lib().mc_store_put_session_start(self._h, karr, n, _addr(sz), _cfg(config), _addr(codes))
        return codes.tolist()

    def batch_put_from_multi_buffer_ranges(self, keys: Sequence[str], all_buffer_ptrs: Sequence[Sequence[int]],
                                           all_sizes: Sequence[Sequence[int]],
                                           all_dst_offsets: Sequence[Sequence[int]]) -> List[int]:
        """Writes, per key, ``all_sizes[i][j]`` bytes from ``all_buffer_ptrs[i][j]`` at offset
        ``all_dst_offsets[i][j]`` of the object, to every replica of the key's put session (no
        master call). Per key the bytes written, or a negative code (no open session or a range
        past the object: INVALID_PARAMS)."""
        return self._session_ranges("batch_put_from_multi_buffer_ranges", 1, keys, all_buffer_ptrs, all_sizes,
                                    all_dst_offsets)

    def batch_put_session_end(self, keys: Sequence[str]) -> List[int]:
        """Makes the objects of the keys' put sessions readable and closes the sessions (after
        the writes in flight); per key 0 or a negative code (no session: INVALID_PARAMS)."""
        return self._put_session_finish(keys, 0)

    def batch_put_session_revoke(self, keys: Sequence[str]) -> List[int]:
        """Drops the objects of the keys' put sessions (their reserved space is freed) and
        closes the sessions; per key 0 or a negative code (no session: INVALID_PARAMS)."""
        return self._put_session_finish(keys, 1)

    # ---- helpers ----
    def _put_session_finish(self, keys: Sequence[str], revoke: int) -> List[int]:
        return self._per_key_codes(
            keys, lambda karr, n, codes: _lib().mc_store_put_session_finish(self._h, karr, n, revoke, codes))

    def _per_key_codes(self, keys: Sequence[str], call) -> List[int]:
        """Runs call(key array, n, codes address) over keys; a code per key ([] for no keys,
        INVALID_PARAMS for each when the store is not set up)."""
        keys = list(keys)
        if not keys:
            return []
        if not self._h:
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        karr, enc = _keys(keys)  # enc keeps the encoded keys alive during the call
        codes = _codes(len(keys))
        call(karr, len(keys), _addr(codes))
        return codes.tolist()

    def _session_ranges(self, what: str, write: int, keys, all_buffer_ptrs, all_sizes, all_offsets) -> List[int]:
        keys = list(keys)
        n = len(keys)
        if len(all_buffer_ptrs) != n or len(all_sizes) != n or len(all_offsets) != n:
            log.error("%s: %d keys, %d buffer lists, %d size lists, %d offset lists", what, n, len(all_buffer_ptrs),
                      len(all_sizes), len(all_offsets))
            return [ErrorCode.INVALID_PARAMS] * n
        if n == 0:
            return []
        if not self._h:
            return [ErrorCode.INVALID_PARAMS] * n
        results = [0] * n
        send = []  # the keys whose lists are well formed
        counts, addrs, sizes, offs = array.array("q"), array.array("Q"), array.array("Q"), array.array("Q")
        for i, (ptrs, szs, ofs) in enumerate(zip(all_buffer_ptrs, all_sizes, all_offsets)):
            if not (len(ptrs) == len(szs) == len(ofs)):
                log.error("%s: key %r has %d buffers, %d sizes and %d offsets", what, keys[i], len(ptrs), len(szs),
                          len(ofs))
                results[i] = ErrorCode.INVALID_PARAMS
                continue
            try:
                a, s, o = array.array("Q", ptrs), array.array("Q", szs), array.array("Q", ofs)
            except (OverflowError, TypeError) as e:
                log.error("%s: key %r: addresses, sizes and offsets must be integers in [0, 2**64): %s", what,
                          keys[i], e)
                results[i] = ErrorCode.INVALID_PARAMS
                continue
            send.append(i)
            counts.append(len(a))
            addrs.extend(a)
            sizes.extend(s)
            offs.extend(o)
        if not send:
            return results
        karr, enc = _keys([keys[i] for i in send])
        res = array.array("q", bytes(8 * len(send)))
        _lib().mc_store_session_ranges(self._h, write, len(send), karr, _addr(counts), _addr(offs), _addr(addrs),
                                       _addr(sizes), _addr(res))
        for i, r in zip(send, res):
            results[i] = r
        return results
