"""One rank of the fault matrix (tests/test_fault_matrix.py starts it as a real process).

    python tests/fault_worker.py --port P --rank R --world 4 --scenario S [--store-host H]

Every rank runs an all_reduce loop (rank r contributes r+1, so a sum names its contributors)
and prints one line "RESULT <json>": per step the value or the error, then the view it ends
with. The fault is made by the victim itself before step FAULT (SIGKILL, SIGSTOP, a busy
loop) or by the test (a partition); the test resumes a stopped rank (SIGCONT) once every
survivor finished step FAULT (key "done/<rank>" in the store), so the order of events is fixed.

Scenarios (victim rank 2 unless said):
  sigkill    killed before step FAULT
  sigstop    stopped before step FAULT, resumed by the test: its step FAULT must fail (fenced);
             it comes back with join_group when the members call recover_ranks at step RECOVER
  partition  it enters step FAULT first, then the test cuts its link and lets the others enter
             it (they have its contribution: that step completes with it there, and it cannot
             complete it here); the link is restored after the others' step FAULT+1, which
             finds it gone; then as sigstop
  partition_last
             the others enter step FAULT first (their contributions reach it), then the test
             cuts its link and it enters the step (its carrier down, FAULT_IFACE): it has every
             contribution but its own never leaves, so the others finish the step without it
             and its step must fail (fenced), not return the sum of four; the link is restored
             after the others' step FAULT; then as sigstop
  split      the survivors split on step FAULT: every rank waits before it until the test
             drops what rank 2 sends rank 3 (a rule in rank 3's namespace), so ranks 0, 1
             and 2 complete the step and rank 3 never gets rank 2's contribution; then the test
             cuts rank 2's link. Rank 3 must end the step with the sum of four (handed over by
             the others, which returned it), never an error nor a sum mixing two steps (with
             FAULT_STEP_VALUES=1 a contribution depends on the step); then as sigstop
  busy       busy in Python for BUSY_S seconds before step FAULT: nobody is dropped
  rejoin_collective, rejoin_p2p
             two ranks (upstream's in-place rejoin): a checked all_reduce (or a
             batch_isend_irecv exchange), then the test cuts rank 1's link and both run the op
             once more (rank 0 after the cut), the link is restored, rank 1 calls join_group in
             the same process, rank 0 activate_ranks([1]), and the op runs checked again
  two        rank 2 killed before step FAULT, rank 3 before step SECOND
  recovery   rank 2 killed before step FAULT, a replacement started by the test; rank 3 killed
             while the members recover rank 2 at step RECOVER
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import mooncake  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import mooncake_pg as mpg  # noqa: E402

import rejoin_ops  # noqa: E402  (tests/, beside this script)

FAULT, SECOND, RECOVER, STEPS = 10, 20, 30, 36
BUSY_S = 5.0


def wait_for(cond, what: str, timeout: float = 150.0) -> None:
    rejoin_ops.wait_for(cond, what, timeout)


def view() -> dict:
    return {"active": mpg.get_active_ranks(None).tolist(), "epoch": mpg.get_current_epoch(None)}


def contribution(rank: int, s: int) -> float:
    """Rank r contributes r+1 (and 100*s with FAULT_STEP_VALUES=1: a sum names its step too)."""
    return float(rank + 1 + (100 * s if os.environ.get("FAULT_STEP_VALUES") == "1" else 0))


def step(rank: int, s: int, out: dict, store) -> bool:
    """One all_reduce; records [step, value or None, error or None]; False on an error."""
    x = torch.full((8,), contribution(rank, s))
    try:
        dist.all_reduce(x)
    except Exception as e:  # noqa: BLE001
        out["steps"].append([s, None, str(e)[:600]])
        return False
    out["steps"].append([s, x[0].item() if bool(torch.all(x == x[0])) else "mixed", None])
    if s == FAULT + (os.environ.get("FAULT_DONE_AFTER") == "next"):
        store.set(f"done/{rank}", b"1")
    return True


def rejoin(rank: int, out: dict, store) -> int:
    """A fenced rank or a replacement: join_group, then the group's step from rank 0."""
    r = mpg.join_group(None)
    out["join"] = int(r.status)
    t = torch.zeros(1, dtype=torch.int64)
    dist.broadcast(t, src=0)
    return int(t.item())


def recover(rank: int, victim: int, out: dict, s: int) -> None:
    """Members: admit victim's process (when it asked to join), then tell it the step."""
    wait_for(lambda: mpg.get_peer_state(None, [victim])[0], f"rank {victim} to ask to join")
    r = mpg.recover_ranks(None, [victim])
    out["recover"] = int(r.status)
    t = torch.tensor([s], dtype=torch.int64)
    dist.broadcast(t, src=0)


