"""Knobs (MC_* / MOONCAKE_* environment variables) set from Python after the library is loaded
take effect at the call that reads them (docs/configuration.md).

Each test runs a fresh Python process that imports mooncake, loads libmooncake.so, and only then
sets a knob through os.environ, before the call that reads it (store setup(), engine creation,
init_process_group). Before the knobs were read through libc's getenv, Go saw only the
environment of the process at library load, so these knobs were ignored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

from conftest import stop
from test_store import Master

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The knobs these tests set must come from the child's os.environ, never from ours.
_KNOBS = ("MC_STORE_CLUSTER_ID", "MC_FORCE_TCP", "MOONCAKE_PG_COLLECTIVE_TIMEOUT_US",
          "MC_METADATA_SERVER", "MC_STORE_RPC")


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _KNOBS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(ROOT, "tests"),
                                                    env.get("PYTHONPATH", "")) if p)
    return env


def run_child(code: str, *args: str, timeout: float = 90) -> dict:
    """Runs code in a new Python process; its last stdout line is a JSON result."""
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=_env(),
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"child failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-4000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---- (a) MC_STORE_CLUSTER_ID, read at setup() -------------------------------------------------

@pytest.fixture
def ha_masters(etcd_server):
    # Two HA masters on etcd in cluster "prod", with none of the knobs this file sets.
    ms = [Master("--enable_ha", f"--etcd_endpoints=http://{etcd_server}", "--cluster_id=prod",
                 "--ha_lease_ttl_sec=2", env=_env()) for _ in range(2)]
    yield etcd_server
    for m in ms:
        m.stop()


STORE_CHILD = """
import json, os, sys
from mooncake import _native
from mooncake.store import MooncakeDistributedStore

_native.lib()                         # the library (and its Go runtime) is loaded now
if sys.argv[2]:
    os.environ["MC_STORE_CLUSTER_ID"] = sys.argv[2]
s = MooncakeDistributedStore()
rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 4 << 20, "tcp", "", "etcd://" + sys.argv[1])
res = {"setup": rc, "error": _native.last_error() if rc else ""}
if rc == 0:
    res["put"] = s.put("config-key", b"value set after load")
    res["get"] = s.get("config-key").decode()
    s.close()
print(json.dumps(res))
"""


def test_store_cluster_id_set_after_load(ha_masters):
    """setup() follows the HA leader of the cluster named by MC_STORE_CLUSTER_ID, set from
    Python after the library loaded; a put/get round-trips through it."""
    res = run_child(STORE_CHILD, ha_masters, "prod")
    assert res == {"setup": 0, "error": "", "put": 0, "get": "value set after load"}, res


def test_store_cluster_id_unset_is_the_default_cluster(ha_masters):
    """Control: without the knob the client follows "mooncake_cluster", where no master leads,
    so the same setup() fails: the knob above is what made it work."""
    res = run_child(STORE_CHILD, ha_masters, "")
    assert res["setup"] != 0, res
    assert "no master leads" in res["error"] and "mooncake_cluster" in res["error"], res


# ---- (b) MC_FORCE_TCP, read at engine creation -------------------------------------------------

ENGINE_CHILD = """
import json, os, sys
from mooncake import _native
from mooncake.engine import TransferEngine

_native.lib()                         # the library (and its Go runtime) is loaded now
if sys.argv[1]:
    os.environ["MC_FORCE_TCP"] = sys.argv[1]
tgt, ini = TransferEngine(), TransferEngine()
assert tgt.initialize("127.0.0.1") == 0 and ini.initialize("127.0.0.1") == 0
n = 1 << 20
dst, src = tgt.allocate_managed_buffer(n), ini.allocate_managed_buffer(n)
data = bytes((i * 7 + 3) % 256 for i in range(n))
ini.write_bytes_to_buffer(src, data)
assert ini.transfer_sync_write(tgt.get_segment_name(), src, dst, n) == 0
assert tgt.read_bytes_from_buffer(dst, n) == data
print(json.dumps(ini.get_transport_bytes()))
"""


def test_force_tcp_set_after_load():
    """Two engines of one process: a write to the peer's shared buffer goes over shared memory,
    and over TCP when MC_FORCE_TCP=1 was set (after the library loaded) before the engines
    were created."""
    n = 1 << 20
    forced = run_child(ENGINE_CHILD, "1")
    assert forced == {"local": 0, "shm": 0, "tcp": n}, forced
    default = run_child(ENGINE_CHILD, "")
    assert default == {"local": 0, "shm": n, "tcp": 0}, default


# ---- (c) a process-group knob, read at init_process_group --------------------------------------
#
# NOTE: this one passes only once capi's process-group code reads MOONCAKE_PG_COLLECTIVE_TIMEOUT_US
# through package config (config.PGCollectiveTimeoutUS) instead of os.Getenv; on a branch
# without that wiring it fails (the op waits for the 30 s group timeout).

PG_CHILD = """
import datetime, json, os, sys, time
import torch
import torch.distributed as dist
import mooncake_pg  # noqa: F401  registers the backends
from mooncake import _native

_native.lib()                         # the library (and its Go runtime) is loaded now
rank, store_path, done = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if rank == 0:
    os.environ["MOONCAKE_PG_COLLECTIVE_TIMEOUT_US"] = "1000000"
dist.init_process_group("mooncake-cpu", rank=rank, world_size=2,
                        store=dist.FileStore(store_path, 2), timeout=datetime.timedelta(seconds=30))
res = {}
if rank == 0:
    t0 = time.time()
    try:
        dist.all_reduce(torch.ones(4))    # rank 1 never joins this all_reduce
        res["error"] = ""
    except Exception as e:  # noqa: BLE001
        res["error"] = str(e)[:200]
    res["elapsed"] = time.time() - t0
    open(done, "w").close()
else:
    while not os.path.exists(done):
        time.sleep(0.05)
print(json.dumps(res), flush=True)
os._exit(0)
"""


def test_pg_collective_timeout_set_after_load():
    """[needs the lead's process-group wiring] MOONCAKE_PG_COLLECTIVE_TIMEOUT_US=1 s set after
    the library loaded, before init_process_group: an all_reduce that a live peer never joins
    ends after about 1 s instead of the group's 30 s timeout."""
    with tempfile.TemporaryDirectory() as d:
        store, done = os.path.join(d, "store"), os.path.join(d, "done")
        procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(PG_CHILD), str(r), store, done],
                                  env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for r in range(2)]
        outs = []
        try:
            for p in procs:
                out, err = p.communicate(timeout=90)
                assert p.returncode == 0, f"rank failed ({p.returncode}):\n{out}\n{err[-4000:]}"
                outs.append(json.loads(out.strip().splitlines()[-1]))
        finally:
            for p in procs:
                stop(p)
    assert outs[0]["elapsed"] < 10, outs[0]
