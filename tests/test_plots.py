"""The benchmarks' plots (bench/pgbench.py --plot, bench/store_bench.py --plot) and pgbench's
progress lines."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytest.importorskip("matplotlib")


def bench_module(name: str):
    """Imports bench/<name>.py leaving sys.path as it was (store_bench adds the source tree's
    python/ to it, which must not leak into the other tests of the session)."""
    import importlib

    saved = list(sys.path)
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path[:] = saved


def png_size(path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk; fails unless path is a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", head
    return struct.unpack(">II", head[16:24])


def test_pgbench_plot(tmp_path):
    pgbench = bench_module("pgbench")
    rows = []
    for i, size in enumerate([8, 4096, 1 << 20]):
        m, g = {"busbw": 0.1 * (i + 1)}, {"busbw": 0.05 * (i + 1)}
        rows.append({"collective": "all_reduce", "size": size, "ranks": 2, "dtype": "float32",
                     "mooncake-cpu": m, "gloo": g, "mooncake-cpu/gloo": 2.0})
    out = tmp_path / "sub" / "pg.png"
    pgbench.plot(rows, str(out))
    assert png_size(out) == (880, 594)  # figsize 8 x 5.4 inches at 110 dpi
    assert [pgbench.human(s) for s in (8, 4096, 3 << 20, 1 << 30, 1000)] == ["8 B", "4 KiB", "3 MiB", "1 GiB", "1000 B"]


def test_store_bench_plot(tmp_path):
    store_bench = bench_module("store_bench")
    rows = [{"size": label, "n": n, "bytes": size, "mc_put": (1.0, 0.5 * k), "mc_get": (1.0, 0.6 * k),
             "r_set": (1.0, 0.2 * k), "r_get": (1.0, 0.3 * k)}
            for k, (size, label, n) in enumerate(store_bench.SIZES, start=1)]
    out = tmp_path / "store.png"
    store_bench.plot([("Same host", rows), ("tcp", rows), ("empty", [])], str(out))
    assert png_size(out) == (1364, 572)  # two panels: 12.4 x 5.2 inches at 110 dpi


def test_pgbench_progress_lines_and_plot_file(tmp_path):
    env = dict(os.environ)
    out = tmp_path / "sweep.png"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "pgbench.py"), "--collective", "all_reduce",
                        "--backend", "mooncake-cpu,gloo", "-b", "8", "-e", "64", "-f", "8", "-n", "2", "-w", "1",
                        "-g", "2", "--plot", str(out)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    progress = [line.split(" done ")[0] for line in r.stderr.splitlines() if line.startswith("pgbench: all_reduce")]
    assert progress == ["pgbench: all_reduce 8 B", "pgbench: all_reduce 64 B"], r.stderr
    assert f"pgbench: plot written to {out}" in r.stderr
    assert png_size(out) == (880, 594)
