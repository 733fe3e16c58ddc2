"""The wheel a user installs: built from this tree, small, and working in a fresh virtualenv.

Builds the wheel (`pip wheel --no-build-isolation --no-deps .`; the Go build cache and the
build/ tree that `make setup`'s install left make this a link step and a copy), checks its size
and contents, installs it into a new virtualenv that sees this environment's torch through a
.pth file (nothing is downloaded), and from that environment runs a two-rank all_reduce on
mooncake-cpu under torchrun and the console scripts of the Go commands.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_WHEEL_BYTES = 25 * 10**6
COMMANDS = ["mooncake_master", "mooncake_client", "transfer_engine_bench",
            "mooncake_http_metadata_server"]

ALLREDUCE = textwrap.dedent("""\
    import os, sys
    import torch, torch.distributed as dist
    import mooncake, mooncake_pg
    venv = os.environ["WHEEL_VENV"]
    assert mooncake.__file__.startswith(venv), f"mooncake from {mooncake.__file__}, not the wheel in {venv}"
    dist.init_process_group(backend="mooncake-cpu")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((1 << 16,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.all(t == world * (world + 1) / 2), t[:4]
    print(f"WHEEL_ALLREDUCE_OK rank={rank} world={world} sum={t[0].item():g}", flush=True)
    dist.destroy_process_group()
""")


def clean_env(venv: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = venv
    env["WHEEL_VENV"] = os.path.realpath(venv)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    torch = pytest.importorskip("torch")  # the shim needs it; so does the all_reduce below
    del torch
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                    "-w", str(out), ROOT], check=True, timeout=900)
    wheels = glob.glob(os.path.join(out, "mooncake_transfer_engine-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> str:
    """A fresh virtualenv with the wheel installed; torch comes from this environment."""
    d = str(tmp_path_factory.mktemp("venv") / "env")
    subprocess.run([sys.executable, "-m", "venv", d], check=True, timeout=300)
    py = os.path.join(d, "bin", "python")
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # This environment's site directories (where torch is; in a worktree venv that reuses
    # another one through its own .pth, that one too), after the new venv's own.
    import torch

    dirs = [os.path.dirname(os.path.dirname(torch.__file__)), sysconfig.get_paths()["purelib"]]
    dirs += [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    with open(os.path.join(purelib, "zz_reuse_torch.pth"), "w") as f:
        f.write("\n".join(dict.fromkeys(dirs)) + "\n")
    # --ignore-installed: the mooncake installed here is visible through the .pth; it must be
    # neither taken as "already satisfied" nor uninstalled.
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--ignore-installed", wheel],
                   check=True, timeout=300, env=clean_env(d))
    return d


def test_wheel_is_small_and_ships_the_commands_once(wheel):
    size = os.path.getsize(wheel)
    assert size <= MAX_WHEEL_BYTES, f"wheel is {size / 1e6:.1f} MB, goal <= {MAX_WHEEL_BYTES / 1e6:.0f} MB"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        bins = sorted(n for n in names if n.startswith("mooncake/bin/"))
        assert bins == ["mooncake/bin/mooncake"], bins
        mode = z.getinfo("mooncake/bin/mooncake").external_attr >> 16
        assert mode & 0o111, oct(mode)
        assert "mooncake/libmooncake.so" in names
        assert any(n.startswith("mooncake/_pg_ext") and n.endswith(".so") for n in names), names
        assert any(n.startswith("mooncake/_fast_copy") and n.endswith(".so") for n in names), names
        assert any(n.startswith("mooncake/_bytes_alloc") and n.endswith(".so") for n in names), names
        eps = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    for cmd in COMMANDS:
        assert f"{cmd} = mooncake._cli:{cmd}" in eps, eps
    assert "mc_store_rest_server = mooncake.mooncake_store_service:sync_main" in eps, eps


def test_commands_run_from_the_fresh_venv(venv):
    env = clean_env(venv)
    r = subprocess.run([os.path.join(venv, "bin", "mooncake_master"), "--help"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "-rpc_port" in r.stderr and "Usage of mooncake_master" in r.stderr, r.stderr
    r = subprocess.run([os.path.join(venv, "bin", "mooncake_http_metadata_server"), "--port=-1"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr == "mooncake_http_metadata_server: --port=-1 is not a TCP port (0..65535)\n"
    for cmd in ("mooncake_client", "transfer_engine_bench"):
        r = subprocess.run([os.path.join(venv, "bin", cmd), "--help"], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and f"Usage of {cmd}" in r.stderr, (cmd, r.returncode, r.stderr)
    r = subprocess.run([os.path.join(venv, "bin", "mc_store_rest_server"), "--help"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "usage: mc_store_rest_server" in r.stdout, (r.returncode, r.stdout, r.stderr)


def test_two_rank_allreduce_from_the_fresh_venv(venv, tmp_path):
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE)
    py = os.path.join(venv, "bin", "python")
    r = subprocess.run([py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)],
                       cwd=str(tmp_path), env=clean_env(venv), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    # Both ranks write to torchrun's one stdout, so their lines may run into each other.
    ok = sorted(re.findall(r"WHEEL_ALLREDUCE_OK rank=\d+ world=\d+ sum=\d+", r.stdout))
    assert ok == ["WHEEL_ALLREDUCE_OK rank=0 world=2 sum=3", "WHEEL_ALLREDUCE_OK rank=1 world=2 sum=3"], r.stdout


def test_a_mismatched_torch_gets_the_clear_error(venv):
    # The shim is built for one torch version; under another one the import says so.
    code = ("import torch\nbuilt = torch.__version__\ntorch.__version__ = '0.0.1'\n"
            "try:\n    import mooncake_pg\nexcept ImportError as e:\n    print(built, '|', e)\n")
    r = subprocess.run([os.path.join(venv, "bin", "python"), "-c", code], env=clean_env(venv),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    built, msg = r.stdout.strip().split(" | ", 1)
    assert msg == (f"mooncake._pg_ext was built against torch {built}, but torch 0.0.1 is installed; "
                   "reinstall mooncake with `pip install --no-build-isolation .` so the shim is rebuilt "
                   "against this torch."), msg
