"""Replica-level calls of upstream's store API: get_replica_desc / batch_get_replica_desc
(ReplicaDescriptor), batch_replica_clear, create_copy_task / create_move_task / query_task,
remove_by_regex / remove_all / batch_remove. A real master and a second client process.
(setup_dummy: test_store_dummy.py.)"""

from __future__ import annotations

import subprocess
import time

import pytest

from test_store import MB, master, new_store, run_peer, start_master, store  # noqa: F401
from mooncake.store import (ErrorCode, MooncakeDistributedStore, QueryTaskResponse, ReplicaStatus,
                            ReplicateConfig, TaskStatus, TaskType, last_error)


def peer_host(master):
    """A second client that stays up until its stdin closes; returns (process, its segment)."""
    p = run_peer(master, """
        print("UP", flush=True)
        sys.stdin.readline()
        s.close()
    """, wait=False, stdin=subprocess.PIPE)
    host = p.stdout.readline().split()[1]
    assert p.stdout.readline().strip() == "UP"
    return p, host


def end(p):
    p.stdin.close()
    assert p.wait(timeout=60) == 0


def wait_task(store, tid):
    while True:  # the task runs on the store's own thread; it ends in SUCCESS or FAILED
        resp, rc = store.query_task(tid)
        assert rc == 0 and isinstance(resp, QueryTaskResponse)
        if resp.status in (TaskStatus.SUCCESS, TaskStatus.FAILED):
            return resp
        time.sleep(0.01)


def test_replica_desc(master, store):
    p, peer = peer_host(master)
    try:
        assert store.put("two", b"v" * 1000, ReplicateConfig(replica_num=2)) == 0
        ds = store.get_replica_desc("two")
        assert len(ds) == 2
        assert sorted(d.get_memory_descriptor().buffer_descriptor.transport_endpoint for d in ds) == sorted([store.get_hostname(), peer])
        for d in ds:
            assert d.is_memory_replica() and not d.is_disk_replica() and not d.is_local_disk_replica()
            assert d.status == ReplicaStatus.COMPLETE and d["tier"] == "memory" and d["size"] == 1000
            bd = d.get_memory_descriptor().buffer_descriptor
            assert bd.size == 1000 and bd.buffer_address > 0 and bd.protocol == "tcp"
        m = store.batch_get_replica_desc(["two", "nope"])
        assert set(m) == {"two", "nope"} and len(m["two"]) == 2 and m["nope"] == []
    finally:
        end(p)


def test_batch_replica_clear(start_master):
    master = start_master("--client_ttl=2", "--default_kv_lease_ttl=600000")  # a lease outlasts the test
    store = new_store(master)
    p, peer = peer_host(master)
    try:
        keys = ["c1", "c2", "c3"]
        for k in keys:
            assert store.put(k, k.encode() * 100, ReplicateConfig(replica_num=2)) == 0
        # clear the copies on the peer's segment: both keys stay readable from ours
        assert store.batch_replica_clear(keys[:2], peer) == keys[:2]
        for k in keys[:2]:
            segs = [d.get_memory_descriptor().buffer_descriptor.transport_endpoint for d in store.get_replica_desc(k)]
            assert segs == [store.get_hostname()]
            assert store.get(k) == k.encode() * 100
        # a leased key is skipped (the get above leased c1, c2); c3 has no lease: whole object
        assert store.batch_replica_clear(["c1", "c3", "nope"]) == ["c3"]
        assert store.is_exist("c3") == 0 and store.is_exist("c1") == 1
        # another client's keys are skipped
        q = run_peer(master, 'print("CLEARED", s.batch_replica_clear(["c2"]), flush=True)')
        assert "CLEARED []" in q.output
        assert store.batch_replica_clear([]) == []
    finally:
        end(p)
        store.close()


