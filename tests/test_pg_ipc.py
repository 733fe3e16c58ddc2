"""The same-host device path (torchext/ipc.hpp, docs/cuda.md "Same-host device path") with real
processes: its protocol over the shared-memory fake (MOONCAKE_PG_IPC_FAKE=1, CPU tensors on
backend "mooncake") at 2 and 4 ranks, every collective it covers in fp32, bf16, fp16 and int32,
results compared exactly with the op on CPU and the path's counters with what the ops imply;
the same checks with the path off (test_pg_ipc_faults.py: a peer dying during a path op). On a CUDA GPU the checks run
over CUDA IPC too, with the path on and with staging forced (MOONCAKE_PG_CUDA_IPC=0)."""

from __future__ import annotations

import pytest
import torch

import pg_harness  # noqa: F401  (sets sys.path for the source tree)
import pg_ipc_workers
from pg_harness import run_ranks


@pytest.mark.parametrize("world", [2, 4])
def test_fake_path_matches_cpu(world):
    run_ranks(pg_ipc_workers.worker_ipc, world, False, True, timeout=240)


def test_fake_off_stays_on_staging():
    run_ranks(pg_ipc_workers.worker_ipc, 2, False, False, timeout=240)


def _need_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import mooncake.pg as mpg

    if not mpg._pg_ext.WITH_CUDA:
        pytest.skip("mooncake._pg_ext was built without CUDA support")


@pytest.mark.parametrize("world,path", [(2, True), (4, True), (2, False)],
                         ids=["2-cuda-ipc", "4-cuda-ipc", "2-staging"])
def test_cuda_path_matches_cpu(world, path):
    _need_cuda()
    run_ranks(pg_ipc_workers.worker_ipc, world, True, path, timeout=300)
