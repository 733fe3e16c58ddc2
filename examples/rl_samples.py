#!/usr/bin/env python3
"""Reinforcement-learning data exchange through Mooncake Store: rollout engines put_tensor
their samples, training engines get_tensor them (Mooncake's "RL training integration" page).

It runs two ways.

1. The page's loop (upstream's mooncake-rl/examples/rl_samples.py), against a metadata server
   and a mooncake_master you started (the page's addresses are the defaults):

       python examples/bootstrap_server.py &                  # or: mooncake_master --enable_http_metadata_server=true ...
       mooncake_master --rpc_port=50051 &
       python examples/rl_samples.py --num_rollout=10 --num_train_actor=2 --num_rollout_actor=2 \
           --save_interval=5 --eval_interval=5 --model_path=./checkpoints

   RolloutManager (with a RolloutController and --num_rollout_actor RolloutEngines) puts each
   rollout's samples under key str(rollout_id) (or "run:RUN/rollout:ID" with --run_id); TrainGroup
   (--num_train_actor TrainActors) gets them, checks them and takes a training step; checkpoints
   every --save_interval rollouts under --model_path, evaluation every --eval_interval. Both
   sides print the samples' sha256, so the handoff is checked byte for byte. The store clients
   use --protocol (default tcp; the page's "rdma" with --rollout_device/--train_device names a
   NIC, and fails with what is missing on a host without one).

2. A self-contained exchange (no flags, or --rollouts/--trainers/--steps): starts its own
   mooncake_master with its HTTP metadata server, runs rollout workers and trainers as separate
   processes, and removes each batch once trained on:

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


def exchange_train(trainer: int, cfg, results):
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



# ================================================================================== the page's loop

OBS_DIM, NUM_ACTIONS = 4, 10  # upstream's sample: 4 ints of observation, an action in [0, 9]


def _digest(samples) -> str:
    """sha256 (16 hex digits) of a rollout's samples: every tensor's dtype, shape and bytes."""
    import hashlib

    h = hashlib.sha256()
    for sample in samples:
        for name in sorted(sample):
            t = sample[name].contiguous()
            h.update(f"{name}:{t.dtype}:{tuple(t.shape)}:".encode())
            h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


def _connect(args, role: str, hostname: str, device: str):
    """A store client as the page sets one up (its seven positional arguments)."""
    from mooncake.engine import last_error
    from mooncake.store import MooncakeDistributedStore

    client = MooncakeDistributedStore()
    rc = client.setup(hostname, args.metadata_server, args.global_segment_size,
                      args.local_buffer_size, args.protocol, device, args.master_server_address)
    if rc != 0:
        raise SystemExit(f"[{role}] MooncakeDistributedStore.setup({hostname!r}, "
                         f"{args.metadata_server!r}, ..., {args.protocol!r}, {device!r}, "
                         f"{args.master_server_address!r}) failed with {rc}: {last_error()}")
    return client


class TrainActor:
    """One training worker: a small policy model and its optimizer."""

    def __init__(self, rank: int, seed: int):
        import torch

        self.rank = rank
        self.gen = torch.Generator().manual_seed(seed * 7919 + rank)
        self.model = torch.nn.Linear(OBS_DIM, 2)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)

    def init_model(self, args=None):
        import torch

        with torch.no_grad():
            bound = (6.0 / (OBS_DIM + 2)) ** 0.5  # xavier-uniform, from our generator
            self.model.weight.copy_(torch.rand(self.model.weight.shape, generator=self.gen) * 2 * bound - bound)
            self.model.bias.zero_()
        print(f"[TrainActor {self.rank}] Model and optimizer initialized")

    def train(self, sample) -> float:
        """One step: loss = (model(obs)[action % 2] - reward)^2."""
        self.model.train()
        obs = sample["obs"].float().unsqueeze(0) / 100.0
        action = int(sample["action"])
        reward = sample["reward"].float().reshape(1)
        pred = self.model(obs)[0, action % 2]
        loss = (pred - reward).pow(2).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        print(f"[TrainActor {self.rank}] Trained on sample (action={action}, "
              f"reward={float(reward):.4f}), loss={loss.item():.4f}")
        return loss.item()

    def save_model(self, rollout_id: int, model_path: str) -> str:
        import torch

        path = os.path.join(model_path, f"actor_{self.rank}_rollout_{rollout_id}.pt")
        torch.save(self.model.state_dict(), path)
        return path


class TrainGroup:
    """The training engines: --num_train_actor actors and the training side's store client."""

    def __init__(self, args):
        self.args = args
        self.actor_handlers = [TrainActor(r, args.seed) for r in range(args.num_train_actor)]
        self.training_client = _connect(args, "TrainGroup", args.train_hostname, args.train_device)
        self.digests = {}

    def init_actors(self, args, role="actor"):
        for actor in self.actor_handlers:
            actor.init_model(args)
        print(f"[TrainGroup] {len(self.actor_handlers)} actor(s) initialized")
        return [0 if args.start_rollout_id is None else args.start_rollout_id] * len(self.actor_handlers)

    def init_weight_update_connections(self, rollout_manager):
        print("[TrainGroup] Connected to rollout manager")

    def update_weights(self):
        print("[TrainGroup] Weights updated")

    def train(self, rollout_id: int, rollout_key: str) -> float:
        """Fetches the rollout's samples from the store and spreads them over the actors."""
        samples = self.training_client.get_tensor(rollout_key)
        if samples is None:
            raise RuntimeError(f"[TrainGroup] rollout {rollout_id}: key {rollout_key!r} is not "
                               "in the store")
        digest = _digest(samples)
        self.digests[rollout_id] = digest
        print(f"[TrainGroup] rollout {rollout_id}: got {len(samples)} samples from key "
              f"{rollout_key!r} (sha256 {digest})")
        losses = [self.actor_handlers[i % len(self.actor_handlers)].train(s)
                  for i, s in enumerate(samples)]
        avg = sum(losses) / len(losses)
        print(f"[TrainGroup] Rollout {rollout_id} average loss: {avg:.4f}")
        return avg

    def save_model(self, rollout_id: int):
        os.makedirs(self.args.model_path, exist_ok=True)
        for actor in self.actor_handlers:
            actor.save_model(rollout_id, self.args.model_path)
        print(f"[TrainGroup] Saved checkpoint at rollout {rollout_id} in {self.args.model_path}")

    def close(self):
        self.training_client.close()


