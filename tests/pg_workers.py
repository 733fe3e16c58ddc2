"""Rank bodies of the process-group tests (run in spawned processes by pg_harness.run_ranks).

Inputs are deterministic functions of (rank, dtype, shape), so every rank can compute what every
other rank contributed and the exact expected result; values are small integers so float sums
and products are exact in any order. A gloo group in the same processes cross-checks a subset.
"""

from __future__ import annotations

import functools
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from pg_harness import OP_TIMEOUT, Checker, init

R = dist.ReduceOp
ALL_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
              torch.float32, torch.float64, torch.bool, torch.bfloat16]
FLOATS = {torch.float16, torch.float32, torch.float64, torch.bfloat16}
INTS = {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64}


def ops_for(dt):
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
    if dt in FLOATS:
        ops.append(R.AVG)
    if dt in INTS or dt == torch.bool:
        ops += [R.BAND, R.BOR, R.BXOR]
    return ops


def make(rank: int, dt, shape, op=None, salt: int = 0) -> torch.Tensor:
    n = 1
    for s in shape:
        n *= s
    i = torch.arange(n, dtype=torch.int64) + salt
    if dt == torch.bool:
        v = ((i + rank) % 3) != 0
    elif op == R.PRODUCT:
        v = ((i + rank) % 2) + 1  # 1 or 2: products stay exact
        if dt in INTS:
            v = torch.where((i + rank) % 5 == 0, -v if dt != torch.uint8 else v, v)
    elif dt == torch.uint8:
        v = (i * 3 + rank * 5) % 23
    elif dt in INTS:
        v = (i * 3 + rank * 5) % 23 - 11
    else:
        v = ((i * 3 + rank * 5) % 17) - 8
    return v.to(dt).reshape(shape)


def fold(op, ts):
    dt = ts[0].dtype
    if dt == torch.bool:
        f = {R.SUM: torch.logical_or, R.MAX: torch.logical_or, R.BOR: torch.logical_or,
             R.PRODUCT: torch.logical_and, R.MIN: torch.logical_and, R.BAND: torch.logical_and,
             R.BXOR: torch.logical_xor}[op]
        return functools.reduce(f, ts)
    if op == R.AVG:
        s = functools.reduce(torch.add, [t.double() for t in ts])
        return (s / len(ts)).to(dt)
    f = {R.SUM: torch.add, R.PRODUCT: torch.mul, R.MIN: torch.minimum, R.MAX: torch.maximum,
         R.BAND: torch.bitwise_and, R.BOR: torch.bitwise_or, R.BXOR: torch.bitwise_xor}[op]
    return functools.reduce(f, ts)


def tol(dt, op):
    if op == R.AVG and dt in (torch.float16, torch.bfloat16):
        return dict(atol=1e-2, rtol=1e-2)
    if op == R.AVG:
        return dict(atol=1e-6, rtol=1e-6)
    return {}


def opname(op) -> str:
    for n in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"):
        if op == getattr(R, n):
            return n
    return str(op)


# ----------------------------------------------------------------------------- op matrix


