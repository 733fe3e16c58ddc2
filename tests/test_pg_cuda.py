"""Backend "mooncake" on CUDA tensors (skipped without a CUDA GPU, or with a shim built without
CUDA): 2 and 4 ranks sharing the GPUs there are (one is enough), every collective and
point-to-point op in fp32, bf16, fp16 and int32, each result compared exactly with the same op
computed on CPU; stream order after Work.wait(); and a DDP step on CUDA against the mean of the
ranks' CPU gradients. scripts/gpu_check.sh runs this file on a lent GPU machine."""

from __future__ import annotations

import pytest
import torch

import pg_harness  # noqa: F401  (sets sys.path for the source tree)
import pg_cuda_workers
from pg_harness import run_ranks


def _need_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import mooncake.pg as mpg

    if not mpg._pg_ext.WITH_CUDA:
        pytest.skip("mooncake._pg_ext was built without CUDA support")


@pytest.mark.parametrize("world", [2, 4])
def test_cuda_ops_match_cpu(world):
    _need_cuda()
    run_ranks(pg_cuda_workers.worker_cuda_ops, world, timeout=300)


def test_cuda_ddp_step():
    _need_cuda()
    run_ranks(pg_cuda_workers.worker_cuda_ddp, 2, timeout=300)


def test_same_checks_on_cpu():
    """The checks above, on CPU tensors over mooncake-cpu: runs everywhere, so the CUDA tests'
    expected values and op coverage are exercised on every machine."""
    run_ranks(pg_cuda_workers.worker_cuda_ops, 2, False, timeout=300)
    run_ranks(pg_cuda_workers.worker_cuda_ddp, 2, False, timeout=300)
