"""One rank of the elastic-membership tests (tests/test_elastic.py starts it as a real process).

    python tests/elastic_worker.py --port P --rank R --world N --scenario S [--victim V] ...

The rendezvous store is a TCPStore hosted by the test process, so it outlives any rank. The
worker prints one line "RESULT <json>" with what it observed; the test asserts on it. A victim
kills itself with SIGKILL while the survivors wait in the op under test.
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

N = 4096  # elements per tensor


def wait_for(cond, what: str, timeout: float = 60.0) -> None:
    end = time.time() + timeout
    while not cond():
        if time.time() > end:
            raise TimeoutError(f"waited {timeout}s for {what}")
        time.sleep(0.05)


def run_op(op: str, rank: int, world: int, survivors: list[int], out: dict) -> None:
    """Runs op over the group while a rank dies; records result correctness and the hints."""
    t0 = time.time()
    if op == "all_reduce":
        y = torch.full((N,), float(rank + 1))
        w = dist.all_reduce(y, async_op=True)
        w.wait()
        out["correct"] = bool(torch.equal(y, torch.full((N,), float(sum(r + 1 for r in survivors)))))
    elif op == "all_gather":
        outs = [torch.full((N,), -1.0) for _ in range(world)]
        w = dist.all_gather(outs, torch.full((N,), float(rank + 1)), async_op=True)
        w.wait()
        out["correct"] = all(torch.equal(outs[r], torch.full((N,), float(r + 1))) for r in survivors)
    elif op == "reduce_scatter":
        ins = [torch.full((N,), float((rank + 1) * (j + 1))) for j in range(world)]
        o = torch.zeros(N)
        w = dist.reduce_scatter(o, ins, async_op=True)
        w.wait()
        want = float(sum((r + 1) * (rank + 1) for r in survivors))
        out["correct"] = bool(torch.equal(o, torch.full((N,), want)))
    elif op == "send_recv":
        # Survivors exchange in a ring among themselves; the rank after the dead one also
        # receives from it, which completes at once (as upstream's) with the rank in the hint.
        i = survivors.index(rank)
        nxt, prv = survivors[(i + 1) % len(survivors)], survivors[i - 1]
        buf = torch.zeros(N)
        s = dist.isend(torch.full((N,), float(rank + 1)), nxt)
        dist.recv(buf, prv)
        s.wait()
        out["correct"] = bool(torch.equal(buf, torch.full((N,), float(prv + 1))))
        dead = [r for r in range(world) if r not in survivors]
        if dead and rank == survivors[0]:
            t1 = time.time()
            try:
                rw = dist.irecv(torch.zeros(N), dead[0])
                rw.wait()
                out["recv_from_dead"] = {"local_success": mpg.get_local_success(rw), "hint": hint_ranks(rw)}
            except Exception as e:  # noqa: BLE001
                out["recv_from_dead"] = str(e)[:300]
            out["recv_from_dead_s"] = round(time.time() - t1, 3)
            # A send to it completes (as upstream's): not locally successful, the rank in the hint.
            t1 = time.time()
            sw = dist.isend(torch.zeros(N), dead[0])
            sw.wait()
            out["send_to_dead"] = {"local_success": mpg.get_local_success(sw), "hint": hint_ranks(sw)}
            out["send_to_dead_s"] = round(time.time() - t1, 3)
        w = None
    else:
        raise ValueError(op)
    out["elapsed_s"] = round(time.time() - t0, 3)
    if w is not None:
        out["hint"] = hint_ranks(w)
        out["local_success"] = mpg.get_local_success(w)


def hint_ranks(w) -> list[int]:
    """The ranks set in a work's failed-ranks mask."""
    return [r for r, x in enumerate(mpg.get_failed_ranks_hint(w).tolist()) if x]


def all_reduce_sum(expect: float, out: dict, name: str, group=None) -> None:
    x = torch.ones(N)
    w = dist.all_reduce(x, group=group, async_op=True)
    w.wait()
    out[name] = {"ok": bool(torch.equal(x, torch.full((N,), expect))),
                 "hint": hint_ranks(w), "local_success": mpg.get_local_success(w)}


def subgroup_with_new_rank(rank: int, out: dict) -> None:
    # A subgroup made after the extension, by every rank (as torch's new_group wants), with the
    # new rank 3 in it.
    sub = dist.new_group([1, 3])
    if rank not in (1, 3):
        return
    x = torch.full((N,), float(rank + 1))
    dist.all_reduce(x, group=sub)
    out["subgroup_with_new_rank"] = x[0].item()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--victim", type=int, default=-1)
    ap.add_argument("--op", default="all_reduce")
    ap.add_argument("--max-size", type=int, default=0)
    ap.add_argument("--manual", action="store_true")
    ap.add_argument("--extension", action="store_true")
    ap.add_argument("--recover", action="store_true")
    a = ap.parse_args()
    import faulthandler

    faulthandler.dump_traceback_later(float(os.environ.get("MC_TEST_DUMP_S", "150")), exit=False)  # a hung rank says where it is stuck
    out: dict = {"rank": a.rank}
    try:
        store = dist.TCPStore("127.0.0.1", a.port, is_master=False, timeout=timedelta(seconds=120))
        opts = mpg.MooncakeBackendOptions(a.max_size, a.extension, not a.manual, not a.manual)
        dist.init_process_group("mooncake-cpu", store=store, rank=a.rank, world_size=a.world,
                                timeout=timedelta(seconds=120), pg_options=opts)
        mpg.set_collective_timeout_us(10_000_000)
        scenario(a, store, out)
    except Exception:  # noqa: BLE001
        out["error"] = traceback.format_exc()
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)  # skip destroy: peers may be dead


