"""Upsert family of MooncakeDistributedStore (upsert, upsert_parts, upsert_from, upsert_batch,
batch_upsert_from) against a real mooncake_master and a second client process."""

from __future__ import annotations

import ctypes
import os

from test_store import MB, master, new_store, run_peer, start_master, store  # noqa: F401
from mooncake.store import ErrorCode, ReplicateConfig


def test_upsert_inserts_then_replaces(store):
    assert store.upsert("u", b"first") == 0
    assert store.get("u") == b"first"
    big = os.urandom(2 * MB + 3)
    assert store.upsert("u", big) == 0
    assert store.get("u") == big
    assert store.get_size("u") == len(big)
    # put stays write-once, upsert replaces
    assert store.put("u", b"ignored") == 0
    assert store.get("u") == big
    assert store.upsert("u", bytearray(b"short")) == 0
    assert store.get("u") == b"short"
    assert store.upsert_parts("u", b"ab", memoryview(b"cd"), bytearray(b"ef")) == 0
    assert store.get("u") == b"abcdef"
    assert store.upsert_parts("new-parts", b"x", b"y") == 0
    assert store.get("new-parts") == b"xy"


def test_upsert_from_and_batches(store):
    n = MB
    a = (ctypes.c_char * n).from_buffer_copy(os.urandom(n))
    b = (ctypes.c_char * (n // 2)).from_buffer_copy(os.urandom(n // 2))
    pa, pb = ctypes.addressof(a), ctypes.addressof(b)
    assert store.register_buffer(pa, n) == 0
    assert store.upsert_from("z", pa, n) == 0
    assert store.get("z") == bytes(a)
    assert store.upsert_from("z", pb, n // 2) == 0  # unregistered source: staged copy
    assert store.get("z") == bytes(b)
    assert store.batch_upsert_from(["z", "z2"], [pa, pb], [n, n // 2]) == [0, 0]
    assert store.get_batch(["z", "z2"]) == [bytes(a), bytes(b)]
    assert store.batch_upsert_from(["z"], [pa, pb], [n]) == [ErrorCode.INVALID_PARAMS]
    assert store.get("z") == bytes(a)

    keys = [f"ub{i}" for i in range(6)]
    v1 = [os.urandom(100 + i) for i in range(6)]
    v2 = [os.urandom(5000 + 7 * i) for i in range(6)]
    assert store.put_batch(keys[:3], v1[:3]) == 0
    assert store.upsert_batch(keys, v2) == 0  # three replaced, three inserted
    assert store.get_batch(keys) == v2
    assert store.unregister_buffer(pa) == 0


def test_upsert_bad_arguments_keep_old_value(store):
    assert store.put("keep", b"old-value") == 0
    assert store.upsert("keep", b"") == ErrorCode.INVALID_PARAMS  # empty values cannot be stored
    assert store.upsert("", b"x") == ErrorCode.INVALID_KEY
    assert store.upsert_from("keep", 0, 10) == ErrorCode.INVALID_PARAMS
    # too big for any segment: refused, the old value stays readable
    assert store.upsert("keep", bytes(100 * MB)) == ErrorCode.NO_AVAILABLE_HANDLE
    assert store.get("keep") == b"old-value"
    assert store.upsert_batch(["keep", ""], [b"new", b"y"]) == ErrorCode.INVALID_KEY
    assert store.get("keep") == b"new"
    try:
        store.upsert_batch(["a", "b"], [b"1"])
    except ValueError as e:
        assert "upsert_batch: 2 keys but 1 values" in str(e)
    else:
        raise AssertionError("no ValueError")
    cfg = ReplicateConfig(replica_num=3)  # only one segment in this cluster
    assert store.upsert("keep", b"three copies", cfg) == ErrorCode.NO_AVAILABLE_HANDLE
    assert store.get("keep") == b"new"


def test_upsert_across_clients_readers_never_see_a_mix(master, store):
    """A second client process upserts the key over and over, alternating two values of different
    sizes placed on its own segment; this process reads all the while: every read is one whole
    value (never a mix or a truncation), and the last value wins."""
    size_a, size_b = 3 * MB, 2 * MB + 17
    assert store.put("shared", b"\x00" * 10) == 0
    p = run_peer(master, f"""
        cfg = ReplicateConfig()
        cfg.preferred_segment = s.get_hostname()
        for i in range(40):
            v = bytes([65 + i % 2]) * ({size_a} if i % 2 == 0 else {size_b})
            assert s.upsert("shared", v, cfg) == 0, i
        assert s.upsert("shared", b"final" * 1000, cfg) == 0
        print("DONE", flush=True)
        sys.stdin.readline()
        s.close()
    """, wait=False, stdin=__import__("subprocess").PIPE)
    seen = set()
    try:
        done = False
        while not done:
            v = store.get("shared")
            if v == b"final" * 1000:
                done = True
            elif v == b"\x00" * 10:
                seen.add("initial")
            elif v:
                assert (len(v), v[:1]) in ((size_a, b"A"), (size_b, b"B")), (len(v), v[:1])
                assert v.count(v[:1]) == len(v), "a read saw a mix of two versions"
                seen.add(v[:1].decode())
            else:
                raise AssertionError("the key vanished during the upserts: " + repr(v))
        assert p.stdout.readline().split()[0] == "HOST"
        assert p.stdout.readline().strip() == "DONE"
        assert store.get("shared") == b"final" * 1000
        assert store.get_size("shared") == 5000
    finally:
        p.stdin.close()
        p.wait(timeout=60)
    assert p.returncode == 0


def test_client_killed_mid_upsert_keeps_a_whole_value(master, store):
    """A second client upserts one key over and over onto our segment and is killed mid-way:
    the key holds one whole value afterwards (an old or a new one), the killed client's open
    upsert is reclaimed at its expiry, and then the key takes upserts again."""
    import signal
    import time
    size = 4 << 20
    assert store.put("k", b"\x00" * size) == 0
    p = run_peer(master, f"""
        cfg = ReplicateConfig(); cfg.preferred_segment = {store.get_hostname()!r}
        i = 0
        while True:
            assert s.upsert("k", bytes([1 + i % 250]) * {size}, cfg) == 0
            i += 1
            if i == 3:
                print("RUNNING", flush=True)
    """, wait=False)
    try:
        for line in p.stdout:
            if line.startswith("RUNNING"):
                break
        p.send_signal(signal.SIGKILL)
        p.wait()
        v = store.get("k")
        assert len(v) == size and v.count(v[:1]) == size, "a mix of versions is visible"
        # the dead client expires (client_ttl): its segment and its open upsert (if any) go;
        # then upserts work again
        while master.http("/get_all_segments").split() != [store.get_hostname()] or \
                master.metric("mooncake_master_pending_tasks") > 0:
            time.sleep(0.1)
        assert store.upsert("k", b"after") == 0 and store.get("k") == b"after"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
