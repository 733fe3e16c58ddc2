"""The same-host device path (docs/cuda.md) when a peer dies during a path op, over the
shared-memory fake with real processes (3 ranks, the last one exits without a goodbye before the
op): all_reduce and broadcast run again over the survivors through host memory and complete as a
staged op over the survivors does (docs/elastic.md); all_gather_into_tensor raises; the path is
off afterwards and the next op runs on staging over the survivors."""

from __future__ import annotations

import pytest

import pg_harness  # noqa: F401  (sets sys.path for the source tree)
import pg_ipc_workers
from pg_harness import run_ranks


@pytest.mark.parametrize("kind", ["all_reduce", "broadcast", "all_gather_into_tensor"])
def test_fake_peer_dies(kind):
    run_ranks(pg_ipc_workers.worker_ipc_peer_dies, 3, kind, timeout=100)
