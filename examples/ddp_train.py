"""The main job (`make run`): the same data-parallel training on mooncake-cpu and on gloo, side by side.

    torchrun --standalone --nproc_per_node=2 examples/ddp_train.py [--steps 100] [--out build/run]

Every rank trains the same small MLP with DistributedDataParallel on synthetic data (noisy
points around ten fixed random class centres; each rank draws its own batches), first with the
gradients all-reduced over mooncake-cpu, then, from the same initial weights and the same data,
over gloo. It prints the loss as it falls, then a summary: time per step, all_reduce time per step
(while any of DDP's gradient buckets is with the backend, from hand-off until reduced; it
overlaps the backward pass) and the speed-up. Then a short
all_reduce sweep of both backends (bench/pgbench.py's, 4 KiB to 16 MiB), its summary, and the
plot of it (busbw against size, ratio to gloo) it wrote. Both runs should end at the same loss:
the backends compute the same sums.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import mooncake_pg  # noqa: F401  registers "mooncake-cpu" / "mooncake"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import pgbench  # noqa: E402  the all_reduce sweep and its plot

IN, CLASSES = 256, 10
BACKENDS = ["mooncake-cpu", "gloo"]


def make_model(args) -> nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank and for both backends
    return nn.Sequential(nn.Linear(IN, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                         nn.Linear(args.hidden, CLASSES))


def make_data(rank: int, args) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """args.steps batches for this rank: noisy points around 10 fixed random class centres."""
    g = torch.Generator().manual_seed(1000 + rank)
    out = []
    centres = torch.randn(CLASSES, IN, generator=torch.Generator().manual_seed(7))
    for _ in range(args.steps):
        y = torch.randint(0, CLASSES, (args.batch,), generator=g)
        out.append((centres[y] + 3.0 * torch.randn(args.batch, IN, generator=g), y))
    return out


class AllReduceTimes:
    """The state of timed_allreduce: the group, and when each of this step's buckets was handed
    to the backend and completed."""

    def __init__(self, group):
        self.group = group
        self.world = dist.get_world_size(group)
        self.spans = []  # (hand-off, done) per bucket since the last take()

    def take(self) -> float:
        """Seconds during which at least one of this step's buckets was being all-reduced."""
        total, end = 0.0, float("-inf")
        for start, done in sorted(self.spans):
            total += max(0.0, done - max(start, end))
            end = max(end, done)
        self.spans = []
        return total


def timed_allreduce(state: AllReduceTimes, bucket):
    """A DDP communication hook: DDP's default (average by all_reduce), noting when each bucket
    is handed to the backend and when the backend completes it."""
    t0 = time.perf_counter()
    buf = bucket.buffer().div_(state.world)
    fut = dist.all_reduce(buf, group=state.group, async_op=True).get_future()

    def done(f):
        state.spans.append((t0, time.perf_counter()))
        return f.value()[0]
    return fut.then(done)


def train(backend: str, group, ctl, data, args) -> dict:
    rank = dist.get_rank()
    model = DDP(make_model(args), process_group=group)
    hook = AllReduceTimes(group)
    model.register_comm_hook(hook, timed_allreduce)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    step_s, ar_s, losses = [], [], []
    dist.barrier(group=ctl)
    for step, (x, y) in enumerate(data):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()  # DDP all-reduces the gradient buckets during backward
        opt.step()
        step_s.append(time.perf_counter() - t0)
        ar_s.append(hook.take())
        losses.append(loss.item())
        if (step + 1) % args.log_every == 0 or step == 0:
            mean = torch.tensor([loss.item()])
            dist.all_reduce(mean, group=ctl)  # outside the timed part
            if rank == 0:
                print(f"  [{backend:>12}] step {step + 1:>3}/{len(data)}  loss {mean.item() / dist.get_world_size():.4f}",
                      flush=True)
    # A step takes as long as its slowest rank: per-step maximum over ranks, then the median
    # over the steps after the warm-up ones.
    t = torch.tensor([step_s, ar_s], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctl)
    final = torch.tensor([statistics.fmean(losses[-args.log_every:])])
    dist.all_reduce(final, group=ctl)
    w = args.warmup
    return {"step_ms": statistics.median(t[0, w:].tolist()) * 1e3,
            "allreduce_ms": statistics.median(t[1, w:].tolist()) * 1e3,
            "loss": final.item() / dist.get_world_size()}


