#!/usr/bin/env python3
"""Reinforcement-learning experience exchange through Mooncake Store.

Rollout workers generate experience batches (dicts of tensors) and ``put_tensor`` them under
``exp/<worker>/<step>``; trainers ``get_tensor`` the batches assigned to them, check them and take a
(fake) training step, then remove them. Data moves worker -> trainer through the store's segments
(shared memory on one host, tcp across hosts); the master only holds metadata.

The example starts its own ``mooncake_master`` with ``--enable_http_metadata_server``, and the
clients use that HTTP metadata server, so it runs with no other service:

    python examples/rl_samples.py --rollouts 2 --trainers 2 --steps 8
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def master_binary() -> str:
    import mooncake
    p = os.path.join(os.path.dirname(mooncake.__file__), "bin", "mooncake_master")
    if os.path.exists(p):
        return p
    p = shutil.which("mooncake_master")
    if p:
        return p
    out = os.path.join(ROOT, "build", "bin", "mooncake_master")
    subprocess.run(["go", "build", "-o", out, "./cmd/mooncake_master"], cwd=ROOT, check=True)
    return out


def connect(cfg, segment: int):
    import torch
    torch.set_num_threads(1)  # many small processes: don't oversubscribe the cores
    from mooncake.store import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", cfg["metadata"], segment, 32 << 20, "tcp", "", cfg["master"])
    if rc != 0:
        raise RuntimeError(f"store setup failed with {rc}")
    return store


def make_batch(worker: int, step: int, batch: int, obs_dim: int):
    import torch
    g = torch.Generator().manual_seed(worker * 100003 + step)
    return {
        "obs": torch.randn(batch, obs_dim, generator=g),
        "action": torch.randint(0, 16, (batch,), generator=g),
        "reward": torch.randn(batch, generator=g).to(torch.bfloat16),
        "done": torch.rand(batch, generator=g) < 0.05,
        "meta": [torch.tensor(worker), torch.tensor(step)],
    }


def rollout(worker: int, cfg, done_evt, results):
    from mooncake.store import ReplicateConfig
    # Rollouts contribute the memory and keep their experience on their own segment: a trainer
    # that finishes early and leaves must not take other trainers' batches with it.
    store = connect(cfg, cfg["segment"])
    here = ReplicateConfig(replica_num=1, preferred_segment=store.get_hostname())
    t0 = time.time()
    nbytes = 0
    for step in range(cfg["steps"]):
        b = make_batch(worker, step, cfg["batch"], cfg["obs_dim"])
        _t = time.time()
        rc = store.put_tensor(f"exp/{worker}/{step}", b, here)
        if os.environ.get("RL_DEBUG"):
            print("put", worker, step, rc, round(time.time() - _t, 3), flush=True)
        if rc != 0:
            raise RuntimeError(f"rollout {worker}: put_tensor step {step} failed with {rc}")
        nbytes += sum(t.numel() * t.element_size() for t in (b["obs"], b["action"], b["reward"], b["done"]))
    results.put(("rollout", worker, nbytes, time.time() - t0))
    done_evt.wait()  # our segment holds the data: stay until the trainers are done
    store.close()


def train(trainer: int, cfg, results):
    import torch
    store = connect(cfg, 0)  # a pure client: contributes no memory
    mine = [(w, s) for w in range(cfg["rollouts"]) for s in range(cfg["steps"])
            if (w * cfg["steps"] + s) % cfg["trainers"] == trainer]
    t0 = time.time()
    loss_sum = 0.0
    for w, s in mine:
        key = f"exp/{w}/{s}"
        deadline = time.time() + 60
        while store.is_exist(key) != 1:
            if time.time() > deadline:
                raise RuntimeError(f"trainer {trainer}: {key} never arrived")
            time.sleep(0.01)
        b = store.get_tensor(key)
        want = make_batch(w, s, cfg["batch"], cfg["obs_dim"])
        assert torch.equal(b["obs"], want["obs"]) and torch.equal(b["reward"], want["reward"])
        assert int(b["meta"][0]) == w and int(b["meta"][1]) == s
        # a fake policy-gradient step
        logits = b["obs"][:, :16]
        logp = torch.log_softmax(logits, dim=1).gather(1, b["action"][:, None]).squeeze(1)
        loss_sum += float(-(logp * b["reward"].float()).mean())
        store.remove(key, force=True)
    results.put(("trainer", trainer, len(mine), time.time() - t0, loss_sum))
    store.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=2)
    ap.add_argument("--trainers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--obs-dim", type=int, default=128)
    args = ap.parse_args()

    rpc, metrics, http = free_port(), free_port(), free_port()
    master = subprocess.Popen([master_binary(), f"--rpc_port={rpc}", f"--metrics_port={metrics}",
                               "--rpc_address=127.0.0.1", "--enable_http_metadata_server=true",
                               "--http_metadata_server_host=127.0.0.1", f"--http_metadata_server_port={http}",
                               "--enable_metric_reporting=false"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in master.stdout:
            if line.startswith("MOONCAKE_MASTER_READY"):
                break
        else:
            raise RuntimeError("mooncake_master did not start")
        cfg = dict(master=f"127.0.0.1:{rpc}", metadata=f"http://127.0.0.1:{http}/metadata",
                   segment=256 << 20, steps=args.steps, batch=args.batch, obs_dim=args.obs_dim,
                   rollouts=args.rollouts, trainers=args.trainers)
        ctx = mp.get_context("spawn")
        done, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=rollout, args=(w, cfg, done, results)) for w in range(args.rollouts)]
        trainers = [ctx.Process(target=train, args=(t, cfg, results)) for t in range(args.trainers)]
        t0 = time.time()
        for p in procs + trainers:
            p.start()
        for p in trainers:
            p.join(300)
        done.set()
        for p in procs:
            p.join(60)
        elapsed = time.time() - t0
        failed = [p for p in procs + trainers if p.exitcode != 0]
        total = 0
        while not results.empty():
            r = results.get()
            if r[0] == "rollout":
                total += r[2]
                print(f"rollout {r[1]}: put {r[2] / 2**20:.1f} MiB in {r[3]:.2f} s")
            else:
                print(f"trainer {r[1]}: trained on {r[2]} batches in {r[3]:.2f} s (loss sum {r[4]:.3f})")
        print(f"{total / 2**20:.1f} MiB of experience exchanged in {elapsed:.2f} s")
        if failed:
            sys.exit(f"{len(failed)} process(es) failed")
    finally:
        master.terminate()
        master.wait(10)


if __name__ == "__main__":
    main()
