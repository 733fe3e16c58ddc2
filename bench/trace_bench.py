"""Replays a KV-cache trace against a Mooncake store as an LLM serving system would.

The trace (--trace, Mooncake's FAST'25 format, e.g. shared/data/mooncake_conversation_trace.jsonl):
one JSON request per line with `timestamp` (ms), `input_length`, `output_length` and `hash_ids`,
one id per 512-token block, an id naming its block together with every block before it.

Per request, in timestamp order (--speed compresses time; 0 = as fast as possible): look the
request's block keys up (one batch_is_exist), take the cached prefix (up to the first miss: only
a prefix is usable), get those blocks (get_batch; a hit is a block read back whole), and put the
missing blocks (put_batch) of --block-bytes each, standing in for 512 tokens of KV cache.
Keys: "blk-<id>" for a first block, "blk-<id>|blk-<parent id>" for the others: the master's
prefix eviction policy (--eviction_policy=prefix, docs/store.md) reads the parent from them.

Capacity (--capacity-tokens, several values) sizes the one mooncake_client's memory segment:
capacity_tokens / 512 blocks of --block-bytes. The master runs with --eviction_high_watermark_ratio=1
and --eviction_ratio=0.001, so eviction takes 0.1 % of the blocks (at least one) when a put finds
no room, and with a 1 us read lease: the store holds the capacity, less at most 0.1 %. --file-tier-tokens adds the G3 file tier
(a temporary directory of that many tokens). With --master ADDR the bench uses a running store
instead (one capacity: the one that store was given; --policies names its policy).

For each capacity and policy: the prefix hit ratio (hits / block references), the ceiling
(infinite capacity), plain LRU over blocks at the same capacity computed here (a hit counts only
inside a request's cached prefix; blocks read are touched, missing blocks inserted), get/put
ops/s and GB/s, per-request latency percentiles, evictions (master metrics), disk reads.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import OrderedDict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from perfdoc import write_section  # noqa: E402
from store_bench import binary, free_port, library, wait_line  # noqa: E402

BIN_DIR = ""  # --bin-dir: the commands' directory (no rebuild from the sources)


def command(name: str) -> str:
    return os.path.join(BIN_DIR, name) if BIN_DIR else binary(name)

BLOCK_TOKENS = 512
MB = 1 << 20


def load_trace(path: str, limit: int = 0) -> list[dict]:
    """The trace's requests in timestamp order (stable: equal timestamps keep file order)."""
    reqs = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                r = json.loads(line)
                if not isinstance(r.get("hash_ids"), list) or "timestamp" not in r:
                    raise SystemExit(f"{path}:{n}: want timestamp and hash_ids")
                reqs.append(r)
    reqs.sort(key=lambda r: r["timestamp"])
    return reqs[:limit] if limit > 0 else reqs


def block_keys(hash_ids: list) -> list[str]:
    return [f"blk-{h}" if i == 0 else f"blk-{h}|blk-{hash_ids[i - 1]}" for i, h in enumerate(hash_ids)]


def ceiling(reqs: list[dict]) -> float:
    """Prefix hit ratio with infinite capacity."""
    seen, hits, refs = set(), 0, 0
    for r in reqs:
        prefix = True
        for h in r["hash_ids"]:
            refs += 1
            if prefix and h in seen:
                hits += 1
            else:
                prefix = False
            seen.add(h)
    return hits / refs if refs else 0.0


def lru_hit_ratio(reqs: list[dict], capacity_blocks: int) -> float:
    """Plain LRU over blocks, as the store replays it: the cached prefix is read (touched), the
    missing blocks after it are inserted (evicting the least recently used), blocks present after
    the first miss are left alone."""
    cache: OrderedDict = OrderedDict()
    hits = refs = 0
    for r in reqs:
        prefix = True
        for h in r["hash_ids"]:
            refs += 1
            if h in cache:
                if prefix:
                    hits += 1
                    cache.move_to_end(h)
                continue
            prefix = False
            cache[h] = None
            if len(cache) > capacity_blocks:
                cache.popitem(last=False)
    return hits / refs if refs else 0.0


