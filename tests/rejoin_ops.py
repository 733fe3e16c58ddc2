"""What the in-place rejoin workers share (fault_worker.py's rejoin_* scenarios, with a cut
link; transfer_seam_worker.py, with an injected transfer failure): the op both ranks of a
2-rank group run, a recorder of its outcome, and a bounded wait."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist


def wait_for(cond, what: str, timeout: float) -> None:
    end = time.time() + timeout
    while not cond():
        if time.time() > end:
            raise TimeoutError(f"waited {timeout}s for {what}")
        time.sleep(0.05)


def pair_op(collective: bool, rank: int):
    """An all_reduce (collective) or a batch_isend_irecv exchange between ranks 0 and 1; returns
    the sum of both ranks' contributions this rank saw (3 with both) and the op's works."""
    mine = torch.full((8,), float(rank + 1))
    if collective:
        w = dist.all_reduce(mine, async_op=True)
        w.wait()
        return mine[0].item(), [w]
    got = torch.zeros(8)
    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, 1 - rank),
                                    dist.P2POp(dist.irecv, got, 1 - rank)])
    for w in works:
        w.wait()
    return got[0].item() + rank + 1, works


def recorder(mpg, collective: bool, rank: int, out: dict, view, hints: bool = False):
    """record(name): runs pair_op and stores out[name] = [value, local successes, error], the
    view after it in out[name + "_view"] and, with hints, the failed-ranks hints."""

    def record(name: str) -> None:
        try:
            v, works = pair_op(collective, rank)
            out[name] = [v, [bool(mpg.get_local_success(w)) for w in works], None]
            if hints:
                out[name + "_hints"] = [mpg.get_failed_ranks_hint(w).tolist() for w in works]
        except Exception as e:  # noqa: BLE001
            out[name] = [None, None, str(e)[:600]]
        out[name + "_view"] = view()

    return record
