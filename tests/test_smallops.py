"""Small operations with real processes (issue 36, item 3): batches whose values move as one
engine batch (a mix of present and missing keys, both data paths), single puts from concurrent
threads, batches over a SIGKILL of the HA leader (nothing acknowledged lost, nothing half
visible), and a get with no master reachable told apart from a get of a missing key."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_failover import Client, ha_flags, serving, wait_until  # noqa: E402
from test_store import Master  # noqa: E402
from conftest import go_command, stop  # noqa: E402
from mooncake.store import ErrorCode  # noqa: E402

NOT_FOUND = int(ErrorCode.OBJECT_NOT_FOUND)
RPC_FAIL = int(ErrorCode.RPC_FAIL)

# One process: a pure client (no segment) doing batches against values held by another
# process (a mooncake_client), so values move through the engine (shm, or tcp with
# MC_FORCE_TCP=1). Prints one JSON object of what it saw.
BATCHES = textwrap.dedent("""
    import ctypes, json, sys
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", sys.argv[1]) == 0
    val = lambda k, n: (k.encode() * (n // len(k) + 1))[:n]
    out = {}
    for size in (100, 4096, 65536, 3 << 20):  # 3 MiB: larger than a staging chunk of 4 MiB / 16
        keys = [f"v{size}/{i}" for i in range(20)]
        present = keys[::2]
        out[f"put_batch {size}"] = s.put_batch(present, [val(k, size) for k in present])
        # registered memory: batch_put_from and batch_get_into without staging
        arena = ctypes.create_string_buffer(len(keys) * size)
        base = ctypes.addressof(arena)
        assert s.register_buffer(base, len(arena)) == 0
        rkeys = [f"r{size}/{i}" for i in range(len(keys))]
        for j, k in enumerate(rkeys):
            ctypes.memmove(base + j * size, val(k, size), size)
        out[f"batch_put_from {size}"] = s.batch_put_from(rkeys[::2], [base + j * size for j in range(0, len(keys), 2)],
                                                        [size] * (len(keys) // 2))
        ctypes.memset(base, 0, len(arena))
        got = s.batch_get_into(rkeys, [base + j * size for j in range(len(keys))], [size] * len(keys))
        out[f"batch_get_into registered {size}"] = got
        out[f"batch_get_into registered {size} exact"] = all(
            arena.raw[j * size:(j + 1) * size] == val(k, size) for j, k in enumerate(rkeys) if j % 2 == 0)
        assert s.unregister_buffer(base) == 0
        # unregistered memory: staged, several values a chunk
        plain = ctypes.create_string_buffer(len(keys) * size)
        pbase = ctypes.addressof(plain)
        got = s.batch_get_into(keys, [pbase + j * size for j in range(len(keys))], [size] * len(keys))
        out[f"batch_get_into {size}"] = got
        out[f"batch_get_into {size} exact"] = all(
            plain.raw[j * size:(j + 1) * size] == val(k, size) for j, k in enumerate(keys) if j % 2 == 0)
        vals = s.get_batch(keys)
        out[f"get_batch {size} exact"] = [v == (val(k, size) if j % 2 == 0 else b"") for j, (k, v) in enumerate(zip(keys, vals))]
        out[f"batch_is_exist {size}"] = s.batch_is_exist(keys)
        bufs = s.batch_get_buffer(keys)
        out[f"batch_get_buffer {size}"] = [None if b is None else bytes(b) == val(k, size) for k, b in zip(keys, bufs)]
        # a buffer too small for one value: that item fails alone
        small = ctypes.create_string_buffer(size)
        got = s.batch_get_into(present[:3], [pbase, ctypes.addressof(small), pbase + 2 * size], [size, size - 1, size])
        out[f"overflow {size}"] = got
    print(json.dumps(out))
    s.close()
""")


@pytest.fixture
def holder():
    """A master and a mooncake_client holding 256 MiB; yields the master's address."""
    m = Master()
    c = subprocess.Popen([go_command("mooncake_client"), f"--master_server_address={m.addr}", "--port=0", "--host=127.0.0.1",
                          "--global_segment_size=256 MB", "--local_buffer_size=16 MB"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in c.stdout:
            if line.startswith("MOONCAKE_CLIENT_READY"):
                break
        else:
            raise RuntimeError("mooncake_client never became ready")
        yield m.addr
    finally:
        stop(c)
        m.stop()


@pytest.mark.parametrize("tcp", [False, True], ids=["shm", "tcp"])
def test_batches_with_present_and_missing_keys(holder, tcp):
    env = dict(os.environ)
    if tcp:
        env["MC_FORCE_TCP"] = "1"
    p = subprocess.run([sys.executable, "-c", BATCHES, holder], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    for size in (100, 4096, 65536, 3 << 20):
        half = [size, NOT_FOUND] * 10
        assert out[f"put_batch {size}"] == 0
        assert out[f"batch_put_from {size}"] == [0] * 10
        assert out[f"batch_get_into registered {size}"] == half
        assert out[f"batch_get_into registered {size} exact"] is True
        assert out[f"batch_get_into {size}"] == half
        assert out[f"batch_get_into {size} exact"] is True
        assert out[f"get_batch {size} exact"] == [True] * 20
        assert out[f"batch_is_exist {size}"] == [1, 0] * 10
        assert out[f"batch_get_buffer {size}"] == [True, None] * 10
        assert out[f"overflow {size}"] == [size, int(ErrorCode.BUFFER_OVERFLOW), size]


# Threads of one process putting small values at once, then reading them all back.
THREADS = textwrap.dedent("""
    import json, sys, threading
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", sys.argv[1]) == 0
    codes = {}
    def worker(t):
        codes[t] = [s.put(f"t{t}/{i}", f"{t}:{i}:".encode() * 300) for i in range(150)]
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    ok = sum(s.get(f"t{t}/{i}") == f"{t}:{i}:".encode() * 300 for t in range(8) for i in range(150))
    print(json.dumps({"codes": sorted(set(c for v in codes.values() for c in v)), "n": sum(map(len, codes.values())), "ok": ok}))
    s.close()
""")


@pytest.mark.parametrize("tcp", [False, True], ids=["shm", "tcp"])
def test_concurrent_small_puts_from_threads(holder, tcp):
    env = dict(os.environ)
    if tcp:
        env["MC_FORCE_TCP"] = "1"
    p = subprocess.run([sys.executable, "-c", THREADS, holder], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"codes": [0], "n": 1200, "ok": 1200}


# A client process that puts batches until told to stop, printing each batch's codes, then
# reads every key it tried back. Alternates put_batch (staged) and batch_put_from (registered).
LOOP = textwrap.dedent("""
    import ctypes, json, sys, threading
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    print("SETUP", s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 4 << 20, "tcp", "", sys.argv[1]), flush=True)
    N, SIZE = 16, 4096
    val = lambda k: (k.encode() * (SIZE // len(k) + 1))[:SIZE]
    arena = ctypes.create_string_buffer(N * SIZE)
    base = ctypes.addressof(arena)
    assert s.register_buffer(base, len(arena)) == 0
    stop = threading.Event()
    def loop():
        b = 0
        while not stop.is_set():
            keys = [f"b{b}/{i}" for i in range(N)]
            if b % 3 == 2:  # single puts: their bytes go with PutEnd, into the master's value cache
                codes = [s.put(k, val(k)) for k in keys]
            elif b % 3 == 1:
                for j, k in enumerate(keys):
                    ctypes.memmove(base + j * SIZE, val(k), SIZE)
                codes = s.batch_put_from(keys, [base + j * SIZE for j in range(N)], [SIZE] * N)
            else:
                rc = s.put_batch(keys, [val(k) for k in keys])
                codes = [rc] * N if rc else [0] * N
            print("ACK", b, json.dumps(codes), flush=True)
            b += 1
        tried[0] = b
    tried = [0]
    t = threading.Thread(target=loop)
    t.start()
    sys.stdin.readline()  # stop
    stop.set()
    t.join()
    seen = {}
    for b in range(tried[0]):
        keys = [f"b{b}/{i}" for i in range(N)]
        for k, v in zip(keys, s.get_batch(keys)):
            seen[k] = "exact" if v == val(k) else ("missing" if v == b"" else "wrong")
        v = s.get(keys[0])  # a single get too: one round trip, the bytes from the master's value cache
        if seen[keys[0]] == "exact" and v != val(keys[0]):
            seen[keys[0]] = "wrong"
    print("SEEN", json.dumps(seen), flush=True)
    s.close()
""")


def test_batches_over_a_leader_sigkill_lose_nothing_acknowledged(etcd_server):
    flags = ha_flags(etcd_server, "smallops_" + uuid.uuid4().hex[:8])
    a = Master(*flags)
    b = proc = None
    try:
        wait_until(lambda: serving(a), "the first master never led")
        b = Master(*flags)
        proc = subprocess.Popen([sys.executable, "-c", LOOP, f"etcd://{etcd_server}"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env=dict(os.environ, MC_STORE_CLUSTER_ID=flags[2].split("=", 1)[1]))
        assert proc.stdout.readline().split() == ["SETUP", "0"]
        acked: dict[str, bool] = {}

        def read_ack():
            line = proc.stdout.readline()
            assert line.startswith("ACK "), line
            _, batch, codes = line.split(" ", 2)
            codes = json.loads(codes)
            for i, c in enumerate(codes):
                acked[f"b{batch}/{i}"] = c == 0
            return all(c == 0 for c in codes)

        ok_before = sum(read_ack() for _ in range(5))
        assert ok_before == 5
        a.proc.send_signal(signal.SIGKILL)  # while batches are in flight
        a.proc.wait()
        wait_until(lambda: serving(b), "the standby never took over")
        ok_after = 0
        while ok_after < 3:  # three whole batches acknowledged by the new leader
            ok_after += read_ack()
        proc.stdin.write("stop\n")
        proc.stdin.flush()
        line = ""
        while not line.startswith("SEEN "):
            line = proc.stdout.readline()
            assert line, "the client exited before reading back"
            if line.startswith("ACK "):
                _, batch, codes = line.split(" ", 2)
                for i, c in enumerate(json.loads(codes)):
                    acked[f"b{batch}/{i}"] = c == 0
        seen = json.loads(line[5:])
        assert set(seen) == set(acked)
        lost = [k for k, ok in acked.items() if ok and seen[k] != "exact"]
        assert lost == []
        assert [k for k, v in seen.items() if v == "wrong"] == []
        assert sum(acked.values()) >= 8 * 16
    finally:
        if proc:
            try:
                proc.stdin.close()
            except OSError:
                pass
            stop(proc)
        for m in (a, b):
            if m:
                m.stop()


# get with the master gone: told apart from a missing key by get_into's code, batch_get_into's
# codes and get_buffer; get itself answers b"" in both cases, as upstream's does.
def test_get_without_a_master_is_an_error_not_a_missing_key():
    m = Master("--client_ttl=2")
    client = None
    try:
        client = Client(m.addr)
        assert client.ask("put 2", "PUT") == "[0, 0]"
        missing = json.loads(client.ask("gets", "GETS"))
        assert missing == {"get": "b''", "get_into": NOT_FOUND, "get_buffer": None,
                           "batch_get_into": [700, NOT_FOUND], "get_batch": ["value-0" * 100, ""]}, missing
        assert 'get "missing"' not in client.stderr()  # a missing key is no error to log
        m.proc.send_signal(signal.SIGKILL)
        m.proc.wait()
        client.wait_log("no master reachable")
        gone = json.loads(client.ask("gets", "GETS"))
        assert gone == {"get": "b''", "get_into": RPC_FAIL, "get_buffer": None,
                        "batch_get_into": [RPC_FAIL, RPC_FAIL], "get_batch": ["", ""]}, gone
        # each failed get's log line says which master it could not reach
        after = client.stderr().split("no master reachable", 1)[1]
        assert f'get "missing": master {m.addr} unreachable' in after, after
    finally:
        if client:
            client.close()
        m.stop()


# Keys inside and outside the subset of JSON that the hot master messages read without
# encoding/json (store/api/fastjson.go: ASCII without escapes), through single and batch calls:
# every answer exact either way.
CODEC_KEYS = textwrap.dedent("""
    import json, sys
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 << 20, "tcp", "", sys.argv[1]) == 0
    keys = ["plain/0", 'quote"d', "back\\\\slash", "<html>&amp;", "tab\\tnew\\nline", "ünï/ç😀", "\\u2028sep", "x" * 4000]
    val = lambda k: (k.encode() * 300)[:300] + bytes(range(256))
    out = {"put": [s.put(k, val(k)) for k in keys[::2]],
           "put_batch": s.put_batch(keys[1::2], [val(k) for k in keys[1::2]]),
           "get": [s.get(k) == val(k) for k in keys],
           "get_batch": [v == val(k) for k, v in zip(keys, s.get_batch(keys))],
           "is_exist": [s.is_exist(k) for k in keys],
           "batch_is_exist": s.batch_is_exist(keys + ["missing/é"]),
           "get_size": [s.get_size(k) for k in keys],
           "desc": [[d["size"] for d in s.get_replica_desc(k)] for k in keys],
           "remove": s.batch_remove(keys[:4], force=True),  # the gets hold leases
           "after": s.batch_is_exist(keys)}
    print(json.dumps(out))
    s.close()
""")


def test_keys_outside_the_fast_codec_subset(holder):
    p = subprocess.run([sys.executable, "-c", CODEC_KEYS, holder], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-4000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    n = 8
    size = 300 + 256
    assert out["put"] == [0] * 4 and out["put_batch"] == 0
    assert out["get"] == [True] * n and out["get_batch"] == [True] * n
    assert out["is_exist"] == [1] * n and out["batch_is_exist"] == [1] * n + [0]
    assert out["get_size"] == [size] * n
    assert out["desc"] == [[size]] * n
    assert out["remove"] == [0] * 4
    assert out["after"] == [0] * 4 + [1] * 4