class RolloutEngine:
    """One inference worker: makes (obs, action, reward) samples (random, reproducible)."""

    def __init__(self, args, index: int = 0):
        self.seed, self.index = args.seed, index

    def generate(self, rollout_id: int):
        import torch

        g = torch.Generator().manual_seed((self.seed * 1000003 + rollout_id) * 1009 + self.index)
        return {
            "obs": torch.randint(0, 100, (OBS_DIM,), dtype=torch.int32, generator=g),
            "action": torch.randint(0, NUM_ACTIONS, (), dtype=torch.int64, generator=g),
            "reward": torch.rand((), generator=g) * 2 - 1,
        }

    def eval(self, rollout_id: int, samples) -> float:
        avg_reward = sum(float(s["reward"]) for s in samples) / len(samples)
        score = avg_reward ** 2
        print(f"[RolloutEngine {self.index}] Evaluating rollout {rollout_id} "
              f"(reward={avg_reward:.4f}) => eval_score={score:.4f}")
        return score


class RolloutController:
    """The rollout manager's controller: dataset state, and the rollout side's store client."""

    def __init__(self, args):
        self.args = args
        self.epoch_id = 0
        self.sample_index = 0
        self.sample_offset = 0
        self.metadata = {}
        self.rollout_client = _connect(args, "RolloutController", args.rollout_hostname,
                                       args.rollout_device)

    def _path(self, rollout_id) -> str:
        return os.path.join(self.args.model_path, "rollout",
                            f"global_dataset_state_dict_{rollout_id}.pt")

    def load(self, rollout_id=None):
        import torch

        path = self._path(rollout_id)
        if not os.path.exists(path):
            print(f"[RolloutController] no dataset state at {path}: starting fresh")
            return
        state = torch.load(path)
        self.sample_offset = state.get("sample_offset", 0)
        self.epoch_id = state.get("epoch_id", 0)
        self.sample_index = state.get("sample_index", 0)
        self.metadata = state.get("metadata", {})
        print(f"[RolloutController] loaded dataset state from {path}: sample_index="
              f"{self.sample_index}")

    def save(self, rollout_id: int):
        import torch

        path = self._path(rollout_id)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.save({"sample_offset": self.sample_offset, "epoch_id": self.epoch_id,
                    "sample_index": self.sample_index, "metadata": self.metadata}, path)


