"""Rank bodies of tests/test_pg_ipc.py: the same-host device path (torchext/ipc.hpp) run by real
processes. With MOONCAKE_PG_IPC_FAKE=1 and CPU tensors on backend "mooncake" the path's
protocol runs over shared memory (handles are shm names) instead of CUDA IPC; on a GPU
(cuda=True) the same checks run on CUDA tensors over CUDA IPC. Every result is compared exactly
with the op computed on CPU from every rank's input, and the path's counters (ops taken, scratch
buffers exported, peer buffers mapped) are compared with what the sequence of ops implies."""

from __future__ import annotations

import glob
import json
import os

import torch
import torch.distributed as dist

from pg_harness import Checker, init
from pg_workers import R, fold, make, tol

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32)
KIND = {False: "shm-fake", True: "cuda-ipc"}


class Tally:
    """What the path should have done: ops taken and the scratch's growth (each of its two
    halves doubles, at least to the op's size, from 4 KiB for shm-fake and 512 KiB for
    cuda-ipc)."""

    def __init__(self, cuda: bool, on: bool):
        self.on, self.ops, self.exports, self.cap = on, 0, 0, 0
        self.floor = (512 << 10) if cuda else 4096

    def took(self, t: torch.Tensor) -> None:
        if not self.on:
            return
        self.ops += 1
        n = t.numel() * t.element_size()
        if self.cap < n:
            self.cap = max(n, 2 * self.cap, self.floor)
            self.exports += 1


def _setup(rank: int, world: int, tmpdir: str, cuda: bool, path: bool) -> torch.device:
    if cuda:
        os.environ["MOONCAKE_PG_CUDA_IPC"] = "1" if path else "0"
        torch.cuda.set_device(rank % torch.cuda.device_count())
        init(rank, world, os.path.join(tmpdir, "store"), backend="cpu:mooncake-cpu,cuda:mooncake")
        return torch.device("cuda", torch.cuda.current_device())
    if path:
        os.environ["MOONCAKE_PG_IPC_FAKE"] = "1"
    init(rank, world, os.path.join(tmpdir, "store"), backend="cpu:mooncake")
    return torch.device("cpu")


def _stats(dev) -> dict:
    import mooncake.pg as mpg

    return dict(mpg._pg_ext._ipc_stats(dist.group.WORLD._get_backend(dev)))


def _same(ck: Checker, name: str, got, want) -> None:
    ck.true(name, got == want, f"got {got!r}, want {want!r}")


def _ops(dt):
    ops = [R.SUM, R.MAX, R.MIN, R.PRODUCT]
    if dt.is_floating_point:
        ops.append(R.AVG)
    else:
        ops.append(R.BXOR)  # not on the path: staged between path ops
    return ops


def check_ops(ck: Checker, rank: int, world: int, dev, dt, tally: Tally):
    for op in _ops(dt):
        ins = [make(r, dt, (37,), op) for r in range(world)]
        t = ins[rank].to(dev, copy=True)
        dist.all_reduce(t, op=op)
        ck.eq(f"all_reduce {dt}/{op}", t.cpu(), fold(op, ins), **tol(dt, op))
        if op != R.BXOR:
            tally.took(t)
    # reduce_scatter_tensor: rank r gets the reduction of everyone's chunk r
    for op in (R.SUM, R.MAX):
        chunks = [[make(r * world + j, dt, (5,)) for j in range(world)] for r in range(world)]
        out = torch.empty(5, dtype=dt, device=dev)
        src = torch.cat(chunks[rank]).to(dev, copy=True)
        dist.reduce_scatter_tensor(out, src, op=op)
        ck.eq(f"reduce_scatter_tensor {dt}/{op}", out.cpu(),
              fold(op, [chunks[r][rank] for r in range(world)]))
        tally.took(src)
    root = 1 % world
    t = make(rank, dt, (33,)).to(dev, copy=True)
    dist.broadcast(t, src=root)
    ck.eq(f"broadcast {dt}", t.cpu(), make(root, dt, (33,)))
    tally.took(t)
    x = make(rank, dt, (9,)).to(dev, copy=True)
    outs = [torch.empty(9, dtype=dt, device=dev) for _ in range(world)]
    dist.all_gather(outs, x)
    for r in range(world):
        ck.eq(f"all_gather {dt}[{r}]", outs[r].cpu(), make(r, dt, (9,)))
    tally.took(x)
    big = torch.empty(9 * world, dtype=dt, device=dev)
    dist.all_gather_into_tensor(big, x)
    ck.eq(f"all_gather_into_tensor {dt}", big.cpu(), torch.cat([make(r, dt, (9,)) for r in range(world)]))
    tally.took(x)
    mine = [make(rank * world + j, dt, (4,)) for j in range(world)]
    want = [make(r * world + rank, dt, (4,)) for r in range(world)]
    y = torch.empty(4 * world, dtype=dt, device=dev)
    src = torch.cat(mine).to(dev, copy=True)
    dist.all_to_all_single(y, src)
    ck.eq(f"all_to_all_single {dt}", y.cpu(), torch.cat(want))
    tally.took(src)
    # uneven splits stay on staging
    send = make(rank, dt, (sum(j + 1 for j in range(world)),))
    y = torch.empty((rank + 1) * world, dtype=dt, device=dev)
    dist.all_to_all_single(y, send.to(dev, copy=True), [rank + 1] * world, [j + 1 for j in range(world)])
    want = torch.cat([torch.split(make(r, dt, send.shape), [j + 1 for j in range(world)])[rank]
                      for r in range(world)])
    ck.eq(f"all_to_all_single uneven {dt}", y.cpu(), want)


