"""unmount_local_disk_segment (upstream's): a client with SSD offload takes its local disk out of
the store while its memory segment stays. With real processes: a mooncake_master with
--enable_offload --offload_on_evict, and this process as the client holding memory and disk.
The copies on the disk go (an object whose only copy was there is gone), the objects in memory
stay readable, and from then on eviction drops objects instead of moving them to the disk."""

from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:
    import mooncake  # noqa: F401
except ImportError:  # running from the source tree
    sys.path.insert(0, os.path.join(ROOT, "python"))

from mooncake.store import ErrorCode, MooncakeDistributedStore  # noqa: E402
from test_store import Master  # noqa: E402

MB = 1024 * 1024
SIZE = 256 * 1024
N = 128  # 32 MiB against an 8 MiB memory segment


def value(i: int) -> bytes:
    return (i.to_bytes(4, "little") * (SIZE // 4 + 1))[:SIZE]


def kinds(s: MooncakeDistributedStore, keys: list) -> dict:
    """Where each key's copies are ([] for a missing key)."""
    return {k: sorted(d["kind"] for d in ds) for k, ds in s.batch_get_replica_desc(keys).items()}


def test_unmount_local_disk_segment(tmp_path):
    m = Master("--enable_offload", "--offload_on_evict", "--eviction_high_watermark_ratio=0.8", "--eviction_ratio=0.1",
               "--default_kv_lease_ttl=200", "--client_ttl=5")
    ssd = tmp_path / "ssd"
    ssd.mkdir()
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 8 * MB, 4 * MB, "tcp", "", m.addr,
                   enable_ssd_offload=True, ssd_offload_path=str(ssd)) == 0
    try:
        first = [f"o{i}" for i in range(N)]
        for i, k in enumerate(first):
            assert s.put(k, value(i)) == 0, k
        # Room below the watermark (memory holds the newest objects): no eviction runs while
        # the test looks.
        for k in first[-8:]:
            assert s.remove(k, True) == 0
        kept = first[:-8]
        before = kinds(s, kept)
        local_only = [k for k in kept if before[k] == ["local_disk"]]
        assert len(local_only) >= N // 8, before

        assert s.unmount_local_disk_segment() == 0
        after = kinds(s, kept)
        assert {k: after[k] for k in local_only} == {k: [] for k in local_only}
        assert all(after[k] in ([], ["memory"]) for k in kept), after
        in_memory = [k for k in kept if after[k] == ["memory"]]
        assert in_memory, after
        assert [s.get(k) == value(int(k[1:])) for k in in_memory] == [True] * len(in_memory)
        assert [s.is_exist(k) for k in local_only] == [0] * len(local_only)

        # Memory fills again: eviction drops objects now, none moves to the disk.
        more = [f"n{i}" for i in range(2 * N)]
        for i, k in enumerate(more):
            assert s.put(k, value(i)) == 0, k
        now = kinds(s, kept + more)
        assert all(v in ([], ["memory"]) for v in now.values()), now
        assert 0 < sum(v == ["memory"] for v in now.values()) < len(more)
        # Again: nothing left to unmount.
        assert s.unmount_local_disk_segment() == 0
    finally:
        s.close()
        m.stop()


def test_unmount_local_disk_segment_without_offload_and_bad_arguments():
    m = Master("--client_ttl=5")
    s = MooncakeDistributedStore()
    try:
        assert s.unmount_local_disk_segment() == ErrorCode.INVALID_PARAMS  # not set up
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 8 * MB, 4 * MB, "tcp", "", m.addr) == 0
        assert s.put("k", b"v" * 100) == 0
        assert s.unmount_local_disk_segment() == 0  # no SSD offload: nothing to do
        assert s.unmount_local_disk_segment(grace_period_seconds=0) == 0
        assert s.get("k") == b"v" * 100
        assert s.unmount_local_disk_segment(-1) == ErrorCode.INVALID_PARAMS
        with pytest.raises(TypeError, match="grace_period_seconds"):
            s.unmount_local_disk_segment("1")
    finally:
        s.close()
        m.stop()
