"""Time from a SIGKILL of one rank to the survivors' next successful collective.

    python bench/elastic_bench.py [--world 4] [--trials 5] [--size 4096] [--manual]

Each trial starts `world` rank processes on mooncake-cpu (rendezvous: a TCPStore hosted here).
The ranks run back-to-back all_reduce ops of --size float32 elements; the victim writes the
wall-clock time into the store and SIGKILLs itself in the middle of the loop. Each survivor
records when its op in flight completed (over the survivors, with the failed-ranks hint), and
when its first op after that completed with every remaining member (local success). Both
intervals are measured from the kill. All processes run on this host, so their clocks agree.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import mooncake  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def rank_main(a) -> None:
    import mooncake_pg as mpg

    store = dist.TCPStore("127.0.0.1", a.port, is_master=False, timeout=timedelta(seconds=60))
    opts = mpg.MooncakeBackendOptions(0, False, not a.manual, not a.manual)
    dist.init_process_group("mooncake-cpu", store=store, rank=a.rank, world_size=a.world,
                            timeout=timedelta(seconds=60), pg_options=opts)
    x = torch.ones(a.size)
    for _ in range(20):
        dist.all_reduce(x)
    store.set(f"warm{a.rank}", b"1")
    if a.rank == a.victim:
        for r in range(a.world):
            store.wait([f"warm{r}"])
        time.sleep(0.2)
        store.set("t_kill", repr(time.time()).encode())
        os.kill(os.getpid(), signal.SIGKILL)
    degraded = clean = None
    while clean is None:
        w = dist.all_reduce(x, async_op=True)
        w.wait()
        now = time.time()
        failed = mpg.get_failed_ranks_hint(w).nonzero().flatten().tolist()
        if failed and degraded is None:
            degraded = now
            if a.manual:  # membership changes only when the program says so
                mpg.deactivate_ranks(None, failed)
        elif degraded is not None and mpg.get_local_success(w):
            clean = now
    t_kill = float(store.get("t_kill").decode())
    print("RESULT " + json.dumps({"rank": a.rank, "degraded_ms": (degraded - t_kill) * 1e3,
                                  "next_ok_ms": (clean - t_kill) * 1e3}), flush=True)
    os._exit(0)


def trial(a) -> list[dict]:
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=60))
    cmd = [sys.executable, os.path.abspath(__file__), "--port", str(store.port), "--world",
           str(a.world), "--victim", str(a.victim), "--size", str(a.size)]
    if a.manual:
        cmd.append("--manual")
    procs = [subprocess.Popen(cmd + ["--rank", str(r)], stdout=subprocess.PIPE, text=True)
             for r in range(a.world)]
    out = []
    for r, p in enumerate(procs):
        so, _ = p.communicate(timeout=120)
        for line in so.splitlines():
            if line.startswith("RESULT "):
                out.append(json.loads(line[7:]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--victim", type=int, default=2)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--manual", action="store_true", help="both auto flags off")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--rank", type=int, default=-1)
    a = ap.parse_args()
    if a.rank >= 0:
        rank_main(a)
        return 0
    deg, ok = [], []
    for t in range(a.trials):
        res = trial(a)
        if len(res) != a.world - 1:
            print(f"trial {t}: only {len(res)} survivors reported", file=sys.stderr)
            return 1
        d = max(r["degraded_ms"] for r in res)
        n = max(r["next_ok_ms"] for r in res)
        deg.append(d)
        ok.append(n)
        print(f"trial {t}: op in flight completed over the survivors {d:7.1f} ms after the kill; "
              f"next clean collective {n:7.1f} ms", flush=True)
    mode = "manual" if a.manual else "auto"
    print(f"\nworld {a.world}, {a.size * 4} B all_reduce, {mode} mode, {a.trials} trials "
          f"(slowest survivor per trial): in-flight op completes after median "
          f"{statistics.median(deg):.1f} ms (min {min(deg):.1f}, max {max(deg):.1f}); next clean "
          f"collective median {statistics.median(ok):.1f} ms (min {min(ok):.1f}, max {max(ok):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