class RolloutManager:
    """The rollout engines and their controller: writes each rollout's samples to the store."""

    def __init__(self, args):
        self.args = args
        self.controller = RolloutController(args)
        self.rollout_engines = [RolloutEngine(args, i) for i in range(args.num_rollout_actor)]
        self.digests = {}

    def key(self, rollout_id: int) -> str:
        if self.args.run_id:
            return f"run:{self.args.run_id}/rollout:{rollout_id}"
        return str(rollout_id)

    def generate(self, rollout_id: int) -> str:
        rollout_samples = [e.generate(rollout_id) for e in self.rollout_engines]
        if self.args.rollout_shuffle:
            import random

            random.Random(self.args.seed * 31 + rollout_id).shuffle(rollout_samples)
        key = self.key(rollout_id)
        client = self.controller.rollout_client
        if client.is_exist(key) == 1:  # left by an earlier run: puts never overwrite
            client.remove(key, force=True)
        rc = client.put_tensor(key, rollout_samples)
        if rc != 0:
            raise RuntimeError(f"[RolloutManager] put_tensor({key!r}) failed with {rc}")
        self.controller.sample_index += len(rollout_samples)
        digest = _digest(rollout_samples)
        self.digests[rollout_id] = digest
        print(f"[RolloutManager] rollout {rollout_id}: put {len(rollout_samples)} samples under "
              f"key {key!r} (sha256 {digest})")
        return key

    def eval(self, rollout_id: int):
        samples = self.controller.rollout_client.get_tensor(self.key(rollout_id))
        if samples is None:
            raise RuntimeError(f"[RolloutManager] rollout {rollout_id} is not in the store")
        for engine in self.rollout_engines:
            engine.eval(rollout_id, samples)
        print(f"[RolloutManager] Evaluation at rollout {rollout_id}")

    def release(self, key: str):
        """Removes a consumed rollout from the store."""
        self.controller.rollout_client.remove(key, force=True)

    def close(self):
        self.controller.rollout_client.close()


def train(args):
    """The page's loop (adapted from THUDM/slime): generate -> train -> save -> update -> eval."""
    actor_model = TrainGroup(args)
    rollout_manager = RolloutManager(args)
    try:
        start_rollout_ids = actor_model.init_actors(args)
        assert len(set(start_rollout_ids)) == 1
        if args.start_rollout_id is None:
            args.start_rollout_id = start_rollout_ids[0]
        rollout_manager.controller.load(args.start_rollout_id - 1)
        actor_model.init_weight_update_connections(rollout_manager)
        actor_model.update_weights()
        steps = 0
        if args.eval_interval:  # warm-up round, evaluated
            key = rollout_manager.generate(args.start_rollout_id)
            actor_model.train(args.start_rollout_id, key)
            rollout_manager.eval(args.start_rollout_id)
            rollout_manager.release(key)
            steps += 1
        for rollout_id in range(args.start_rollout_id, args.num_rollout):
            key = rollout_manager.generate(rollout_id)
            actor_model.train(rollout_id, key)
            if args.save_interval and (rollout_id + 1) % args.save_interval == 0:
                actor_model.save_model(rollout_id)
                rollout_manager.controller.save(rollout_id)
            actor_model.update_weights()
            if args.eval_interval and (rollout_id + 1) % args.eval_interval == 0:
                rollout_manager.eval(rollout_id)
            rollout_manager.release(key)
            steps += 1
            if rollout_manager.digests[rollout_id] != actor_model.digests[rollout_id]:
                raise RuntimeError(f"rollout {rollout_id}: the trainer got other samples than "
                                   "the rollout engines put")
        print(f"done: {steps} rollout(s) exchanged through Mooncake Store, every one byte-exact")
    finally:
        rollout_manager.close()
        actor_model.close()


PAGE_FLAGS = ("num_rollout", "num_train_actor", "num_rollout_actor", "save_interval",
              "eval_interval", "model_path", "start_rollout_id", "num_epoch",
              "rollout_global_dataset", "rollout_shuffle", "master_server_address",
              "metadata_server", "protocol", "rollout_device", "train_device",
              "rollout_hostname", "train_hostname", "global_segment_size", "local_buffer_size",
              "run_id", "seed")