def check_reductions(ck: Checker, rank: int, world: int, group=None, ranks=None, tag=""):
    """allreduce / reduce / reduce_scatter (list and tensor) for every dtype x op."""
    ranks = ranks or list(range(world))
    n = len(ranks)
    me = ranks.index(rank)
    shape = (3, 5)
    for dt in ALL_DTYPES:
        for op in ops_for(dt):
            name = f"{tag}{dt}/{opname(op)}"
            ins = [make(r, dt, shape, op) for r in ranks]
            want = fold(op, ins)
            t = ins[me].clone()
            if ck.run("all_reduce " + name, lambda: dist.all_reduce(t, op=op, group=group)) is None or True:
                ck.eq("all_reduce " + name, t, want, **tol(dt, op))
            # reduce to the last member (global rank number for the API)
            root = ranks[-1]
            t = ins[me].clone()
            ck.run("reduce " + name, lambda: dist.reduce(t, dst=root, op=op, group=group))
            ck.eq("reduce " + name, t, want if rank == root else ins[me], **tol(dt, op))
            # reduce_scatter_tensor: rank r gets chunk r of the reduction
            full = [make(r, dt, (n * 4,), op, salt=7) for r in ranks]
            wantfull = fold(op, full)
            out = torch.empty(4, dtype=dt)
            ck.run("reduce_scatter_tensor " + name,
                   lambda: dist.reduce_scatter_tensor(out, full[me].clone(), op=op, group=group))
            ck.eq("reduce_scatter_tensor " + name, out, wantfull[me * 4:(me + 1) * 4], **tol(dt, op))
            # list reduce_scatter
            out = torch.empty(4, dtype=dt)
            inl = list(full[me].clone().chunk(n))
            ck.run("reduce_scatter " + name, lambda: dist.reduce_scatter(out, inl, op=op, group=group))
            ck.eq("reduce_scatter " + name, out, wantfull[me * 4:(me + 1) * 4], **tol(dt, op))
    # complex SUM / AVG (viewed as real pairs)
    for op in (R.SUM, R.AVG):
        ins = [torch.complex(make(r, torch.float32, (6,)), make(r, torch.float32, (6,), salt=3))
               for r in ranks]
        t = ins[me].clone()
        ck.run("all_reduce complex", lambda: dist.all_reduce(t, op=op, group=group))
        want = functools.reduce(torch.add, ins)
        if op == R.AVG:
            want = want / n
        ck.eq(f"{tag}all_reduce complex64/{opname(op)}", t, want, atol=1e-6)


