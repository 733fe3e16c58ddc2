#!/usr/bin/env python3
"""nccl-tests-style benchmark of torch.distributed backends, several side by side in one run.

    python bench/pgbench.py --collective all_reduce --backend mooncake-cpu,gloo -b 8 -e 64M -f 4 -g 2
    torchrun --nproc_per_node=4 bench/pgbench.py --collective all_gather ...

For each size it prints time (us), algbw and busbw (GB/s, 1 GB = 1e9 B) and #wrong per backend,
and each backend's busbw ratio to gloo measured in the same run. busbw factors follow
nccl-tests: all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n with the size
being the whole gathered/scattered buffer; broadcast and sendrecv 1.
Every backend runs on a group of its own (new_group) over the same processes, size by size,
so the figures compare like with like. With -r R each size runs R timed rounds that alternate
the backends, and each backend reports its median round (a shared machine's slow spells then
hit every backend alike; the ratios are steadier). --cpu adds each backend's CPU time and
context switches per op (process totals, all threads, mean of the ranks): on a machine whose
speed drifts they show the work an op costs. --json writes the rows, every round, CPU and
context switches included, for tooling. --plot FILE.png draws busbw against size (log axes), one
line per backend, and each backend's ratio to gloo on a second axis (matplotlib). Rank 0 prints
one progress line per size on stderr (size, each backend's time on it, elapsed).

Before the sweep rank 0 measures single-thread memcpy bandwidth of the largest size (at least
1 MiB) while the other ranks wait, and each row reports busbw as a percentage of it
("%memcpy"), the reference the issue's all_reduce goal is stated against.

Across hosts the reference is the network instead: with --tcp-bound (on by default with --netns)
every round also times a raw TCP ring exchange between the ranks (bench/tcpbound.py: each rank
sends the bytes the op puts on its link, busbw x time, to the next rank and receives as many from
the previous one) over 1 and 4 connections (--tcp-conns), and each row reports the op's time as a
share of the faster one's ("%tcp") in place of %memcpy, and the exchange's own times.

--netns runs the ranks (-g, default 2) in network namespaces of their own: two joined by a veth
pair, more by veths to one bridge, so the engine sees separate hosts and moves bytes over tcp.

--device cuda puts the tensors on each rank's GPU (ranks share a GPU when there are fewer GPUs
than ranks) for backends such as mooncake and nccl; timings then include a device synchronize
after each timed loop, and the bound is the GPU's device-to-device copy bandwidth (CUDA events,
rank 0), printed as "%d2d" (the JSON keeps the key pct_memcpy, with "bound": "d2d"):

    python bench/pgbench.py --device cuda --backend mooncake,nccl -b 8 -e 256M -f 8 -g 2 -r 3
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "sendrecv"]
DTYPES = {"float32": torch.float32, "float": torch.float32, "float64": torch.float64,
          "float16": torch.float16, "half": torch.float16, "bfloat16": torch.bfloat16,
          "int32": torch.int32, "int64": torch.int64, "int8": torch.int8, "uint8": torch.uint8}
OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
       "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG}


def parse_size(s: str) -> int:
    s = s.strip().upper()
    mult = 1
    for suf, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
        if s.endswith(suf):
            s, mult = s[:-1], m
    return int(float(s) * mult)


def bus_factor(coll: str, n: int) -> float:
    if coll == "all_reduce":
        return 2 * (n - 1) / n
    if coll in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def make_op(coll: str, size: int, dtype: torch.dtype, op, group, rank: int, n: int, dev="cpu"):
    """Returns (run, check): run() does one op; check() counts wrong elements after a fresh run.
    The buffers live on dev (cpu, or the rank's CUDA device with --device cuda)."""
    esize = torch.tensor([], dtype=dtype).element_size()
    count = max(1, size // esize)
    if coll in ("all_gather", "reduce_scatter", "all_to_all"):
        count = max(n, count - count % n)
    per = count // n

    def fill(t, value):
        t.fill_(value)

    if coll == "all_reduce":
        buf = torch.ones(count, dtype=dtype, device=dev)

        def run():
            dist.all_reduce(buf, op=op, group=group)

        def check():
            fill(buf, rank + 1)
            run()
            exp = {dist.ReduceOp.SUM: n * (n + 1) // 2, dist.ReduceOp.MAX: n, dist.ReduceOp.MIN: 1,
                   dist.ReduceOp.AVG: (n + 1) / 2}.get(op)
            if exp is None:  # PRODUCT
                exp = 1
                for i in range(1, n + 1):
                    exp *= i
            return int((buf.double() != float(exp)).sum())
        return run, check, count
    if coll == "all_gather":
        inp = torch.ones(per, dtype=dtype, device=dev)
        out = torch.ones(per * n, dtype=dtype, device=dev)

        def run():
            dist.all_gather_into_tensor(out, inp, group=group)

        def check():
            fill(inp, rank + 1)
            run()
            exp = torch.arange(1, n + 1, dtype=torch.float64).repeat_interleave(per)
            return int((out.double().cpu() != exp).sum())
        return run, check, count
    if coll == "reduce_scatter":
        inp = torch.ones(per * n, dtype=dtype, device=dev)
        out = torch.ones(per, dtype=dtype, device=dev)

        def run():
            dist.reduce_scatter_tensor(out, inp, op=op, group=group)

        def check():
            fill(inp, rank + 1)
            run()
            return int((out.double() != float(n * (n + 1) // 2)).sum())
        return run, check, count
    if coll == "all_to_all":
        inp = torch.ones(per * n, dtype=dtype, device=dev)
        out = torch.ones(per * n, dtype=dtype, device=dev)

        def run():
            dist.all_to_all_single(out, inp, group=group)

        def check():
            for j in range(n):
                inp[j * per:(j + 1) * per] = (rank * n + j) % 100
            run()
            exp = torch.tensor([(i * n + rank) % 100 for i in range(n)],
                               dtype=torch.float64).repeat_interleave(per)
            return int((out.double().cpu() != exp).sum())
        return run, check, count
    if coll == "broadcast":
        buf = torch.ones(count, dtype=dtype, device=dev)
        root = dist.get_global_rank(group, 0) if group is not None else 0

        def run():
            dist.broadcast(buf, src=root, group=group)

        def check():
            fill(buf, 7 if rank == 0 else 0)
            run()
            return int((buf.double() != 7).sum())
        return run, check, count
    if coll == "sendrecv":
        sbuf = torch.ones(count, dtype=dtype, device=dev)
        rbuf = torch.ones(count, dtype=dtype, device=dev)
        ranks = dist.get_process_group_ranks(group)
        nxt, prv = ranks[(rank + 1) % n], ranks[(rank - 1) % n]

        def run():
            if n == 1:
                rbuf.copy_(sbuf)
                return
            ops = [dist.P2POp(dist.isend, sbuf, nxt, group), dist.P2POp(dist.irecv, rbuf, prv, group)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()

        def check():
            fill(sbuf, rank + 1)
            run()
            return int((rbuf.double() != float((rank - 1) % n + 1)).sum())
        return run, check, count
    raise ValueError(f"unknown collective {coll}")


def context_switches() -> int:
    """Voluntary and involuntary context switches of this process (all its threads) so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_nvcsw + ru.ru_nivcsw


def memcpy_gbps(nbytes: int, reps: int = 5) -> float:
    """Best single-thread libc memcpy bandwidth of nbytes between two touched buffers (GB/s,
    bytes copied per second)."""
    import ctypes

    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.zeros(nbytes, dtype=torch.uint8)
    ctypes.memmove(dst.data_ptr(), src.data_ptr(), nbytes)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        ctypes.memmove(dst.data_ptr(), src.data_ptr(), nbytes)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best / 1e9


def d2d_gbps(nbytes: int, dev, reps: int = 5) -> float:
    """Best device-to-device copy bandwidth of nbytes on dev (GB/s, bytes copied per second,
    timed with CUDA events): the bound of --device cuda rows."""
    src = torch.ones(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.zeros(nbytes, dtype=torch.uint8, device=dev)
    dst.copy_(src)
    best = float("inf")
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        best = min(best, a.elapsed_time(b) / 1e3)
    return nbytes / best / 1e9


def bench_device(args):
    """The tensors' device: cpu, or with --device cuda the rank's GPU (ranks share GPUs when
    there are fewer GPUs than ranks)."""
    if args.device != "cuda":
        return torch.device("cpu"), (lambda: None)
    if not torch.cuda.is_available():
        raise SystemExit("pgbench: --device cuda needs a CUDA GPU and a CUDA build of torch")
    torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
    return torch.device("cuda", torch.cuda.current_device()), torch.cuda.synchronize


def bench_rank(args) -> list[dict]:
    rank, n = dist.get_rank(), dist.get_world_size()
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    groups = {b: dist.new_group(backend=b) for b in backends}
    dtype = DTYPES[args.dtype]
    op = OPS[args.op]
    sizes = []
    s = parse_size(args.minbytes)
    while s <= parse_size(args.maxbytes):
        sizes.append(s)
        s *= args.stepfactor
    timer = dist.new_group(backend="gloo")
    rows = []
    tcp = {}
    if args.tcp_bound:
        from tcpbound import RingExchange, local_address

        host = local_address(os.environ.get("MASTER_ADDR", "127.0.0.1"))
        cap = int(sizes[-1] * bus_factor(args.collective, n)) + 1
        tcp = {c: RingExchange(timer, c, host, cap) for c in args.tcp_conns}
    dev, sync = bench_device(args)
    bound = "d2d" if dev.type == "cuda" else "memcpy"
    if rank != 0:
        memcpy = 0.0
    elif dev.type == "cuda":
        memcpy = d2d_gbps(max(sizes[-1], 1 << 20), dev)
    else:
        memcpy = memcpy_gbps(max(sizes[-1], 1 << 20))
    mc = torch.tensor([memcpy], dtype=torch.float64)
    dist.all_reduce(mc, op=dist.ReduceOp.MAX, group=timer)
    memcpy = mc.item()
    if rank == 0:
        cpu = f"{'cpu(us)':>8} {'csw':>5} " if args.cpu else ""
        names = "".join(f"| {b:>14}: {'time(us)':>10} {'algbw':>7} {'busbw':>7} {'%' + bound:>7} "
                        f"{'#wrong':>6} {cpu}" for b in backends)
        ratio = "".join(f"| {b + '/gloo':>16} " for b in backends if b != "gloo" and "gloo" in backends)
        print(f"# {args.collective} dtype={args.dtype} op={args.op} ranks={n} iters={args.iters} "
              f"warmup={args.warmup} rounds={args.rounds} device={dev}")
        if dev.type == "cuda":
            print(f"# d2d copy ({torch.cuda.get_device_name(dev)}, {max(sizes[-1], 1 << 20)} B, "
                  f"rank 0): {memcpy:.2f} GB/s")
        else:
            print(f"# memcpy (1 thread, {max(sizes[-1], 1 << 20)} B, rank 0): {memcpy:.2f} GB/s")
        if tcp:
            names = names.replace("%memcpy", "   %tcp")
            ratio += "| " + " ".join(f"{f'tcp{c}(us)':>10}" for c in tcp) + " "
            print(f"# tcp bound: a raw ring exchange of busbw x time bytes per rank over "
                  f"{' and '.join(map(str, tcp))} connection(s), timed in the same rounds; "
                  f"%tcp = the faster exchange's time / the op's time")
        print(f"{'size(B)':>12} {'count':>12} {names}{ratio}")
    start = time.perf_counter()
    for size in sizes:
        spent = {b: 0.0 for b in backends}  # wall time on this size, for the progress line
        row = {"collective": args.collective, "size": size, "ranks": n, "dtype": args.dtype,
               "device": dev.type, "bound": bound, "memcpy_gbps": memcpy}
        runs, wrong, times = {}, {}, {b: [] for b in backends}
        cpus, csws = {b: [] for b in backends}, {b: [] for b in backends}
        tcp_times: dict[int, list[float]] = {}
        for b in backends:
            t0 = time.perf_counter()
            run, check, count = make_op(args.collective, size, dtype, op, groups[b], rank, n, dev)
            runs[b] = run
            row["count"] = count
            wrong[b] = check() if args.check else 0
            for _ in range(args.warmup):
                run()
            sync()
            spent[b] += time.perf_counter() - t0
        op_bytes = row["count"] * torch.tensor([], dtype=dtype).element_size()
        # Rounds alternate the backends, so a slow spell of a shared machine hits all of them;
        # each backend's time is its median round.
        for _ in range(args.rounds):
            for b in backends:
                dist.barrier(group=timer)
                c0, s0 = time.process_time(), context_switches()
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    runs[b]()
                sync()  # CUDA: the ops are queued on the stream; time them to completion
                el = torch.tensor([(time.perf_counter() - t0) / args.iters], dtype=torch.float64)
                used = torch.tensor([(time.process_time() - c0) / args.iters,
                                     (context_switches() - s0) / args.iters], dtype=torch.float64)
                dist.all_reduce(el, op=dist.ReduceOp.MAX, group=timer)
                dist.all_reduce(used, group=timer)
                spent[b] += el.item() * args.iters
                times[b].append(el.item())
                cpus[b].append(used[0].item() / n)
                csws[b].append(used[1].item() / n)
            for c, ex in tcp.items():
                nb = max(1, int(op_bytes * bus_factor(args.collective, n)))
                dist.barrier(group=timer)
                t0 = time.perf_counter()
                for _ in range(args.iters):
                    ex.exchange(nb)
                el = torch.tensor([(time.perf_counter() - t0) / args.iters], dtype=torch.float64)
                dist.all_reduce(el, op=dist.ReduceOp.MAX, group=timer)
                tcp_times.setdefault(c, []).append(el.item())
        for b in backends:
            w = torch.tensor([wrong[b]], dtype=torch.int64)
            dist.all_reduce(w, group=timer)
            el = statistics.median(times[b])
            nbytes = row["count"] * torch.tensor([], dtype=dtype).element_size()
            algbw = nbytes / el / 1e9
            busbw = algbw * bus_factor(args.collective, n)
            row[b] = {"time_us": el * 1e6, "algbw": algbw, "busbw": busbw,
                      "pct_memcpy": 100 * busbw / memcpy, "wrong": int(w.item()),
                      "rounds_us": [t * 1e6 for t in times[b]],
                      "cpu_us": statistics.median(cpus[b]) * 1e6,
                      "context_switches": statistics.median(csws[b])}
        if tcp:
            row["tcp"] = {str(c): {"time_us": statistics.median(ts) * 1e6, "rounds_us": [t * 1e6 for t in ts],
                                   "bytes_each_way": max(1, int(op_bytes * bus_factor(args.collective, n)))}
                          for c, ts in tcp_times.items()}
            best = min(v["time_us"] for v in row["tcp"].values())
            for b in backends:
                row[b]["pct_tcp"] = 100 * best / row[b]["time_us"]
        if "gloo" in backends:
            for b in backends:
                if b != "gloo":
                    row[b + "/gloo"] = row[b]["busbw"] / max(row["gloo"]["busbw"], 1e-12)
        rows.append(row)
        if rank == 0 and args.progress:
            each = ", ".join(f"{b} {spent[b]:.2f} s" for b in backends)
            print(f"pgbench: {args.collective} {human(size)} done ({each}); elapsed {time.perf_counter() - start:.1f} s",
                  file=sys.stderr, flush=True)
        if rank == 0:
            line = f"{row['size']:>12} {row['count']:>12} "
            for b in backends:
                r = row[b]
                pct = r["pct_tcp"] if tcp else r["pct_memcpy"]
                line += (f"| {'':>14}  {r['time_us']:>10.1f} {r['algbw']:>7.3f} {r['busbw']:>7.3f} "
                         f"{pct:>6.1f}% {r['wrong']:>6} ")
                if args.cpu:
                    line += f"{r['cpu_us']:>8.0f} {r['context_switches']:>5.0f} "
            for b in backends:
                if b + "/gloo" in row:
                    line += f"| {row[b + '/gloo']:>15.2f}x "
            if tcp:
                line += "| " + " ".join(f"{row['tcp'][str(c)]['time_us']:>10.1f}" for c in tcp) + " "
            print(line, flush=True)
    for ex in tcp.values():
        ex.close()
    return rows



def human(size: int) -> str:
    """8 -> "8 B", 1048576 -> "1 MiB"."""
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= m and size % m == 0:
            return f"{size // m} {unit}"
    return f"{size} B"


def plot(rows: list[dict], path: str, title: str = "") -> None:
    """Writes busbw against size (log-log), one line per backend, and each backend's busbw
    ratio to gloo (dashed, right axis) to path (PNG), from bench_rank's rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    if not rows:
        return
    sizes = [r["size"] for r in rows]
    backends = [k for k, v in rows[0].items() if isinstance(v, dict) and "busbw" in v]
    fig, ax = plt.subplots(figsize=(8, 5.4), dpi=110)
    colors = {}
    for b in backends:
        (line,) = ax.plot(sizes, [r[b]["busbw"] for r in rows], marker="o", label=f"{b} busbw")
        colors[b] = line.get_color()
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([human(s) for s in sizes], rotation=45, ha="right")
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw (GB/s, log)")
    ax.grid(True, which="major", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    ratios = [b for b in backends if b + "/gloo" in rows[0]]
    if ratios:
        ax2 = ax.twinx()
        for b in ratios:
            ax2.plot(sizes, [r[b + "/gloo"] for r in rows], linestyle="--", marker="x",
                     color=colors[b], label=f"{b} / gloo (right axis)")
        ax2.axhline(1.0, color="gray", linewidth=0.8, linestyle=":")
        ax2.set_ylabel("busbw ratio to gloo (dashed)")
        ax2.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax2.set_ylim(bottom=0)
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8,
              frameon=False)
    r0 = rows[0]
    ax.set_title(title or f"{r0['collective']}, {r0['ranks']} ranks, {r0['dtype']}, one host")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def finish(rows: list[dict], args) -> None:
    """Rank 0's outputs after the sweep: --json and --plot."""
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.plot:
        plot(rows, args.plot)
        print(f"pgbench: plot written to {args.plot}", file=sys.stderr, flush=True)


def worker(local_rank: int, args, world: int, init: str) -> None:
    import mooncake_pg  # noqa: F401  registers the backends in every spawned process

    dist.init_process_group("gloo", init_method=init, rank=local_rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    rows = bench_rank(args)
    if local_rank == 0:
        finish(rows, args)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--collective", default="all_reduce", choices=COLLECTIVES)
    p.add_argument("--backend", default="mooncake-cpu,gloo")
    p.add_argument("-b", "--minbytes", default="8")
    p.add_argument("-e", "--maxbytes", default="64M")
    p.add_argument("-f", "--stepfactor", type=int, default=4)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup", type=int, default=5)
    p.add_argument("--cpu", action="store_true",
                   help="also print CPU time and context switches per op (mean of the ranks)")
    p.add_argument("-r", "--rounds", type=int, default=1,
                   help="timed rounds per size, alternating the backends; each reports its median")
    p.add_argument("-d", "--dtype", default="float32", choices=sorted(DTYPES))
    p.add_argument("-o", "--op", default="sum", choices=sorted(OPS))
    p.add_argument("-c", "--check", type=int, default=1)
    p.add_argument("-g", "--ranks", type=int, default=2, help="ranks to spawn on this node")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                   help="where the tensors live; cuda: each rank's GPU (shared when fewer GPUs "
                        "than ranks), backends such as mooncake and nccl, and the bound is the "
                        "GPU's device-to-device copy bandwidth instead of memcpy")
    p.add_argument("--timeout", type=int, default=300)
    p.add_argument("--json", default="")
    p.add_argument("--plot", default="", metavar="FILE.png",
                   help="draw busbw vs size per backend and the ratio to gloo (matplotlib)")
    p.add_argument("-q", "--quiet", dest="progress", action="store_false",
                   help="no progress lines on stderr")
    p.add_argument("--netns", action="store_true",
                   help="each rank (-g, default 2) in a network namespace of its own, two joined by a "
                        "veth pair, more by veths to one bridge (root, ip): separate hosts as far as "
                        "the engine can tell, so mooncake moves bytes over tcp")
    p.add_argument("--tcp-bound", action=argparse.BooleanOptionalAction, default=None,
                   help="also time a raw TCP ring exchange of each op's bytes in the same rounds and "
                        "report %%tcp (default: on with --netns)")
    p.add_argument("--tcp-conns", default="1,4",
                   help="connections per neighbour pair of the TCP bound's exchanges (comma list)")
    args = p.parse_args()
    args.tcp_conns = [int(c) for c in str(args.tcp_conns).split(",") if c.strip()]
    if args.tcp_bound is None:
        args.tcp_bound = bool(args.netns or os.environ.get("PGBENCH_NETNS"))
    if args.netns and "RANK" not in os.environ:
        return run_netns()
    if "RANK" in os.environ:  # under torchrun (or --netns)
        import mooncake_pg  # noqa: F401

        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
        rows = bench_rank(args)
        if dist.get_rank() == 0:
            finish(rows, args)
        dist.destroy_process_group()
        return
    with tempfile.TemporaryDirectory() as d:
        init = "file://" + os.path.join(d, "rdzv")
        torch.multiprocessing.spawn(worker, args=(args, args.ranks, init), nprocs=args.ranks)


def run_netns() -> int:
    """Runs this benchmark with each rank (-g, default 2) in a fresh network namespace of its own:
    two joined by a veth pair, more by veths to a bridge in the root namespace."""
    import shutil
    import subprocess
    import uuid

    if shutil.which("ip") is None or os.geteuid() != 0:
        raise SystemExit("--netns needs root and iproute2 (ip)")
    args = [a for a in sys.argv[1:] if a != "--netns"]
    ranks = 2
    for i, a in enumerate(args):
        if a in ("-g", "--ranks") and i + 1 < len(args):
            ranks = int(args[i + 1])
        elif a.startswith("--ranks="):
            ranks = int(a.split("=", 1)[1])
    tag = uuid.uuid4().hex[:6]
    ns = [f"pb{tag}{r}" for r in range(ranks)]
    addrs = [f"10.231.19.{r + 1}" for r in range(ranks)]
    bridge = f"pbr{tag}" if ranks > 2 else ""
    inner = [f"pv{tag}{r}" for r in range(ranks)]  # each rank's interface, inside its namespace

    def ip(*a):
        subprocess.run(["ip", *a], check=True, capture_output=True)

    try:
        for n in ns:
            ip("netns", "add", n)
        if bridge:
            ip("link", "add", bridge, "type", "bridge")
            ip("link", "set", bridge, "up")
            for r in range(ranks):
                outer = f"pw{tag}{r}"
                ip("link", "add", inner[r], "type", "veth", "peer", "name", outer)
                ip("link", "set", outer, "master", bridge)
                ip("link", "set", outer, "up")
        else:
            ip("link", "add", inner[0], "type", "veth", "peer", "name", inner[1])
        for n, v, a in zip(ns, inner, addrs):
            ip("link", "set", v, "netns", n)
            ip("-n", n, "addr", "add", f"{a}/24", "dev", v)
            ip("-n", n, "link", "set", v, "up")
            ip("-n", n, "link", "set", "lo", "up")
        procs = []
        for r in range(ranks):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK="0", WORLD_SIZE=str(ranks),
                       MASTER_ADDR=addrs[0], MASTER_PORT="29611", GLOO_SOCKET_IFNAME=inner[r],
                       PGBENCH_NETNS="1")
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns[r], sys.executable,
                                           os.path.abspath(__file__), *args], env=env,
                                          stdout=None if r == 0 else subprocess.DEVNULL))
        rc = 0
        for p in procs:
            rc |= p.wait()
        return rc
    finally:
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        if bridge:
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
