"""Upstream Mooncake PG's elastic semantics, run as code written for upstream would run them:
real processes on ``mooncake-cpu`` (tests/elastic_parity_worker.py), the rendezvous store
hosted by the test.

Each case is one of the differences issue 17 lists: the failed-ranks hint as a tensor mask,
manual mode end to end, ranks that join with torch's full world size, a rank that leaves with
deactivate_ranks on itself and comes back, isend to a rank that has exited, outputs sized by
the active ranks after a failure, set_device_filter, and upstream's option and status names."""

from __future__ import annotations

import os

import pytest

from elastic_harness import HERE, wait_store

WORKER = os.path.join(HERE, "elastic_parity_worker.py")


def start(j, name, rank, world, scenario, *extra):
    j.start(name, rank, world, "--scenario", scenario, *extra, worker=WORKER)


def test_options_and_status_names():
    import mooncake_pg as pg

    o = pg.MooncakeBackendOptions(4, True, False, False)  # upstream's positional order
    assert (o.max_group_size, o.is_extension, o.auto_deactivate_on_failure, o.auto_sync_on_failure) == (4, True, False, False)
    o = pg.MooncakeBackendOptions(max_group_size=3, is_extension=False,
                                  auto_deactivate_on_failure=True, auto_sync_on_failure=False)
    assert (o.max_group_size, o.auto_deactivate_on_failure, o.auto_sync_on_failure) == (3, True, False)
    # ProposalResponse.status takes upstream's enum (ViewUpdateStatus; ProposalStatus is the
    # older name of the same enum) and names.
    assert pg.ViewUpdateStatus is pg.ProposalStatus
    assert [(s.name, int(s)) for s in pg.ViewUpdateStatus] == [
        ("Rejected", 0), ("Applied", 1), ("AppliedWithDroppedRanks", 2)]
    assert [(s.name, int(s)) for s in pg.SyncAfterFailureStatus] == [
        ("Reconciled", 0), ("NoPending", 1), ("Rejected", 2)]
    r = pg.ProposalResponse(pg.ViewUpdateStatus.Applied, 3)
    assert (r.status, r.new_epoch, r.dropped_ranks, r.reject_reason) == (pg.ViewUpdateStatus.Applied, 3, [], "")


def test_manual_mode_hint_mask_deactivate_recover(job):
    world, victim = 3, 2
    j = job(world)
    for r in range(world):
        start(j, f"rank{r}", r, world, "manual")
    victim_res = j.result(f"rank{victim}")
    assert victim_res["round1"]["sum"] == 6
    wait_store(j.store, [f"survivor_{r}_waiting" for r in range(world) if r != victim])
    start(j, "replacement", victim, world, "manual", "--role", "replacement")
    res = {r: j.result(f"rank{r}") for r in range(world) if r != victim}
    rep = j.result("replacement")
    for r, o in res.items():
        # Round 1, all healthy: the hint is an all-zero tensor mask of the group's size.
        assert o["round1"] == {"sum": 6, "ok": True, "hint": [0, 0, 0], "hint_is_tensor": True}, o
        assert o["active1"] == [1, 1, 1], o
        # Round 2, the victim gone but still a member: the survivors' sum, not locally
        # successful, the victim set in the mask; membership unchanged.
        assert o["round2"] == {"sum": 3, "ok": False, "hint": [0, 0, 1], "hint_is_tensor": True}, o
        assert o["active2"] == [1, 1, 1], o
        assert o["sync"] in ("Reconciled", "NoPending"), o
        assert o["peer_state_after_sync"] == [False], o
        assert o["deactivate"] == ["Applied", []], o
        assert o["active3"] == [1, 1, 0], o
        assert o["round3"] == {"sum": 3, "ok": True, "hint": [0, 0, 0], "hint_is_tensor": True}, o
        assert o["recover"] == "Applied", o
        assert o["full"] == {"sum": 6, "ok": True, "hint": [0, 0, 0], "hint_is_tensor": True}, o
        assert o["active4"] == [1, 1, 1], o
    # isend to the exited rank completes, not locally successful, with the rank in the mask.
    assert res[0]["send_to_dead"] == {"ok": False, "hint": [0, 0, 1]}, res[0]
    assert rep["join"] == 1 and rep["full"]["sum"] == 6, rep


