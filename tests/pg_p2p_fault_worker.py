"""One rank of tests/test_pg_p2p_fault.py (started as a real process by elastic_harness.Job).

    python tests/pg_p2p_fault_worker.py --port P --rank R --world N --scenario S [--manual]
        [--replacement]

The rendezvous store is a TCPStore hosted by the test process. The victim kills itself with
SIGKILL; the test sets "go" in the store once it saw the victim's process end, so the
survivors' next ops meet a dead peer. Prints one line "RESULT <json>".
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

from mooncake import pg  # noqa: E402


def wait_key(store, key: str) -> None:
    store.wait([key], timedelta(seconds=120))


def all_to_all_p2p(rank: int, world: int, skip=()) -> list:
    """Every pair exchanges its rank: [(peer, kind, work, recv tensor or None)]."""
    ops, meta = [], []
    for p in range(world):
        if p == rank or p in skip:
            continue
        s = torch.tensor([rank], dtype=torch.int64)
        r = torch.full((1,), -1, dtype=torch.int64)
        ops += [dist.P2POp(dist.isend, s, p), dist.P2POp(dist.irecv, r, p)]
        meta += [(p, "send", None), (p, "recv", r)]
    works = dist.batch_isend_irecv(ops)
    out = []
    for (p, kind, r), w in zip(meta, works):
        w.wait()
        out.append((p, kind, w, r))
    return out


def p2p_dead(a, store, out: dict) -> None:
    rank, world, victim = a.rank, a.world, 1
    first = all_to_all_p2p(rank, world)
    out["round1"] = [[p, k, pg.get_local_success(w), pg.get_failed_ranks_hint(w).tolist(),
                      None if r is None else int(r.item())] for p, k, w, r in first]
    if rank == victim:
        store.set("victim_ready", b"1")
        os.kill(os.getpid(), signal.SIGKILL)
    wait_key(store, "go")
    second = all_to_all_p2p(rank, world)
    # Read right after the works completed: get_current_epoch does not look for decisions
    # this rank has not applied, so an epoch of 1 here was applied before the p2p completed.
    out["epoch_after_p2p"] = pg.get_current_epoch(None)
    out["round2"] = [[p, k, pg.get_local_success(w), pg.get_failed_ranks_hint(w).tolist(),
                      None if r is None else int(r.item())] for p, k, w, r in second]
    out["active"] = pg.get_active_ranks(None).tolist()
    # The survivors go on: p2p among themselves, a receive from the dead rank, a collective.
    third = all_to_all_p2p(rank, world, skip=(victim,))
    out["round3"] = [[p, k, pg.get_local_success(w), None if r is None else int(r.item())]
                     for p, k, w, r in third]
    w = dist.irecv(torch.zeros(1, dtype=torch.int64), src=victim)
    w.wait()
    out["recv_from_dead"] = [pg.get_local_success(w), pg.get_failed_ranks_hint(w).tolist()]
    x = torch.tensor([float(rank + 1)])
    w = dist.all_reduce(x, async_op=True)
    w.wait()
    out["all_reduce"] = [x.item(), pg.get_local_success(w)]
    out["epoch"] = pg.get_current_epoch(None)


def run_gather_scatter(active: int, slot: int) -> list:
    """all_gather_into_tensor and reduce_scatter_tensor with buffers of `active` ranks; slot is
    this rank's position among them."""
    o = torch.zeros(active, dtype=torch.int32)
    dist.all_gather_into_tensor(o, torch.tensor([slot + 1], dtype=torch.int32))
    r = torch.zeros(1, dtype=torch.int32)
    dist.reduce_scatter_tensor(r, torch.arange(1, active + 1, dtype=torch.int32))
    return [o.tolist(), int(r.item())]


def gather_recovery(a, store, out: dict) -> None:
    rank, world, victim = a.rank, a.world, a.world - 1
    if a.replacement:
        out["join"] = int(pg.join_group(None).status)
        out["after_recovery"] = run_gather_scatter(world, rank)
        out["epoch"] = pg.get_current_epoch(None)
        return
    out["before"] = run_gather_scatter(world, rank)
    if rank == victim:
        store.set("victim_ready", b"1")
        os.kill(os.getpid(), signal.SIGKILL)
    wait_key(store, "go")
    out["after_failure"] = run_gather_scatter(world - 1, rank)
    out["active_after_failure"] = pg.get_active_ranks(None).tolist()
    store.add("survivors_ready", 1)
    while not pg.get_peer_state(None, [victim])[0]:
        time.sleep(0.05)
    r = pg.recover_ranks(None, [victim])
    out["recover"] = [int(r.status), r.new_epoch]
    out["after_recovery"] = run_gather_scatter(world, rank)
    out["epoch"] = pg.get_current_epoch(None)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--manual", action="store_true")
    ap.add_argument("--replacement", action="store_true")
    a = ap.parse_args()
    import faulthandler

    faulthandler.dump_traceback_later(float(os.environ.get("MC_TEST_DUMP_S", "150")), exit=False)
    out: dict = {"rank": a.rank}
    try:
        store = dist.TCPStore("127.0.0.1", a.port, is_master=False, timeout=timedelta(seconds=120))
        opts = pg.MooncakeBackendOptions(a.world, a.replacement, not a.manual, not a.manual)
        dist.init_process_group("mooncake-cpu", store=store, rank=a.rank, world_size=a.world,
                                timeout=timedelta(seconds=120), pg_options=opts)
        {"p2p_dead": p2p_dead, "gather_recovery": gather_recovery}[a.scenario](a, store, out)
    except Exception:  # noqa: BLE001
        out["error"] = traceback.format_exc()
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)  # skip destroy: peers may be dead


if __name__ == "__main__":
    sys.exit(main())
