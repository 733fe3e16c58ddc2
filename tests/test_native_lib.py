"""One libmooncake.so per process: the library a process loads (the package's, or MOONCAKE_LIB's)
is the one the torch shim binds, through the library's soname, so a process never holds two Go
runtimes."""

import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = r'''
import datetime, json, os, sys
import torch, torch.distributed as dist
import mooncake.pg  # noqa: F401  (the shim and the library)
from mooncake import engine
store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=60))
dist.init_process_group("mooncake-cpu", store=store, rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=60))
t = torch.arange(4, dtype=torch.float32)
dist.all_reduce(t)
te = engine.TransferEngine()  # the ctypes side of the same library
maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if l.rstrip().endswith("libmooncake.so")})
print(json.dumps({"sum": t.tolist(), "maps": maps}))
dist.destroy_process_group()
'''


def run(env):
    p = subprocess.run([sys.executable, "-c", WORKER], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    import json
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_the_library_has_its_soname():
    import mooncake
    lib = os.path.join(os.path.dirname(mooncake.__file__), "libmooncake.so")
    out = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("no readelf")
    assert "Library soname: [libmooncake.so]" in out.stdout


def test_one_library_per_process(tmp_path):
    import mooncake
    pkg = os.path.realpath(os.path.join(os.path.dirname(mooncake.__file__), "libmooncake.so"))
    env = {k: v for k, v in os.environ.items() if k != "MOONCAKE_LIB" and not k.startswith("MC_")}
    got = run(env)
    assert got["sum"] == [0.0, 1.0, 2.0, 3.0]
    assert [os.path.realpath(m) for m in got["maps"]] == [pkg]
    # A copy elsewhere, named by MOONCAKE_LIB: the shim runs on that copy, and the package's is
    # never mapped.
    copy = tmp_path / "libmooncake.so"
    shutil.copyfile(pkg, copy)
    got = run(dict(env, MOONCAKE_LIB=str(copy)))
    assert got["sum"] == [0.0, 1.0, 2.0, 3.0]
    assert [os.path.realpath(m) for m in got["maps"]] == [os.path.realpath(copy)]