def check_layouts(ck: Checker, rank: int, world: int):
    """Non-contiguous and zero-element tensors, coalesced forms."""
    ranks = list(range(world))
    # non-contiguous in-place allreduce (a transposed view and a strided slice)
    base = [make(r, torch.float32, (6, 4)) for r in ranks]
    t = base[rank].clone().t()
    dist.all_reduce(t)
    ck.eq("all_reduce transposed", t, fold(R.SUM, base).t())
    big = make(rank, torch.int64, (10,)).clone()
    view = big[::2]
    dist.all_reduce(view, op=R.MAX)
    want = big.clone()
    want[::2] = fold(R.MAX, [make(r, torch.int64, (10,))[::2] for r in ranks])
    ck.eq("all_reduce strided", big, want)
    # zero-element tensors through every op family
    z = torch.empty(0, dtype=torch.float32)
    ck.run("all_reduce empty", lambda: dist.all_reduce(z))
    ck.run("broadcast empty", lambda: dist.broadcast(z, src=0))
    outs = [torch.empty(0) for _ in ranks]
    ck.run("all_gather empty", lambda: dist.all_gather(outs, z))
    ck.run("all_to_all_single empty", lambda: dist.all_to_all_single(torch.empty(0), z))
    ck.run("reduce_scatter_tensor empty",
           lambda: dist.reduce_scatter_tensor(torch.empty(0), torch.empty(0)))
    # allgather into a non-contiguous output
    out = torch.zeros(4, world * 3).t()  # (world*3, 4) non-contiguous
    inp = make(rank, torch.float32, (3, 4))
    dist.all_gather_into_tensor(out, inp)
    ck.eq("all_gather_into_tensor noncontig out", out, torch.cat([make(r, torch.float32, (3, 4)) for r in ranks]))
    # coalesced allreduce through the ProcessGroup binding
    ts = [make(rank, torch.float32, (3,)), make(rank, torch.float32, (5,), salt=2)]
    pg = dist.group.WORLD
    opts = dist.AllreduceCoalescedOptions()
    opts.reduceOp = R.SUM
    w = ck.run("allreduce_coalesced", lambda: pg.allreduce_coalesced(ts, opts))
    if w is not None:
        w.wait()
        ck.eq("allreduce_coalesced 0", ts[0], fold(R.SUM, [make(r, torch.float32, (3,)) for r in ranks]))
        ck.eq("allreduce_coalesced 1", ts[1], fold(R.SUM, [make(r, torch.float32, (5,), salt=2) for r in ranks]))
    # all_gather_coalesced: output_lists[r][i] is input i of rank r
    ins = [make(rank, torch.int64, (2,)), make(rank, torch.int64, (3,), salt=4)]
    outl = [[torch.empty(2, dtype=torch.int64), torch.empty(3, dtype=torch.int64)] for _ in ranks]
    ck.run("all_gather_coalesced", lambda: dist.all_gather_coalesced(outl, ins))
    for r in ranks:
        ck.eq(f"all_gather_coalesced [{r}][0]", outl[r][0], make(r, torch.int64, (2,)))
        ck.eq(f"all_gather_coalesced [{r}][1]", outl[r][1], make(r, torch.int64, (3,), salt=4))
    # coalescing manager: all_gather_into_tensor / reduce_scatter_tensor coalesced
    outs = [torch.empty(world * 2, dtype=torch.int32), torch.empty(world * 3, dtype=torch.int32)]
    ins = [make(rank, torch.int32, (2,)), make(rank, torch.int32, (3,), salt=1)]

    def coalesced_ag():
        with dist._coalescing_manager(async_ops=True) as cm:
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i)
        cm.wait()

    ck.run("allgather_into_tensor_coalesced", coalesced_ag)
    ck.eq("allgather_into_tensor_coalesced 0", outs[0], torch.cat([make(r, torch.int32, (2,)) for r in ranks]))
    ck.eq("allgather_into_tensor_coalesced 1", outs[1], torch.cat([make(r, torch.int32, (3,), salt=1) for r in ranks]))
    rs_in = [make(rank, torch.int64, (world * 2,)), make(rank, torch.int64, (world,), salt=3)]
    rs_out = [torch.empty(2, dtype=torch.int64), torch.empty(1, dtype=torch.int64)]

    def coalesced_rs():
        with dist._coalescing_manager(async_ops=True) as cm:
            for o, i in zip(rs_out, rs_in):
                dist.reduce_scatter_tensor(o, i)
        cm.wait()

    ck.run("reduce_scatter_tensor_coalesced", coalesced_rs)
    ck.eq("reduce_scatter_tensor_coalesced 0", rs_out[0],
          fold(R.SUM, [make(r, torch.int64, (world * 2,)) for r in ranks])[rank * 2:rank * 2 + 2])
    ck.eq("reduce_scatter_tensor_coalesced 1", rs_out[1],
          fold(R.SUM, [make(r, torch.int64, (world,), salt=3) for r in ranks])[rank:rank + 1])


