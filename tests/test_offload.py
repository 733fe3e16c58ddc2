"""SSD offload (client-local disk) through the Python API, with real processes: a
mooncake_master with --enable_offload, two client processes set up with
enable_ssd_offload=True (each with its own MOONCAKE_OFFLOAD_FILE_STORAGE_PATH) holding the
memory, and this process as a pure client putting and reading back 4x the memory."""

from __future__ import annotations

import ctypes
import glob
import json
import os
import signal
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

from conftest import stop  # noqa: E402
from mooncake.store import ErrorCode, MooncakeDistributedStore  # noqa: E402
from test_store import Master  # noqa: E402

MB = 1024 * 1024
SIZE = 256 * 1024
N = 128  # 32 MiB against 16 MiB of memory segments

HOLDER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    seg = int(sys.argv[3]) if len(sys.argv) > 3 else 8 << 20
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", seg, 4 << 20, "tcp", "", sys.argv[1], enable_ssd_offload=True)
    print("READY" if rc == 0 else f"FAILED {rc}", flush=True)
    sys.stdin.read()
    s.close()
""")


def value(i: int, n: int = SIZE) -> bytes:
    return (i.to_bytes(4, "little") * (n // 4 + 1))[:n]


def start_holder(python_exe: str, master: Master, ssd_dir: str, segment: int = 8 * MB, **env_extra: str) -> subprocess.Popen:
    os.makedirs(ssd_dir, exist_ok=True)
    env = dict(os.environ, MOONCAKE_OFFLOAD_FILE_STORAGE_PATH=ssd_dir, MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT="16", **env_extra)
    p = subprocess.Popen([python_exe, "-c", HOLDER, master.addr, os.path.join(ROOT, "python"), str(segment)], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    assert line.strip() == "READY", line
    return p


@pytest.fixture
def offload(tmp_path, python_exe):
    m = Master("--enable_offload", "--offload_on_evict", "--eviction_high_watermark_ratio=0.8", "--eviction_ratio=0.1",
               "--default_kv_lease_ttl=200", "--promotion_on_hit", "--promotion_admission_threshold=2", "--client_ttl=2")
    dirs = [str(tmp_path / f"ssd{i}") for i in range(2)]
    holders = [start_holder(python_exe, m, d) for d in dirs]
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MB, "tcp", "", m.addr) == 0
    yield m, s, holders, dirs
    s.close()
    for p in holders:
        stop(p)
    m.stop()


def kinds(s: MooncakeDistributedStore, key: str) -> list:
    return [d["kind"] for d in s.get_replica_desc(key)]


def test_offload_working_set_and_promotion(offload):
    m, s, holders, dirs = offload
    for i in range(N):
        assert s.put(f"o{i}", value(i)) == 0, i
    local_only = [i for i in range(N) if kinds(s, f"o{i}") == ["local_disk"]]
    assert len(local_only) >= N // 3, len(local_only)
    # Every key reads back byte for byte: 0 lost.
    bad = [i for i in range(N) if s.get(f"o{i}") != value(i)]
    assert bad == []
    assert s.get_offload_rpc_read_count() >= len(local_only)
    st = s.get_tier_stats()
    assert st["offload_rpc_reads"] == s.get_offload_rpc_read_count() and st["disk_reads"] >= len(local_only)
    # Small objects share bucket files: fewer files than objects on local disk.
    buckets = [f for d in dirs for f in glob.glob(os.path.join(d, "*", "**", "*.mcbkt"), recursive=True)]
    assert 0 < len(buckets) < len(local_only)
    desc = s.get_replica_desc(f"o{local_only[0]}")[0]
    assert desc["tier"] == "local_disk" and desc["endpoint"] and desc["size"] == SIZE

    # Promotion: room below the watermark, then two hits of a disk-only object.
    keep = [i for i in local_only if i < N // 2]
    for i in range(N // 2, N):
        assert s.remove(f"o{i}", True) == 0
    key, idx = f"o{keep[0]}", keep[0]
    assert s.get(key) == value(idx) and s.get(key) == value(idx)
    assert sorted(kinds(s, key)) == ["local_disk", "memory"]
    before = s.get_offload_rpc_read_count()
    assert s.get(key) == value(idx)
    assert s.get_offload_rpc_read_count() == before  # served from memory now
    # Removed keys are gone, files of fully removed buckets too (handed back to their holders).
    assert s.is_exist(f"o{N - 1}") == 0


def test_local_disk_stays_within_its_quota(tmp_path, python_exe):
    """MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES: with write-behind copies of 10 MiB of puts into a
    client whose offload directory may hold 4 MiB, the master keeps that client's local copies
    within 90% of it (oldest dropped, --enable_disk_eviction by default), and every key still
    reads back from memory."""
    m = Master("--enable_offload", "--client_ttl=5")
    holder = start_holder(python_exe, m, str(tmp_path / "ssd"), segment=64 * MB,
                          MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES=str(4 * MB))
    s = MooncakeDistributedStore()
    try:
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MB, "tcp", "", m.addr) == 0
        quota = 4 * MB - 4 * MB // 10

        def labelled(name):
            return float(next(line.rsplit(" ", 1)[1] for line in m.http("/metrics").splitlines() if line.startswith(name + " ")))

        def settle():  # the copy of the last put written (one at a time: the order is then exact)
            deadline = time.time() + 20
            while time.time() < deadline and labelled('mooncake_master_tier_objects{state="moving"}') > 0:
                time.sleep(0.01)
            assert labelled('mooncake_master_tier_objects{state="moving"}') == 0

        n = 40
        for i in range(n):
            assert s.put(f"q{i}", value(i)) == 0, i
            settle()
        used = m.metric("mooncake_master_local_disk_used_bytes")
        kept = 0  # the copies on disk as the quota rule keeps them: room made down to 90% of the quota
        for _ in range(n):
            if (kept + 1) * SIZE > quota:
                kept = min(kept, (quota - quota // 10 - SIZE) // SIZE)
            kept += 1
        assert used == kept * SIZE, (used, kept)
        evicted = labelled('mooncake_master_tier_moves_total{result="local_disk_evicted"}')
        assert labelled('mooncake_master_tier_moves_total{result="local_disk_refused"}') == 0
        assert labelled('mooncake_master_tier_moves_total{result="offloaded"}') == n
        on_disk = [i for i in range(n) if "local_disk" in kinds(s, f"q{i}")]
        assert len(on_disk) * SIZE == used and on_disk == list(range(n - len(on_disk), n))  # the newest stay
        assert evicted == n - len(on_disk) and used <= quota
        assert [i for i in range(n) if s.get(f"q{i}") != value(i)] == []
    finally:
        s.close()
        stop(holder)
        m.stop()


def test_offload_holder_killed(offload):
    m, s, holders, dirs = offload
    for i in range(N):
        assert s.put(f"x{i}", value(i)) == 0, i
    assert any(kinds(s, f"x{i}") == ["local_disk"] for i in range(N))
    holders[0].send_signal(signal.SIGKILL)
    holders[0].wait()
    buf = (ctypes.c_char * SIZE)()
    addr = ctypes.addressof(buf)
    assert s.register_buffer(addr, SIZE) == 0
    clean = {ErrorCode.RPC_FAIL, ErrorCode.TRANSFER_FAIL, ErrorCode.OBJECT_NOT_FOUND, -710}  # -710: REPLICA_NOT_FOUND
    ok = failed = 0
    for i in range(N):
        rc = s.get_into(f"x{i}", addr, SIZE)
        if rc == SIZE:
            assert bytes(buf) == value(i), f"wrong bytes for x{i}"
            ok += 1
        else:
            assert rc in clean, (i, rc)
            failed += 1
    assert ok > 0 and failed > 0, (ok, failed)
    # Once the master expires the dead client (--client_ttl=2), what lived only with it is
    # OBJECT_NOT_FOUND and everything else still reads back right.
    deadline = time.time() + 30
    while True:
        codes = [s.get_into(f"x{i}", addr, SIZE) for i in range(N)]
        if all(rc in (SIZE, ErrorCode.OBJECT_NOT_FOUND) for rc in codes):
            break
        assert time.time() < deadline, sorted(set(codes))
        time.sleep(0.5)
    for i, rc in enumerate(codes):
        if rc == SIZE:
            assert s.get(f"x{i}") == value(i)
    assert codes.count(ErrorCode.OBJECT_NOT_FOUND) >= failed
    s.unregister_buffer(addr)


def test_offload_bad_setup_is_a_clear_error(tmp_path, monkeypatch):
    m = Master("--enable_offload")
    try:
        s = MooncakeDistributedStore()
        # A pure client has nothing to offload.
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MB, "tcp", "", m.addr, enable_ssd_offload=True) == -600
        assert "needs a global segment" in s._setup_error
        # The directory must exist (upstream's rule): nothing is created behind the user's back.
        missing = tmp_path / "nope"
        monkeypatch.setenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", str(missing))
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 4 * MB, 4 * MB, "tcp", "", m.addr, enable_ssd_offload=True) == -600
        assert str(missing) in s._setup_error and not missing.exists()
        monkeypatch.setenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "relative/dir")
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 4 * MB, 4 * MB, "tcp", "", m.addr, enable_ssd_offload=True) == -600
        assert "not an absolute path" in s._setup_error
        # A good one works, and close() removes this client's files.
        good = tmp_path / "ssd"
        good.mkdir()
        monkeypatch.setenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", str(good))
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 4 * MB, 4 * MB, "tcp", "", m.addr, enable_ssd_offload=True) == 0
        assert len(os.listdir(good)) == 1 and s.get_tier_stats()["offload_dir"].startswith(str(good))
        assert s.close() == 0
        assert os.listdir(good) == []
    finally:
        m.stop()


def test_offload_survives_master_restart_from_snapshot(tmp_path, python_exe):
    """A master restarted from its snapshot (--enable_snapshot_restore) knows which objects
    live on which client's local disk: every key reads back byte for byte, the local-disk
    ones still through their holders."""
    snaps = tmp_path / "snaps"
    flags = ["--enable_offload", "--offload_on_evict", "--eviction_high_watermark_ratio=0.8", "--eviction_ratio=0.1",
             "--default_kv_lease_ttl=200", "--client_ttl=5", "--enable_snapshot", f"--snapshot_backup_dir={snaps}",
             "--snapshot_interval_seconds=1", "--enable_snapshot_restore"]
    m = Master(*flags)
    holders = [start_holder(python_exe, m, str(tmp_path / f"ssd{i}")) for i in range(2)]
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MB, "tcp", "", m.addr) == 0
    m2 = None
    try:
        for i in range(N):
            assert s.put(f"r{i}", value(i)) == 0, i
        local_only = [i for i in range(N) if kinds(s, f"r{i}") == ["local_disk"]]
        assert len(local_only) >= N // 3
        # Wait for a snapshot of the state as counted above (its manifest's last applied entry
        # at least the master's applied count now).
        applied = m.metric("mooncake_master_applied_entries_total")

        def snapshot_seqs():
            out = []
            for d, _, files in os.walk(snaps):
                if "manifest.json" in files:
                    try:
                        with open(os.path.join(d, "manifest.json")) as f:
                            out.append(json.load(f)["last_applied_seq"])
                    except (OSError, ValueError, KeyError):
                        pass
            return out
        deadline = time.time() + 30
        while not any(seq >= applied for seq in snapshot_seqs()):
            assert time.time() < deadline, (applied, snapshot_seqs())
            time.sleep(0.2)
        m.proc.kill()
        m.proc.wait()
        m2 = Master(*flags, f"--rpc_port={m.rpc_port}")
        # (moves still in flight at the count above may have finished before the snapshot)
        after = [i for i in range(N) if kinds(s, f"r{i}") == ["local_disk"]]
        assert set(local_only) <= set(after), sorted(set(local_only) - set(after))
        bad = [i for i in range(N) if s.get(f"r{i}") != value(i)]
        assert bad == []
    finally:
        s.close()
        for p in holders:
            stop(p)
        if m2 is not None:
            m2.stop()
        m.stop()
