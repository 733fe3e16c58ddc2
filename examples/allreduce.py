"""All-reduce over the mooncake-cpu backend.

    torchrun --nproc_per_node=4 examples/allreduce.py

Every rank contributes rank+1 (and a float/int/bf16 mix of tensors); the script checks the
sums, an AVG and a MAX, and prints one OK line per rank."""

import os
import sys

import torch
import torch.distributed as dist

import mooncake_pg  # noqa: F401  registers "mooncake-cpu" / "mooncake"


def main() -> None:
    dist.init_process_group(backend="mooncake-cpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = world * (world + 1) // 2
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        t = torch.full((1024,), rank + 1, dtype=dtype)
        dist.all_reduce(t)
        assert torch.all(t == total), f"rank {rank}: {dtype} sum {t[:4]} != {total}"
    t = torch.full((16,), float(rank + 1))
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.allclose(t, torch.full((16,), total / world)), t
    t = torch.tensor([rank])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert t.item() == world - 1
    work = dist.all_reduce(torch.ones(8), async_op=True)
    work.wait()
    active = mooncake_pg.get_active_ranks(dist.group.WORLD)
    print(f"allreduce OK rank {rank}/{world} active={active.tolist()} "
          f"epoch={mooncake_pg.get_current_epoch(dist.group.WORLD)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
