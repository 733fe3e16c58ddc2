"""Elastic data-parallel training on mooncake-cpu: a rank dies, the others keep training, a
replacement joins and training goes on with all ranks.

    python examples/elastic_train.py [--world 4] [--steps 40] [--kill-step 5] [--victim 2]

The launcher hosts the rendezvous store (a TCPStore, as torchrun's agent would) and starts the
ranks as separate processes. torchrun itself is not used here because its agent tears the whole
job down when a worker dies; with mooncake the survivors go on.

Every step: forward/backward on the rank's shard, grads all-reduced (SUM) and divided by the
number of ranks that contributed (the op's failed-ranks hint says who did not). At --kill-step
the victim SIGKILLs itself in the middle of the all_reduce; the survivors' op completes over
them, the group deactivates the dead rank (auto mode) and training continues. The launcher then
starts a replacement process for the same rank; it calls join_group. The survivors poll
get_peer_state every step, agree through one all_reduce(MAX) on the step at which to admit it,
and call recover_ranks together; then everybody broadcasts the model and the step from the lowest
active rank and trains on. At the end every rank prints a digest of its parameters: they are
identical.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import mooncake  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import mooncake_pg as mpg  # noqa: E402

DIM = 64
args_step_sleep = 0.25


def log(rank: int, msg: str) -> None:
    print(f"[rank {rank}] {msg}", flush=True)


def make_data(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(32, DIM, generator=g)
    w_true = torch.arange(DIM, dtype=torch.float32) / DIM
    return x, x @ w_true + 0.5


def lowest_active() -> int:
    return int(torch.nonzero(mpg.get_active_ranks(None))[0].item())


def sync_model(model: torch.nn.Module, step: int) -> int:
    src = lowest_active()
    for p in model.parameters():
        dist.broadcast(p.data, src)
    s = torch.tensor([step], dtype=torch.int64)
    dist.broadcast(s, src)
    return int(s.item())


def train(rank: int, world: int, port: int, steps: int, kill_step: int, victim: int, joining: bool) -> None:
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=120))
    dist.init_process_group("mooncake-cpu", store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    torch.manual_seed(0)
    model = torch.nn.Linear(DIM, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    if joining:
        t0 = time.time()
        r = mpg.join_group(None)
        log(rank, f"replacement joined: {r.status.name}, epoch {r.new_epoch} ({time.time() - t0:.2f}s)")
        step = sync_model(model, 0)
        log(rank, f"got the model at step {step}")
    while step < steps:
        if not joining and rank == victim and step == kill_step:
            store.set("victim_dying", b"1")
            time.sleep(0.3)  # the others are inside the step's all_reduce by now
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = make_data(rank, step)
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
        opt.zero_grad()
        loss.backward()
        flat = torch.cat([p.grad.flatten() for p in model.parameters()])
        t0 = time.time()
        w = dist.all_reduce(flat, async_op=True)
        w.wait()
        failed = mpg.get_failed_ranks_hint(w).nonzero().flatten().tolist()  # ranks set in the mask
        contributors = int(mpg.get_active_ranks(None).sum().item())
        if failed:
            log(rank, f"step {step}: all_reduce completed without ranks {failed} in "
                      f"{time.time() - t0:.2f}s; epoch {mpg.get_current_epoch(None)}, "
                      f"active {mpg.get_active_ranks(None).tolist()}")
        flat /= contributors
        off = 0
        for p in model.parameters():
            n = p.numel()
            p.grad.copy_(flat[off:off + n].view_as(p))
            off += n
        opt.step()
        # Admit a replacement: the lowest active rank decides, everybody learns it in one op.
        dead = [r for r, a in enumerate(mpg.get_active_ranks(None).tolist()) if not a and r < world]
        ready = torch.zeros(1)
        if dead and rank == lowest_active() and all(mpg.get_peer_state(None, dead)):
            ready[0] = 1
        dist.all_reduce(ready, op=dist.ReduceOp.MAX)
        if ready[0] > 0:
            r = mpg.recover_ranks(None, dead)
            log(rank, f"step {step}: recover_ranks({dead}) -> {r.status.name}, epoch {r.new_epoch}")
            sync_model(model, step + 1)
        time.sleep(args_step_sleep)  # stands in for real work; lets the replacement start in time
        if step % 10 == 0 or step == steps - 1:
            log(rank, f"step {step}: loss {loss.item():.4f} (world {contributors})")
        step += 1
    digest = sum(float(p.detach().double().sum()) for p in model.parameters())
    log(rank, f"done: parameter digest {digest:.6f}, epoch {mpg.get_current_epoch(None)}")
    os._exit(0)


def launch(args) -> int:
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=120))
    base = [sys.executable, os.path.abspath(__file__), "--port", str(store.port),
            "--world", str(args.world), "--steps", str(args.steps),
            "--kill-step", str(args.kill_step), "--victim", str(args.victim)]
    procs = [subprocess.Popen(base + ["--rank", str(r)]) for r in range(args.world)]
    procs[args.victim].wait()
    print(f"[launcher] rank {args.victim} exited with {procs[args.victim].returncode}; "
          "starting a replacement", flush=True)
    time.sleep(1.0)
    rep = subprocess.Popen(base + ["--rank", str(args.victim), "--joining"])
    rc = 0
    for p in [p for i, p in enumerate(procs) if i != args.victim] + [rep]:
        rc |= p.wait(timeout=600)
    return rc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--kill-step", type=int, default=5)
    ap.add_argument("--victim", type=int, default=2)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--rank", type=int, default=-1)
    ap.add_argument("--joining", action="store_true")
    args = ap.parse_args()
    if args.rank < 0:
        return launch(args)
    train(args.rank, args.world, args.port, args.steps, args.kill_step, args.victim, args.joining)
    return 0


if __name__ == "__main__":
    sys.exit(main())
