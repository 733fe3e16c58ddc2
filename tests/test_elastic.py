"""Elastic membership with real processes: ranks killed with SIGKILL during collectives and p2p,
survivors' results and hints, replacement and recovery, growth with is_extension, subgroups,
manual mode, and the rank that proposed the last membership change being the one killed.

The rendezvous store is a TCPStore hosted here, outside the ranks (as torchrun's agent hosts
it), so any rank may die without taking the store along."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
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

    def start(self, name: str, rank: int, world: int, *extra: str) -> None:
        cmd = [sys.executable, WORKER, "--port", str(self.port), "--rank", str(rank),
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


@pytest.fixture
def job():
    jobs = []

    def make(world):
        j = Job(world)
        jobs.append(j)
        return j

    yield make
    for j in jobs:
        j.close()


def run_kill(job, op: str, victim: int, *extra: str, recover: bool = False, world: int = 4):
    j = job(world)
    args = ["--scenario", "kill", "--victim", str(victim), "--op", op, *extra]
    if recover:
        args.append("--recover")
    for r in range(world):
        j.start(f"rank{r}", r, world, *args)
    assert j.killed(f"rank{victim}") == -9
    if recover:
        wait_store(j.store, [f"survivor_{r}_waiting" for r in range(world) if r != victim])
        j.start("replacement", victim, world, "--scenario", "replacement")
    res = {r: j.result(f"rank{r}") for r in range(world) if r != victim}
    if recover:
        res["replacement"] = j.result("replacement")
    return res


def wait_store(store, keys, timeout=120):
    end = time.time() + timeout
    for k in keys:
        while not store.check([k]):
            assert time.time() < end, f"no {k}"
            time.sleep(0.05)


def check_survivors(res: dict, victim: int, world: int, auto: bool = True) -> None:
    survivors = [r for r in range(world) if r != victim]
    for r in survivors:
        o = res[r]
        assert o["before"] == {"ok": True, "hint": [], "local_success": True}, o
        assert o["correct"], o
        assert o["elapsed_s"] < COLLECTIVE_TIMEOUT_S, o
        if "hint" in o:
            assert o["hint"] == [victim] and o["local_success"] is False, o
        assert o["peer_state"] == [x != victim for x in range(world)], o
        assert o["synced"] == world - 1, o
        # get_world_size() is the active extent: the highest active rank + 1.
        extent = max(x for x in range(world) if x != victim or not auto) + 1
        assert o["world_size_after"] == extent, o
        if auto:
            assert o["active_after"] == [int(x != victim) for x in range(world)], o
            assert o["epoch_after"] == o["epoch_before"] + 1, o
            assert o["next"] == {"ok": True, "hint": [], "local_success": True}, o
        else:
            assert o["active_after"] == [1] * world, o
            assert o["epoch_after"] == o["epoch_before"], o
            assert o["next"] == {"ok": True, "hint": [victim], "local_success": False}, o
        assert "membership decision #1" in o["_stderr"], o["_stderr"][-2000:]


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "send_recv"])
def test_kill_during_op(job, op):
    victim = 2
    res = run_kill(job, op, victim)
    if op == "send_recv":
        # The survivors' p2p goes on; receiving from the dead rank fails fast and says why.
        o = res[0]
        assert o["correct"], o
        assert "rank 2" in o["recv_from_dead"] and "returned" != o["recv_from_dead"], o
        assert o["recv_from_dead_s"] < COLLECTIVE_TIMEOUT_S, o
        assert "rank 2" in o["send_to_dead"] and "returned" != o["send_to_dead"], o
        assert o["send_to_dead_s"] < COLLECTIVE_TIMEOUT_S, o
        for r in (1, 3):
            assert res[r]["correct"], res[r]
        return
    check_survivors(res, victim, 4)
    for r in (0, 1):
        assert res[r]["sub_without"] == {"ok": True, "hint": [], "local_success": True}, res[r]
    sub_with = [r for r in range(4) if r != (victim + 2) % 4]  # group ranks index this list
    for r in (1, 3):
        assert res[r]["sub_with"]["ok"], res[r]
        assert res[r]["sub_with"]["hint"] == [sub_with.index(victim)], res[r]


def test_kill_then_replace_and_recover(job):
    res = run_kill(job, "all_reduce", 2, recover=True)
    check_survivors(res, 2, 4)
    for r in (0, 1, 3):
        o = res[r]
        assert o["recover"][0] == 1 and o["recover"][2] == [], o
        assert o["active_after_recover"] == [1, 1, 1, 1], o
        assert o["after_recover"] == {"ok": True, "hint": [], "local_success": True}, o
        assert o["sum_after_join"] == 10.0, o
    rep = res["replacement"]
    assert rep["join"] == 1 and rep["active"] == [1, 1, 1, 1], rep
    assert rep["after_join"]["ok"] and rep["sum_after_join"] == 10.0, rep
    assert rep["epoch"] == res[0]["epoch_after"] + 1, (rep, res[0])


def test_killed_rank_is_the_last_proposer(job):
    # Rank 0 proposed the group's only decisions so far (none) and is the lowest rank: with
    # upstream's design it would be the coordinator. Here the survivors decide without it.
    res = run_kill(job, "all_reduce", 0, recover=True)
    check_survivors(res, 0, 4)
    for r in (1, 2, 3):
        assert res[r]["sum_after_join"] == 10.0, res[r]
    assert res["replacement"]["sum_after_join"] == 10.0


def test_manual_mode(job):
    res = run_kill(job, "all_reduce", 3, "--manual")
    check_survivors(res, 3, 4, auto=False)
    for r in (0, 1, 2):
        o = res[r]
        assert o["deactivate"][0] == 1 and o["deactivate"][1] == o["epoch_before"] + 1, o
        assert o["deactivate_again"] == 1, o
        assert o["active_after_deactivate"] == [1, 1, 1, 0], o
        assert o["world_size_after_deactivate"] == 3, o
        assert o["after_deactivate"] == {"ok": True, "hint": [], "local_success": True}, o


def test_extend_group(job):
    j = job(3)
    for r in range(3):
        j.start(f"rank{r}", r, 3, "--scenario", "extend", "--max-size", "4")
    j.start("new", 3, 4, "--scenario", "replacement", "--extension", "--max-size", "4")
    res = {r: j.result(f"rank{r}") for r in range(3)}
    new = j.result("new")
    for r in range(3):
        o = res[r]
        assert o["extend"][0] == 1 and o["active"] == [1, 1, 1, 1], o
        assert o["world_size_after_extend"] == 4, o
        assert o["all_gather_after_extend"] == [0.0, 1.0, 2.0, 3.0], o
        assert o["after_extend"] == {"ok": True, "hint": [], "local_success": True}, o
        assert o["sum_after_join"] == 10.0, o
    assert new["join"] == 1 and new["sum_after_join"] == 10.0, new
    assert new["world_size"] == 4 and new["all_gather_after_extend"] == [0.0, 1.0, 2.0, 3.0], new
    # A subgroup made after the extension includes the new rank.
    assert res[1]["subgroup_with_new_rank"] == 6.0 and new["subgroup_with_new_rank"] == 6.0, (res[1], new)
