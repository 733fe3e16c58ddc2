"""Elastic membership with real processes: ranks killed with SIGKILL during collectives and p2p,
survivors' results and hints, replacement and recovery, growth with is_extension, subgroups,
manual mode, and the rank that proposed the last membership change being the one killed.

The rendezvous store is a TCPStore hosted here, outside the ranks (as torchrun's agent hosts
it), so any rank may die without taking the store along."""

from __future__ import annotations

import pytest

from elastic_harness import COLLECTIVE_TIMEOUT_S, wait_store


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
        # get_world_size() is the world size: the highest active rank + 1.
        world_size = max(x for x in range(world) if x != victim or not auto) + 1
        assert o["world_size_after"] == world_size, o
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
        # The survivors' p2p goes on; a receive from the dead rank and a send to it complete
        # at once with the rank in their hints (upstream's semantics, issue 33).
        o = res[0]
        assert o["correct"], o
        assert o["recv_from_dead"] == {"local_success": False, "hint": [2]}, o
        assert o["recv_from_dead_s"] < COLLECTIVE_TIMEOUT_S, o
        assert o["send_to_dead"] == {"local_success": False, "hint": [2]}, o
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