def check_data_movement(ck: Checker, rank: int, world: int, group=None, ranks=None, tag=""):
    """broadcast, all_gather (list / tensor / object), gather, scatter, all_to_all (single equal,
    single uneven, list) and send/recv for every dtype."""
    ranks = ranks or list(range(world))
    n = len(ranks)
    me = ranks.index(rank)
    for dt in ALL_DTYPES:
        name = f"{tag}{dt}"
        src = ranks[n - 1]
        t = make(rank, dt, (4, 3))
        ck.run("broadcast " + name, lambda: dist.broadcast(t, src=src, group=group))
        ck.eq("broadcast " + name, t, make(src, dt, (4, 3)))
        outs = [torch.empty(5, dtype=dt) for _ in ranks]
        ck.run("all_gather " + name, lambda: dist.all_gather(outs, make(rank, dt, (5,)), group=group))
        for i, r in enumerate(ranks):
            ck.eq(f"all_gather {name}[{i}]", outs[i], make(r, dt, (5,)))
        out = torch.empty(n * 2, 3, dtype=dt)
        ck.run("all_gather_into_tensor " + name,
               lambda: dist.all_gather_into_tensor(out, make(rank, dt, (2, 3)), group=group))
        ck.eq("all_gather_into_tensor " + name, out, torch.cat([make(r, dt, (2, 3)) for r in ranks]))
        dst = ranks[0]
        gl = [torch.empty(3, dtype=dt) for _ in ranks] if rank == dst else None
        ck.run("gather " + name, lambda: dist.gather(make(rank, dt, (3,)), gl, dst=dst, group=group))
        if rank == dst:
            for i, r in enumerate(ranks):
                ck.eq(f"gather {name}[{i}]", gl[i], make(r, dt, (3,)))
        out = torch.empty(4, dtype=dt)
        sl = [make(src, dt, (4,), salt=10 * i) for i in range(n)] if rank == src else None
        ck.run("scatter " + name, lambda: dist.scatter(out, sl, src=src, group=group))
        ck.eq("scatter " + name, out, make(src, dt, (4,), salt=10 * me))
        # all_to_all_single, equal splits: chunk j of rank i goes to rank j
        inp = make(rank, dt, (n * 2, 2))
        out = torch.empty(n * 2, 2, dtype=dt)
        ck.run("all_to_all_single " + name, lambda: dist.all_to_all_single(out, inp, group=group))
        ck.eq("all_to_all_single " + name, out,
              torch.cat([make(r, dt, (n * 2, 2))[me * 2:me * 2 + 2] for r in ranks]))
        # uneven: rank i sends (i + j) % 3 rows to rank j
        def rows(i, j):
            return (i + j) % 3
        in_splits = [rows(me, j) for j in range(n)]
        out_splits = [rows(j, me) for j in range(n)]
        inp = make(rank, dt, (sum(in_splits), 2), salt=5)
        out = torch.empty(sum(out_splits), 2, dtype=dt)
        ck.run("all_to_all_single uneven " + name,
               lambda: dist.all_to_all_single(out, inp, out_splits, in_splits, group=group))
        pieces = []
        for j, r in enumerate(ranks):
            their = make(r, dt, (sum(rows(j, k) for k in range(n)), 2), salt=5)
            off = sum(rows(j, k) for k in range(me))
            pieces.append(their[off:off + rows(j, me)])
        ck.eq("all_to_all_single uneven " + name, out, torch.cat(pieces))
        # list all_to_all with per-peer sizes
        inl = [make(rank, dt, (j + 1,), salt=j) for j in range(n)]
        outl = [torch.empty(me + 1, dtype=dt) for _ in range(n)]
        ck.run("all_to_all " + name, lambda: dist.all_to_all(outl, inl, group=group))
        for j, r in enumerate(ranks):
            ck.eq(f"all_to_all {name}[{j}]", outl[j], make(r, dt, (me + 1,), salt=me))
        # send/recv ring
        if n > 1:
            nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]
            buf = torch.empty(6, dtype=dt)
            if me % 2 == 0:
                ck.run("send " + name, lambda: dist.send(make(rank, dt, (6,)), nxt, group=group))
                ck.run("recv " + name, lambda: dist.recv(buf, prv, group=group))
            else:
                ck.run("recv " + name, lambda: dist.recv(buf, prv, group=group))
                ck.run("send " + name, lambda: dist.send(make(rank, dt, (6,)), nxt, group=group))
            ck.eq("send/recv " + name, buf, make(prv, dt, (6,)))
    ck.run("barrier", lambda: dist.barrier(group=group))