def sweep(args) -> list[dict]:
    """bench/pgbench.py's all_reduce sweep over both backends; its own wide table is not printed."""
    ns = argparse.Namespace(collective="all_reduce", backend=",".join(BACKENDS), minbytes="4K",
                            maxbytes="16M", stepfactor=4, iters=args.sweep_iters, warmup=3, rounds=5,
                            dtype="float32", op="sum", check=1, cpu=False, progress=True)
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):
        return pgbench.bench_rank(ns)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100, help="training steps per backend")
    p.add_argument("--warmup", type=int, default=5, help="first steps left out of the timings")
    p.add_argument("--batch", type=int, default=8, help="samples per rank per step")
    p.add_argument("--hidden", type=int, default=1536, help="width of the two hidden layers")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--sweep-iters", type=int, default=10, help="timed all_reduces per size in the sweep")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "run"), help="where the plot goes")
    args = p.parse_args()

    # The default group carries this script's own bookkeeping (timings, loss means); the
    # training and the sweep run on one group per backend over the same processes.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    ctl = dist.new_group(backend="gloo")
    groups = {b: dist.new_group(backend=b) for b in BACKENDS}
    nparams = sum(q.numel() for q in make_model(args).parameters())
    data = make_data(rank, args)
    if rank == 0:
        print(f"== DDP training: {world} ranks on one host, MLP {IN}-{args.hidden}-{args.hidden}-{CLASSES} "
              f"({nparams / 1e6:.1f} M parameters, {nparams * 4 / 2**20:.1f} MiB of gradients all-reduced per step), "
              f"batch {args.batch} per rank, {args.steps} steps per backend", flush=True)
    res = {}
    for b in BACKENDS:
        if rank == 0:
            print(f"-- {b}", flush=True)
        res[b] = train(b, groups[b], ctl, data, args)

    if rank == 0:
        print(flush=True)
        print(f"== DDP summary (median step after {args.warmup} warm-up steps, slowest rank)", flush=True)
        print(f"{'':24}{'mooncake-cpu':>14}{'gloo':>14}{'speed-up':>10}")
        m, g = res["mooncake-cpu"], res["gloo"]
        print(f"{'time per step':24}{m['step_ms']:>11.1f} ms{g['step_ms']:>11.1f} ms{g['step_ms'] / m['step_ms']:>9.2f}x")
        print(f"{'all_reduce per step':24}{m['allreduce_ms']:>11.1f} ms{g['allreduce_ms']:>11.1f} ms"
              f"{g['allreduce_ms'] / m['allreduce_ms']:>9.2f}x")
        print(f"{'final loss':24}{m['loss']:>14.4f}{g['loss']:>14.4f}")
        print(flush=True)
        print(f"== all_reduce sweep (float32 sum, {world} ranks, 5 alternated rounds of {args.sweep_iters} ops per size, median; "
              f"progress on stderr)", flush=True)
    rows = sweep(args)
    if rank == 0:
        print(f"{'size':>8}{'mooncake-cpu':>14}{'gloo':>14}{'speed-up':>10}{'busbw mooncake-cpu':>20}")
        for r in rows:
            m, g = r["mooncake-cpu"], r["gloo"]
            print(f"{pgbench.human(r['size']):>8}{m['time_us']:>11.0f} us{g['time_us']:>11.0f} us"
                  f"{g['time_us'] / m['time_us']:>9.1f}x{m['busbw']:>14.2f} GB/s")
        bad = sum(r[b]["wrong"] for r in rows for b in BACKENDS)
        if bad:
            print(f"WRONG RESULTS: {bad} elements differ from the expected sums", flush=True)
        path = os.path.join(args.out, "allreduce_sweep.png")
        pgbench.plot(rows, path, title=f"all_reduce on one host, {world} ranks: mooncake-cpu vs gloo")
        print(flush=True)
        print(f"plot: {os.path.relpath(path)}  (busbw against size, one line per backend; dashed: ratio to gloo)",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