@pytest.mark.parametrize("variant", ["is_extension", "world_size"])
def test_join_with_full_world_size(job, variant):
    full = 3
    j = job(full)
    for r in range(full - 1):
        start(j, f"rank{r}", r, full, "join")
    wait_store(j.store, [f"original_{r}_up" for r in range(full - 1)])
    start(j, "joiner", full - 1, full, "join", "--role", "joiner", "--variant", variant)
    res = {r: j.result(f"rank{r}") for r in range(full - 1)}
    new = j.result("joiner")
    # Before join_group the joiner sees torch's world size and runs ops over itself alone.
    assert new["world_size_before"] == full, new
    assert new["before_join"]["sum"] == full and new["before_join"]["ok"], new
    assert new["join"] == 1, new
    for o in [*res.values(), new]:
        assert o["world_size"] == full, o
        assert o["full"] == {"sum": 6, "ok": True, "hint": [0, 0, 0], "hint_is_tensor": True}, o
        assert o["all_gather"] == [0, 1, 2], o
    for o in (res[0], new):
        # A subgroup made after the extension, with the joiner in it.
        assert o["sub"]["sum"] == 1 + full and o["sub"]["ok"], o
        assert o["sub_p2p"] is True, o
    for r in range(full - 1):
        assert res[r]["initial"]["sum"] == 3 and res[r]["recover"] == "Applied", res[r]


@pytest.mark.parametrize("variant", ["same_process", "new_process"])
def test_leave_and_rejoin(job, variant):
    j = job(2)
    for r in range(2):
        start(j, f"rank{r}", r, 2, "leave", "--variant", variant)
    if variant == "new_process":
        left = j.result("rank1")
        start(j, "rejoiner", 1, 2, "leave", "--role", "rejoiner")
        back = j.result("rejoiner")
    else:
        left = back = j.result("rank1")
    o = j.result("rank0")
    assert left["before"]["sum"] == 3 and left["leave"] == ["Applied", 1], left
    # The survivor sees the leaver inactive and goes on alone, with no failure.
    assert o["active_after_leave"] == [1, 0], o
    assert o["world_size_after_leave"] == 1, o
    assert o["alone"] == {"sum": 1, "ok": True, "hint": [0, 0], "hint_is_tensor": True}, o
    assert o["recover"] == "Applied" and o["active_after_recover"] == [1, 1], o
    assert o["after"]["sum"] == 3 and o["after"]["ok"] and o["p2p"], o
    assert back["join"] == 1 and back["after"]["sum"] == 3 and back["p2p"], back


def test_isend_to_exited_rank(job):
    j = job(2)
    for r in range(2):
        start(j, f"rank{r}", r, 2, "send_dead")
    assert j.result("rank1")["before"]["sum"] == 3
    o = j.result("rank0")
    assert o["send"]["ok"] is False and o["send"]["hint"] == [0, 1], o
    assert o["alone"]["sum"] == 1, o


def test_set_device_filter(job):
    j = job(2)
    for r in range(2):
        start(j, f"rank{r}", r, 2, "device_filter")
    for r in range(2):
        o = j.result(f"rank{r}")
        assert "no network interface 'no-such-nic0'" in o["unknown"].replace('"', "'") and "lo" in o["unknown"], o
        assert "not an IP address" in o["bad_ip"], o
        assert o["sum"] == 3 and o["p2p"], o
        # The engine listens on the loopback interface only (no wildcard listener).
        assert o["listening"] == ["127.0.0.1"], o
        # Another interface once the engine runs: refused, saying why.
        for name, msg in o["later"].items():
            assert "already runs" in msg or "has no IPv4 address" in msg, (name, o)


def test_outputs_sized_by_active_ranks(job):
    j = job(4)
    for r in range(4):
        start(j, f"rank{r}", r, 4, "outputs")
    assert j.result("rank1")["before"]["sum"] == 10
    live = [0, 2, 3]
    for i, r in enumerate(live):
        o = j.result(f"rank{r}")
        assert o["after"]["sum"] == 8 and o["active"] == [1, 0, 1, 1], o
        # Entries in rank order of the active mask: ranks 0, 2, 3 contribute rank + 1.
        assert o["all_gather_into_tensor"] == [1, 3, 4], o
        assert o["all_gather"] == [1, 3, 4], o
        # The i-th active rank gets the sum of every member's i-th entry.
        assert o["reduce_scatter_tensor"] == (i + 1) * 3, o
        assert o["reduce_scatter"] == 10 * (i + 1) * 3, o
        # One entry per rank below the world size: the dead rank's entry is left as it was.
        assert o["all_gather_full"] == [1, -1, 3, 4], o
        # Fewer entries than active ranks: the op probes the group when it runs (its peers may
        # have seen ranks fail); nobody else died, so it fails naming the sizes.
        assert "2 outputs for a group of 4 ranks (3 active)" in o["two_entries"], o
