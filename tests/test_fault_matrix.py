"""The fault matrix: four mooncake-cpu ranks (real processes, one host, the same-host fast path)
in an all_reduce loop while one fault or two happen: SIGKILL, SIGSTOP then SIGCONT, a busy rank,
two faults in a row (4 -> 3 -> 2), a fault during a recovery. Rank r contributes r+1, so every
sum names its contributors. Each case checks every survivor's every step, that the survivors
agree on the active ranks and the epoch, and what the fenced rank sees: its op fails with an
error naming the decision and the epoch (never a success with its peers' stale contributions),
its view is the group's, and it comes back with join_group. The partition case (network
namespaces) is in tests/test_fault_partition.py. Worker: tests/fault_worker.py."""

from __future__ import annotations

import os
import signal
import time

import pytest

from elastic_harness import HERE, Job, wait_store

WORKER = os.path.join(HERE, "fault_worker.py")
FAULT, SECOND, RECOVER, STEPS = 10, 20, 30, 36  # as in fault_worker.py


def total(ranks) -> float:
    return float(sum(r + 1 for r in ranks))


def check_steps(res: dict, want, first: int = 0) -> None:
    """res's steps from first on have the values want(step) gives, and no error."""
    steps = [s for s in res["steps"] if s[0] >= first]
    assert [s[0] for s in steps] == list(range(first, STEPS)), (res["rank"], res["steps"])
    for s, v, err in steps:
        assert err is None and v == want(s), (res["rank"], s, v, err)


def agree(results: list[dict], active: list[int], epoch: int) -> None:
    for res in results:
        assert (res["active"], res["epoch"]) == (active, epoch), res["rank"]


def stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def run(scenario: str):
    job = Job(4)
    try:
        for r in range(4):
            job.start(f"r{r}", r, 4, "--scenario", scenario, worker=WORKER)
        yield job
    finally:
        job.close()


@pytest.fixture
def matrix_job(request):
    yield from run(request.param)


def results(job: Job, names) -> dict[str, dict]:
    """Every named process's result; when one fails, the error holds every process's log (what
    the others saw is usually what explains it)."""
    out, errors = {}, []
    for n in names:
        try:
            out[n] = job.result(n)
        except AssertionError as e:
            errors.append(str(e))
    if errors:
        raise AssertionError("\n\n".join(errors + [f"--- {n}'s log ---\n{r['_stderr'][-3000:]}" for n, r in out.items()]))
    return out


@pytest.mark.parametrize("matrix_job", ["sigkill"], indirect=True)
def test_sigkill(matrix_job):
    res = results(matrix_job, ["r0", "r1", "r3"])
    assert matrix_job.killed("r2") == -signal.SIGKILL
    for r in res.values():
        check_steps(r, lambda s: total([0, 1, 2, 3]) if s < FAULT else total([0, 1, 3]))
    agree(list(res.values()), [1, 1, 0, 1], 1)


@pytest.mark.parametrize("matrix_job", ["sigstop"], indirect=True)
def test_sigstop_then_sigcont_fences_the_resumed_rank(matrix_job):
    job = matrix_job
    wait_store(job.store, ["stopping"])
    pid = job.procs["r2"].pid
    end = time.time() + 60
    while not stopped(pid):
        assert time.time() < end, "rank 2 did not stop"
        time.sleep(0.01)
    # The survivors finish the step without it; only then it resumes (its peers' contributions
    # to that step are still in their shared-memory arenas).
    wait_store(job.store, ["done/0", "done/1", "done/3"])
    os.kill(pid, signal.SIGCONT)
    res = results(job, ["r0", "r1", "r2", "r3"])
    for n in ("r0", "r1", "r3"):
        check_steps(res[n], lambda s: total([0, 1, 3]) if FAULT <= s < RECOVER else total(range(4)))
        assert res[n]["recover"] == 1
    v = res["r2"]
    assert [s[1] for s in v["steps"][:FAULT]] == [total(range(4))] * FAULT
    s, val, err = v["steps"][FAULT]
    assert (s, val) == (FAULT, None), v["steps"][FAULT]
    assert "fenced" in err and "epoch 1" in err and "decision #1" in err, err
    assert v["fenced_view"] == {"active": [1, 1, 0, 1], "epoch": 1}
    assert v["join"] == 1
    check_steps(v, lambda s: total(range(4)), first=RECOVER)
    agree(list(res.values()), [1, 1, 1, 1], 2)


@pytest.mark.parametrize("matrix_job", ["busy"], indirect=True)
def test_busy_rank_is_not_blamed(matrix_job):
    res = results(matrix_job, ["r0", "r1", "r2", "r3"])
    for r in res.values():
        check_steps(r, lambda s: total(range(4)))
    agree(list(res.values()), [1, 1, 1, 1], 0)


@pytest.mark.parametrize("matrix_job", ["two"], indirect=True)
def test_two_faults_in_a_row(matrix_job):
    res = results(matrix_job, ["r0", "r1"])
    for r in res.values():
        check_steps(r, lambda s: total(range(4)) if s < FAULT else
                    total([0, 1, 3]) if s < SECOND else total([0, 1]))
    agree(list(res.values()), [1, 1, 0, 0], 2)


@pytest.mark.parametrize("matrix_job", ["recovery"], indirect=True)
def test_fault_during_a_recovery(matrix_job):
    job = matrix_job
    assert job.killed("r2") == -signal.SIGKILL
    job.start("r2b", 2, 4, "--scenario", "recovery", "--replacement", worker=WORKER)
    res = results(job, ["r0", "r1", "r2b"])
    assert job.killed("r3") == -signal.SIGKILL
    for n in ("r0", "r1"):
        check_steps(res[n], lambda s: total(range(4)) if s < FAULT else
                    total([0, 1, 3]) if s < RECOVER else total([0, 1, 2]))
    assert res["r2b"]["join"] == 1
    check_steps(res["r2b"], lambda s: total([0, 1, 2]), first=RECOVER)
    agree(list(res.values()), [1, 1, 1, 0], 3)
