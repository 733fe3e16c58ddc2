"""Several MooncakeDistributedStore objects in one process: each is its own segment, with its own
name (get_hostname), as upstream's stores each have their own transfer engine. Clearing the copy
on one store's segment keeps the other store's copy (upstream's
test_batch_replica_clear::test_clear_specific_segment_replica lost the key when both stores
shared one name). A real master; both stores in this test process."""

from __future__ import annotations

import pytest

from test_store import MB, master, new_store, start_master  # noqa: F401
from mooncake.store import ReplicateConfig


@pytest.fixture
def two(master):
    a, b = new_store(master), new_store(master)
    yield a, b
    a.close()
    b.close()


def endpoints(store, key):
    return sorted(d.get_memory_descriptor().buffer_descriptor.transport_endpoint
                  for d in store.get_replica_desc(key))


def clear_until_cleared(store, key, segment):
    """batch_replica_clear skips a key while a lease is held (a put's or a get's, 50 ms here):
    ask again until the lease is over."""
    while True:
        cleared = store.batch_replica_clear([key], segment_name=segment)
        if cleared:
            return cleared


def test_two_stores_are_two_segments(start_master):
    m = start_master("--client_ttl=2", "--default_kv_lease_ttl=50")
    a, b = new_store(m), new_store(m)
    try:
        ha, hb = a.get_hostname(), b.get_hostname()
        assert ha and hb and ha != hb
        data = b"one copy on each store of this process"
        assert a.put("k", data, ReplicateConfig(replica_num=2)) == 0
        assert endpoints(a, "k") == sorted([ha, hb])

        assert clear_until_cleared(a, "k", ha) == ["k"]
        assert endpoints(b, "k") == [hb]
        assert b.get("k") == data
        assert a.get("k") == data

        # the copy left is b's: clearing it on b's segment takes the object
        assert clear_until_cleared(a, "k", hb) == ["k"]
        assert a.is_exist("k") == 0 and b.get("k") == b""
    finally:
        a.close()
        b.close()


def test_closing_one_store_keeps_the_other(two, master):
    a, b = two
    assert b.put("onb", b"b" * 1000, ReplicateConfig(preferred_segments=[b.get_hostname()])) == 0
    assert endpoints(b, "onb") == [b.get_hostname()]
    assert a.close() == 0
    assert b.get("onb") == b"b" * 1000
    # a store set up after a closed is again a segment of its own
    c = new_store(master)
    try:
        assert c.get_hostname() != b.get_hostname()
        assert c.put("onc", b"c" * 10, ReplicateConfig(preferred_segments=[c.get_hostname()])) == 0
        assert endpoints(b, "onc") == [c.get_hostname()]
        assert b.get("onc") == b"c" * 10
    finally:
        c.close()