def test_copy_and_move_tasks(master, store):
    p, peer = peer_host(master)
    try:
        v = bytes(range(256)) * 1000
        assert store.put("t", v, ReplicateConfig(preferred_segment=store.get_hostname())) == 0
        tid, rc = store.create_copy_task("t", [peer])
        assert rc == 0 and tid != (0, 0)
        resp = wait_task(store, tid)
        assert resp.status == TaskStatus.SUCCESS and resp.type == TaskType.REPLICA_COPY, resp.message
        segs = sorted(d["segment_name"] for d in store.get_replica_desc("t"))
        assert segs == sorted([store.get_hostname(), peer]) and store.get("t") == v

        tid, rc = store.create_move_task("t", store.get_hostname(), peer)
        assert rc == 0
        resp = wait_task(store, tid)
        assert resp.status == TaskStatus.SUCCESS and resp.type == TaskType.REPLICA_MOVE, resp.message
        assert [d["segment_name"] for d in store.get_replica_desc("t")] == [peer]
        assert store.get("t") == v

        # submission errors: no task
        assert store.create_copy_task("nope", [peer]) == ((0, 0), ErrorCode.OBJECT_NOT_FOUND)
        assert store.create_move_task("t", "nowhere:1", peer) == ((0, 0), ErrorCode.INVALID_PARAMS)
        assert store.create_copy_task("t", []) == ((0, 0), ErrorCode.INVALID_PARAMS)
        assert store.query_task((1, 2)) == (None, -1300)
        # a copy to a segment that does not exist fails in the task, the value untouched
        tid, rc = store.create_copy_task("t", ["nowhere:1"])
        assert rc == 0
        resp = wait_task(store, tid)
        assert resp.status == TaskStatus.FAILED and "nowhere:1" in resp.message
        assert store.get("t") == v
    finally:
        end(p)


def test_removal_family(store):
    for i in range(5):
        assert store.put(f"rx/{i}", b"v") == 0
    assert store.put("keep", b"k") == 0
    assert store.remove_by_regex("^rx/[0-2]$") == 3
    assert store.batch_is_exist([f"rx/{i}" for i in range(5)]) == [0, 0, 0, 1, 1]
    assert store.remove_by_regex("(") == ErrorCode.INVALID_PARAMS
    assert store.remove_by_regex(regex_pattern="^nothing$") == 0  # upstream's keyword
    with pytest.raises(TypeError):
        store.remove_by_regex()
    assert store.batch_remove(["rx/3", "nope"]) == [0, ErrorCode.OBJECT_NOT_FOUND]
    # remove_all(force=False) leaves what a plain remove refuses: a hard pin; force=True takes it
    cfg = ReplicateConfig()
    cfg.with_hard_pin = True
    assert store.put("pinned", b"p", cfg) == 0
    assert store.remove_all(force=False) == 2  # keep, rx/4
    assert store.is_exist("pinned") == 1 and store.is_exist("keep") == 0
    assert store.remove_all(force=True) == 1
    assert store.put("keep", b"k") == 0 and store.put("pinned", b"p", cfg) == 0
    assert store.remove_all() == 2  # upstream's older remove_all(): everything
    assert store.is_exist("keep") == 0 and store.is_exist("pinned") == 0