def check_shapes(ck: Checker, rank: int, world: int, dev, tally: Tally):
    """Sizes that do not split evenly, a non-contiguous tensor, a buffer that grows the scratch
    several times, and a smaller one after it (the grown scratch is reused)."""
    for n in (1, world + 1, 1000003, 3 << 20, 17):
        ins = [make(r, torch.float32, (n,)) for r in range(world)]
        t = ins[rank].to(dev, copy=True)
        dist.all_reduce(t)
        ck.eq(f"all_reduce of {n}", t.cpu(), fold(R.SUM, ins))
        tally.took(t)
    base = [make(r, torch.float32, (64, 6)) for r in range(world)]
    t = base[rank].to(dev, copy=True).t()  # 6 x 64, not contiguous
    dist.all_reduce(t, op=R.MAX)
    ck.eq("all_reduce of a transposed tensor", t.cpu(), fold(R.MAX, base).t())
    tally.took(t)
    outs = [torch.empty(6, 64, dtype=torch.float32, device=dev).t() for _ in range(world)]
    dist.all_gather(outs, base[rank].to(dev, copy=True))
    for r in range(world):
        ck.eq(f"all_gather into transposed outputs [{r}]", outs[r].cpu(), base[r])
    tally.took(base[rank])


def check_async(ck: Checker, rank: int, world: int, dev, tally: Tally):
    """Several ops in flight, path and staged ones interleaved, waited on in reverse."""
    ins = [make(r, torch.int32, (1000,)) for r in range(world)]
    ts = [ins[rank].to(dev, copy=True) for _ in range(6)]
    ops = [R.SUM, R.BXOR, R.MAX, R.BAND, R.MIN, R.SUM]
    works = [dist.all_reduce(t, op=op, async_op=True) for t, op in zip(ts, ops)]
    for w in reversed(works):
        w.wait()
    for i, (t, op) in enumerate(zip(ts, ops)):
        ck.eq(f"async all_reduce {i} {op}", t.cpu(), fold(op, ins))
        if op in (R.SUM, R.MAX, R.MIN):
            tally.took(t)


def worker_ipc(ck: Checker, rank: int, world: int, tmpdir: str, cuda: bool = False,
               path: bool = True):
    dev = _setup(rank, world, tmpdir, cuda, path)
    tally = Tally(cuda, path)
    for dt in DTYPES:
        check_ops(ck, rank, world, dev, dt, tally)
    check_shapes(ck, rank, world, dev, tally)
    check_async(ck, rank, world, dev, tally)
    dist.barrier()
    st = _stats(dev)
    kind = KIND[cuda]
    _same(ck, "ops on the path", st.get("ops", 0), tally.ops)
    if path:
        _same(ck, "path state", st.get(kind + ".state"), 1)
        _same(ck, "scratch exports", st.get(kind + ".exports"), tally.exports)
        # every peer's scratch is mapped once per export (the cache), never per op
        _same(ck, "peer mappings", st.get(kind + ".opens"), (world - 1) * tally.exports)
    dist.destroy_process_group()


def worker_ipc_peer_dies(ck: Checker, rank: int, world: int, tmpdir: str, kind: str):
    """The last rank exits before an op on the path (kind: all_reduce, broadcast or
    all_gather_into_tensor). The survivors' control all-gather completes without it and the
    group agrees on the failure; all_reduce and broadcast then run again over the survivors
    through host memory and complete like a staged op over the survivors (result over the
    survivors, the dead rank in get_failed_ranks_hint, get_local_success False); the other kinds
    raise. Either way the path switches off and later ops run on staging over the survivors."""
    import mooncake.pg as mpg

    dev = _setup(rank, world, tmpdir, False, True)
    ins = [make(r, torch.float32, (100,)) for r in range(world)]
    t = ins[rank].clone()
    dist.all_reduce(t)
    ck.eq("all_reduce before the failure", t, fold(R.SUM, ins))
    dist.barrier()
    dead = world - 1
    if rank == dead:
        with open(os.path.join(tmpdir, f"result.{rank}.json"), "w") as f:
            json.dump({"failures": ck.failures, "count": ck.count}, f)
        # Its scratch's name goes (the survivors keep their mappings), or /dev/shm keeps it.
        for f in glob.glob(f"/dev/shm/mcpg-ipcfake-{os.getpid()}-*"):
            os.unlink(f)
        os._exit(0)  # no goodbye to the group: its peers find it gone
    t = ins[rank].clone()
    if kind == "all_reduce":
        w = dist.all_reduce(t, async_op=True)
        w.wait()
        ck.eq("all_reduce over the survivors", t, fold(R.SUM, ins[:dead]))
    elif kind == "broadcast":
        w = dist.broadcast(t, src=0, async_op=True)
        w.wait()
        ck.eq("broadcast over the survivors", t, ins[0])
    else:
        w = None
        out = torch.zeros(100 * world)
        try:
            dist.all_gather_into_tensor(out, t)
            ck.true("all_gather_into_tensor with a dead peer raised", False, "it completed")
        except Exception as e:  # noqa: BLE001
            _same(ck, "the error names the path", "same-host device path" in str(e), True)
    if w is not None:
        _same(ck, "failed-ranks hint", mpg.get_failed_ranks_hint(w).nonzero().flatten().tolist(), [dead])
        _same(ck, "local success", mpg.get_local_success(w), False)
    _same(ck, "path off after the failure", _stats(dev).get("off"), 1)
    t = ins[rank].clone()
    dist.all_reduce(t)
    ck.eq("all_reduce over the survivors on staging", t, fold(R.SUM, ins[:dead]))
    _same(ck, "no op on the path after the failure", _stats(dev).get("ops"), 1)
