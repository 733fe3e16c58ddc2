"""Upstream mooncake.pg names beyond the elastic calls (issue 33): ProposeViewUpdateResponse,
set_fault_reconciliation_window_us, set_p2p_timeout_us, set_transfer_engine with
TransferEngine.get_engine_ptr (one engine shared by the process group, the program and the
store), and the coordinator address rank 0 publishes under "coordinator_addr". Each group runs
in a process of its own (the process-wide engine is per process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from elastic_harness import HERE, _env

PRELUDE = """
import json, os, sys, time
from datetime import timedelta
import torch, torch.distributed as dist
from mooncake import pg
from mooncake.engine import TransferEngine
"""


def run(code: str, timeout: float = 120) -> str:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(PRELUDE) + textwrap.dedent(code)],
                       capture_output=True, text=True, timeout=timeout, env=_env(), cwd=HERE)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    return r.stdout + "\n===STDERR===\n" + r.stderr


def result(out: str) -> dict:
    import json

    line = [x for x in out.splitlines() if x.startswith("RESULT ")]
    assert line, out[-4000:]
    return json.loads(line[-1][7:])


def test_names_and_argument_checks():
    from mooncake import pg

    assert pg.ProposeViewUpdateResponse is pg.ProposalResponse
    for fn in (pg.set_fault_reconciliation_window_us, pg.set_p2p_timeout_us):
        with pytest.raises(ValueError, match="negative"):
            fn(-1)
        with pytest.raises(TypeError):
            fn(1.5)
    with pytest.raises(TypeError, match="TransferEngine"):
        pg.set_transfer_engine("not an engine")
    assert pg.COORDINATOR_STORE_KEY == "coordinator_addr"


def test_set_transfer_engine_shares_one_engine_with_the_group_and_the_store():
    from test_store import Master

    m = Master()
    try:
        out = run(f"""
            a, b = TransferEngine(), TransferEngine()
            assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0  # the process's first
            assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
            res = {{"a": a.get_segment_name(), "b": b.get_segment_name(),
                   "ptr_int": isinstance(b.get_engine_ptr(), int),
                   "inner_ptr": b.get_engine().get_engine_ptr() == b.get_engine_ptr()}}
            pg.set_transfer_engine(b)
            store = dist.HashStore()
            dist.init_process_group("mooncake-cpu", store=store, rank=0, world_size=1)
            res["group_segment"] = pg._call(pg.get_backend(None), "endpoint")["segment"]
            x = torch.ones(4)
            dist.all_reduce(x)
            res["sum"] = x.tolist()
            try:
                pg.set_transfer_engine(a)
            except ValueError as e:
                res["switch_with_group"] = str(e)
            pg.set_transfer_engine(b)  # the engine the group runs on: accepted
            from mooncake.store import MooncakeDistributedStore
            s = MooncakeDistributedStore()
            res["setup"] = s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "",
                                   {m.addr!r}, b)
            res["store_segment"] = s.get_hostname()
            res["put"] = s.put("k", b"one engine")
            res["get"] = s.get("k").decode()
            s.close()
            # A store may not run on an engine that publishes its segments elsewhere.
            s2 = MooncakeDistributedStore()
            res["setup_elsewhere"] = s2.setup("127.0.0.1", "http://127.0.0.1:1/metadata", 16 << 20,
                                              16 << 20, "tcp", "", {m.addr!r}, a)
            print("RESULT " + json.dumps(res), flush=True)
            os._exit(0)
        """)
    finally:
        m.stop()
    res = result(out)
    assert res["a"] != res["b"] and res["ptr_int"] and res["inner_ptr"], res
    # The group's endpoint and the store's segment are engine b's: one engine for all three.
    assert res["group_segment"] == res["b"] and res["store_segment"] == res["b"], res
    assert res["sum"] == [1.0] * 4, res
    assert "call it before the process's first group" in res["switch_with_group"], res
    assert (res["setup"], res["put"], res["get"]) == (0, 0, "one engine"), res
    assert res["setup_elsewhere"] != 0, res
    assert "publishes its segments at" in out, out[-3000:]


def test_coordinator_address_is_the_store_holding_the_group_state():
    out = run("""
        server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                               timeout=timedelta(seconds=60))
        dist.init_process_group("mooncake-cpu", store=server, rank=0, world_size=1)
        addr = pg.get_coordinator_address()
        host, port = addr.rsplit(":", 1)
        probe = dist.TCPStore(host, int(port), is_master=False, timeout=timedelta(seconds=10))
        keys = probe.list_keys()
        res = {"addr": addr, "port": server.port,
               "endpoint_keys": [k for k in keys if k.endswith("mooncake/ep/0")],
               "coordinator_keys": [k for k in keys if k.endswith("coordinator_addr")]}
        print("RESULT " + json.dumps(res), flush=True)
        os._exit(0)
    """)
    res = result(out)
    assert res["addr"] == f"127.0.0.1:{res['port']}", res
    # The group's state (its published endpoint) and the key itself are in that store.
    assert len(res["endpoint_keys"]) == 1 and len(res["coordinator_keys"]) == 1, res


def test_fault_window_and_p2p_timeout_take_effect(job):
    worker = os.path.join(HERE, "pg_names_worker.py")
    j = job(3)
    for r in range(3):
        j.start(f"r{r}", r, 3, worker=worker)
    from elastic_harness import wait_store

    wait_store(j.store, ["victim_ready"])
    assert j.killed("r2") == -9
    j.store.set("go", b"1")
    for r in (0, 1):
        res = j.result(f"r{r}")
        assert res["sum"] == [3.0, False] and res["epoch"] == 1, res
        assert res["timeout_error"] and "within 300ms" in res["timeout_error"], res
        # The group waited the window (set from Python) before it decided.
        assert "waiting the fault reconciliation window (1.5s)" in res["_stderr"], res["_stderr"][-3000:]
