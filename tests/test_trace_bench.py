"""bench/trace_bench.py on a five-request trace written here: the master's eviction, both
policies, against hit ratios worked out by hand, and the JSON rows and plot it writes."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest
from conftest import go_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Three blocks of capacity (1536 tokens). Block ids: 1 <- 2 <- 3 and 1 <- 2 <- 4 share the
# prefix 1, 2; 5 stands alone.
#   r1 [1,2,3]: no hits, puts 1, 2, 3                       both: {1,2,3}
#   r2 [1,2,4]: hits 1, 2; put 4 evicts 3 (oldest)           both: {1,2,4}
#   r3 [1,2,3]: hits 1, 2; put 3 evicts 4 (oldest)           both: {1,2,3}
#   r4 [5]:     put 5. lru evicts 1 (oldest: read in r3)     lru: {2,3,5}
#               prefix evicts 3, the oldest chain tail (1 and 2 have cached children)  prefix: {1,2,5}
#   r5 [1,2,3]: lru: 1 missing, no hits, puts 1 evicting 2
#               prefix: hits 1, 2; put 3 evicts 5 (the tails are 2, read just now, and 5)
# 13 block references: lru 4 hits, prefix 6, infinite capacity 8 (r2 2, r3 3, r5 3).
TRACE = [
    {"timestamp": 0, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3]},
    {"timestamp": 10, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 4]},
    {"timestamp": 20, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3]},
    {"timestamp": 30, "input_length": 512, "output_length": 10, "hash_ids": [5]},
    {"timestamp": 40, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3]},
    {"timestamp": 50, "input_length": 512, "output_length": 10, "hash_ids": [6]},  # beyond --limit
]


def commands_dir() -> str:
    """Where the built mooncake_master and mooncake_client are (no rebuild: seconds, not minutes)."""
    try:
        return os.path.dirname(go_command("mooncake_master"))
    except FileNotFoundError:
        return os.path.dirname(sys.executable)  # the virtualenv's entry points


def test_trace_bench_hit_ratios(tmp_path):
    pytest.importorskip("matplotlib")
    trace = tmp_path / "trace.jsonl"
    # out of timestamp order in the file: the bench sorts
    trace.write_text("".join(json.dumps(r) + "\n" for r in [TRACE[1], TRACE[0], *TRACE[2:]]))
    out, png = tmp_path / "rows.json", tmp_path / "hits.png"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "trace_bench.py"), "--trace", str(trace),
                        "--limit", "5", "--capacity-tokens", "1536", "--block-bytes", "4096",
                        "--json", str(out), "--plot", str(png),
                        "--bin-dir", commands_dir()],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())
    assert [(x["capacity_tokens"], x["policy"]) for x in rows] == [(1536, "lru"), (1536, "prefix")]
    lru, prefix = rows
    for x in rows:
        assert x["requests"] == 5 and x["block_refs"] == 13 and x["capacity_blocks"] == 3
        assert x["lru_hit_ratio"] == 4 / 13 and x["ceiling"] == 8 / 13
        assert x["put_batches_failed"] == 0
        for k in ("get_ops_s", "put_ops_s", "get_gb_s", "put_gb_s", "get_p50_ms", "get_p99_ms",
                  "put_p50_ms", "put_p99_ms", "lookup_p50_ms", "wall_s"):
            assert x[k] > 0, k
    assert (lru["hits"], lru["gets"], lru["puts"], lru["evictions"]) == (4, 4, 7, 4)
    assert lru["hit_ratio"] == 4 / 13
    assert (prefix["hits"], prefix["gets"], prefix["puts"], prefix["evictions"]) == (6, 6, 7, 4)
    assert prefix["hit_ratio"] == 6 / 13
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (880, 594)  # 8 x 5.4 in, 110 dpi


def test_trace_bench_simulator():
    import importlib

    saved = list(sys.path)  # the bench adds the source tree's python/: keep it from the session
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        trace_bench = importlib.import_module("trace_bench")
    finally:
        sys.path[:] = saved
    assert trace_bench.block_keys([7, 8, 9]) == ["blk-7", "blk-8|blk-7", "blk-9|blk-8"]
    assert trace_bench.lru_hit_ratio(TRACE[:5], 3) == 4 / 13
    assert trace_bench.ceiling(TRACE[:5]) == 8 / 13
    assert trace_bench.lru_hit_ratio(TRACE[:5], 100) == 8 / 13
