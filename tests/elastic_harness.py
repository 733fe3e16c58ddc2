"""Running elastic-membership workers as real processes: a TCPStore hosted by the test
process (as torchrun's agent hosts it, so any rank may die without taking the store along),
workers that print one "RESULT <json>" line (conftest.py's ``job`` fixture makes jobs and
kills what is left of them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta

import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "elastic_worker.py")
COLLECTIVE_TIMEOUT_S = 10.0  # the workers call set_collective_timeout_us(10 s)


def _env():
    env = dict(os.environ)
    import mooncake

    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(mooncake.__file__))),
         env.get("PYTHONPATH", "")])
    env.setdefault("MOONCAKE_GOMAXPROCS", "2")
    return env


class Job:
    def __init__(self, world: int):
        self.store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                   timeout=timedelta(seconds=120))
        self.port = self.store.port
        self.world = world
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, rank: int, world: int, *extra: str, worker: str = WORKER) -> None:
        cmd = [sys.executable, worker, "--port", str(self.port), "--rank", str(rank),
               "--world", str(world), *extra]
        self.procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                            text=True, env=_env())

    def result(self, name: str, timeout: float = 180) -> dict:
        p = self.procs[name]
        try:
            so, se = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
            raise AssertionError(f"{name} hung:\n{so}\n{se[-4000:]}")
        for line in so.splitlines():
            if line.startswith("RESULT "):
                res = json.loads(line[7:])
                assert "error" not in res, f"{name}: {res['error']}\n{se[-4000:]}"
                res["_stderr"] = se
                return res
        raise AssertionError(f"{name} printed no result (rc {p.returncode}):\n{so}\n{se[-4000:]}")

    def killed(self, name: str, timeout: float = 120) -> int:
        return self.procs[name].wait(timeout)

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


def wait_store(store, keys, timeout=120):
    end = time.time() + timeout
    for k in keys:
        while not store.check([k]):
            assert time.time() < end, f"no {k}"
            time.sleep(0.05)
