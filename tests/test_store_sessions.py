"""Transfer sessions of mooncake.store (upstream's batch_get_session_* / batch_put_session_* and
the *_multi_buffer_ranges transfers), against a real mooncake_master and, where a test needs
another participant, a second client process."""

from __future__ import annotations

import ctypes
import subprocess
import time

import pytest

from test_store import new_store, run_peer, start_master  # noqa: E402,F401  (start_master: a fixture)
from store_fixtures import master, store  # noqa: E402,F401  (fixtures)
from mooncake.store import ErrorCode, ReplicateConfig  # noqa: E402

A = ctypes.addressof
REPLICA_IS_NOT_READY = -703
INVALID_REPLICA = -702


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(n))


def buffer(data: bytes):
    b = (ctypes.c_char * len(data))()
    b[:] = data
    return b


def test_layerwise_put_then_get_sessions(master, store):
    page, layers, keys = 4096, 4, ["ses/a", "ses/b", "ses/c"]
    size = page * layers
    src = buffer(b"".join(pattern(size, i) for i in range(len(keys))))
    dst = (ctypes.c_char * len(src))()
    assert store.register_buffer(A(src), len(src)) == 0
    assert store.register_buffer(A(dst), len(dst)) == 0

    assert store.batch_put_session_start(keys, [size] * len(keys)) == [0, 0, 0]
    # reserved, not readable until the end
    assert store.get("ses/a") == b"" and store.is_exist("ses/a") == 0
    assert store.batch_get_session_start(["ses/a"]) == [REPLICA_IS_NOT_READY]
    for layer in reversed(range(layers)):  # any order
        ptrs = [[A(src) + i * size + layer * page] for i in range(len(keys))]
        rcs = store.batch_put_from_multi_buffer_ranges(keys, ptrs, [[page]] * len(keys), [[layer * page]] * len(keys))
        assert rcs == [page] * len(keys)
    assert store.batch_put_session_end(keys) == [0, 0, 0]
    for i, k in enumerate(keys):
        assert store.get(k) == pattern(size, i)

    assert store.batch_get_session_start(keys) == [0, 0, 0]
    for layer in range(layers):
        ptrs = [[A(dst) + i * size + layer * page] for i in range(len(keys))]
        rcs = store.batch_get_into_multi_buffer_ranges(keys, ptrs, [[page]] * len(keys), [[layer * page]] * len(keys))
        assert rcs == [page] * len(keys)
    assert store.batch_get_session_end(keys) == 0
    assert dst.raw == src.raw
    # several ranges of one key in one call, into one buffer: the byte count is their sum
    dst[:] = b"\0" * len(dst)
    rcs = store.batch_get_into_multi_buffer_ranges(keys[:1], [[A(dst), A(dst) + 10]], [[10, 100]], [[0, 5000]])
    assert rcs == [ErrorCode.INVALID_PARAMS]  # the session was ended
    assert store.batch_get_session_start(keys[:1]) == [0]
    assert store.batch_get_into_multi_buffer_ranges(keys[:1], [[A(dst), A(dst) + 10]], [[10, 100]],
                                                    [[0, 5000]]) == [110]
    assert dst.raw[:110] == pattern(size, 0)[:10] + pattern(size, 0)[5000:5100]
    # another process reads what the sessions wrote
    peer = run_peer(master, f"""
        print("GOT", s.get("ses/b") == bytes((i * 7 + 1) % 251 for i in range({size})))
    """)
    assert "GOT True" in peer.output