def check_against_gloo(ck: Checker, rank: int, world: int):
    gloo = dist.new_group(backend="gloo")
    for dt in (torch.float32, torch.int64, torch.float64, torch.int32):
        for op in (R.SUM, R.MAX, R.MIN, R.PRODUCT):
            a = make(rank, dt, (33,), op)
            b = a.clone()
            dist.all_reduce(a, op=op)
            dist.all_reduce(b, op=op, group=gloo)
            ck.eq(f"gloo all_reduce {dt}/{opname(op)}", a, b)
        a = [torch.empty(7, dtype=dt) for _ in range(world)]
        b = [torch.empty(7, dtype=dt) for _ in range(world)]
        dist.all_gather(a, make(rank, dt, (7,)))
        dist.all_gather(b, make(rank, dt, (7,)), group=gloo)
        ck.eq(f"gloo all_gather {dt}", torch.stack(a), torch.stack(b))
        x = make(rank, dt, (world * 3,))
        a, b = torch.empty_like(x), torch.empty_like(x)
        dist.all_to_all_single(a, x)
        dist.all_to_all_single(b, x, group=gloo)
        ck.eq(f"gloo all_to_all_single {dt}", a, b)
        a, b = make(rank, dt, (9,)), make(rank, dt, (9,))
        dist.broadcast(a, src=world - 1)
        dist.broadcast(b, src=world - 1, group=gloo)
        ck.eq(f"gloo broadcast {dt}", a, b)
    dist.destroy_process_group(gloo)


def check_async_and_objects(ck: Checker, rank: int, world: int):
    import mooncake_pg

    t = make(rank, torch.float32, (8,))
    w = dist.all_reduce(t, async_op=True)
    fut = w.get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    ck.true("work.wait", w.wait() is True or w.wait() is None)
    want = fold(R.SUM, [make(r, torch.float32, (8,)) for r in range(world)])
    ck.eq("async all_reduce", t, want)
    ck.true("is_completed", w.is_completed())
    ck.true("is_success", w.is_success())
    ck.eq("future value", fut.wait()[0], want)
    ck.eq("future then", chained.wait(), want * 2)
    hint = mooncake_pg.get_failed_ranks_hint(w)
    ck.true("failed hint", hint.tolist() == [0] * world and hint.dtype == torch.int32, str(hint))
    ck.true("local success", mooncake_pg.get_local_success(w) is True)
    # many outstanding async ops, waited in reverse order
    ts = [make(rank, torch.int64, (5,), salt=i) for i in range(10)]
    ws = [dist.all_reduce(x, async_op=True) for x in ts]
    for w in reversed(ws):
        w.wait()
    for i, x in enumerate(ts):
        ck.eq(f"async many {i}", x, fold(R.SUM, [make(r, torch.int64, (5,), salt=i) for r in range(world)]))
    # elastic queries
    act = mooncake_pg.get_active_ranks(dist.group.WORLD)
    ck.eq("get_active_ranks", act, torch.ones(world, dtype=torch.int32))
    ck.eq("get_active_ranks default", mooncake_pg.get_active_ranks(), torch.ones(world, dtype=torch.int32))
    ck.true("get_current_epoch", isinstance(mooncake_pg.get_current_epoch(dist.group.WORLD), int))
    # objects
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "s": "x" * rank})
    ck.true("all_gather_object", objs == [{"rank": r, "s": "x" * r} for r in range(world)], str(objs))
    lst = [rank, "hello", {"k": rank}] if rank == 0 else [None, None, None]
    dist.broadcast_object_list(lst, src=0)
    ck.true("broadcast_object_list", lst == [0, "hello", {"k": 0}], str(lst))
    # batch_isend_irecv ring
    if world > 1:
        send = make(rank, torch.float32, (4,))
        recv = torch.empty(4)
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % world),
               dist.P2POp(dist.irecv, recv, (rank - 1) % world)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        ck.eq("batch_isend_irecv", recv, make((rank - 1) % world, torch.float32, (4,)))
        # recv from any source: every other rank sends to rank 0
        if rank == 0:
            got = set()
            for _ in range(world - 1):
                buf = torch.empty(3, dtype=torch.int64)
                src = dist.recv(buf)
                ck.eq(f"recv any from {src}", buf, make(src, torch.int64, (3,)))
                got.add(src)
            ck.true("recv any sources", got == set(range(1, world)), str(got))
        else:
            dist.send(make(rank, torch.int64, (3,)), 0)
        # isend / irecv with tags
        if rank < 2 and world >= 2:
            peer = 1 - rank
            a, b = torch.empty(2), torch.empty(2)
            ws = [dist.isend(make(rank, torch.float32, (2,), salt=1), peer, tag=7),
                  dist.isend(make(rank, torch.float32, (2,), salt=2), peer, tag=8),
                  dist.irecv(b, peer, tag=8), dist.irecv(a, peer, tag=7)]
            for w in ws:
                w.wait()
            ck.eq("tag 7", a, make(peer, torch.float32, (2,), salt=1))
            ck.eq("tag 8", b, make(peer, torch.float32, (2,), salt=2))
    dist.barrier()