def test_more_segments(master, tmp_path):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 8 * MB, "tcp", "", master.addr) == 0  # no memory of its own
    try:
        assert s.put("nowhere", b"x") == ErrorCode.NO_AVAILABLE_HANDLE
        r = s.allocate_and_mount_segment(4 * MB + 1)
        assert r["ret"] == 0 and len(r["segment_ids"]) == 1 and r["allocated_size"] == 4 * MB + 4096
        v = bytes(range(256)) * 8192
        assert s.put("alloc", v) == 0
        path = tmp_path / "seg"
        with open(path, "wb") as f:
            f.truncate(4 * MB)
        m = s.mount_segment(str(path), 2 * MB, offset=4096)
        assert m["ret"] == 0 and m["segment_ids"][0] != r["segment_ids"][0]
        # a second process reads values placed on either segment
        assert s.put("first", b"A" * 1000, ReplicateConfig(replica_num=2)) == 0
        assert s.put("onfile", b"F" * 5000, ReplicateConfig(preferred_segment=m["segment_ids"][0])) == 0
        with open(path, "rb") as f:  # the bytes are in the mapped file
            assert b"F" * 5000 in f.read()
        p = run_peer(master, 'print("GOT", s.get("alloc") == bytes(range(256)) * 8192, s.get("first") == b"A" * 1000, '
                             's.get("onfile") == b"F" * 5000, flush=True)')
        assert "GOT True True True" in p.output
        # wrong kinds and unknown ids change nothing
        assert s.unmount_segment(r["segment_ids"]) == ErrorCode.INVALID_PARAMS
        assert s.unmount_and_free_segment(m["segment_ids"]) == ErrorCode.INVALID_PARAMS
        assert s.unmount_segment(["nope"]) == ErrorCode.SEGMENT_NOT_FOUND
        assert s.unmount_segment(m["segment_ids"], grace_period_seconds=-1) == ErrorCode.INVALID_PARAMS
        with pytest.raises(TypeError, match="grace_period_seconds"):
            s.unmount_segment(m["segment_ids"], grace_period_seconds=1.5)
        assert s.mount_segment(str(path), 8 * MB)["ret"] == ErrorCode.INVALID_PARAMS  # file too short
        assert s.mount_segment(str(tmp_path / "missing"), MB)["ret"] == ErrorCode.INVALID_PARAMS
        assert s.get("first") == b"A" * 1000
        # unmounting the file segment drops the copies there; the other survives
        assert s.unmount_segment(m["segment_ids"]) == 0
        assert s.get("first") == b"A" * 1000
        assert s.unmount_and_free_segment(r["segment_ids"]) == 0
        assert s.is_exist("alloc") == 0 and s.is_exist("first") == 0
        assert s.put("nowhere", b"x") == ErrorCode.NO_AVAILABLE_HANDLE
    finally:
        s.close()


def test_unmount_grace_period(master, tmp_path):
    """unmount_and_free_segment(..., grace_period_seconds=2): the call returns at once; for two
    seconds the segment's objects stay readable (here and in another process) while new objects
    go elsewhere (the file segment, where their bytes show); then it is gone with its objects.
    close() does not wait for a grace period to end."""
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 8 * MB, "tcp", "", master.addr) == 0
    try:
        a = s.allocate_and_mount_segment(4 * MB)["segment_ids"][0]
        path = tmp_path / "seg"
        with open(path, "wb") as f:
            f.truncate(4 * MB)
        assert s.mount_segment(str(path), 4 * MB)["ret"] == 0
        assert s.put("onA", b"A" * 5000, ReplicateConfig(preferred_segment=a)) == 0
        assert b"A" * 5000 not in path.read_bytes()
        t0 = time.monotonic()
        assert s.unmount_and_free_segment([a], grace_period_seconds=2) == 0
        assert time.monotonic() - t0 < 1.5
        assert s.unmount_and_free_segment([a]) == ErrorCode.SEGMENT_NOT_FOUND  # already on its way out
        for i in range(5):  # preferred, but closed to new objects: they land in the file
            assert s.put(f"new{i}", bytes([i]) * 5000, ReplicateConfig(preferred_segment=a)) == 0
            assert bytes([i]) * 5000 in path.read_bytes()
        assert s.get("onA") == b"A" * 5000, last_error()
        p = run_peer(master, 'print("GOT", s.get("onA") == b"A" * 5000, flush=True)')
        assert "GOT True" in p.output
        deadline = time.monotonic() + 10
        while s.is_exist("onA") == 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert s.is_exist("onA") == 0 and time.monotonic() - t0 >= 2
        assert all(s.get(f"new{i}") == bytes([i]) * 5000 for i in range(5))
        # A grace period that outlives the store: close() unmounts at once.
        c = s.allocate_and_mount_segment(4 * MB)["segment_ids"][0]
        assert s.unmount_and_free_segment([c], grace_period_seconds=3600) == 0
    finally:
        t1 = time.monotonic()
        s.close()
        assert time.monotonic() - t1 < 10