def test_put_session_rules(store):
    src = buffer(pattern(8192, 3))
    assert store.register_buffer(A(src), len(src)) == 0
    plain = buffer(pattern(100, 9))  # not registered: goes through the staging buffer
    assert store.put("ps/exists", b"x") == 0
    assert store.batch_put_session_start(["ps/k", "ps/exists", "ps/zero", "ps/k"], [1000, 10, 0, 10]) == [
        0, ErrorCode.OBJECT_ALREADY_EXISTS, ErrorCode.INVALID_PARAMS, ErrorCode.INVALID_PARAMS]
    assert store.batch_put_session_start(["ps/k"], [1000]) == [ErrorCode.INVALID_PARAMS]  # already open
    assert store.batch_put_session_start(["a", "b"], [1]) == [ErrorCode.INVALID_PARAMS] * 2
    assert store.batch_put_session_start([], []) == []

    def put(keys, ptrs, sizes, offs):
        return store.batch_put_from_multi_buffer_ranges(keys, ptrs, sizes, offs)

    assert put(["ps/k"], [[A(src)]], [[100]], [[901]]) == [ErrorCode.INVALID_PARAMS]  # past the end
    assert put(["ps/none"], [[A(src)]], [[10]], [[0]]) == [ErrorCode.INVALID_PARAMS]  # no session
    assert put(["ps/k", "ps/none"], [[A(src)]], [[1]], [[0]]) == [ErrorCode.INVALID_PARAMS] * 2
    assert put(["ps/k"], [[A(src)]], [[10, 20]], [[0]]) == [ErrorCode.INVALID_PARAMS]  # lists differ
    assert put(["ps/k"], [[]], [[]], [[]]) == [0]
    assert put(["ps/k"], [[A(src)]], [[0]], [[1000]]) == [0]  # 0 bytes at the end: nothing
    assert put(["ps/k", "ps/k"], [[A(src)], [A(plain)]], [[900], [100]], [[0], [900]]) == [900, 100]
    assert store.batch_put_session_end(["ps/k", "ps/none", "ps/k"]) == [0, ErrorCode.INVALID_PARAMS, 0]
    assert store.get("ps/k") == pattern(8192, 3)[:900] + pattern(100, 9)
    # the session is closed: no more writes, no second end or revoke
    assert put(["ps/k"], [[A(src)]], [[10]], [[0]]) == [ErrorCode.INVALID_PARAMS]
    assert store.batch_put_session_end(["ps/k"]) == [ErrorCode.INVALID_PARAMS]
    assert store.batch_put_session_revoke(["ps/k"]) == [ErrorCode.INVALID_PARAMS]

    # revoke drops the object; the key can be started again
    assert store.batch_put_session_start(["ps/r"], [64]) == [0]
    assert put(["ps/r"], [[A(src)]], [[64]], [[0]]) == [64]
    assert store.batch_put_session_revoke(["ps/r", "ps/none"]) == [0, ErrorCode.INVALID_PARAMS]
    assert store.is_exist("ps/r") == 0 and store.get("ps/r") == b""
    assert store.batch_put_session_start(["ps/r"], [4]) == [0]
    assert put(["ps/r"], [[A(src) + 10]], [[4]], [[0]]) == [4]
    assert store.batch_put_session_end(["ps/r"]) == [0]
    assert store.get("ps/r") == pattern(8192, 3)[10:14]


def test_put_session_config_places_every_replica(master, store):
    """replica_num=2 with two segments: every range goes to both copies, so either alone holds
    the value (one key per copy dropped)."""
    peer = run_peer(master, """
        print("READY", flush=True)
        sys.stdin.readline()
    """, wait=False, stdin=subprocess.PIPE)
    try:
        assert peer.stdout.readline().startswith("HOST")
        assert peer.stdout.readline().startswith("READY")
        data = buffer(pattern(3000, 5))
        cfg = ReplicateConfig()
        cfg.replica_num = 2
        keys = ["rep/a", "rep/b"]
        assert store.batch_put_session_start(keys, [3000, 3000], cfg) == [0, 0]
        rcs = store.batch_put_from_multi_buffer_ranges(keys, [[A(data), A(data) + 1000]] * 2, [[1000, 2000]] * 2,
                                                       [[0, 1000]] * 2)
        assert rcs == [3000, 3000]
        assert store.batch_put_session_end(keys) == [0, 0]
        segs = sorted(d["segment_name"] for d in store.get_replica_desc("rep/a"))
        assert len(segs) == 2 and store.get_hostname() in segs
        assert sorted(d["segment_name"] for d in store.get_replica_desc("rep/b")) == segs
        for key, drop, keep in (("rep/a", segs[0], segs[1]), ("rep/b", segs[1], segs[0])):
            assert store.batch_replica_clear([key], drop) == [key]
            assert [d["segment_name"] for d in store.get_replica_desc(key)] == [keep]
            assert store.get(key) == pattern(3000, 5)
    finally:
        peer.stdin.write("\n")
        peer.stdin.flush()
        peer.wait(timeout=60)


