"""Recovery time: from a fault of one rank to the survivors' next completed collective.

    python bench/elastic_bench.py [--kind sigkill|sigstop|partition|all] [--world 4]
                                  [--trials 10] [--size 4096] [--manual]

Each trial starts `world` rank processes on mooncake-cpu (rendezvous: a TCPStore hosted here).
The ranks run back-to-back all_reduce ops of --size float32 elements, and one fault hits the
victim in the middle of the loop:
  sigkill    the victim writes the wall-clock time into the store and SIGKILLs itself;
  sigstop    the same with SIGSTOP (it never resumes: the trial kills it at the end);
  partition  the ranks run in network namespaces on a bridge (root and iproute2 needed), and
             this process takes the victim's bridge port down, then writes the time.
Each survivor records when its op in flight completed (over the survivors, with the
failed-ranks hint), and when its first op after that completed with every remaining member
(local success); both are measured from the fault (the slowest survivor per trial). The
survivors then stop together (a flag in the reduced tensor), and each checks every sum it got
(the ranks that contributed: world or world - 1); a trial reports survivors whose op failed or
whose sum was wrong. All processes run on this host, so their clocks agree. A frozen or cut-off rank is declared failed
after the liveness probe's timeout (MC_PG_PROBE_TIMEOUT_MS, default 2000 ms) plus the silence
before the first probe (MC_PG_PROBE_MS, 200 ms): the goal is that timeout + 0.5 s; a dead
process refuses the probe at once (goal 0.5 s).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
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

    store = dist.TCPStore(a.store_host, a.port, is_master=False, timeout=timedelta(seconds=60))
    opts = mpg.MooncakeBackendOptions(0, False, not a.manual, not a.manual)
    dist.init_process_group("mooncake-cpu", store=store, rank=a.rank, world_size=a.world,
                            timeout=timedelta(seconds=60), pg_options=opts)
    x = torch.ones(a.size)
    for _ in range(20):
        dist.all_reduce(x)
    store.set(f"warm{a.rank}", b"1")
    if a.rank == a.victim and a.kind in ("sigkill", "sigstop"):
        for r in range(a.world):
            store.wait([f"warm{r}"])
        time.sleep(0.2)
        store.set("t_kill", repr(time.time()).encode())
        os.kill(os.getpid(), signal.SIGKILL if a.kind == "sigkill" else signal.SIGSTOP)
    degraded = clean = None
    errors = wrong = 0
    end = time.time() + 60
    while time.time() < end:
        # x[0] says whether this rank is done (it saw its next clean op), so every survivor
        # stops after the same call: one whose fault op came a call later than the others'
        # (the group split on the op at the fault, docs/elastic.md) still finds them there.
        x.fill_(1.0)
        x[0] = 0.0 if clean is None else 1.0
        w = dist.all_reduce(x, async_op=True)
        try:
            w.wait()
        except Exception:  # noqa: BLE001
            if a.rank == a.victim:  # cut off: fenced
                os._exit(0)
            errors += 1  # a fault-tolerant loop goes on
            continue
        now = time.time()
        if x[0].item() == a.world - 1:  # every survivor is done
            break
        if not (x[1:] == x[1]).all() or x[1].item() not in (a.world - 1, a.world):
            wrong += 1
        failed = mpg.get_failed_ranks_hint(w).nonzero().flatten().tolist()
        if not failed and degraded is None and mpg.get_current_epoch(None) > 0:
            failed = [a.victim]  # its first op after catching up
        if failed and degraded is None:
            degraded = now
            if a.manual:  # membership changes only when the program says so
                mpg.deactivate_ranks(None, failed)
        elif degraded is not None and clean is None and mpg.get_local_success(w):
            clean = now
    t_kill = float(store.get("t_kill").decode())
    if clean is None:
        os._exit(1)
    print("RESULT " + json.dumps({"rank": a.rank, "degraded_ms": (degraded - t_kill) * 1e3,
                                  "next_ok_ms": (clean - t_kill) * 1e3, "errors": errors,
                                  "wrong": wrong}),
          flush=True)
    os._exit(0)


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class Bridge:
    """world network namespaces on a bridge in this namespace (the store's side)."""

    def __init__(self, world: int):
        tag = uuid.uuid4().hex[:5]
        self.net = f"10.233.{random.randrange(10, 250)}"
        self.br, self.ns = f"eb{tag}", [f"ef{tag}{r}" for r in range(world)]
        self.ports = [f"er{tag}{r}" for r in range(world)]
        ends = [f"ee{tag}{r}" for r in range(world)]
        ip("link", "add", self.br, "type", "bridge")
        ip("addr", "add", f"{self.net}.254/24", "dev", self.br)
        ip("link", "set", self.br, "up")
        for r in range(world):
            ip("netns", "add", self.ns[r])
            ip("link", "add", self.ports[r], "type", "veth", "peer", "name", ends[r])
            ip("link", "set", ends[r], "netns", self.ns[r])
            ip("-n", self.ns[r], "addr", "add", f"{self.net}.{r + 1}/24", "dev", ends[r])
            ip("-n", self.ns[r], "link", "set", ends[r], "up")
            ip("-n", self.ns[r], "link", "set", "lo", "up")
            ip("link", "set", self.ports[r], "master", self.br)
            ip("link", "set", self.ports[r], "up")

    def close(self) -> None:
        for n in self.ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        for p in self.ports:
            subprocess.run(["ip", "link", "del", p], capture_output=True)
        subprocess.run(["ip", "link", "del", self.br], capture_output=True)


def trial(a, kind: str) -> list[dict]:
    br = Bridge(a.world) if kind == "partition" else None
    host = f"{br.net}.254" if br else "127.0.0.1"
    store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=60))
    cmd = [sys.executable, os.path.abspath(__file__), "--port", str(store.port), "--world",
           str(a.world), "--victim", str(a.victim), "--size", str(a.size), "--kind", kind,
           "--store-host", host]
    if a.manual:
        cmd.append("--manual")
    procs = [subprocess.Popen((["ip", "netns", "exec", br.ns[r]] if br else []) + cmd +
                              ["--rank", str(r)], stdout=subprocess.PIPE, text=True)
             for r in range(a.world)]
    out = []
    try:
        if br:
            store.wait([f"warm{r}" for r in range(a.world)])
            time.sleep(0.2)
            ip("link", "set", br.ports[a.victim], "down")
            store.set("t_kill", repr(time.time()).encode())
        for r, p in enumerate(procs):
            if r == a.victim:
                continue
            so, _ = p.communicate(timeout=120)
            for line in so.splitlines():
                if line.startswith("RESULT "):
                    out.append(json.loads(line[7:]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        if br:
            br.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--victim", type=int, default=2)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--kind", default="sigkill", choices=["sigkill", "sigstop", "partition", "all"])
    ap.add_argument("--store-host", default="127.0.0.1")
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--manual", action="store_true", help="both auto flags off")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--rank", type=int, default=-1)
    a = ap.parse_args()
    if a.rank >= 0:
        rank_main(a)
        return 0
    kinds = ["sigkill", "sigstop", "partition"] if a.kind == "all" else [a.kind]
    mode = "manual" if a.manual else "auto"
    table = []
    for kind in kinds:
        deg, ok = [], []
        bad = 0
        for t in range(a.trials):
            res = trial(a, kind)
            if len(res) != a.world - 1:
                print(f"{kind} trial {t}: only {len(res)} survivors reported", file=sys.stderr)
                return 1
            if any(r["errors"] or r["wrong"] for r in res):
                print(f"{kind} trial {t}: ranks {[r['rank'] for r in res if r['errors']]} had an "
                      f"op fail, ranks {[r['rank'] for r in res if r['wrong']]} a wrong sum",
                      flush=True)
                bad += 1
            d = max(r["degraded_ms"] for r in res)
            n = max(r["next_ok_ms"] for r in res)
            deg.append(d)
            ok.append(n)
            print(f"{kind} trial {t}: op in flight completed over the survivors {d:7.1f} ms after "
                  f"the fault; next clean collective {n:7.1f} ms", flush=True)
        table.append((kind, deg, ok))
        print(f"\n{kind}: world {a.world}, {a.size * 4} B all_reduce, {mode} mode, {a.trials} "
              f"faults (slowest survivor per fault): in-flight op completes after median "
              f"{statistics.median(deg):.1f} ms (min {min(deg):.1f}, max {max(deg):.1f}); next "
              f"clean collective median {statistics.median(ok):.1f} ms (min {min(ok):.1f}, "
              f"max {max(ok):.1f}); faults with a survivor's op failing or wrong: {bad}\n",
              flush=True)
    print("| fault | faults | fault -> survivors' op completes: median / max | next clean op: median / max |")
    print("|---|---|---|---|")
    for kind, deg, ok in table:
        print(f"| {kind} | {len(deg)} | {statistics.median(deg):.0f} / {max(deg):.0f} ms | "
              f"{statistics.median(ok):.0f} / {max(ok):.0f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
