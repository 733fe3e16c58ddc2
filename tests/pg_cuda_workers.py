"""Rank bodies of tests/test_pg_cuda.py: every collective and point-to-point op of backend
"mooncake" on CUDA tensors (all ranks may share one GPU), each result copied back and compared
exactly with the same op computed on CPU from every rank's input (pg_workers.make/fold), and a
DDP step on CUDA against the mean of the ranks' gradients computed on CPU."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from pg_harness import Checker, init
from pg_workers import R, fold, make, tol

DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32)


def _ops(dt):
    ops = [R.SUM, R.MAX, R.MIN, R.PRODUCT]
    if dt.is_floating_point:
        ops.append(R.AVG)
    else:
        ops += [R.BAND, R.BOR, R.BXOR]
    return ops


def _setup(rank: int, world: int, tmpdir: str, cuda: bool = True) -> torch.device:
    """cuda=False runs the same checks on CPU tensors over mooncake-cpu (the CPU-side test that
    keeps these checks honest on machines without a GPU)."""
    if not cuda:
        init(rank, world, os.path.join(tmpdir, "store"))
        return torch.device("cpu")
    torch.cuda.set_device(rank % torch.cuda.device_count())
    init(rank, world, os.path.join(tmpdir, "store"), backend="cpu:mooncake-cpu,cuda:mooncake")
    return torch.device("cuda", torch.cuda.current_device())


def check_reductions(ck: Checker, rank: int, world: int, dev, dt):
    root = world - 1
    for op in _ops(dt):
        ins = [make(r, dt, (37,), op) for r in range(world)]
        want = fold(op, ins)
        t = ins[rank].to(dev, copy=True)
        dist.all_reduce(t, op=op)
        ck.eq(f"all_reduce {dt}/{op}", t.cpu(), want, **tol(dt, op))
        t = ins[rank].to(dev, copy=True)
        dist.reduce(t, dst=root, op=op)
        if rank == root:
            ck.eq(f"reduce {dt}/{op}", t.cpu(), want, **tol(dt, op))
    # reduce_scatter: rank r gets the sum of everyone's chunk r
    chunks = [[make(r * world + j, dt, (5,)) for j in range(world)] for r in range(world)]
    want = fold(R.SUM, [chunks[r][rank] for r in range(world)])
    out = torch.empty(5, dtype=dt, device=dev)
    dist.reduce_scatter(out, [c.to(dev, copy=True) for c in chunks[rank]])
    ck.eq(f"reduce_scatter {dt}", out.cpu(), want)
    out = torch.empty(5, dtype=dt, device=dev)
    dist.reduce_scatter_tensor(out, torch.cat(chunks[rank]).to(dev, copy=True))
    ck.eq(f"reduce_scatter_tensor {dt}", out.cpu(), want)


def check_movement(ck: Checker, rank: int, world: int, dev, dt):
    src = 1 % world
    t = make(rank, dt, (33,)).to(dev, copy=True)
    dist.broadcast(t, src=src)
    ck.eq(f"broadcast {dt}", t.cpu(), make(src, dt, (33,)))
    outs = [torch.empty(9, dtype=dt, device=dev) for _ in range(world)]
    dist.all_gather(outs, make(rank, dt, (9,)).to(dev, copy=True))
    for r in range(world):
        ck.eq(f"all_gather {dt}[{r}]", outs[r].cpu(), make(r, dt, (9,)))
    big = torch.empty(9 * world, dtype=dt, device=dev)
    dist.all_gather_into_tensor(big, make(rank, dt, (9,)).to(dev, copy=True))
    ck.eq(f"all_gather_into_tensor {dt}", big.cpu(), torch.cat([make(r, dt, (9,)) for r in range(world)]))
    # all_to_all: rank r's chunk j goes to rank j
    mine = [make(rank * world + j, dt, (4,)) for j in range(world)]
    want = [make(r * world + rank, dt, (4,)) for r in range(world)]
    outs = [torch.empty(4, dtype=dt, device=dev) for _ in range(world)]
    dist.all_to_all(outs, [m.to(dev, copy=True) for m in mine])
    for r in range(world):
        ck.eq(f"all_to_all {dt}[{r}]", outs[r].cpu(), want[r])
    y = torch.empty(4 * world, dtype=dt, device=dev)
    dist.all_to_all_single(y, torch.cat(mine).to(dev, copy=True))
    ck.eq(f"all_to_all_single {dt}", y.cpu(), torch.cat(want))
    # uneven splits: rank r sends j+1 elements to rank j
    send = make(rank, dt, (sum(j + 1 for j in range(world)),))
    y = torch.empty((rank + 1) * world, dtype=dt, device=dev)
    dist.all_to_all_single(y, send.to(dev, copy=True), [rank + 1] * world, [j + 1 for j in range(world)])
    want = torch.cat([torch.split(make(r, dt, send.shape), [j + 1 for j in range(world)])[rank]
                      for r in range(world)])
    ck.eq(f"all_to_all_single uneven {dt}", y.cpu(), want)
    # gather to 0, scatter from 0
    x = make(rank, dt, (6,)).to(dev, copy=True)
    gl = [torch.empty(6, dtype=dt, device=dev) for _ in range(world)] if rank == 0 else None
    dist.gather(x, gl, dst=0)
    if rank == 0:
        for r in range(world):
            ck.eq(f"gather {dt}[{r}]", gl[r].cpu(), make(r, dt, (6,)))
    out = torch.empty(6, dtype=dt, device=dev)
    sl = [make(100 + r, dt, (6,)).to(dev, copy=True) for r in range(world)] if rank == 0 else None
    dist.scatter(out, sl, src=0)
    ck.eq(f"scatter {dt}", out.cpu(), make(100 + rank, dt, (6,)))


def check_p2p(ck: Checker, rank: int, world: int, dev, dt):
    if world < 2:
        return
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(11, dtype=dt, device=dev)
    if rank % 2 == 0:
        dist.send(make(rank, dt, (11,)).to(dev, copy=True), nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(make(rank, dt, (11,)).to(dev, copy=True), nxt)
    ck.eq(f"send/recv {dt}", got.cpu(), make(prv, dt, (11,)))
    got = torch.empty(11, dtype=dt, device=dev)
    ws = [dist.isend(make(rank, dt, (11,), salt=3).to(dev, copy=True), nxt), dist.irecv(got, prv)]
    for w in ws:
        w.wait()
    ck.eq(f"isend/irecv {dt}", got.cpu(), make(prv, dt, (11,), salt=3))
    got = torch.empty(11, dtype=dt, device=dev)
    ops = [dist.P2POp(dist.isend, make(rank, dt, (11,), salt=5).to(dev, copy=True), nxt),
           dist.P2POp(dist.irecv, got, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    ck.eq(f"batch_isend_irecv {dt}", got.cpu(), make(prv, dt, (11,), salt=5))


def check_streams(ck: Checker, rank: int, world: int, dev):
    """Work.wait() orders the current stream after the op: work queued after it sees the result."""
    ins = [make(r, torch.float32, (1 << 16,)) for r in range(world)]
    t = ins[rank].to(dev, copy=True)
    w = dist.all_reduce(t, async_op=True)
    w.wait()
    ck.eq("stream order after wait()", (t * 1).cpu(), fold(R.SUM, ins))
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        u = ins[rank].to(dev, copy=True)
        dist.all_reduce(u)
        v = u + 0
    s.synchronize()
    ck.eq("op on a side stream", v.cpu(), fold(R.SUM, ins))


def worker_cuda_ops(ck: Checker, rank: int, world: int, tmpdir: str, cuda: bool = True):
    dev = _setup(rank, world, tmpdir, cuda)
    for dt in DTYPES:
        check_reductions(ck, rank, world, dev, dt)
        check_movement(ck, rank, world, dev, dt)
        check_p2p(ck, rank, world, dev, dt)
    if cuda:
        check_streams(ck, rank, world, dev)
    dist.barrier()
    dist.destroy_process_group()


def _grads(model, x, y):
    model.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.detach().cpu().clone() for p in model.parameters()]


def worker_cuda_ddp(ck: Checker, rank: int, world: int, tmpdir: str, cuda: bool = True):
    """One DDP step on CUDA: the averaged gradients equal the mean of every rank's gradients
    computed on CPU, and the parameters after an SGD step match."""
    dev = _setup(rank, world, tmpdir, cuda)
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    data = []
    for r in range(world):
        g = torch.Generator().manual_seed(100 + r)
        data.append((torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)))
    per = [_grads(ref, x, y) for x, y in data]
    want = [sum(gs) / world for gs in zip(*per)]
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    model.load_state_dict(ref.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(
        model.to(dev), device_ids=[dev.index] if cuda else None)
    x, y = data[rank]
    got = _grads(ddp, x.to(dev, copy=True), y.to(dev, copy=True))
    for i, (g, w) in enumerate(zip(got, want)):
        ck.eq(f"ddp grad {i}", g, w, atol=1e-5, rtol=1e-4)
    torch.optim.SGD(ddp.parameters(), lr=0.1).step()
    p0 = [p.detach().cpu() for p in ddp.parameters()]
    for i, (p, r, w) in enumerate(zip(p0, ref.parameters(), want)):
        ck.eq(f"ddp param {i} after a step", p, r.detach() - 0.1 * w, atol=1e-5, rtol=1e-4)
    dist.barrier()
    dist.destroy_process_group()