def check_errors(ck: Checker, rank: int, world: int, tmpdir: str):
    """Bad input raises RuntimeError on the calling rank; the group stays usable after local
    validation errors. Cross-rank mismatches run on a separate subgroup."""
    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    t = torch.ones(4)
    ck.raises("all_gather wrong list length",
              lambda: dist.all_gather([torch.empty(4) for _ in range(world + 1)], t), match="mooncake")
    ck.raises("all_gather_into_tensor dtype mismatch",
              lambda: dist.all_gather_into_tensor(torch.empty(4 * world, dtype=torch.int32), t),
              match="dtype")
    ck.raises("all_gather_into_tensor wrong size",
              lambda: dist.all_gather_into_tensor(torch.empty(4 * world + 1), t))
    sp = torch.eye(3).to_sparse()
    ck.raises("broadcast sparse", lambda: dist.broadcast(sp, src=0), match="sparse")
    ck.raises("all_reduce sparse", lambda: dist.all_reduce(sp))
    opts = dist.BroadcastOptions()
    opts.rootRank = world + 3
    ck.raises("broadcast bad root", lambda: be.broadcast([t], opts), match="root")
    ck.raises("send to self", lambda: be.send([t], rank, 0), match="itself")
    ck.raises("send bad rank", lambda: be.send([t], world + 5, 0), match="rank")
    ck.raises("reduce_scatter list length",
              lambda: dist.reduce_scatter(torch.empty(2), [torch.empty(2)] * (world + 1)))
    ck.raises("all_to_all_single bad splits",
              lambda: dist.all_to_all_single(torch.empty(world), torch.empty(world),
                                             [1] * world, [2] * world))
    ck.raises("bitwise on float", lambda: dist.all_reduce(torch.ones(2), op=R.BAND), match="bitwise")
    ck.raises("all_reduce unsupported dtype", lambda: dist.all_reduce(torch.ones(2, dtype=torch.uint16)))
    # still usable
    x = torch.full((3,), float(rank))
    dist.all_reduce(x)
    ck.eq("usable after errors", x, torch.full((3,), float(sum(range(world)))))
    if world > 1:
        sub = dist.new_group(list(range(world)))
        y = torch.ones(3 + rank)  # sizes differ across ranks
        ck.raises("mismatched sizes across ranks", lambda: dist.all_reduce(y, group=sub))
        # (destroyed with the world group; test_destroy_reinit covers destroying a live group)
    dist.barrier()


def check_subgroups(ck: Checker, rank: int, world: int):
    if world < 3:
        return
    half = world // 2
    a, b = list(range(half)), list(range(half, world))
    ga = dist.new_group(a)
    gb = dist.new_group(b)
    tail = list(range(1, world))
    gt = dist.new_group(tail)
    mine, g = (a, ga) if rank in a else (b, gb)
    check_reductions_small(ck, rank, g, mine, "sub")
    check_data_movement_small(ck, rank, g, mine)
    if rank in tail:
        check_reductions_small(ck, rank, gt, tail, "tail")
    # the world group still works interleaved with subgroups
    x = torch.full((2,), float(rank))
    dist.all_reduce(x)
    ck.eq("world after subgroups", x, torch.full((2,), float(sum(range(world)))))


