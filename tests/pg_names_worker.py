"""One rank of tests/test_pg_upstream_names.py's knob test (a real process; elastic_harness.Job).

    python tests/pg_names_worker.py --port P --rank R --world 3

Rank 2 kills itself after one all_reduce; ranks 0 and 1 set a fault reconciliation window and a
p2p timeout from Python, wait for "go" (the test saw rank 2 end), run an all_reduce that meets the
failure, then each posts a receive nobody answers. Prints one line "RESULT <json>"."""

from __future__ import annotations

import argparse
import json
import os
import signal
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

from mooncake import pg  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    a = ap.parse_args()
    out: dict = {"rank": a.rank}
    try:
        store = dist.TCPStore("127.0.0.1", a.port, is_master=False, timeout=timedelta(seconds=120))
        dist.init_process_group("mooncake-cpu", store=store, rank=a.rank, world_size=a.world,
                                timeout=timedelta(seconds=120),
                                pg_options=pg.MooncakeBackendOptions(a.world))
        x = torch.ones(1)
        dist.all_reduce(x)
        if a.rank == 2:
            store.set("victim_ready", b"1")
            os.kill(os.getpid(), signal.SIGKILL)
        pg.set_fault_reconciliation_window_us(1_500_000)
        pg.set_p2p_timeout_us(300_000)
        store.wait(["go"], timedelta(seconds=120))
        x = torch.tensor([float(a.rank + 1)])
        w = dist.all_reduce(x, async_op=True)
        w.wait()
        out["sum"] = [x.item(), pg.get_local_success(w)]
        out["epoch"] = pg.get_current_epoch(None)
        try:
            dist.irecv(torch.zeros(1), src=1 - a.rank, tag=77).wait()
            out["timeout_error"] = None
        except Exception as e:  # noqa: BLE001
            out["timeout_error"] = str(e)
    except Exception:  # noqa: BLE001
        out["error"] = traceback.format_exc()
    print("RESULT " + json.dumps(out), flush=True)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
