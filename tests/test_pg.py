"""Process-group backend tests: every op x reduce op x dtype at world sizes 1-4 (and a subset at
8), compared with exact arithmetic and cross-checked with gloo; subgroups, async Work and
futures, objects, batch p2p, any-source recv, bad input, destroy + re-init, env:// rendezvous,
group options, DDP against gloo, and CUDA staging where a GPU exists.

Each test launches one set of real rank processes (spawn) running many checks, so the whole file
stays within a few minutes on a 2-core machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import pg_harness  # noqa: F401  (sets sys.path for the source tree)
import pg_workers
from conftest import free_port
from pg_harness import run_ranks

import torch


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ops_matrix(world):
    run_ranks(pg_workers.worker_ops, world, True, timeout=900)


def test_ops_world8():
    run_ranks(pg_workers.worker_ops, 8, False, timeout=900)


@pytest.mark.parametrize("world", [1, 2])
def test_destroy_reinit(world):
    run_ranks(pg_workers.worker_reinit, world, 3, timeout=300)


def _free_port() -> int:
    return free_port()


def test_env_init_and_options():
    run_ranks(pg_workers.worker_tcpstore, 3, _free_port(), timeout=300)


def test_ddp_matches_gloo():
    run_ranks(pg_workers.worker_ddp, 2, 20, timeout=300)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_staging():
    import mooncake.pg as mpg

    if not mpg._pg_ext.WITH_CUDA:
        pytest.skip("mooncake._pg_ext was built without CUDA support")
    run_ranks(pg_workers.worker_cuda, 2, timeout=300)


def test_registration_idempotent_and_options():
    code = r"""
import torch.distributed as dist
import mooncake_pg, mooncake.pg, importlib
importlib.reload(mooncake.pg)
import mooncake_pg as again
assert "mooncake-cpu" in dist.Backend.backend_list and "mooncake" in dist.Backend.backend_list
assert dist.Backend.backend_capability["mooncake-cpu"] == ["cpu"]
assert dist.Backend.backend_capability["mooncake"] == ["cuda"]
o = mooncake_pg.MooncakeBackendOptions(8)
assert (o.max_group_size, o.is_extension, o.auto_deactivate_on_failure, o.auto_sync_on_failure) == (8, False, True, True)
try:
    mooncake_pg.MooncakeBackendOptions(4, False, False, True)
    raise SystemExit("auto_sync without auto_deactivate accepted")
except ValueError:
    pass
assert mooncake_pg.ProposalStatus.AppliedWithDroppedRanks == 2
assert mooncake_pg.SyncAfterFailureStatus.Rejected == 2
print("ok")
"""
    env = dict(os.environ)
    import mooncake  # the package this test session uses: installed, or the source tree

    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(mooncake.__file__))),
         env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
    env["MOONCAKE_PG_AUTO_DEACTIVATE_ON_FAILURE"] = "0"
    env["MOONCAKE_PG_AUTO_SYNC_ON_FAILURE"] = "0"
    r = subprocess.run(
        [sys.executable, "-c",
         "import mooncake_pg as m; o=m.MooncakeBackendOptions(0); "
         "assert not o.auto_deactivate_on_failure and not o.auto_sync_on_failure; print('ok')"],
        capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("collective", ["all_reduce", "all_to_all"])
def test_pgbench_runs_and_checks(collective, tmp_path):
    """bench/pgbench.py: both backends side by side, results checked, rounds alternated, the
    JSON rows complete (the benchmark the performance figures come from must keep working)."""
    import mooncake

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(mooncake.__file__))),
         env.get("PYTHONPATH", "")])
    out = tmp_path / "rows.json"
    bench = os.path.join(pg_harness.ROOT, "bench", "pgbench.py")
    r = subprocess.run(
        [sys.executable, bench, "--collective", collective, "--backend", "mooncake-cpu,gloo",
         "-b", "8", "-e", "64K", "-f", "8", "-n", "2", "-w", "1", "-r", "2", "-g", "2",
         "--cpu", "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(out.read_text())
    assert [row["size"] for row in rows] == [8, 64, 512, 4096, 32768]
    for row in rows:
        for b in ("mooncake-cpu", "gloo"):
            assert row[b]["wrong"] == 0, (b, row)
            assert len(row[b]["rounds_us"]) == 2 and row[b]["time_us"] > 0
            assert row[b]["cpu_us"] > 0 and row[b]["context_switches"] >= 0
        assert row["mooncake-cpu/gloo"] == pytest.approx(
            row["mooncake-cpu"]["busbw"] / row["gloo"]["busbw"])
    assert "mooncake-cpu/gloo" in r.stdout and "cpu(us)" in r.stdout


def test_segv_trace_prints_a_native_backtrace():
    """MOONCAKE_PG_SEGV_TRACE=1: a crash in native code (here a read of address 0) prints the
    faulting thread's native frames before the process dies of the signal; unset, it does not."""
    code = ("import ctypes, mooncake.pg as m; m._pg_ext; print('LOADED', flush=True); "
            "ctypes.string_at(0)")
    for on in (True, False):
        env = dict(os.environ)
        env.pop("MOONCAKE_PG_SEGV_TRACE", None)
        if on:
            env["MOONCAKE_PG_SEGV_TRACE"] = "1"
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert "LOADED" in p.stdout and p.returncode != 0, (p.returncode, p.stdout, p.stderr[-2000:])
        traced = "mooncake._pg_ext: fatal signal; native backtrace:" in p.stderr
        assert traced == on, p.stderr[-2000:]
        if on:
            assert "libc.so" in p.stderr or "python" in p.stderr, p.stderr[-2000:]