def check_reductions_small(ck, rank, group, ranks, tag):
    me = ranks.index(rank)
    for dt in (torch.float32, torch.int64, torch.bfloat16):
        for op in (R.SUM, R.MAX):
            ins = [make(r, dt, (6,), op) for r in ranks]
            t = ins[me].clone()
            dist.all_reduce(t, op=op, group=group)
            ck.eq(f"{tag} all_reduce {dt}/{opname(op)}", t, fold(op, ins))


def check_data_movement_small(ck, rank, group, ranks):
    me = ranks.index(rank)
    n = len(ranks)
    outs = [torch.empty(3) for _ in ranks]
    dist.all_gather(outs, make(rank, torch.float32, (3,)), group=group)
    for i, r in enumerate(ranks):
        ck.eq(f"sub all_gather[{i}]", outs[i], make(r, torch.float32, (3,)))
    t = make(rank, torch.int32, (4,))
    dist.broadcast(t, src=ranks[-1], group=group)
    ck.eq("sub broadcast", t, make(ranks[-1], torch.int32, (4,)))
    inp = make(rank, torch.int64, (n,))
    out = torch.empty(n, dtype=torch.int64)
    dist.all_to_all_single(out, inp, group=group)
    ck.eq("sub all_to_all_single", out, torch.stack([make(r, torch.int64, (n,))[me] for r in ranks]))


# ----------------------------------------------------------------------------- entry points


def worker_ops(ck: Checker, rank: int, world: int, tmpdir: str, full: bool = True):
    init(rank, world, os.path.join(tmpdir, "store"))
    check_reductions(ck, rank, world)
    check_data_movement(ck, rank, world)
    if full:
        check_layouts(ck, rank, world)
        check_async_and_objects(ck, rank, world)
        check_errors(ck, rank, world, tmpdir)
        check_subgroups(ck, rank, world)
    if world > 1 and full:
        check_against_gloo(ck, rank, world)
    dist.destroy_process_group()


