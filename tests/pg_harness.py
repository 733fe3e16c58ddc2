"""Helpers for the process-group tests: start N real rank processes (spawn, never fork: a process
that loaded the Go runtime must not fork), give each a FileStore rendezvous, collect every
rank's list of failed checks, and kill everything on a deadline so a hang fails the test instead
of stalling the suite."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from typing import Any, Callable, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PY = os.path.join(ROOT, "python")
_TESTS = os.path.dirname(os.path.abspath(__file__))
for _p in (_TESTS,):
    if _p not in sys.path:
        sys.path.insert(0, _p)
try:  # installed package first; the source tree when not installed
    import mooncake  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, _PY)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

OP_TIMEOUT = timedelta(seconds=60)


class Checker:
    """Collects failed checks instead of stopping at the first one."""

    def __init__(self, rank: int):
        self.rank = rank
        self.failures: List[str] = []
        self.count = 0

    def eq(self, name: str, got: torch.Tensor, want: torch.Tensor, atol: float = 0.0,
           rtol: float = 0.0) -> None:
        self.count += 1
        try:
            if got.dtype != want.dtype or got.shape != want.shape:
                raise AssertionError(
                    f"dtype/shape {got.dtype}{tuple(got.shape)} != {want.dtype}{tuple(want.shape)}")
            if got.is_complex():
                got, want = torch.view_as_real(got), torch.view_as_real(want)
            if atol == 0.0 and rtol == 0.0:
                ok = torch.equal(got, want)
            else:
                ok = torch.allclose(got.double(), want.double(), atol=atol, rtol=rtol)
            if not ok:
                raise AssertionError(f"got {got.flatten()[:16].tolist()} want {want.flatten()[:16].tolist()}")
        except AssertionError as e:
            self.failures.append(f"rank {self.rank} {name}: {e}")

    def true(self, name: str, cond: bool, detail: str = "") -> None:
        self.count += 1
        if not cond:
            self.failures.append(f"rank {self.rank} {name}: {detail or 'false'}")

    def run(self, name: str, fn: Callable[[], Any]) -> Any:
        """Runs fn; an exception is a failure (and is reported with its traceback)."""
        self.count += 1
        try:
            return fn()
        except Exception:  # noqa: BLE001
            self.failures.append(f"rank {self.rank} {name}: raised\n{traceback.format_exc()}")
            return None

    def raises(self, name: str, fn: Callable[[], Any], exc=RuntimeError, match: str = "") -> None:
        self.count += 1
        try:
            fn()
        except exc as e:  # noqa: BLE001
            if match and match.lower() not in str(e).lower():
                self.failures.append(f"rank {self.rank} {name}: message {str(e)[:300]!r} lacks {match!r}")
            return
        except Exception as e:  # noqa: BLE001
            self.failures.append(f"rank {self.rank} {name}: raised {type(e).__name__} not {exc.__name__}: {e}")
            return
        self.failures.append(f"rank {self.rank} {name}: did not raise")


def init(rank: int, world: int, store_path: str, backend: str = "mooncake-cpu", **kw) -> None:
    import mooncake_pg  # noqa: F401  registers the backends in this (spawned) process

    store = dist.FileStore(store_path, world)
    dist.init_process_group(backend, rank=rank, world_size=world, store=store,
                            timeout=kw.pop("timeout", OP_TIMEOUT), **kw)


def _entry(rank: int, fn_name: str, module: str, world: int, tmpdir: str, args: tuple,
           dump_after: float) -> None:
    import faulthandler

    # A crashing rank prints the Python line it died on; a hung one where it is stuck before the
    # parent kills it.
    faulthandler.enable()
    faulthandler.dump_traceback_later(dump_after, exit=False)
    os.environ.setdefault("MOONCAKE_GOMAXPROCS", "2")
    import importlib

    mod = importlib.import_module(module)
    fn = getattr(mod, fn_name)
    ck = Checker(rank)
    try:
        fn(ck, rank, world, tmpdir, *args)
    except Exception:  # noqa: BLE001
        ck.failures.append(f"rank {rank}: worker raised\n{traceback.format_exc()}")
    with open(os.path.join(tmpdir, f"result.{rank}.json"), "w") as f:
        json.dump({"failures": ck.failures, "count": ck.count}, f)
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def run_ranks(fn: Callable, world: int, *args, timeout: float = 300.0) -> dict:
    """Runs fn(checker, rank, world, tmpdir, *args) in `world` spawned processes and fails (with
    every rank's failed checks) if any check failed, a process died, or the deadline passed."""
    with tempfile.TemporaryDirectory(prefix="mcpg-") as tmpdir:
        ctx = mp.start_processes(
            _entry, args=(fn.__name__, fn.__module__, world, tmpdir, args, max(timeout - 20, 10)),
            nprocs=world,
            join=False, start_method="spawn")
        deadline = time.time() + timeout
        error = None
        try:
            while True:
                remaining = deadline - time.time()
                if remaining <= 0:
                    error = f"timed out after {timeout}s"
                    break
                try:
                    if ctx.join(timeout=min(remaining, 1.0)):
                        break
                except Exception as e:  # noqa: BLE001  a rank died
                    error = f"rank process failed: {e}"
                    break
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
            for p in ctx.processes:
                p.join(5)
        failures, count = [], 0
        for r in range(world):
            path = os.path.join(tmpdir, f"result.{r}.json")
            if not os.path.exists(path):
                failures.append(f"rank {r}: no result")
                continue
            with open(path) as f:
                res = json.load(f)
            failures += res["failures"]
            count += res["count"]
        if error:
            failures.insert(0, error)
        if failures:
            shown = "\n".join(failures[:40])
            raise AssertionError(f"{len(failures)} failed checks of {count} (world {world}):\n{shown}")
        return {"count": count}
