"""Authenticated transfer engine (issue 23, docs/security.md): a target whose MC_AUTH_TOKEN is
set serves only peers that prove the same token.

Real processes over tcp: the target is tests/engine_peer.py; initiators are real engines
(tests/auth_engine_client.py) and, for the wire itself, raw sockets speaking the frame and
handshake formats from their specifications (engine/transport/tcp/doc.go, auth/doc.go) with
the standard library's HMAC. With no token or a wrong one every call is refused (WRITE, READ,
a batch, the descriptor call, notify, ping) and the target's bytes stay as they were; with the
right token everything works; a captured handshake replayed on a new connection is refused;
and the same across two network namespaces (test_pg_netns.py's fixture)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import subprocess
import sys

import pytest

from conftest import stop
from test_pg_netns import two_hosts  # noqa: F401  (fixture)

HERE = os.path.dirname(os.path.abspath(__file__))
SIZE = 1 << 16
TOKEN = "0123456789abcdef-auth-test-token"
WRONG = "fedcba9876543210-auth-test-token"
PATTERN = bytes(i % 251 for i in range(SIZE))  # what engine_peer.py fills its buffers with
WRITTEN = bytes((i * 13 + 5) % 256 for i in range(SIZE))  # what auth_engine_client.py writes


def _env(token: str | None, **extra: str) -> dict:
    env = dict(os.environ)
    env.pop("MC_AUTH_TOKEN", None)
    env.pop("MC_AUTH_TOKEN_FILE", None)
    env.update(MC_FORCE_TCP="1", MOONCAKE_GOMAXPROCS="2", **extra)
    if token is not None:
        env["MC_AUTH_TOKEN"] = token
    return env


class Target:
    def __init__(self, tmp_path, token: str | None, name: str = "127.0.0.1", netns: str | None = None):
        self.log = open(tmp_path / "target.stderr", "w+")
        cmd = [sys.executable, os.path.join(HERE, "engine_peer.py"), "P2PHANDSHAKE", name, str(SIZE)]
        if netns:
            cmd = ["ip", "netns", "exec", netns, *cmd]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=_env(token))
        info = json.loads(self.proc.stdout.readline())
        assert "error" not in info, info
        self.name, self.managed, self.plain = info["name"], info["managed"], info["plain"]
        host, port = self.name.rsplit(":", 1)
        self.addr = (host, int(port))

    def dump(self, kind: str) -> bytes:
        self.proc.stdin.write(f"dump {kind} 0 {SIZE}\n")
        self.proc.stdin.flush()
        return bytes.fromhex(self.proc.stdout.readline().strip())

    def notifies(self):
        self.proc.stdin.write("notifies\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def stderr(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(10)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            stop(self.proc)
        self.log.close()


@pytest.fixture
def target(tmp_path):
    t = Target(tmp_path, TOKEN)
    yield t
    t.close()


def run_client(t: Target, token: str | None, netns: str | None = None, local: str = "127.0.0.1") -> dict:
    cmd = [sys.executable, os.path.join(HERE, "auth_engine_client.py"), t.name, str(t.managed),
           str(t.plain), str(SIZE), local]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                       env=_env(token, MC_TRANSFER_TIMEOUT="10"))
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    assert lines, f"client printed nothing (rc {p.returncode}):\n{p.stdout}\n{p.stderr}"
    return json.loads(lines[-1])


def assert_refused(t: Target, out: dict, why: str) -> None:
    assert out["open"] != "ok" and why in out["open"], out["open"]
    for call in ("write", "batch", "read", "notify", "probe"):
        assert out[call] == -1, (call, out)
    assert out["first_buffer"] == 0, out
    assert out["read_bytes"] == "00" * SIZE, "bytes came back"
    assert t.dump("plain") == PATTERN and t.dump("managed") == PATTERN, "the target's bytes changed"
    assert t.notifies() == [], "a notification was delivered"


def assert_served(t: Target, out: dict) -> None:
    assert out["open"] == "ok", out
    for call in ("write", "batch", "read", "notify", "probe"):
        assert out[call] == 0, (call, out)
    assert out["first_buffer"] != 0, out
    assert bytes.fromhex(out["read_bytes"]) == WRITTEN
    assert t.dump("plain") == WRITTEN and t.dump("managed") == WRITTEN
    assert [n[1] for n in t.notifies()] == ["hello"]


def test_engine_without_token_is_refused(target):
    out = run_client(target, None)
    assert_refused(target, out, "set the same MC_AUTH_TOKEN here")
    assert "refused connection from 127.0.0.1:" in target.stderr(), target.stderr()


def test_engine_with_wrong_token_is_refused(target):
    out = run_client(target, WRONG)
    assert_refused(target, out, f"peer {target.name} refused: authentication failed; set the same MC_AUTH_TOKEN on both sides")
    assert "authentication failed" in target.stderr(), target.stderr()


def test_engine_with_right_token_is_served(target):
    assert_served(target, run_client(target, TOKEN))


def test_token_file(tmp_path, target):
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    f.chmod(0o600)
    env_out = run_client_env(target, MC_AUTH_TOKEN_FILE=str(f))
    assert_served(target, env_out)
    f.chmod(0o644)
    p = run_client_raw(target, MC_AUTH_TOKEN_FILE=str(f))
    assert "initialize failed" in p.stdout and "chmod 600" in p.stderr + p.stdout, (p.stdout, p.stderr)


def run_client_raw(t: Target, **env) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", "import sys\nfrom mooncake.engine import TransferEngine\n"
           "from mooncake import _native\ne = TransferEngine()\n"
           "rc = e.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', '')\n"
           "print('initialize failed' if rc else 'ok', _native.last_error(), flush=True)"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=_env(None, **env))


def run_client_env(t: Target, **env) -> dict:
    cmd = [sys.executable, os.path.join(HERE, "auth_engine_client.py"), t.name, str(t.managed),
           str(t.plain), str(SIZE), "127.0.0.1"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env(None, **env))
    return json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])


# -- the wire, from the specifications ---------------------------------------------------------

REQ_MAGIC, RESP_MAGIC = 0x5154434D, 0x5254434D
OP_READ, OP_WRITE, OP_DESCRIPTOR = 1, 2, 3


def frame(op: int, seq: int, addr: int, payload: bytes = b"", length: int | None = None) -> bytes:
    n = len(payload) if length is None else length
    return struct.pack("<IBBHIIQQ", REQ_MAGIC, 1, op, 0, seq, 0, addr, n) + payload


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def answer(s: socket.socket) -> tuple[int, bytes]:
    magic, status, _seq, _res, n = struct.unpack("<IiIIQ", recv_exact(s, 24))
    assert magic == RESP_MAGIC
    return status, recv_exact(s, n)


def auth_msg(t: int, body: bytes) -> bytes:
    return b"MCAU" + bytes([1, t]) + struct.pack("<H", len(body)) + body


def read_auth(s: socket.socket) -> tuple[int, bytes]:
    hdr = recv_exact(s, 8)
    assert hdr[:5] == b"MCAU\x01", hdr
    return hdr[5], recv_exact(s, struct.unpack("<H", hdr[6:])[0])


def mac(token: str, role: bytes, idc: bytes, ids: bytes, nc: bytes, ns: bytes) -> bytes:
    data = b"mooncake-auth/1\x00" + role + b"\x00" + bytes([len(idc)]) + idc + bytes([len(ids)]) + ids + nc + ns
    return hmac.new(token.encode(), data, hashlib.sha256).digest()


def handshake(s: socket.socket, token: str, me: bytes = b"raw-client", replay: list | None = None):
    """Runs the client side; returns (accepted, server proof ok, the bytes sent)."""
    nc = os.urandom(32)
    hello = auth_msg(1, nc + bytes([len(me)]) + me)
    s.sendall(replay[0] if replay else hello)
    t, body = read_auth(s)
    assert t == 2
    ns, ids = body[:32], body[33:33 + body[32]]
    proof = auth_msg(3, mac(token, b"client", me, ids, nc, ns))
    s.sendall(replay[1] if replay else proof)
    t, body = read_auth(s)
    assert t == 4 and len(body) == 33
    ok = body[0] == 1
    return ok, ok and hmac.compare_digest(body[1:], mac(token, b"server", me, ids, nc, ns)), [hello, proof]


def closed_without_answer(s: socket.socket) -> bool:
    s.settimeout(10)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_raw_frames_without_handshake_get_nothing(target):
    for f in (frame(OP_WRITE, 1, target.plain, WRITTEN[:4096]) + frame(OP_READ, 2, target.plain, length=4096),
              frame(OP_DESCRIPTOR, 1, 0)):
        with socket.create_connection(target.addr) as s:
            s.sendall(f)
            assert closed_without_answer(s)
    assert target.dump("plain") == PATTERN


def test_raw_wrong_token_then_frames_get_nothing(target):
    with socket.create_connection(target.addr) as s:
        ok, _, _ = handshake(s, WRONG)
        assert not ok
        try:
            s.sendall(frame(OP_WRITE, 1, target.plain, WRITTEN[:4096]) + frame(OP_READ, 2, target.plain, length=4096))
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert closed_without_answer(s)
    assert target.dump("plain") == PATTERN


def test_raw_right_token_and_replay(target):
    with socket.create_connection(target.addr) as s:
        ok, server_proved, sent = handshake(s, TOKEN)
        assert ok and server_proved
        s.sendall(frame(OP_WRITE, 1, target.plain, WRITTEN[:4096]) + frame(OP_READ, 2, target.plain, length=4096))
        assert answer(s) == (0, b"")
        assert answer(s) == (0, WRITTEN[:4096])
    assert target.dump("plain")[:4096] == WRITTEN[:4096]
    # The captured hello and proof, replayed on a new connection: the server's nonce is new,
    # so the old proof does not match, and the connection serves nothing.
    with socket.create_connection(target.addr) as s:
        ok, _, _ = handshake(s, TOKEN, replay=sent)
        assert not ok
        try:
            s.sendall(frame(OP_WRITE, 1, target.plain + 4096, WRITTEN[:4096]))
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert closed_without_answer(s)
    assert target.dump("plain")[4096:] == PATTERN[4096:]


def test_no_token_anywhere_is_unchanged(tmp_path):
    t = Target(tmp_path, None)
    try:
        assert_served(t, run_client(t, None))
    finally:
        t.close()


def test_across_two_network_namespaces(two_hosts, tmp_path):  # noqa: F811
    (ns0, addr0), (ns1, addr1) = two_hosts
    t = Target(tmp_path, TOKEN, name=addr0, netns=ns0)
    try:
        assert_refused(t, run_client(t, None, netns=ns1, local=addr1), "set the same MC_AUTH_TOKEN here")
        assert_refused(t, run_client(t, WRONG, netns=ns1, local=addr1), "refused: authentication failed")
        assert f"refused connection from {addr1}:" in t.stderr(), t.stderr()
        assert_served(t, run_client(t, TOKEN, netns=ns1, local=addr1))
    finally:
        t.close()
