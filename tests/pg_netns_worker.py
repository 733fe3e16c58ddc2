"""One rank of the cross-host test: run inside a network namespace of its own, it joins a
mooncake-cpu group through a TCPStore on the other namespace's address and checks the core
ops' results exactly. Usage: pg_netns_worker.py RANK WORLD MASTER_ADDR MASTER_PORT"""

import datetime
import sys

import torch
import torch.distributed as dist

import mooncake_pg  # noqa: F401


def main() -> None:
    rank, world, addr, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    dist.init_process_group("mooncake-cpu", init_method=f"tcp://{addr}:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    tri = world * (world + 1) // 2
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16):
        for n in (1, 1000, 1 << 20):
            t = torch.full((n,), rank + 1, dtype=dtype)
            dist.all_reduce(t)
            assert torch.all(t == tri), (dtype, n, t[:4])
    t = torch.full((4096,), float(rank + 1))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert torch.all(t == world)
    b = torch.arange(3 << 20, dtype=torch.float32) if rank == 0 else torch.zeros(3 << 20)
    dist.broadcast(b, src=0)
    assert torch.equal(b, torch.arange(3 << 20, dtype=torch.float32))
    out = torch.empty(world * 1000, dtype=torch.int64)
    dist.all_gather_into_tensor(out, torch.full((1000,), rank, dtype=torch.int64))
    assert torch.equal(out, torch.arange(world).repeat_interleave(1000))
    rs = torch.empty(500)
    dist.reduce_scatter_tensor(rs, torch.arange(world * 500, dtype=torch.float32))
    assert torch.equal(rs, world * torch.arange(rank * 500, (rank + 1) * 500, dtype=torch.float32))
    a2a_in = torch.tensor([rank * 10 + j for j in range(world)], dtype=torch.int32)
    a2a_out = torch.empty(world, dtype=torch.int32)
    dist.all_to_all_single(a2a_out, a2a_in)
    assert a2a_out.tolist() == [j * 10 + rank for j in range(world)]
    if rank == 0:
        dist.send(torch.arange(1 << 18, dtype=torch.float32), dst=1, tag=3)
        r = torch.empty(7, dtype=torch.int64)
        dist.recv(r, src=1, tag=4)
        assert r.tolist() == list(range(7))
    elif rank == 1:
        r = torch.empty(1 << 18)
        dist.recv(r, src=0, tag=3)
        assert torch.equal(r, torch.arange(1 << 18, dtype=torch.float32))
        dist.send(torch.arange(7), dst=0, tag=4)
    dist.barrier()
    print(f"netns rank {rank} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