PAGE_DEFAULTS = dict(num_rollout=5, num_train_actor=1, num_rollout_actor=1, save_interval=2,
                     eval_interval=2, model_path="./checkpoints", start_rollout_id=None,
                     num_epoch=1, rollout_global_dataset=False, rollout_shuffle=False,
                     master_server_address="localhost:50051",
                     metadata_server="http://localhost:8080/metadata", protocol="tcp",
                     rollout_device="", train_device="", rollout_hostname="localhost:12346",
                     train_hostname="localhost:12345", global_segment_size=512 * 1024 * 1024,
                     local_buffer_size=128 * 1024 * 1024, run_id="", seed=0)
EXCHANGE_DEFAULTS = dict(rollouts=2, trainers=2, steps=8, batch=1024, obs_dim=128)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 argument_default=None)
    g = ap.add_argument_group("the page's loop (upstream's flags; defaults in brackets)")
    g.add_argument("--num_rollout", type=int, help="total number of rollouts [5]")
    g.add_argument("--num_train_actor", type=int, help="training actors [1]")
    g.add_argument("--num_rollout_actor", type=int, help="rollout engines [1]")
    g.add_argument("--save_interval", type=int, help="checkpoint every N rollouts; 0: never [2]")
    g.add_argument("--eval_interval", type=int, help="evaluate every N rollouts; 0: never [2]")
    g.add_argument("--model_path", help="where checkpoints go [./checkpoints]")
    g.add_argument("--start_rollout_id", type=int, help="first rollout id [0]")
    g.add_argument("--num_epoch", type=int, help="accepted, as upstream (no effect) [1]")
    g.add_argument("--rollout_global_dataset", action="store_true", default=None,
                   help="accepted, as upstream (no effect)")
    g.add_argument("--rollout_shuffle", action="store_true", default=None,
                   help="shuffle each rollout's samples before putting them")
    c = ap.add_argument_group("the page's loop: where the store is (ours)")
    c.add_argument("--master_server_address", help="mooncake_master [localhost:50051]")
    c.add_argument("--metadata_server", help="[http://localhost:8080/metadata]")
    c.add_argument("--protocol", help='store clients\' protocol ["tcp"; the page: "rdma"]')
    c.add_argument("--rollout_device", help='NIC of the rollout client (the page: "erdma_0") [""]')
    c.add_argument("--train_device", help='NIC of the training client (the page: "erdma_1") [""]')
    c.add_argument("--rollout_hostname", help="[localhost:12346]")
    c.add_argument("--train_hostname", help="[localhost:12345]")
    c.add_argument("--global_segment_size", type=int, help="bytes per client [512 MiB]")
    c.add_argument("--local_buffer_size", type=int, help="bytes per client [128 MiB]")
    c.add_argument("--run_id", help='keys "run:RUN/rollout:ID" instead of "ID"')
    c.add_argument("--seed", type=int, help="seed of the samples and models [0]")
    x = ap.add_argument_group("the self-contained exchange (starts its own mooncake_master)")
    x.add_argument("--rollouts", type=int, help="rollout worker processes [2]")
    x.add_argument("--trainers", type=int, help="trainer processes [2]")
    x.add_argument("--steps", type=int, help="batches per rollout worker [8]")
    x.add_argument("--batch", type=int, help="samples per batch [1024]")
    x.add_argument("--obs-dim", dest="obs_dim", type=int, help="observation size [128]")
    args = ap.parse_args(argv)
    page = [f for f in PAGE_FLAGS if getattr(args, f) is not None]
    exchange = [f for f in EXCHANGE_DEFAULTS if getattr(args, f) is not None]
    if page and exchange:
        ap.error(f"--{page[0]} (the page's loop) and --{exchange[0].replace('_', '-')} (the "
                 "self-contained exchange) cannot be combined")
    args.mode = "page" if page else "exchange"
    for k, v in {**PAGE_DEFAULTS, **EXCHANGE_DEFAULTS}.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.mode == "page":
        for name in ("num_rollout", "num_train_actor", "num_rollout_actor"):
            if getattr(args, name) < (0 if name == "num_rollout" else 1):
                ap.error(f"--{name} must be >= {0 if name == 'num_rollout' else 1}")
        for name in ("save_interval", "eval_interval"):
            if getattr(args, name) < 0:
                ap.error(f"--{name} must be >= 0 (0: never)")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.mode == "page":
        train(args)
    else:
        exchange_main(args)


def exchange_main(args):
    """The self-contained exchange: its own master, rollout and trainer processes."""
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
        trainers = [ctx.Process(target=exchange_train, args=(t, cfg, results)) for t in range(args.trainers)]
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
