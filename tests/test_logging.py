"""Errors the C functions return are also logged where they happen (issue 37): one line per
failure on the library's stderr in glog's format ("E1206 01:23:45.678901 12345 engine.go:118]
mc_engine_create: error -1: ..."), filtered by MC_LOG_LEVEL (upstream's TRACE, INFO, WARNING,
ERROR; default INFO). Outcomes callers test for (a key that is not there) appear only at TRACE;
a put that finds no space is a warning; a batch call logs its first failure only.

Each case runs in its own process (the level is read when the library loads) and checks that
process's whole stderr."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_store import Master  # noqa: E402

# glog's line: severity, MMDD, time to the microsecond, thread id, file:line] message.
GLOG = re.compile(r"^([IWE])(\d{4}) (\d\d:\d\d:\d\d\.\d{6}) +(\d+) ([\w.]+):(\d+)\] (.*)$")


def child_env(**kv) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("MC_AUTH_", "MC_TLS_", "MC_LOG_"))}
    e.update({k: v for k, v in kv.items() if v is not None})
    return e


def run(script: str, *args: str, **env) -> tuple[list[str], list[str]]:
    """Runs script in a fresh Python with env; returns its stdout lines and stderr lines."""
    p = subprocess.run([sys.executable, "-c", script, *args], env=child_env(**env),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr[-4000:])
    return p.stdout.splitlines(), p.stderr.splitlines()


def glog_lines(stderr: list[str]) -> list[tuple]:
    """The glog lines of stderr as (letter, file, function, code, message) — every line of
    stderr that is not a marker (">> ...") must be one."""
    out = []
    for line in stderr:
        if line.startswith(">> "):
            out.append((line,))
            continue
        m = GLOG.match(line)
        assert m, f"not a glog line on stderr: {line!r}"
        fn, _, rest = m.group(7).partition(": error ")
        code, _, msg = rest.partition(": ")
        out.append((m.group(1), m.group(5), fn, int(code) if code else None, msg or m.group(7)))
    return out


# ---- the transfer engine ------------------------------------------------------------------------

ENGINE = """
import datetime, os, threading
from mooncake import _native
from mooncake.engine import TransferEngine
today = datetime.datetime.now().strftime("%m%d")
rc = TransferEngine().initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "")
print(rc)
print(_native.last_error())
print(threading.get_native_id())
print(today)
"""


@pytest.mark.parametrize("level", [None, "INFO", "WARNING", "ERROR"])
def test_initialize_with_a_short_token_logs_why(level):
    out, err = run(ENGINE, MC_AUTH_TOKEN="short", MC_LOG_LEVEL=level)
    rc, last, tid, today = out
    assert rc == "-1" and "MC_AUTH_TOKEN: authentication token is too short: 5 bytes" in last, out
    assert len(err) == 1, err
    m = GLOG.match(err[0])
    assert m, err
    assert m.group(1) == "E" and m.group(2) == today and m.group(4) == tid, (err, tid, today)
    assert m.group(5) == "engine.go" and int(m.group(6)) > 0, err
    assert m.group(7) == f"mc_engine_create: error -1: {last}", err


def test_an_unknown_log_level_is_named_and_info_used():
    out, err = run(ENGINE, MC_AUTH_TOKEN="short", MC_LOG_LEVEL="debug")
    assert out[0] == "-1"
    lines = glog_lines(err)
    assert [line[0] for line in lines] == ["W", "E"], err
    assert lines[0][4] == 'MC_LOG_LEVEL="debug" is not one of TRACE, INFO, WARNING or ERROR; using INFO', err
    assert lines[1][2:4] == ("mc_engine_create", -1), err


# The torch shim asks mc_work_run / mc_work_test about a work its completion thread may have
# freed meanwhile: an unknown handle is an answer there (TRACE), a failure elsewhere (mc_work_free).
WORK = """
import ctypes
from mooncake import _native
l = _native.lib()
for f in (l.mc_work_run, l.mc_work_test, l.mc_work_free):
    f.argtypes, f.restype = [ctypes.c_uint64], ctypes.c_int
print(l.mc_work_run(123456789), l.mc_work_test(123456789), l.mc_work_free(123456789))
"""


@pytest.mark.parametrize("level", [None, "TRACE"])
def test_a_freed_work_is_an_answer_to_the_shims_probes(level):
    out, err = run(WORK, MC_LOG_LEVEL=level)
    assert out == ["-600 -600 -600"], out
    want = [("E", "pg.go", "mc_work_free", -600, "unknown work handle 123456789")]
    if level == "TRACE":
        want = [("I", "pg.go", fn, -600, "unknown work handle 123456789")
                for fn in ("mc_work_run", "mc_work_test")] + want
    assert glog_lines(err) == want, err


# ---- the store ----------------------------------------------------------------------------------

# Runs the store operations of argv[2] against the master at argv[1], writing a marker line to
# stderr before each (the library writes its lines straight to the same file descriptor).
STORE = """
import json, os, sys
from mooncake import _native
from mooncake.store import MooncakeDistributedStore
def mark(what):
    sys.stderr.write(">> " + what + "\\n")
    sys.stderr.flush()
