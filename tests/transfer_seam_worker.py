"""A rank of tests/test_transfer_seam.py, started with LD_PRELOAD naming the test's fault injector
(tests/transfer_seam_preload.c). Two ranks on one host run rounds (--ops: an all_reduce round,
then a batch_isend_irecv round, in the same processes). In a round both run the op checked; rank 0 reads the epoch; then rank 1's transfers to rank 0
are reported failed by the injector while both run the op once more (rank 0 after rank 1 turned
the fault on); the fault is
turned off, rank 1 calls join_group in the same process, rank 0 waits for the new epoch and
rank 1's join request and calls activate_ranks([1]), and the op runs checked again. Prints
RESULT <json>: per round and phase [value, local successes, error], the views, the injected
count, and whether the seam reports itself interposed."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import traceback
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import mooncake  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from mooncake import pg as mpg  # noqa: E402

import rejoin_ops  # noqa: E402  (tests/, beside this script)


def wait_for(cond, what: str, timeout: float = 60.0) -> None:
    rejoin_ops.wait_for(cond, what, timeout)


def view() -> dict:
    return {"active": mpg.get_active_ranks(None).tolist(), "epoch": mpg.get_current_epoch(None)}


def seam_interposed() -> int:
    import mooncake

    seam = ctypes.CDLL(os.path.join(os.path.dirname(mooncake.__file__), "libmooncake_pg.so"))
    return int(seam.mooncake_pg_seam_interposed())


def run_round(kind: str, rank: int, store, inj) -> dict:
    """One round (see the module comment) with op kind "collective" or "p2p"."""
    out: dict = {}
    record = rejoin_ops.recorder(mpg, kind == "collective", rank, out, view, hints=True)

    record("before")
    if rank == 1:
        # rank 0 reads the epoch before the fault can change it
        wait_for(lambda: store.check([f"{kind}/epoch_read"]), "rank 0 to read the epoch")
        inj.seam_fault_fail_target(0)
        store.set(f"{kind}/fault_on", b"1")
    else:
        epoch = mpg.get_current_epoch(None)
        store.set(f"{kind}/epoch_read", b"1")
        wait_for(lambda: store.check([f"{kind}/fault_on"]), "rank 1 to turn its fault on")
    count = int(inj.seam_fault_count())
    record("fault")
    inj.seam_fault_clear()
    out["injected"] = int(inj.seam_fault_count()) - count
    if rank == 1:
        out["join"] = int(mpg.join_group(None).status)
    else:
        wait_for(lambda: mpg.get_current_epoch(None) > epoch, "the group's new epoch")
        wait_for(lambda: mpg.get_peer_state(None, [1])[0], "rank 1 to ask to join")
        out["activate"] = int(mpg.activate_ranks(None, [1]).status)
    record("after")
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--ops", default="collective,p2p", help="the rounds, in order")
    ap.add_argument("--injector", required=True, help="the preloaded fault injector")
    a = ap.parse_args()
    rank = a.rank
    out: dict = {"rank": rank}
    try:
        inj = ctypes.CDLL(a.injector)  # the preloaded copy
        inj.seam_fault_count.restype = ctypes.c_uint64
        out["ready"] = inj.seam_fault_ready()
        store = dist.TCPStore("127.0.0.1", a.port, is_master=False, timeout=timedelta(seconds=60))
        dist.init_process_group("mooncake-cpu", store=store, rank=rank, world_size=2,
                                timeout=timedelta(seconds=60))

        for kind in a.ops.split(","):
            out[kind] = run_round(kind, rank, store, inj)
        out["interposed"] = seam_interposed()
        # Neither exits while the other's last op may still wait for its delivery credit: a
        # sender whose peer exited right after taking the message probes it, finds it gone and
        # flags the send (the end of a job, not what this test is about).
        store.set(f"done/{rank}", b"1")
        wait_for(lambda: store.check([f"done/{1 - rank}"]), "the other rank to finish")
    except Exception:  # noqa: BLE001
        out["error"] = traceback.format_exc()
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
