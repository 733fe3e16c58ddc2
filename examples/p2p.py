"""Point-to-point over the mooncake-cpu backend: a send/recv ring, batch_isend_irecv, tagged
isend/irecv and a receive from any source.

    torchrun --nproc_per_node=4 examples/p2p.py
"""

import torch
import torch.distributed as dist

import mooncake_pg  # noqa: F401


def main() -> None:
    dist.init_process_group(backend="mooncake-cpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    if world > 1:
        # Blocking ring: even ranks send first, odd ranks receive first.
        buf = torch.empty(4)
        if rank % 2 == 0:
            dist.send(torch.full((4,), float(rank)), nxt)
            dist.recv(buf, prv)
        else:
            dist.recv(buf, prv)
            dist.send(torch.full((4,), float(rank)), nxt)
        assert torch.all(buf == prv), buf

        # Batched, both directions at once.
        to_next, from_prev = torch.full((3,), rank * 1.5), torch.empty(3)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, to_next, nxt),
                                       dist.P2POp(dist.irecv, from_prev, prv)])
        for r in reqs:
            r.wait()
        assert torch.all(from_prev == prv * 1.5), from_prev

        # Tagged messages may be received in any order.
        a, b = torch.empty(1), torch.empty(1)
        ws = [dist.isend(torch.tensor([1.0 + rank]), nxt, tag=1),
              dist.isend(torch.tensor([2.0 + rank]), nxt, tag=2),
              dist.irecv(b, prv, tag=2), dist.irecv(a, prv, tag=1)]
        for w in ws:
            w.wait()
        assert a.item() == 1.0 + prv and b.item() == 2.0 + prv, (a, b)

        # Any source: rank 0 collects one message from everyone else.
        if rank == 0:
            seen = set()
            for _ in range(world - 1):
                t = torch.empty(1, dtype=torch.int64)
                src = dist.recv(t)
                assert t.item() == src * 7, (src, t)
                seen.add(src)
            assert seen == set(range(1, world)), seen
        else:
            dist.send(torch.tensor([rank * 7]), 0)
    dist.barrier()
    print(f"p2p OK rank {rank}/{world}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