s = MooncakeDistributedStore()
assert s.setup("127.0.0.1", "P2PHANDSHAKE", 4 << 20, 4 << 20, "tcp", "", sys.argv[1]) == 0
big = b"x" * (8 << 20)
for op in json.loads(sys.argv[2]):
    mark(op)
    if op == "get":
        r = s.get("missing")
    elif op == "get_size":
        r = s.get_size("missing")
    elif op == "is_exist":
        r = s.is_exist("missing")
    elif op == "remove":
        r = s.remove("missing")
    elif op == "batch_get":
        r = s.get_batch(["missing-1", "missing-2", "missing-3"])
    elif op == "put":
        r = s.put("big", big)
    elif op == "batch_put":
        r = s.put_batch(["big-1", "big-2", "big-3"], [big, big, big])
    print(json.dumps([op, repr(r), _native.last_error()]), flush=True)
mark("close")
s.close()
"""

OPS = ["get", "get_size", "is_exist", "remove", "batch_get", "put", "batch_put"]


@pytest.fixture(scope="module")
def store_master():
    m = Master()
    yield m
    m.stop()


def store_run(master: Master, level: str | None) -> tuple[dict, dict]:
    """The result line of each op, and the glog lines each op wrote (by op)."""
    import json
    out, err = run(STORE, master.addr, json.dumps(OPS), MC_LOG_LEVEL=level)
    results = {}
    for line in out:
        op, r, last = json.loads(line)
        results[op] = (r, last)
    logged: dict[str, list] = {}
    op = None
    for line in glog_lines(err):
        if len(line) == 1:
            op = line[0][3:]
            logged[op] = []
        else:
            assert op is not None, f"a line before the first operation: {line}"
            logged[op].append(line)
    assert list(logged) == OPS + ["close"], logged
    return results, logged


def test_store_results_are_the_same_at_every_level(store_master):
    got = [store_run(store_master, level)[0] for level in (None, "ERROR", "TRACE")]
    r = got[0]
    assert r["get"][0] == "b''" and "OBJECT_NOT_FOUND" in r["get"][1], r
    assert r["get_size"][0] == "-704" and r["is_exist"][0] == "0" and r["remove"][0] == "-704", r
    assert r["batch_get"][0] == "[b'', b'', b'']", r
    assert r["put"][0] == "-200" and "NO_AVAILABLE_HANDLE" in r["put"][1], r
    assert r["batch_put"][0] == "-200", r  # put_batch: one code, as upstream
    assert got[1] == got[0] and got[2] == got[0], got


def test_store_default_level_logs_only_the_put_without_space(store_master):
    _, logged = store_run(store_master, None)
    assert {op: lines for op, lines in logged.items() if lines} == {
        "put": [("W", "store_data.go", "mc_store_put", -200, logged["put"][0][4])],
        "batch_put": [("W", "store_data.go", "mc_store_put", -200, logged["batch_put"][0][4])],
    }, logged
    assert "NO_AVAILABLE_HANDLE" in logged["put"][0][4], logged
    assert "NO_AVAILABLE_HANDLE" in logged["batch_put"][0][4], logged


def test_store_error_level_drops_the_warning(store_master):
    _, logged = store_run(store_master, "ERROR")
    assert all(lines == [] for lines in logged.values()), logged


def test_store_trace_level_adds_the_misses_once_per_call(store_master):
    _, logged = store_run(store_master, "TRACE")
    for op in ("get", "remove", "batch_get"):
        lines = logged[op]
        assert len(lines) == 1, (op, logged)
        letter, file, fn, code, msg = lines[0]
        assert (letter, file, code) == ("I", "store_data.go", -704) and fn.startswith("mc_store_"), (op, lines)
        assert "OBJECT_NOT_FOUND" in msg, (op, lines)
    assert logged["batch_get"][0][2].startswith("mc_store_get"), logged
    # not errors of the C call: is_exist answers 0, and get_size is is_exist's size (0: missing)
    assert logged["is_exist"] == [] and logged["get_size"] == [] and logged["close"] == [], logged
    assert [line[:4] for line in logged["put"]] == [("W", "store_data.go", "mc_store_put", -200)], logged
    assert [line[:4] for line in logged["batch_put"]] == [("W", "store_data.go", "mc_store_put", -200)], logged