def test_get_session_rules(store):
    assert store.put("gs/k", pattern(5000, 1)) == 0
    dst = (ctypes.c_char * 5000)()
    plain = (ctypes.c_char * 100)()  # not registered
    assert store.register_buffer(A(dst), len(dst)) == 0
    assert store.batch_get_session_start(["gs/k", "gs/missing", "gs/k"]) == [0, ErrorCode.OBJECT_NOT_FOUND, 0]
    assert store.batch_get_session_start([]) == []

    def get(keys, ptrs, sizes, offs):
        return store.batch_get_into_multi_buffer_ranges(keys, ptrs, sizes, offs)

    assert get(["gs/k"], [[A(dst)]], [[10]], [[4991]]) == [ErrorCode.INVALID_PARAMS]  # past the end
    assert get(["gs/missing"], [[A(dst)]], [[10]], [[0]]) == [ErrorCode.INVALID_PARAMS]  # no session
    assert get(["gs/k"], [[A(dst)]], [[10]], [[0, 1]]) == [ErrorCode.INVALID_PARAMS]
    assert get(["gs/k"], [[A(dst)]], [[10]], []) == [ErrorCode.INVALID_PARAMS]
    assert get(["gs/k"], [[]], [[]], [[]]) == [0]
    assert get(["gs/k", "gs/k"], [[A(dst)], [A(plain)]], [[5000], [100]], [[0], [4900]]) == [5000, 100]
    assert dst.raw == pattern(5000, 1) and plain.raw == pattern(5000, 1)[4900:]
    assert store.batch_get_session_end(["gs/k", "gs/missing"]) == 0
    assert get(["gs/k"], [[A(dst)]], [[10]], [[0]]) == [ErrorCode.INVALID_PARAMS]


def test_get_session_sees_one_version(start_master):
    """A get session reads the version it was opened on while its lease holds: an upsert meanwhile
    does not show, and remove is refused (the lease); a new session sees the new value."""
    m = start_master("--client_ttl=2", "--default_kv_lease_ttl=10000")
    s = new_store(m)
    try:
        assert s.put("ver/k", b"A" * 4096) == 0
        dst = (ctypes.c_char * 4096)()
        assert s.register_buffer(A(dst), 4096) == 0
        assert s.batch_get_session_start(["ver/k"]) == [0]
        assert s.remove("ver/k") == ErrorCode.OBJECT_HAS_LEASE
        assert s.upsert("ver/k", b"B" * 4096) == 0
        assert s.get("ver/k") == b"B" * 4096
        assert s.batch_get_into_multi_buffer_ranges(["ver/k"], [[A(dst)]], [[4096]], [[0]]) == [4096]
        assert dst.raw == b"A" * 4096
        assert s.batch_get_session_start(["ver/k"]) == [0]  # replaces the session
        assert s.batch_get_into_multi_buffer_ranges(["ver/k"], [[A(dst)]], [[4096]], [[0]]) == [4096]
        assert dst.raw == b"B" * 4096
    finally:
        s.close()


def test_get_session_ends_with_its_lease(start_master):
    """Once the session's lease is over a read fails with LEASE_EXPIRED, writes nothing and closes
    the session (the next read: no session)."""
    m = start_master("--client_ttl=2", "--default_kv_lease_ttl=300")
    s = new_store(m)
    try:
        assert s.put("exp/k", b"C" * 100) == 0
        dst = (ctypes.c_char * 100)()
        assert s.batch_get_session_start(["exp/k"]) == [0]
        time.sleep(0.5)  # past the session's lease
        assert s.batch_get_into_multi_buffer_ranges(["exp/k"], [[A(dst)]], [[100]], [[0]]) == [
            ErrorCode.LEASE_EXPIRED]
        assert s.batch_get_into_multi_buffer_ranges(["exp/k"], [[A(dst)]], [[100]], [[0]]) == [
            ErrorCode.INVALID_PARAMS]
        assert dst.raw == b"\0" * 100
    finally:
        s.close()


def test_sessions_need_a_set_up_store_and_are_per_store(master, store):
    from mooncake.store import MooncakeDistributedStore
    fresh = MooncakeDistributedStore()
    assert fresh.batch_put_session_start(["k"], [10]) == [ErrorCode.INVALID_PARAMS]
    assert fresh.batch_get_session_start(["k"]) == [ErrorCode.INVALID_PARAMS]
    assert fresh.batch_put_session_end(["k"]) == [ErrorCode.INVALID_PARAMS]
    assert fresh.batch_get_into_multi_buffer_ranges(["k"], [[1]], [[1]], [[0]]) == [ErrorCode.INVALID_PARAMS]
    other = new_store(master)
    try:
        src = buffer(b"xyz")
        assert store.batch_put_session_start(["per/k"], [3]) == [0]
        # another store object has no session for the key
        assert other.batch_put_from_multi_buffer_ranges(["per/k"], [[A(src)]], [[3]], [[0]]) == [
            ErrorCode.INVALID_PARAMS]
        assert other.batch_put_session_end(["per/k"]) == [ErrorCode.INVALID_PARAMS]
        assert store.batch_put_from_multi_buffer_ranges(["per/k"], [[A(src)]], [[3]], [[0]]) == [3]
        assert store.batch_put_session_end(["per/k"]) == [0]
        assert other.get("per/k") == b"xyz"
    finally:
        other.close()
