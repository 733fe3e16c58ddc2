"""scripts/gpu_check.sh's CPU side, so the device check cannot rot between GPU sessions: the dry
run prints the prepare commands, builds the shim's flags from torchext/build.py (libstdc++ first,
hidden visibility, the version script), runs scripts/stdcxx_probe.py --strict for real (the
formatting probe passes and no shim reference to libstdc++ binds elsewhere, and its JSON report
of this build is checked), collects the CUDA test selection and checks pgbench's --device option."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pg_harness

ROOT = pg_harness.ROOT


def _env():
    return dict(os.environ, PYTHON=sys.executable,
                PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))


def test_dry_run_plans_every_step(tmp_path):
    js = tmp_path / "probe.json"
    env = dict(_env(), DRY_JSON=str(js), TMPDIR=str(tmp_path))
    # A deadline for a hang only: under load the two torch imports and the collection take minutes.
    p = subprocess.run(["bash", "scripts/gpu_check.sh", "--dry-run"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert ("go build -trimpath -ldflags=-s\\ -w\\ -extldflags=-Wl,-soname,libmooncake.so -buildmode=c-shared "
            "-o python/mooncake/libmooncake.so ./capi") in out
    assert "tar -czf .gpu/bin.tgz python/mooncake/libmooncake.so python/mooncake/bin/mooncake" in out
    assert "  libraries: stdc++ mooncake" in out
    assert "-fvisibility=hidden" in out and "--version-script=" in out
    assert "-> OK" in out and "bound outside libstdc++: 0" in out
    assert "tests/test_pg_cuda.py tests/test_engine_cuda.py tests/test_store_tensor_cuda.py" in out
    assert "tests/test_pg_ipc.py::test_cuda_path_matches_cpu" in out
    assert "MOONCAKE_PG_CUDA_IPC=0" in out and "pgbench_cuda_staging.json" in out
    assert "tests collected" in out
    assert "pgbench has --device" in out and out.rstrip().endswith("dry-run OK")
    # the probe's report of this build (scripts/stdcxx_probe.py --json)
    rep = json.loads(js.read_text())
    import torch

    assert rep["shim_build"]["glibcxx_use_cxx11_abi"] == int(torch._C._GLIBCXX_USE_CXX11_ABI)
    assert rep["shim_exports"] == ["PyInit__pg_ext"]
    assert rep["shim_needed"][0] == "libstdc++.so.6"
    assert rep["probe"]["out"] == "n=12345 x=6172.5"
    assert rep["shim_foreign_bindings"] == []