def loop(a, store, out: dict, start: int) -> None:
    rank, sc = a.rank, a.scenario
    s = start
    while s < STEPS:
        if s == FAULT and rank == 2 and start == 0:
            if sc == "sigkill" or sc == "two" or sc == "recovery":
                os.kill(os.getpid(), signal.SIGKILL)
            elif sc == "sigstop":
                store.set("stopping", b"1")
                os.kill(os.getpid(), signal.SIGSTOP)  # the test resumes it
            elif sc == "partition":
                store.set("victim_in", b"1")  # it enters the step; the test cuts its link
            elif sc == "partition_last":
                wait_for(lambda: store.check([f"in/{r}" for r in (0, 1, 3)]), "the others to enter the step")
                time.sleep(1.0)  # their contributions reach this rank's mailboxes
                store.set("victim_ready", b"1")  # the test cuts its link now
                wait_for(carrier_down, "the test to cut this rank's link")
            elif sc == "busy":
                t = time.time()
                while time.time() - t < BUSY_S:
                    pass
        if s == FAULT and sc == "split":
            store.set(f"ready/{rank}", b"1")  # the test drops rank 2's messages to rank 3
            wait_for(lambda: store.check(["go"]), "the test to drop rank 2's messages to rank 3")
        if s == FAULT and sc == "partition_last" and rank != 2:
            store.set(f"in/{rank}", b"1")
        if s == FAULT and sc == "partition" and rank != 2:
            wait_for(lambda: store.check(["cut"]), "the test to cut rank 2's link")
        if s == SECOND and sc == "two" and rank == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        if s == RECOVER and start == 0 and rank != 2:
            if sc == "recovery" and rank == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            if sc in ("sigstop", "partition", "partition_last", "split", "recovery"):
                recover(rank, 2, out, s)
        if not step(rank, s, out, store):
            if rank == 2 and sc in ("sigstop", "partition", "partition_last", "split") and "fenced" not in out:
                out["fenced"] = out["steps"][-1][2]
                out["fenced_view"] = view()
                s = rejoin(rank, out, store)
                continue
            raise RuntimeError(f"step {s} failed: {out['steps'][-1][2]}")
        s += 1


def carrier_down() -> bool:
    """Whether this namespace's link (FAULT_IFACE) lost its carrier: the test cut it."""
    try:
        with open(f"/sys/class/net/{os.environ['FAULT_IFACE']}/carrier") as f:
            return f.read().strip() == "0"
    except OSError:  # the carrier of a link that is down reads EINVAL
        return True


def inplace_rejoin(a, store, out: dict) -> None:
    """Scenarios rejoin_collective and rejoin_p2p (see the module comment)."""
    rank = a.rank
    record = rejoin_ops.recorder(mpg, a.scenario == "rejoin_collective", rank, out, view)

    record("before")
    if rank == 1:
        store.set("victim_in", b"1")  # the test cuts this rank's link now
        wait_for(carrier_down, "the test to cut this rank's link")
    else:
        wait_for(lambda: store.check(["cut"]), "the test to cut rank 1's link")
    record("fault")
    store.set(f"fault_done/{rank}", b"1")  # rank 1's waits for the link to come back
    if rank == 1:
        out["join"] = int(mpg.join_group(None).status)
    else:
        wait_for(lambda: mpg.get_peer_state(None, [1])[0], "rank 1 to ask to join")
        out["activate"] = int(mpg.activate_ranks(None, [1]).status)
    record("after")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--store-host", default="127.0.0.1")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--replacement", action="store_true")
    a = ap.parse_args()
    import faulthandler

    faulthandler.dump_traceback_later(float(os.environ.get("MC_TEST_DUMP_S", "150")), exit=False)
    out: dict = {"rank": a.rank, "steps": []}
    try:
        store = dist.TCPStore(a.store_host, a.port, is_master=False, timeout=timedelta(seconds=120))
        dist.init_process_group("mooncake-cpu", store=store, rank=a.rank, world_size=a.world,
                                timeout=timedelta(seconds=120))
        mpg.set_collective_timeout_us(30_000_000)
        if a.scenario.startswith("rejoin_"):
            inplace_rejoin(a, store, out)
        else:
            start = rejoin(a.rank, out, store) if a.replacement else 0
            loop(a, store, out, start)
        out.update(view())
    except Exception:  # noqa: BLE001
        out["error"] = traceback.format_exc()
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)  # skip destroy: peers may be dead


if __name__ == "__main__":
    sys.exit(main())
