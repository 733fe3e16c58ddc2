"""Upstream's failure semantics outside collectives, with real processes (issue 33): p2p with a
dead peer completes with get_local_success False and the peer in get_failed_ranks_hint, and with
auto_sync_on_failure the new view is applied before the failed p2p completes; all_gather /
reduce_scatter with buffers sized for the survivors (3 of max_group_size 4) before any op of
theirs met the failure, then a replacement recovered and joined (upstream's
test_allgather_reduce_scatter_recovery). The victim dies by SIGKILL; the rendezvous store is
hosted by the test process (tests/pg_p2p_fault_worker.py)."""

from __future__ import annotations

import os
import time

import pytest

from elastic_harness import HERE, wait_store

WORKER = os.path.join(HERE, "pg_p2p_fault_worker.py")


def _kill_victim(j, name: str) -> None:
    wait_store(j.store, ["victim_ready"])
    assert j.killed(name) == -9
    j.store.set("go", b"1")


@pytest.mark.parametrize("manual", [False, True], ids=["auto_sync", "manual"])
def test_p2p_with_a_dead_peer(job, manual):
    j = job(3)
    extra = ["--scenario", "p2p_dead"] + (["--manual"] if manual else [])
    for r in range(3):
        j.start(f"r{r}", r, 3, *extra, worker=WORKER)
    _kill_victim(j, "r1")
    for r in (0, 2):
        res = j.result(f"r{r}")
        other = 2 - r
        # Round 1, everyone alive: every op succeeded with an empty hint.
        for p, kind, ok, hint, got in res["round1"]:
            assert ok and hint == [0, 0, 0], (r, p, kind, ok, hint)
            assert kind == "send" or got == p
        # Round 2: each op with the dead rank 1 completed (no exception) with local success
        # False and rank 1 in its hint; the ops with the other survivor are untouched.
        for p, kind, ok, hint, got in res["round2"]:
            if p == 1:
                assert (ok, hint) == (False, [0, 1, 0]), (r, kind, ok, hint)
            else:
                assert (ok, hint) == (True, [0, 0, 0]) and (kind == "send" or got == other), (r, kind, ok, hint, got)
        if manual:
            # Membership does not change without auto_deactivate_on_failure.
            assert res["epoch_after_p2p"] == 0 and res["active"] == [1, 1, 1], res
            assert res["all_reduce"] == [float(1 + 3), False], res
        else:
            # The group agreed on the failure before the failed p2p completed.
            assert res["epoch_after_p2p"] == 1 and res["active"] == [1, 0, 1], res
            assert res["all_reduce"] == [float(1 + 3), True] and res["epoch"] == 1, res
        assert res["round3"] == [[other, "send", True, None], [other, "recv", True, other]], res
        assert res["recv_from_dead"] == [False, [0, 1, 0]], res


def test_gather_scatter_sized_for_survivors_then_recovery(job):
    j = job(4)
    for r in range(4):
        j.start(f"r{r}", r, 4, "--scenario", "gather_recovery", worker=WORKER)
    _kill_victim(j, "r3")
    wait_store(j.store, ["survivors_ready"])
    end = time.time() + 120
    while int(j.store.add("survivors_ready", 0)) < 3:
        assert time.time() < end, "the survivors never got past the failure"
        time.sleep(0.05)
    j.start("replacement", 3, 4, "--scenario", "gather_recovery", "--replacement", worker=WORKER)
    for r in range(3):
        res = j.result(f"r{r}")
        assert res["before"] == [[1, 2, 3, 4], (r + 1) * 4], res
        # 3 survivors of 4 slots: the buffers hold the survivors in rank order.
        assert res["after_failure"] == [[1, 2, 3], (r + 1) * 3], res
        assert res["active_after_failure"] == [1, 1, 1, 0], res
        assert res["recover"] == [1, 2], res
        assert res["after_recovery"] == [[1, 2, 3, 4], (r + 1) * 4] and res["epoch"] == 2, res
    rep = j.result("replacement")
    assert rep["join"] == 1 and rep["after_recovery"] == [[1, 2, 3, 4], 16] and rep["epoch"] == 2, rep