def worker_reinit(ck: Checker, rank: int, world: int, tmpdir: str, rounds: int = 3):
    """destroy_process_group + init_process_group again in the same processes (fresh stores), and
    destroying one subgroup while others live on."""
    init(rank, world, os.path.join(tmpdir, "storeA"), timeout=timedelta(seconds=20))
    keep = dist.new_group(list(range(world)))
    for k in range(2):
        tmp = dist.new_group(list(range(world)))
        y = torch.ones(2)
        ck.run(f"temp group {k} all_reduce", lambda: dist.all_reduce(y, group=tmp))
        ck.eq(f"temp group {k} all_reduce", y, torch.full((2,), float(world)))
        dist.destroy_process_group(tmp)
        for name, g in (("world", None), ("kept group", keep)):
            x = torch.ones(2)
            ck.run(f"{name} after destroying a subgroup ({k})", lambda: dist.all_reduce(x, group=g))
            ck.eq(f"{name} after destroying a subgroup ({k})", x, torch.full((2,), float(world)))
    dist.destroy_process_group()
    for k in range(rounds):
        init(rank, world, os.path.join(tmpdir, f"store{k}"), timeout=timedelta(seconds=20))
        x = torch.full((4,), float(rank + 1 + k))
        ck.run(f"round {k} all_reduce", lambda: dist.all_reduce(x))
        ck.eq(f"round {k} all_reduce", x, torch.full((4,), float(world * (world + 1) // 2 + world * k)))
        sub = dist.new_group(list(range(world)))
        y = torch.ones(2)
        ck.run(f"round {k} subgroup all_reduce", lambda: dist.all_reduce(y, group=sub))
        ck.eq(f"round {k} subgroup all_reduce", y, torch.full((2,), float(world)))
        dist.destroy_process_group()


def worker_tcpstore(ck: Checker, rank: int, world: int, tmpdir: str, port: int):
    import mooncake_pg  # noqa: F401

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world))
    dist.init_process_group("mooncake-cpu", init_method="env://", timeout=OP_TIMEOUT)
    x = torch.full((5,), float(rank))
    dist.all_reduce(x)
    ck.eq("env:// all_reduce", x, torch.full((5,), float(sum(range(world)))))
    # a group created with options
    g = dist.new_group(list(range(world)), backend="mooncake-cpu",
                       pg_options=mooncake_pg.MooncakeBackendOptions(world + 2, False, True, True))
    ck.true("max_group_size", mooncake_pg.get_max_group_size(g) == world + 2,
            str(mooncake_pg.get_max_group_size(g)))
    y = torch.full((2,), float(rank))
    dist.all_reduce(y, group=g)
    ck.eq("options group all_reduce", y, torch.full((2,), float(sum(range(world)))))
    dist.destroy_process_group()


def worker_ddp(ck: Checker, rank: int, world: int, tmpdir: str, steps: int = 20):
    from torch.nn.parallel import DistributedDataParallel as DDP

    init(rank, world, os.path.join(tmpdir, "store"))
    gloo = dist.new_group(backend="gloo")

    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    m1 = DDP(model())
    m2 = DDP(model(), process_group=gloo)
    o1 = torch.optim.SGD(m1.parameters(), lr=0.05)
    o2 = torch.optim.SGD(m2.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(steps):
        x = torch.randn(16, 8, generator=g)
        y = torch.randn(16, 4, generator=g)
        for m, o in ((m1, o1), (m2, o2)):
            o.zero_grad()
            loss = torch.nn.functional.mse_loss(m(x), y)
            loss.backward()
            o.step()
    for (n1, p1), (_, p2) in zip(m1.named_parameters(), m2.named_parameters()):
        ck.eq(f"ddp param {n1}", p1.detach(), p2.detach(), atol=1e-5, rtol=1e-4)
    # parameters identical on every rank
    flat = torch.cat([p.detach().flatten() for p in m1.parameters()])
    outs = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(outs, flat)
    for r in range(world):
        ck.eq(f"ddp replicas equal {r}", outs[r], flat)
    dist.destroy_process_group(gloo)
    dist.destroy_process_group()


def worker_cuda(ck: Checker, rank: int, world: int, tmpdir: str):
    """CUDA tensors through backend 'mooncake' (staged through pinned host memory)."""
    torch.cuda.set_device(rank % torch.cuda.device_count())
    init(rank, world, os.path.join(tmpdir, "store"), backend="cpu:mooncake-cpu,cuda:mooncake")
    dev = torch.device("cuda", torch.cuda.current_device())
    for dt in (torch.float32, torch.float16, torch.int64):
        ins = [make(r, dt, (1000,)) for r in range(world)]
        t = ins[rank].to(dev)
        w = dist.all_reduce(t, async_op=True)
        w.wait()
        t2 = t * 1  # stream-ordered after wait()
        ck.eq(f"cuda all_reduce {dt}", t2.cpu(), fold(R.SUM, ins))
        outs = [torch.empty(7, dtype=dt, device=dev) for _ in range(world)]
        dist.all_gather(outs, make(rank, dt, (7,)).to(dev))
        for r in range(world):
            ck.eq(f"cuda all_gather {dt}[{r}]", outs[r].cpu(), make(r, dt, (7,)))
        x = make(rank, dt, (world * 2,)).to(dev)
        y = torch.empty_like(x)
        dist.all_to_all_single(y, x)
        ck.eq(f"cuda all_to_all_single {dt}", y.cpu(),
              torch.cat([make(r, dt, (world * 2,))[rank * 2:rank * 2 + 2] for r in range(world)]))
    t = torch.ones(4, device=dev).t()
    fut = dist.all_reduce(t, async_op=True).get_future()
    ck.eq("cuda future", fut.wait()[0].cpu(), torch.full((4,), float(world)))
    dist.destroy_process_group()
