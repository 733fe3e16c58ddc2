#!/usr/bin/env python3
"""G3 file tier throughput and get latency, against plain sequential file I/O in the same run.

Starts a mooncake_master with --root_fs_dir on DIR, one mooncake_client process contributing a
MEM-byte memory segment, and uses this process as a pure client (MooncakeDistributedStore).
For 1 MiB and 64 KiB objects it:

  * puts 4x the memory segment (put_batch of 32 keys), so that most objects move to G3 while the puts run; G3 write
    GB/s = bytes in G3 at the end of the put phase / its duration (the clients write objects
    above 256 KiB to a file each and smaller ones into 8 MiB bucket files: temporary name,
    CRC-32, rename);
  * gets every G3-only object once (get_batch of 32 keys; the client reads 8 at once), with the
    files dropped from the page cache first (posix_fadvise DONTNEED); G3 read GB/s = bytes /
    time (pread, header and checksum verified);
  * writes the same number of bytes sequentially to one file in DIR (1 MiB writes, one fdatasync
    at the end) and reads it back after dropping it from the cache: the plain baseline.

Then, with --promotion_on_hit --promotion_admission_threshold=2, get latency for a memory hit, a
disk hit and a hit after promotion (median of many gets).

    python bench/tier_bench.py [--dir /path/on/the/fs] [--mem 256MB] [--write-doc]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from perfdoc import write_section  # noqa: E402
from store_bench import binary, free_port, library, wait_line  # noqa: E402

MB = 1 << 20
PUT_BATCH = 32  # keys per put_batch call of the put phase (several puts in flight, like get_batch)


def parse_size(s: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", s.upper())
    if not m:
        raise SystemExit(f"bad size {s!r}")
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def drop_cache(paths):
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def g3_files(root):
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.join(d, f) for f in files if f.endswith((".mcobj", ".mcbkt"))]
    return out


class Cluster:
    def __init__(self, root: str, mem: int, *flags: str):
        self.procs = []
        rpc, self.mport = free_port(), free_port()
        m = subprocess.Popen([binary("mooncake_master"), f"--rpc_port={rpc}", f"--metrics_port={self.mport}",
                              "--rpc_address=127.0.0.1", "--enable_metric_reporting=false", f"--root_fs_dir={root}",
                              "--eviction_high_watermark_ratio=0.9", "--eviction_ratio=0.1",
                              "--default_kv_lease_ttl=100", *flags],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(m)
        wait_line(m, "MOONCAKE_MASTER_READY")
        self.addr = f"127.0.0.1:{rpc}"
        c = subprocess.Popen([binary("mooncake_client"), f"--master_server_address={self.addr}", "--port=0",
                              "--host=127.0.0.1", f"--global_segment_size={mem}", "--local_buffer_size=64MB"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(c)
        wait_line(c, "MOONCAKE_CLIENT_READY")
        from mooncake.store import MooncakeDistributedStore
        self.store = MooncakeDistributedStore()
        rc = self.store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 * MB, "tcp", "", self.addr)
        if rc != 0:
            raise SystemExit(f"setup failed: {rc}")

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.mport}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[-1])
        raise KeyError(name)

    def close(self):
        self.store.close()
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def disk_only(store, key) -> bool:
    d = store.get_replica_desc(key)
    return len(d) == 1 and d[0]["tier"] == "disk"


def throughput(base: str, mem: int, size: int, label: str):
    root = tempfile.mkdtemp(prefix="g3-", dir=base)
    cl = Cluster(root, mem)
    try:
        total = 4 * mem
        n = total // size
        value = os.urandom(size)
        room = int(0.8 * mem) // size // PUT_BATCH * PUT_BATCH  # puts that fit below the watermark: no moves yet
        t0 = time.perf_counter()
        for i in range(0, n, PUT_BATCH):
            if i == room:
                mem_put_gbs = room * size / (time.perf_counter() - t0) / 1e9
            keys = [f"o{j}" for j in range(i, min(i + PUT_BATCH, n))]
            rc = cl.store.put_batch(keys, [value] * len(keys))
            if rc != 0:
                raise SystemExit(f"put_batch {i}: {rc}")
        put_s = time.perf_counter() - t0
        in_g3 = cl.metric("mooncake_master_dfs_segment_used_bytes")
        write_gbs = in_g3 / put_s / 1e9
        keys = [f"o{i}" for i in range(n) if disk_only(cl.store, f"o{i}")]
        drop_cache(g3_files(root))
        t0 = time.perf_counter()
        for j in range(0, len(keys), 32):
            for k, v in zip(keys[j:j + 32], cl.store.get_batch(keys[j:j + 32])):
                if len(v) != size:
                    raise SystemExit(f"get {k}: {len(v)} bytes")
        read_s = time.perf_counter() - t0
        read_gbs = len(keys) * size / read_s / 1e9
    finally:
        cl.close()
        shutil.rmtree(root, ignore_errors=True)
    # Baseline: the same bytes, sequentially, to one file in the same directory.
    path = os.path.join(base, "plain-seq.bin")
    block = os.urandom(MB)
    t0 = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        for _ in range(int(in_g3) // MB):
            f.write(block)
        os.fdatasync(f.fileno())
    pw = (int(in_g3) // MB) * MB / (time.perf_counter() - t0) / 1e9
    drop_cache([path])
    t0 = time.perf_counter()
    got = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(MB)
            if not b:
                break
            got += len(b)
    pr = got / (time.perf_counter() - t0) / 1e9
    os.remove(path)
    return {"label": label, "objects": n, "mem_put": mem_put_gbs, "g3_bytes": int(in_g3), "g3_write": write_gbs, "plain_write": pw,
            "g3_read": read_gbs, "plain_read": pr, "read_objects": len(keys)}


def latency(base: str, mem: int):
    root = tempfile.mkdtemp(prefix="g3-", dir=base)
    cl = Cluster(root, mem, "--promotion_on_hit", "--promotion_admission_threshold=2")
    size = MB
    try:
        n = 2 * mem // size
        value = os.urandom(size)
        for i in range(n):
            cl.store.put(f"l{i}", value)
        disk = [f"l{i}" for i in range(n) if disk_only(cl.store, f"l{i}")]
        memk = [f"l{i}" for i in range(n) if not disk_only(cl.store, f"l{i}")]

        def med(keys):
            ts = []
            for k in keys:
                t0 = time.perf_counter()
                cl.store.get(k)
                ts.append(time.perf_counter() - t0)
            return statistics.median(ts) * 1e6

        mem_us = med(memk[-50:])
        drop_cache(g3_files(root))
        disk_keys = disk[:50]
        disk_us = med(disk_keys)  # first read of each: served from the file, no promotion yet
        # make room below the watermark, then promote (second read) and time hits
        for k in memk:
            cl.store.remove(k, True)
        med(disk_keys)  # second read: promotes
        promoted = sum(1 for k in disk_keys if not disk_only(cl.store, k))
        promo_us = med(disk_keys)
        return {"memory": mem_us, "disk": disk_us, "promoted": promo_us, "promoted_n": promoted, "n": len(disk_keys)}
    finally:
        cl.close()
        shutil.rmtree(root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="directory on the filesystem to measure (the G3 tier's)")
    ap.add_argument("--mem", default="256MB", help="memory segment size (the puts write 4x this)")
    ap.add_argument("--write-doc", action="store_true", help="replace the tier tables of docs/performance.md (its tier_bench section)")
    args = ap.parse_args()
    library()
    mem = parse_size(args.mem)
    rows = [throughput(args.dir, mem, MB, "1 MiB"), throughput(args.dir, mem // 4, 64 << 10, "64 KiB")]
    lat = latency(args.dir, mem // 4)
    in_g3 = ", ".join(f"{r['g3_bytes'] / MB:.0f} MiB ({r['label']})" for r in rows)
    print(f"bytes in G3 after the put phase: {in_g3}")
    print(tables(rows, lat))
    if args.write_doc:
        print(f"wrote today's tier figures into {write_section('tier_bench', doc_section(args, rows, lat))}")


def tables(rows, lat) -> str:
    """Throughput against the plain baseline per object size, and get latency by where the object is."""
    out = ["| objects | G3 write GB/s | plain write GB/s | write ratio | G3 read GB/s | plain read GB/s | read ratio "
           "| put GB/s, memory only |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['objects']} x {r['label']} | {r['g3_write']:.2f} | {r['plain_write']:.2f} | "
                   f"{100 * r['g3_write'] / r['plain_write']:.0f} % | {r['g3_read']:.2f} | {r['plain_read']:.2f} | "
                   f"{100 * r['g3_read'] / r['plain_read']:.0f} % | {r['mem_put']:.2f} |")
    out += ["", "| get of a 1 MiB object | median |", "|---|---|",
            f"| memory hit | {lat['memory']:.0f} µs |",
            f"| disk hit (G3 file, cold cache) | {lat['disk']:.0f} µs |",
            f"| hit after promotion ({lat['promoted_n']} of {lat['n']} promoted) | {lat['promoted']:.0f} µs |"]
    return "\n".join(out)


def doc_section(args, rows, lat) -> str:
    """The tier_bench section of docs/performance.md: the command, the date, the machine and the tables."""
    fs = subprocess.run(["df", "-T", args.dir], capture_output=True, text=True).stdout.splitlines()[-1].split()
    return (f"`python bench/tier_bench.py --write-doc --mem {args.mem} --dir {args.dir}`, {time.strftime('%Y-%m-%d')}; "
            f"{platform.node()}, {os.cpu_count()} cores, {args.dir} on {fs[1]} {fs[0]}; load average "
            f"{os.getloadavg()[0]:.1f} when the runs ended. One run.\n\n" + tables(rows, lat))


if __name__ == "__main__":
    main()
