"""One rank of tests/test_monitoring_pg.py, started by torchrun with MOONCAKE_PG_METRICS_PORT set:
it runs every collective and a send/recv on the default group and an all_reduce on a subgroup
(both groups' series on the rank's one metrics server), checking results exactly, then keeps
the ops going until the test has evaluated the dashboard (DIR/done appears).
Usage: monitoring_pg_worker.py DIR"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import mooncake_pg  # noqa: F401  registers the backends


def ops(rank: int, world: int, sub) -> None:
    tri = world * (world + 1) // 2
    t = torch.full((1024,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.all(t == tri), t[:4]
    b = torch.arange(256, dtype=torch.float32) if rank == 0 else torch.zeros(256)
    dist.broadcast(b, src=0)
    assert torch.equal(b, torch.arange(256, dtype=torch.float32))
    r = torch.full((64,), float(rank + 1))
    dist.reduce(r, dst=0)
    if rank == 0:
        assert torch.all(r == tri)
    out = torch.empty(world * 100, dtype=torch.int64)
    dist.all_gather_into_tensor(out, torch.full((100,), rank, dtype=torch.int64))
    assert torch.equal(out, torch.arange(world).repeat_interleave(100))
    g = [torch.empty(8) for _ in range(world)] if rank == 0 else None
    dist.gather(torch.full((8,), float(rank)), g, dst=0)
    if rank == 0:
        assert all(torch.all(x == i) for i, x in enumerate(g))
    s = torch.empty(8)
    dist.scatter(s, [torch.full((8,), float(i)) for i in range(world)] if rank == 0 else None, src=0)
    assert torch.all(s == rank)
    rs = torch.empty(50)
    dist.reduce_scatter_tensor(rs, torch.arange(world * 50, dtype=torch.float32))
    assert torch.equal(rs, world * torch.arange(rank * 50, (rank + 1) * 50, dtype=torch.float32))
    a2a_out = torch.empty(world, dtype=torch.int32)
    dist.all_to_all_single(a2a_out, torch.tensor([rank * 10 + j for j in range(world)], dtype=torch.int32))
    assert a2a_out.tolist() == [j * 10 + rank for j in range(world)]
    if rank == 0:
        dist.send(torch.arange(32, dtype=torch.float32), dst=1)
    elif rank == 1:
        x = torch.empty(32)
        dist.recv(x, src=0)
        assert torch.equal(x, torch.arange(32, dtype=torch.float32))
    st = torch.ones(16)
    dist.all_reduce(st, group=sub)
    assert torch.all(st == world)
    dist.barrier()


def main() -> None:
    d = sys.argv[1]
    dist.init_process_group("mooncake-cpu", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    sub = dist.new_group(list(range(world)))
    ops(rank, world, sub)
    with open(os.path.join(d, f"ready.{rank}"), "w") as f:
        f.write(os.environ["MOONCAKE_PG_METRICS_PORT"])
    deadline = time.time() + 240
    while not os.path.exists(os.path.join(d, "done")):
        assert time.time() < deadline, "the test never wrote done"
        ops(rank, world, sub)
        time.sleep(0.3)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
