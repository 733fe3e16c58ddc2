"""The G3 file tier through the Python API, with real processes: a mooncake_master with
--root_fs_dir on a temporary directory, a mooncake_client process holding a memory segment,
and a second client process (a pure client) putting and reading back 8x the memory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:
    import mooncake  # noqa: F401
except ImportError:  # running from the source tree
    sys.path.insert(0, os.path.join(ROOT, "python"))

from conftest import go_command, stop  # noqa: E402
from mooncake.store import MooncakeDistributedStore, last_error  # noqa: E402
from test_store import Master  # noqa: E402

MB = 1024 * 1024


def segment_holder(master: Master, size: str) -> subprocess.Popen:
    p = subprocess.Popen([go_command("mooncake_client"), f"--master_server_address={master.addr}", "--host=127.0.0.1",
                          "--port=0", f"--global_segment_size={size}", "--local_buffer_size=4MB"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        if line.startswith("MOONCAKE_CLIENT_READY"):
            return p
    raise RuntimeError("mooncake_client exited")


@pytest.fixture
def g3(tmp_path):
    root = tmp_path / "g3"
    m = Master(f"--root_fs_dir={root}", "--eviction_high_watermark_ratio=0.8", "--eviction_ratio=0.1",
               "--default_kv_lease_ttl=200", "--promotion_on_hit", "--promotion_admission_threshold=2")
    holder = segment_holder(m, "8MB")
    yield m, str(root)
    stop(holder)
    m.stop()


def value(i: int, n: int) -> bytes:
    return (i.to_bytes(4, "little") * (n // 4 + 1))[:n]


def test_g3_working_set_8x_memory(g3, python_exe):
    m, root = g3
    # Another process puts 64 MiB (8x the segment) and reads every key back.
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {os.path.join(ROOT, 'python')!r})
        from mooncake.store import MooncakeDistributedStore
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", {m.addr!r}) == 0
        v = lambda i: (i.to_bytes(4, "little") * (65536 + 1))[:256 << 10]
        for i in range(256):
            assert s.put(f"w{{i}}", v(i)) == 0, i
        bad = [i for i in range(256) if s.get(f"w{{i}}") != v(i)]
        assert not bad, bad
        st = s.get_tier_stats()
        assert st["disk_reads"] > 0 and st["root_fs_dir"] == {root!r}, st
        print("OK", st["disk_reads"])
        s.close()
    """)
    r = subprocess.run([python_exe, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("OK"), r.stderr[-3000:]
    assert m.metric("mooncake_master_dfs_segment_used_bytes") > 32 * MB
    assert m.metric("mooncake_master_disk_reads_total") > 0

    # From this process: replica descriptors, promotion, a corrupt file, a removed key.
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MB, "tcp", "", m.addr) == 0
    try:
        disk = [f"w{i}" for i in range(256) if [d["tier"] for d in s.get_replica_desc(f"w{i}")] == ["disk"]]
        assert len(disk) > 100
        d = s.get_replica_desc(disk[0])[0]
        assert d["size"] == 256 << 10 and d["status"] == "COMPLETE" and os.path.exists(os.path.join(root, d["path"]))
        # room below the watermark, then two reads promote
        for i in range(256):
            if f"w{i}" not in disk:
                assert s.remove(f"w{i}", True) == 0
        key = disk[1]
        idx = int(key[1:])
        assert s.get(key) == value(idx, 256 << 10)
        assert [x["tier"] for x in s.get_replica_desc(key)] == ["memory", "disk"]
        assert s.get_tier_stats()["promoted"] == 1
        # corrupt one file, delete another
        with open(os.path.join(root, d["path"]), "r+b") as f:
            f.seek(d.get("offset", 0) + 4096 + 10)
            f.write(b"\xde\xad")
        assert s.get(disk[0]) == b""
        assert "CHECKSUM_MISMATCH" in last_error(), last_error()
        # in a batch the corrupt key fails alone: its bytes object was made and filled before the
        # checksum failed, and must come back empty, not holding the damaged bytes
        k4 = disk[4]
        assert s.get_batch([disk[0], k4, "no-such-key"]) == [b"", value(int(k4[1:]), 256 << 10), b""]
        gone = s.get_replica_desc(disk[2])[0]["path"]
        os.remove(os.path.join(root, gone))
        assert s.get(disk[2]) == b""
        assert "FILE_NOT_FOUND" in last_error(), last_error()
        # removing every object of a file (small objects share bucket files) deletes it
        rel3 = s.get_replica_desc(disk[3])[0]["path"]
        p3 = os.path.join(root, rel3)
        for k in disk[3:]:
            if any(r.get("path") == rel3 for r in s.get_replica_desc(k)):  # k4 was promoted: memory first
                assert s.remove(k, True) == 0
        deadline = time.time() + 5
        while os.path.exists(p3) and time.time() < deadline:
            time.sleep(0.02)
        assert not os.path.exists(p3)
        with pytest.raises(Exception):
            s.get_replica_desc(disk[3])
    finally:
        s.close()
