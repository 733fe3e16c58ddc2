"""Failover with real processes (issue 36, item 4): a client given a master's plain host:port
follows the HA cluster's leader (learned from the master when it connects) and keeps its keys
over a SIGKILL of the leader; a client with no master reachable says so in its log, once, and
gets error codes.

Each test takes seconds: the leader lease is 2 s and client_ttl 2 s here, the defaults being
5 s and 10 s (bench/failover_bench.py measures with those)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from conftest import stop  # noqa: E402
from test_store import Master  # noqa: E402
from mooncake.store import ErrorCode  # noqa: E402

LEASE_S, CLIENT_TTL_S = 2, 2
# The new leader's grace for clients it has not heard from: one discovery allowance (lease TTL
# + 4 s, store/master's discoveryAllowance) and then client_ttl.
GRACE_S = LEASE_S + 4 + CLIENT_TTL_S

# A client process: setup with the address given, then commands, one a line on stdin, each
# answered with one line on stdout.
CLIENT = textwrap.dedent("""
    import json, sys
    from mooncake.store import MooncakeDistributedStore
    spec = json.loads(sys.argv[1])
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 4 << 20, "tcp", "", spec["master"])
    print("SETUP", rc, flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "put":  # put N keys k0..k{N-1}: the codes
            n = int(arg)
            print("PUT", json.dumps([s.put(f"k{i}", f"value-{i}".encode() * 100) for i in range(n)]), flush=True)
        elif cmd == "check":  # read N keys back: how many hold their value
            n = int(arg)
            print("CHECK", sum(s.get(f"k{i}") == f"value-{i}".encode() * 100 for i in range(n)), flush=True)
        elif cmd == "calls":  # every kind of call once, with the master gone
            import ctypes
            buf = ctypes.create_string_buffer(1 << 12)
            out = {"put": s.put("x", b"y"), "get": repr(s.get("k0")),
                   "get_into": s.get_into("k0", ctypes.addressof(buf), len(buf)),
                   "is_exist": s.is_exist("k0"), "batch_is_exist": s.batch_is_exist(["k0", "k1"]),
                   "get_size": s.get_size("k0"), "remove": s.remove("k0"),
                   "put_batch": s.put_batch(["a", "b"], [b"1", b"2"])}
            print("CALLS", json.dumps(out), flush=True)
        elif cmd == "gets":  # every kind of get of k0 (present before) and of a missing key
            import ctypes
            buf = ctypes.create_string_buffer(1 << 12)
            two = ctypes.create_string_buffer(2 << 12)
            at = ctypes.addressof(two)
            out = {"get": repr(s.get("missing")), "get_into": s.get_into("missing", ctypes.addressof(buf), len(buf)),
                   "get_buffer": s.get_buffer("missing"),
                   "batch_get_into": s.batch_get_into(["k0", "missing"], [at, at + 4096], [4096, 4096]),
                   "get_batch": [v.decode() for v in s.get_batch(["k0", "missing"])]}
            print("GETS", json.dumps(out), flush=True)
        elif cmd == "put_until_ok":  # the master is back: put until a put succeeds (the
            import time                # heartbeat re-mounts the segment within a second)
            for _ in range(600):
                if s.put("back", b"again") == 0:
                    break
                time.sleep(0.05)
            print("BACK", s.get("back").decode(), flush=True)
    s.close()
""")


class Client:
    """A store client in its own process; its stderr (the library's log) is collected."""

    def __init__(self, master: str):
        import json
        env = dict(os.environ)
        self.proc = subprocess.Popen([sys.executable, "-c", CLIENT, json.dumps({"master": master})],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.err: list[str] = []
        self.err_cv = threading.Condition()
        self.out: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._drain, daemon=True).start()
        threading.Thread(target=lambda: [self.out.put(line) for line in self.proc.stdout], daemon=True).start()
        assert self.ask(None, "SETUP") == "0", self.stderr()

    def _drain(self):
        for line in self.proc.stderr:
            with self.err_cv:
                self.err.append(line)
                self.err_cv.notify_all()

    def stderr(self) -> str:
        with self.err_cv:
            return "".join(self.err)

    def wait_log(self, text: str, limit: float = 60) -> None:
        """Waits for a log line holding text (limit only keeps a broken build from hanging)."""
        deadline = time.time() + limit
        with self.err_cv:
            while not any(text in line for line in self.err):
                left = deadline - time.time()
                assert left > 0, f"no log line with {text!r}:\n{''.join(self.err)}"
                self.err_cv.wait(left)

    def ask(self, cmd: str | None, want: str, limit: float = 120) -> str:
        """Sends cmd and returns its answer (limit only keeps a broken build from hanging: a
        client that does not follow the leader spends 10 s on each call)."""
        if cmd is not None:
            self.proc.stdin.write(cmd + "\n")
            self.proc.stdin.flush()
        try:
            line = self.out.get(timeout=limit)
        except queue.Empty:
            line = f"<no answer in {limit} s>"
        assert line.startswith(want + " "), f"{cmd}: {line!r}\n{self.stderr()[-4000:]}"
        return line[len(want) + 1:].strip()

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                stop(self.proc)


def ha_flags(etcd: str, cluster: str) -> list[str]:
    return ["--enable_ha", f"--etcd_endpoints=http://{etcd}", f"--cluster_id={cluster}",
            f"--ha_lease_ttl_sec={LEASE_S}", f"--client_ttl={CLIENT_TTL_S}"]


def serving(m: Master) -> bool:
    try:
        return m.metric("mooncake_master_ha_serving") == 1
    except OSError:
        return False


def wait_until(cond, what: str, limit: float = 60) -> None:
    deadline = time.time() + limit
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.05)


def test_plain_address_client_keeps_its_keys_over_a_leader_sigkill(etcd_server):
    flags = ha_flags(etcd_server, "failover_" + uuid.uuid4().hex[:8])
    a = Master(*flags)
    b = client = None
    try:
        wait_until(lambda: serving(a), "the first master never led")
        b = Master(*flags)
        client = Client(a.addr)  # the primary's plain address, as deployment guides write it
        client.wait_log("runs HA: following the leader")
        assert client.ask("put 200", "PUT") == "[" + ", ".join(["0"] * 200) + "]"
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        wait_until(lambda: serving(b), "the standby never took over")
        took_over = time.time()
        assert client.ask("check 200", "CHECK") == "200"
        # Past the new leader's grace for clients it has not heard from: a client that did
        # not follow the takeover would have had its segment, and its 200 keys, dropped.
        time.sleep(max(0.0, took_over + GRACE_S + 1 - time.time()))
        assert client.ask("check 200", "CHECK") == "200"
        b.proc.send_signal(signal.SIGTERM)
        b.proc.wait(20)
        b.log.seek(0)
        assert "unmounted its segments" not in b.log.read()
        log = client.stderr()
        assert "no master reachable" not in log, log
    finally:
        if client:
            client.close()
        for m in (a, b):
            if m:
                m.stop()


def test_client_without_a_master_gets_error_codes_and_one_log_line():
    m = Master("--client_ttl=2")
    port = m.rpc_port
    client = back = None
    try:
        client = Client(m.addr)
        assert client.ask("put 3", "PUT") == "[0, 0, 0]"
        m.proc.send_signal(signal.SIGKILL)
        m.proc.wait()
        # The heartbeat (every second) finds no master; after the client's RPC timeout
        # (10 s) the outage is declared, in one log line.
        client.wait_log("no master reachable")
        import json
        got = json.loads(client.ask("calls", "CALLS"))
        fail = int(ErrorCode.RPC_FAIL)
        assert got == {"put": fail, "get": "b''", "get_into": fail, "is_exist": fail,
                       "batch_is_exist": [fail, fail], "get_size": fail, "remove": fail,
                       "put_batch": fail}, client.stderr()
        back = Master("--client_ttl=2", f"--rpc_port={port}")  # the same address again
        assert client.ask("put_until_ok", "BACK") == "again"
        client.wait_log("master reachable again")
        log = client.stderr()
        assert log.count("no master reachable") == 1, log
        assert log.count("master reachable again") == 1, log
    finally:
        if client:
            client.close()
        m.stop()
        if back:
            back.stop()