class Cluster:
    """A master and one mooncake_client holding `capacity_blocks` blocks of memory."""

    def __init__(self, capacity_blocks: int, block_bytes: int, policy: str, file_tokens: int = 0):
        self.procs, self.tmp = [], None
        rpc, self.mport = free_port(), free_port()
        flags = [f"--rpc_port={rpc}", f"--metrics_port={self.mport}", "--rpc_address=127.0.0.1",
                 "--enable_metric_reporting=false", f"--eviction_policy={policy}",
                 "--eviction_high_watermark_ratio=1", "--eviction_ratio=0.001", "--default_kv_lease_ttl=1us"]
        if file_tokens:
            self.tmp = tempfile.mkdtemp(prefix="trace-g3-")
            flags += [f"--root_fs_dir={self.tmp}", "--dfs_full_policy=evict_oldest",
                      f"--global_file_segment_size={file_tokens // BLOCK_TOKENS * block_bytes}"]
        m = subprocess.Popen([command("mooncake_master"), *flags], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        self.procs.append(m)
        wait_line(m, "MOONCAKE_MASTER_READY")
        self.addr = f"127.0.0.1:{rpc}"
        c = subprocess.Popen([command("mooncake_client"), f"--master_server_address={self.addr}", "--port=0",
                              "--host=127.0.0.1", f"--global_segment_size={capacity_blocks * block_bytes}",
                              "--local_buffer_size=16MB"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(c)
        wait_line(c, "MOONCAKE_CLIENT_READY")

    def close(self):
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


def metrics(port: int) -> dict:
    out = {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line and not line.startswith("#") and "{" not in line:
                    name, _, v = line.rpartition(" ")
                    out[name] = float(v)
    except OSError:
        pass
    return out


def replay(addr: str, reqs: list[dict], block_bytes: int, speed: float, t0: float) -> dict:
    """Serves reqs in order against the store at addr; returns counts and per-request timings."""
    from mooncake.store import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 64 * MB, "tcp", "", addr)
    if rc != 0:
        raise SystemExit(f"setup against {addr} failed: {rc}")
    value = bytes(block_bytes)
    st = {"refs": 0, "hits": 0, "gets": 0, "puts": 0, "put_failed": 0, "get_s": 0.0, "put_s": 0.0,
          "lookup_ms": [], "get_ms": [], "put_ms": []}
    try:
        first = reqs[0]["timestamp"] if reqs else 0
        for r in reqs:
            if speed > 0:
                wait = t0 + (r["timestamp"] - first) / 1000 / speed - time.time()
                if wait > 0:
                    time.sleep(wait)
            keys = block_keys(r["hash_ids"])
            st["refs"] += len(keys)
            a = time.perf_counter()
            ex = store.batch_is_exist(keys)
            b = time.perf_counter()
            st["lookup_ms"].append((b - a) * 1e3)
            n = 0
            while n < len(keys) and ex[n] == 1:
                n += 1
            if n:
                vals = store.get_batch(keys[:n])
                c = time.perf_counter()
                st["get_ms"].append((c - b) * 1e3)
                st["get_s"] += c - b
                st["gets"] += n
                for v in vals:  # a block evicted between lookup and get ends the usable prefix
                    if len(v) != block_bytes:
                        break
                    st["hits"] += 1
            missing = [k for k, e in zip(keys[n:], ex[n:]) if e != 1]
            if missing:
                c = time.perf_counter()
                rc = store.put_batch(missing, [value] * len(missing))
                d = time.perf_counter()
                st["put_ms"].append((d - c) * 1e3)
                st["put_s"] += d - c
                st["puts"] += len(missing)
                if rc != 0:
                    st["put_failed"] += 1
    finally:
        store.close()
    return st


def _worker(args):
    return replay(*args)


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def run_one(args, reqs, capacity_tokens: int, policy: str) -> dict:
    blocks = capacity_tokens // BLOCK_TOKENS
    cl = None
    if args.master:
        addr, mport = args.master, args.metrics_port
    else:
        cl = Cluster(blocks, args.block_bytes, policy, args.file_tier_tokens)
        addr, mport = cl.addr, cl.mport
    try:
        before = metrics(mport) if mport else {}
        t0 = time.time() + 0.2
        start = time.perf_counter()
        if args.clients <= 1:
            parts = [replay(addr, reqs, args.block_bytes, args.speed, t0)]
        else:
            jobs = [(addr, reqs[i::args.clients], args.block_bytes, args.speed, t0) for i in range(args.clients)]
            with multiprocessing.get_context("spawn").Pool(args.clients) as pool:
                parts = pool.map(_worker, jobs)
        wall = time.perf_counter() - start
        after = metrics(mport) if mport else {}
    finally:
        if cl:
            cl.close()
    st = {k: (sum((p[k] for p in parts), []) if isinstance(parts[0][k], list) else sum(p[k] for p in parts))
          for k in parts[0]}
    delta = lambda name: after.get(name, 0) - before.get(name, 0)  # noqa: E731
    gb = args.block_bytes / 1e9
    return {
        "capacity_tokens": capacity_tokens, "capacity_blocks": blocks, "policy": policy,
        "file_tier_tokens": args.file_tier_tokens, "clients": args.clients, "requests": len(reqs),
        "block_refs": st["refs"], "hits": st["hits"],
        "hit_ratio": st["hits"] / st["refs"] if st["refs"] else 0.0,
        "lru_hit_ratio": lru_hit_ratio(reqs, blocks), "ceiling": ceiling(reqs),
        # with the file tier: plain LRU over memory and file capacity together
        "lru_hit_ratio_total": lru_hit_ratio(reqs, blocks + args.file_tier_tokens // BLOCK_TOKENS),
        "gets": st["gets"], "puts": st["puts"], "put_batches_failed": st["put_failed"],
        "get_ops_s": st["gets"] / st["get_s"] if st["get_s"] else 0.0,
        "put_ops_s": st["puts"] / st["put_s"] if st["put_s"] else 0.0,
        "get_gb_s": st["gets"] * gb / st["get_s"] if st["get_s"] else 0.0,
        "put_gb_s": st["puts"] * gb / st["put_s"] if st["put_s"] else 0.0,
        "lookup_p50_ms": pct(st["lookup_ms"], 50), "lookup_p99_ms": pct(st["lookup_ms"], 99),
        "get_p50_ms": pct(st["get_ms"], 50), "get_p99_ms": pct(st["get_ms"], 99),
        "put_p50_ms": pct(st["put_ms"], 50), "put_p99_ms": pct(st["put_ms"], 99),
        "evictions": int(delta("mooncake_master_eviction_total")),
        "disk_reads": int(delta("mooncake_master_disk_reads_total")),
        "wall_s": wall,
    }


def table(rows: list[dict]) -> str:
    out = ["| capacity (tokens) | tier | policy | hit ratio | plain LRU (sim) | ceiling | get ops/s | get GB/s | put ops/s | put GB/s | get p50 / p99 ms | put p50 / p99 ms | evictions |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        tier = f"memory + file {r['file_tier_tokens'] / 1e6:g}M" if r["file_tier_tokens"] else "memory"
        out.append(f"| {r['capacity_tokens'] / 1e6:g}M | {tier} | {r['policy']} | {100 * r['hit_ratio']:.2f} % | "
                   f"{100 * r['lru_hit_ratio']:.2f} % | {100 * r['ceiling']:.2f} % | {r['get_ops_s']:,.0f} | {r['get_gb_s']:.2f} | "
                   f"{r['put_ops_s']:,.0f} | {r['put_gb_s']:.2f} | {r['get_p50_ms']:.2f} / {r['get_p99_ms']:.2f} | "
                   f"{r['put_p50_ms']:.2f} / {r['put_p99_ms']:.2f} | {r['evictions']:,} |")
    return "\n".join(out)


def plot(rows: list[dict], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5.4), dpi=110)
    caps = sorted({r["capacity_tokens"] for r in rows})
    lru = {r["capacity_tokens"]: r["lru_hit_ratio"] for r in rows}
    ax.plot([c / 1e6 for c in caps], [100 * lru[c] for c in caps], "k--", marker="x", label="plain LRU (simulated)")
    for key in sorted({(r["policy"], r["file_tier_tokens"]) for r in rows}):
        pts = sorted((r["capacity_tokens"], r["hit_ratio"]) for r in rows if (r["policy"], r["file_tier_tokens"]) == key)
        label = f"store, --eviction_policy={key[0]}" + (f", file tier {key[1] / 1e6:g}M tokens" if key[1] else "")
        ax.plot([c / 1e6 for c, _ in pts], [100 * h for _, h in pts], marker="o", label=label)
    ax.axhline(100 * rows[0]["ceiling"], color="grey", linestyle=":", label="ceiling (infinite capacity)")
    ax.set_xscale("log")
    ax.set_xlabel("capacity (million tokens, 512-token blocks)")
    ax.set_ylabel("prefix hit ratio (% of block references)")
    ax.set_title("Trace replay: prefix hit ratio against capacity")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def doc_section(args, rows) -> str:
    cmd = " ".join(["python", "bench/trace_bench.py", *sys.argv[1:]])
    return (f"`{cmd}`, {time.strftime('%Y-%m-%d')} ({rows[0]['requests']:,} requests, {rows[0]['block_refs']:,} block references, "
            f"{args.block_bytes // 1024} KiB per 512-token block, {args.clients} serving client(s), "
            f"{'as fast as possible' if args.speed == 0 else f'{args.speed:g}x real time'}, one master, one "
            f"mooncake_client holding the memory, tcp on loopback, {os.cpu_count()} CPUs):\n\n"
            + table(rows) + "\n\n![prefix hit ratio against capacity](trace_bench.png)\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=os.path.join(ROOT, "..", "shared", "data", "mooncake_conversation_trace.jsonl"))
    ap.add_argument("--limit", type=int, default=0, help="replay only the first N requests (in timestamp order)")
    ap.add_argument("--speed", type=float, default=0, help="time compression (2 = twice real time); 0 = as fast as possible")
    ap.add_argument("--block-bytes", type=int, default=64 << 10, help="bytes per 512-token block (default 64 KiB)")
    ap.add_argument("--capacity-tokens", type=float, nargs="+", default=[1e6, 3e6, 10e6])
    ap.add_argument("--policies", default="lru,prefix", help="master eviction policies to run, comma-separated")
    ap.add_argument("--file-tier-tokens", type=lambda s: int(float(s)), default=0, help="add a G3 file tier of this many tokens (0: memory only)")
    ap.add_argument("--clients", type=int, default=1, help="serving processes sharing the requests")
    ap.add_argument("--master", default="", help="use this running master (its store's capacity is --capacity-tokens)")
    ap.add_argument("--metrics-port", type=int, default=0, help="with --master: its metrics port (for evictions)")
    ap.add_argument("--bin-dir", default="", help="run mooncake_master and mooncake_client from this directory and use the "
                    "library as built (default: rebuild both from this checkout, as store_bench does)")
    ap.add_argument("--json", default="", help="write the rows here")
    ap.add_argument("--plot", default="", help="draw hit ratio against capacity into this PNG")
    ap.add_argument("--write-doc", action="store_true", help="replace docs/performance.md's trace_bench section and docs/trace_bench.png")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still stops the servers (finally)
    policies = [p for p in args.policies.split(",") if p]
    if args.master and (len(args.capacity_tokens) != 1 or len(policies) != 1):
        raise SystemExit("--master: give one --capacity-tokens and one policy (the running store's)")
    reqs = load_trace(args.trace, args.limit)
    global BIN_DIR
    BIN_DIR = args.bin_dir
    if not args.master and not BIN_DIR:
        library()
    rows = []
    for cap in args.capacity_tokens:
        for pol in policies:
            rows.append(run_one(args, reqs, int(cap), pol))
            r = rows[-1]
            print(f"{cap / 1e6:g}M tokens, {pol}: hit {100 * r['hit_ratio']:.2f} % (LRU sim {100 * r['lru_hit_ratio']:.2f} %, "
                  f"ceiling {100 * r['ceiling']:.2f} %), {r['wall_s']:.0f} s", flush=True)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.plot:
        plot(rows, args.plot)
    if args.write_doc:
        plot(rows, os.path.join(ROOT, "docs", "trace_bench.png"))
        print(f"wrote the trace figures into {write_section('trace_bench', doc_section(args, rows))}")


if __name__ == "__main__":
    main()
