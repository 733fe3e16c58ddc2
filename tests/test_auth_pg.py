"""Process groups authenticate their connections by default (issue 23, docs/security.md):
rank 0 draws a token and shares it through the c10d store, every rank's engine accepts it and
proves it, and the group's buffers are out of reach of anyone who does not.

Real rank processes (pg_harness.run_ranks) run the collective checks of pg_workers.py with
nothing set, also with every byte over tcp; rank 0 then plays a stranger who read the store:
raw, unauthenticated READ/WRITE/descriptor frames to rank 1's engine get nothing of the group's
buffer. MOONCAKE_PG_AUTH=0 turns it off. A rank that joins later (is_extension) and a
replacement of a killed rank are admitted (elastic_harness, as tests/test_elastic.py)."""

from __future__ import annotations

import pytest

import auth_pg_worker
from pg_harness import run_ranks
from test_elastic import check_survivors, run_kill

TOKEN_KEY = "0//cpu//0/cpu/mooncake/auth_token"  # the default group's key on the c10d store


def test_every_collective_with_default_auth():
    run_ranks(auth_pg_worker.worker_auth_ops, 3, False, True, timeout=600)


def test_collectives_over_tcp_with_default_auth():
    run_ranks(auth_pg_worker.worker_auth_ops, 3, True, True, timeout=600)


def test_auth_off():
    run_ranks(auth_pg_worker.worker_auth_ops, 2, False, False, timeout=300)


def test_extension_rank_is_admitted(job):
    j = job(3)
    for r in range(3):
        j.start(f"rank{r}", r, 3, "--scenario", "extend", "--max-size", "4")
    j.start("new", 3, 4, "--scenario", "replacement", "--extension", "--max-size", "4")
    res = {r: j.result(f"rank{r}") for r in range(3)}
    new = j.result("new")
    assert j.store.check([TOKEN_KEY]), "no group token in the store: authentication was off"
    for r in range(3):
        assert res[r]["extend"][0] == 1 and res[r]["sum_after_join"] == 10.0, res[r]
    assert new["join"] == 1 and new["sum_after_join"] == 10.0, new
    assert res[1]["subgroup_with_new_rank"] == 6.0 and new["subgroup_with_new_rank"] == 6.0, (res[1], new)


@pytest.mark.parametrize("victim", [2, 0])
def test_replacement_rank_is_admitted(job, victim):
    # victim 0: the replacement is a new rank 0, which must take the token already in the store
    # rather than draw a new one.
    res = run_kill(job, "all_reduce", victim, recover=True)
    check_survivors(res, victim, 4)
    for r in range(4):
        if r != victim:
            assert res[r]["sum_after_join"] == 10.0, res[r]
    assert res["replacement"]["sum_after_join"] == 10.0, res["replacement"]
