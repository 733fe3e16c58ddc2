"""The transfer-status seam (libmooncake_pg.so, faultseam/; docs/elastic.md, "Fault injection
seam"), driven by a fault injector of our own (tests/transfer_seam_preload.c, compiled here with
the system's C compiler): an LD_PRELOAD library that interposes the three C++ methods upstream's
tests interpose, by their mangled names, and reports rank 1's transfers to rank 0 FAILED.

Checks that the seam is off without an injector, and upstream's in-place rejoin with it (the
scenario of upstream's test_pg_elastic test_inplace_rejoin_collective / _p2p, here both rounds in
the same two processes, the all_reduce round then the batch_isend_irecv round): two ranks on
one host; rank 1's op meets the failed transfers and completes without an exception with local
success False, having left the group (active [1, 0], epoch 1 before its op returns); it calls
join_group in the same process, rank 0 sees the new epoch and calls activate_ranks([1]), and the
op is exact on both again. Worker: tests/transfer_seam_worker.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta

import pytest
import torch.distributed as dist

from elastic_harness import HERE, _env

WORKER = os.path.join(HERE, "transfer_seam_worker.py")
PRELOAD_SRC = os.path.join(HERE, "transfer_seam_preload.c")
SYMBOLS = (
    "_ZN8mooncake14TransferEngine14submitTransferEmRKSt6vectorINS_9Transport15TransferRequestESaIS3_EE",
    "_ZN8mooncake14TransferEngine17getTransferStatusEmmRNS_9Transport14TransferStatusE",
    "_ZNK8mooncake11LinkManager11resolvePeerEi",
)


@pytest.fixture(scope="module")
def injector(tmp_path_factory) -> str:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler: scripts/setup.sh installs gcc")
    out = str(tmp_path_factory.mktemp("seam") / "libseam_fault.so")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-Wall", "-Werror", PRELOAD_SRC, "-ldl",
                    "-lpthread", "-o", out], check=True, capture_output=True, text=True)
    return out


PROBE = """
import ctypes, json, os
from mooncake import pg
import mooncake
seam = ctypes.CDLL(os.path.join(os.path.dirname(mooncake.__file__), "libmooncake_pg.so"))
print(json.dumps({"interposed": seam.mooncake_pg_seam_interposed(),
                  "exported": [bool(seam[s]) for s in %r]}))
""" % (SYMBOLS,)


def test_the_seam_is_off_without_an_injector():
    """libmooncake_pg.so exports upstream's three methods and, with no library interposing them,
    reports itself not interposed: the shim gives libmooncake no seam and no op consults it
    (under the injector it reports 1: test_inplace_rejoin_through_the_seam)."""
    p = subprocess.run([sys.executable, "-c", PROBE], env=_env(), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"interposed": 0, "exported": [True] * 3}


def _run(injector: str) -> dict:
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=60))
    env = dict(_env(), LD_PRELOAD=injector)
    procs = {r: subprocess.Popen([sys.executable, WORKER, "--port", str(store.port), "--rank", str(r),
                                  "--ops", "collective,p2p", "--injector", injector],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(2)}
    res = {}
    try:
        for r, p in procs.items():
            out, err = p.communicate(timeout=100)
            line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
            assert line is not None, f"rank {r} printed no result:\n{out}\n{err[-3000:]}"
            res[r] = json.loads(line[len("RESULT "):])
            res[r]["_stderr"] = err
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return res


def test_inplace_rejoin_through_the_seam(injector):
    """Both rounds in the same two processes: an all_reduce round (epochs 0 -> 1 -> 2), then a
    batch_isend_irecv round (2 -> 3 -> 4)."""
    res = _run(injector)
    logs = "\n".join(f"rank {q}:\n{res[q]['_stderr'][-3000:]}" for q in range(2))
    for r in range(2):
        assert "error" not in res[r], f"rank {r}: {res[r]['error']}\n{logs}"
        assert res[r]["ready"] == 1 and res[r]["interposed"] == 1
    for op, e in (("collective", 0), ("p2p", 2)):
        n = 1 if op == "collective" else 2
        got = {r: res[r][op] for r in range(2)}
        for r in range(2):
            assert got[r]["before"] == [3.0, [True] * n, None], (op, r, got[r]["before"])
            assert got[r]["before_view"] == {"active": [1, 1], "epoch": e}, (op, r, got[r]["before_view"])
            # the fault round: wait() never raises; a value other than the group's sum is flagged
            v, oks, err = got[r]["fault"]
            assert err is None, (op, r, got[r]["fault"], logs)
            if op == "collective":
                assert v == 3.0 or oks == [False], (op, r, got[r]["fault"])
            else:
                assert v == 3.0 or not oks[1], (op, r, got[r]["fault"])  # the receive's flag
        # rank 1: its transfers to rank 0 were reported failed; it left the group before its op
        # returned, with local success False
        assert got[1]["injected"] >= 1 and got[0]["injected"] == 0, (op, got[1]["injected"], got[0]["injected"])
        assert not all(got[1]["fault"][1]), (op, got[1]["fault"], logs)
        if op == "p2p":
            assert got[1]["fault"][1][0] is False  # the send to rank 0
        assert got[1]["fault_view"] == {"active": [1, 0], "epoch": e + 1}, (op, got[1]["fault_view"], logs)
        # the same process rejoins; the op is exact on both again
        assert got[1]["join"] == 1 and got[0]["activate"] == 1, (op, got[1].get("join"), got[0].get("activate"))
        for r in range(2):
            assert got[r]["after"] == [3.0, [True] * n, None], (op, r, got[r]["after"], logs)
            assert got[r]["after_view"] == {"active": [1, 1], "epoch": e + 2}, (op, r, got[r]["after_view"])
    assert res[1]["_stderr"].count("data path to them is broken, so it leaves the group") == 2, logs
