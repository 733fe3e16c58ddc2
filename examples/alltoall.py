"""All-to-all over the mooncake-cpu backend: all_to_all_single with equal and uneven splits,
and the list form.

    torchrun --nproc_per_node=4 examples/alltoall.py
"""

import torch
import torch.distributed as dist

import mooncake_pg  # noqa: F401


def main() -> None:
    dist.init_process_group(backend="mooncake-cpu")
    rank, world = dist.get_rank(), dist.get_world_size()

    # Equal splits: element j of rank i's input goes to rank j; rank j receives 100*i + j.
    inp = torch.tensor([100 * rank + j for j in range(world)], dtype=torch.int64)
    out = torch.empty(world, dtype=torch.int64)
    dist.all_to_all_single(out, inp)
    assert out.tolist() == [100 * i + rank for i in range(world)], out

    # Uneven splits: rank i sends j+1 copies of (10*i + j) to rank j.
    in_splits = [j + 1 for j in range(world)]
    out_splits = [rank + 1] * world
    inp = torch.cat([torch.full((j + 1,), 10.0 * rank + j) for j in range(world)])
    out = torch.empty(sum(out_splits))
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((rank + 1,), 10.0 * i + rank) for i in range(world)])
    assert torch.equal(out, want), (out, want)

    # List form with per-peer shapes.
    ins = [torch.full((2, j + 1), float(rank)) for j in range(world)]
    outs = [torch.empty(2, rank + 1) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for i, o in enumerate(outs):
        assert torch.all(o == i), (i, o)

    print(f"alltoall OK rank {rank}/{world}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