def scenario(a, store, out: dict) -> None:
    rank, world, victim = a.rank, a.world, a.victim
    if a.scenario == "replacement":
        # A new process for a dead rank (or, with --extension, a new rank): join, then run.
        out["peer_state_self"] = mpg.get_peer_state(None, [rank])
        r = mpg.join_group(None)
        out["join"] = int(r.status)
        out["epoch"] = mpg.get_current_epoch(None)
        out["active"] = mpg.get_active_ranks(None).tolist()
        out["world_size"] = dist.get_world_size()
        if a.extension:
            outs = [torch.zeros(4) for _ in range(dist.get_world_size())]
            dist.all_gather(outs, torch.full((4,), float(rank)))
            out["all_gather_after_extend"] = [o[0].item() for o in outs]
        all_reduce_sum(float(sum(mpg.get_active_ranks(None).tolist())), out, "after_join")
        x = torch.full((N,), float(rank + 1))
        dist.all_reduce(x)
        out["sum_after_join"] = x[0].item()
        if a.extension:
            subgroup_with_new_rank(rank, out)
        return

    # Subgroups made by every rank before the failure.
    sub_without = dist.new_group([r for r in range(world) if r != victim][:2])
    sub_with = dist.new_group([r for r in range(world) if r != (victim + 2) % world])
    all_reduce_sum(float(world), out, "before")
    out["epoch_before"] = mpg.get_current_epoch(None)

    if a.scenario == "extend":
        # Ranks 0..world-1 run; rank `world` joins with is_extension and they grow the group.
        new = world
        wait_for(lambda: mpg.get_peer_state(None, [new])[0], "the new rank's endpoint")
        r = mpg.extend_group_size_to(None, world + 1)
        out["extend"] = [int(r.status), r.new_epoch, r.dropped_ranks]
        out["world_size_after_extend"] = dist.get_world_size()
        # torch sizes all_gather's output list by get_world_size(): it includes the new rank.
        outs = [torch.zeros(4) for _ in range(dist.get_world_size())]
        dist.all_gather(outs, torch.full((4,), float(rank)))
        out["all_gather_after_extend"] = [o[0].item() for o in outs]
        out["active"] = mpg.get_active_ranks(None).tolist()
        all_reduce_sum(float(world + 1), out, "after_extend")
        x = torch.full((N,), float(rank + 1))
        dist.all_reduce(x)
        out["sum_after_join"] = x[0].item()
        subgroup_with_new_rank(rank, out)
        return

    survivors = [r for r in range(world) if r != victim]
    if rank == victim:
        store.set(f"victim_ready", b"1")
        time.sleep(0.5)  # the survivors are inside the op by now
        os.kill(os.getpid(), signal.SIGKILL)
    run_op(a.op, rank, world, survivors, out)
    out["active_after"] = mpg.get_active_ranks(None).tolist()
    out["world_size_after"] = dist.get_world_size()
    out["epoch_after"] = mpg.get_current_epoch(None)
    out["synced"] = mpg.get_num_synced_ranks(None)
    out["peer_state"] = mpg.get_peer_state(None, list(range(world)))
    all_reduce_sum(float(len(survivors)), out, "next")
    # Subgroups: one without the dead rank, one with it (its survivors go on).
    if rank in [r for r in range(world) if r != victim][:2]:
        all_reduce_sum(2.0, out, "sub_without", sub_without)
    if rank != (victim + 2) % world:
        all_reduce_sum(float(world - 2), out, "sub_with", sub_with)
    if a.manual:
        r = mpg.deactivate_ranks(None, [victim])
        out["deactivate"] = [int(r.status), r.new_epoch]
        again = mpg.deactivate_ranks(None, [victim])
        out["deactivate_again"] = int(again.status)
        out["active_after_deactivate"] = mpg.get_active_ranks(None).tolist()
        out["world_size_after_deactivate"] = dist.get_world_size()
        all_reduce_sum(float(len(survivors)), out, "after_deactivate")
    if a.recover:
        store.set(f"survivor_{rank}_waiting", b"1")
        wait_for(lambda: mpg.get_peer_state(None, [victim])[0], "the replacement's endpoint")
        r = mpg.recover_ranks(None, [victim])
        out["recover"] = [int(r.status), r.new_epoch, r.dropped_ranks]
        out["active_after_recover"] = mpg.get_active_ranks(None).tolist()
        all_reduce_sum(float(world), out, "after_recover")
        x = torch.full((N,), float(rank + 1))
        dist.all_reduce(x)
        out["sum_after_join"] = x[0].item()


if __name__ == "__main__":
    sys.exit(main())
