"""Security of Mooncake Store (issue 23, docs/security-store.md), with real processes: a
mooncake_master with MC_AUTH_TOKEN refuses store clients without it (or with another) and serves
those with it; its key-revealing admin routes and the HTTP metadata server answer only signed
requests; TLS on the master's RPC with a CA the client trusts works and with one it does not
fails; an etcd started with TLS serves as the HA backend, through a leader failover.

Every store client runs in its own process with its own environment (the knobs are read at
setup()); certificates are made at test time with openssl."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from conftest import free_port, go_command, run_child, stop, wait_port  # noqa: E402
from test_store import Master  # noqa: E402

TOKEN = "store-test-token-" + "0123456789abcdef"
OTHER = "another-token-0123456789abcdef"
VALUE = bytes((i * 31 + 7) % 256 for i in range(256 << 10))  # 256 KiB


def env(**kv) -> dict:
    """Our environment without any security knob, plus kv (None values left out)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("MC_AUTH_", "MC_TLS_")) and k not in ("MC_STORE_RPC", "MC_METADATA_SERVER")}
    e.update({k: v for k, v in kv.items() if v is not None})
    return e


# ---- store clients in their own processes ------------------------------------------------------

CHILD = """
import json, sys
from mooncake import _native
from mooncake.store import MooncakeDistributedStore
spec = json.loads(sys.argv[1])
value = bytes((i * 31 + 7) % 256 for i in range(256 << 10))
s = MooncakeDistributedStore()
rc = s.setup("127.0.0.1", spec.get("meta", "P2PHANDSHAKE"), spec.get("segment", 0), 4 << 20, "tcp", "", spec["master"])
res = {"setup": rc, "error": _native.last_error() if rc else "", "ops": []}
for op in spec.get("ops", []):
    if op == "wait":                     # the test does something, then says go on
        print("WAITING", flush=True)
        sys.stdin.readline()
        continue
    kind, key = op
    if kind == "put":
        r = s.put(key, value)
    elif kind == "get":
        got = s.get(key)
        r = "same" if got == value else f"{len(got)} other bytes"
    elif kind == "remove":
        r = s.remove(key)
    res["ops"].append([kind, key, r, _native.last_error() if r not in (0, "same") else ""])
if rc == 0:
    s.close()
print("RESULT " + json.dumps(res), flush=True)
"""


def client(master: str, ops=(), envv=None, meta="P2PHANDSHAKE", segment=0, timeout=90) -> dict:
    """Runs one store client process: setup() against master, then ops; returns its result."""
    spec = {"master": master, "ops": list(ops), "meta": meta, "segment": segment}
    return run_child(CHILD, spec, envv or env(), timeout, "client")


class Provider:
    """A mooncake_client contributing a segment (where the data lives) with environment e."""

    def __init__(self, master: str, e: dict, meta: str = "P2PHANDSHAKE"):
        self.proc = subprocess.Popen(
            [go_command("mooncake_client"), f"--master_server_address={master}", "--host=127.0.0.1",
             "--port=0", "--global_segment_size=64 MB", f"--metadata_server={meta}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)
        line = self.proc.stdout.readline()
        if not line.startswith("MOONCAKE_CLIENT_READY"):
            stop(self.proc)
            raise RuntimeError(f"mooncake_client did not start: {line!r} {self.proc.stderr.read()[-2000:]}")

    def stop(self):
        stop(self.proc)


@pytest.fixture
def token_master():
    m = Master("--client_ttl=5", env=env(MC_AUTH_TOKEN=TOKEN))
    prov = Provider(m.addr, env(MC_AUTH_TOKEN=TOKEN))
    m.provider = prov
    yield m
    prov.stop()
    m.stop()


def ok(res: dict):
    assert res["setup"] == 0 and all(op[2] in (0, "same") for op in res["ops"]), res


def test_token_master_refuses_clients_without_it_and_serves_clients_with_it(token_master):
    m = token_master
    ok(client(m.addr, [("put", "k1"), ("get", "k1")], env(MC_AUTH_TOKEN=TOKEN)))
    ok(client(m.addr, [("put", "k2"), ("get", "k2")], env(MC_AUTH_TOKEN=TOKEN, MC_STORE_RPC="grpc")))

    for rpc in (None, "grpc"):
        # No token: setup() fails with a message naming MC_AUTH_TOKEN; nothing is written.
        res = client(m.addr, [("put", "k1"), ("remove", "k2"), ("get", "k1")], env(MC_STORE_RPC=rpc))
        assert res["setup"] != 0 and "MC_AUTH_TOKEN" in res["error"], res
        assert all(op[2] not in (0, "same") for op in res["ops"]), res
        # Another token: refused the same way (the master does not know it).
        res = client(m.addr, [("put", "k1"), ("remove", "k2")], env(MC_AUTH_TOKEN=OTHER, MC_STORE_RPC=rpc))
        assert res["setup"] != 0 and "MC_AUTH_TOKEN" in res["error"] and "refused" in res["error"], res
        assert all(op[2] != 0 for op in res["ops"]), res

    # The keys and bytes the good clients stored are unchanged.
    ok(client(m.addr, [("get", "k1"), ("get", "k2")], env(MC_AUTH_TOKEN=TOKEN)))
    assert sign_get(m, "/get_all_keys", TOKEN) == (200, "k1\nk2\n")


def test_client_with_a_token_refuses_a_master_without_one():
    m = Master()
    try:
        res = client(m.addr, [], env(MC_AUTH_TOKEN=TOKEN))
        assert res["setup"] != 0 and "MC_AUTH_TOKEN" in res["error"], res
    finally:
        m.stop()


def test_bad_token_knobs_fail_setup_clearly(token_master, tmp_path):
    res = client(token_master.addr, [], env(MC_AUTH_TOKEN="short"))
    assert res["setup"] != 0 and "too short" in res["error"], res
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    f.chmod(0o644)
    res = client(token_master.addr, [], env(MC_AUTH_TOKEN_FILE=str(f)))
    assert res["setup"] != 0 and "chmod 600" in res["error"], res
    f.chmod(0o600)
    ok(client(token_master.addr, [("put", "from-file"), ("get", "from-file")], env(MC_AUTH_TOKEN_FILE=str(f))))


# ---- signed HTTP -------------------------------------------------------------------------------

def signature(token: str, method: str, uri: str, body: bytes = b"") -> str:
    """The Authorization header of auth/httpauth, computed independently."""
    t, n = int(time.time()), secrets.token_hex(16)
    msg = f"mooncake-http-v1\n{method}\n{uri}\n{t}\n{n}\n{hashlib.sha256(body).hexdigest()}"
    s = hmac.new(token.encode(), msg.encode(), hashlib.sha256).hexdigest()
    return f"MC-HMAC-SHA256 t={t}, n={n}, s={s}"


def http(url: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def sign_get(m: Master, path: str, token: str | None) -> tuple[int, str]:
    h = {"Authorization": signature(token, "GET", path)} if token else {}
    return http(f"http://127.0.0.1:{m.metrics_port}{path}", headers=h)


def test_admin_routes_that_reveal_keys_need_a_signature(token_master):
    m = token_master
    ok(client(m.addr, [("put", "secret-key")], env(MC_AUTH_TOKEN=TOKEN)))
    for path in ("/get_all_keys", "/query_key?key=secret-key", "/get_all_segments"):
        code, body = sign_get(m, path, None)
        assert code == 401 and "MC_AUTH_TOKEN" in body and "secret-key" not in body, (path, code, body)
        code, body = sign_get(m, path, OTHER)
        assert code == 401 and "secret-key" not in body, (path, code, body)
        assert sign_get(m, path, TOKEN)[0] == 200, path
    assert sign_get(m, "/get_all_keys", TOKEN) == (200, "secret-key\n")
    # A captured request cannot be replayed.
    h = {"Authorization": signature(TOKEN, "GET", "/get_all_keys")}
    url = f"http://127.0.0.1:{m.metrics_port}/get_all_keys"
    assert http(url, headers=h)[0] == 200
    code, body = http(url, headers=h)
    assert code == 401 and "replayed" in body, body
    # These stay open: counts and the role, no keys.
    for path in ("/metrics", "/metrics/summary", "/health"):
        code, body = sign_get(m, path, None)
        assert code == 200 and "secret-key" not in body, path


@pytest.fixture
def token_metadata_server():
    port = free_port()
    proc = subprocess.Popen([go_command("mooncake_http_metadata_server"), f"--port={port}", "--host=127.0.0.1"],
                            env=env(MC_AUTH_TOKEN=TOKEN))
    try:
        wait_port(port, proc)
        yield f"http://127.0.0.1:{port}/metadata"
    finally:
        stop(proc)


def test_http_metadata_server_refuses_unsigned_requests(token_metadata_server):
    url = token_metadata_server
    q = "/metadata?key=mooncake%2Fram%2Fx"
    assert http(url + "?key=mooncake%2Fram%2Fx", "PUT", b'{"a":1}',
                {"Authorization": signature(TOKEN, "PUT", q, b'{"a":1}')}) == (200, "metadata updated\n")
    for method, body in (("PUT", b'{"evil":1}'), ("DELETE", None), ("GET", None)):
        code, text = http(url + "?key=mooncake%2Fram%2Fx", method, body)
        assert code == 401 and "MC_AUTH_TOKEN" in text, (method, code, text)
        h = {"Authorization": signature(OTHER, method, q, body or b"")}
        assert http(url + "?key=mooncake%2Fram%2Fx", method, body, h)[0] == 401, method
    # A signature does not carry over to another body.
    h = {"Authorization": signature(TOKEN, "PUT", q, b'{"a":1}')}
    assert http(url + "?key=mooncake%2Fram%2Fx", "PUT", b'{"evil":2}', h)[0] == 401
    assert http(url + "?key=mooncake%2Fram%2Fx", headers={"Authorization": signature(TOKEN, "GET", q)}) == (200, '{"a":1}')


def test_engines_with_the_token_work_against_a_signed_metadata_server(token_master, token_metadata_server):
    """Store clients whose engines publish their segments on the HTTP metadata server: with the
    token they register and move data; without it the engine's metadata writes are refused."""
    m, meta = token_master, token_metadata_server
    # Every segment must be on the HTTP metadata server: the fixture's provider (P2P handshake)
    # goes, so that no put lands in a segment this client cannot look up.
    m.provider.stop()
    prov = Provider(m.addr, env(MC_AUTH_TOKEN=TOKEN), meta=meta)
    try:
        ok(client(m.addr, [("put", "via-http-meta"), ("get", "via-http-meta")], env(MC_AUTH_TOKEN=TOKEN),
                  meta=meta, segment=16 << 20))
        code, keys = http(meta + "?key=x")  # unsigned: nothing readable
        assert code == 401
    finally:
        prov.stop()


# ---- TLS ---------------------------------------------------------------------------------------

def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: str, name: str) -> str:
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}-ca.key", "-out", f"{name}-ca.pem", "-days", "1", "-subj", f"/CN={name} test CA", cwd=d)
    return os.path.join(d, f"{name}-ca.pem")


def issue(d: str, ca: str, name: str) -> tuple[str, str]:
    """A certificate for 127.0.0.1 (server and client use) signed by CA ca; returns (cert, key)."""
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}-ca.pem", "-CAkey", f"{ca}-ca.key",
            "-set_serial", str(secrets.randbits(62)), "-out", f"{name}.pem", "-days", "1",
            "-extfile", f"{name}.ext", cwd=d)
    return os.path.join(d, f"{name}.pem"), os.path.join(d, f"{name}.key")


@pytest.fixture(scope="module")
def pki():
    if shutil.which("openssl") is None:
        pytest.fail("openssl is not installed: `make setup` installs it")
    with tempfile.TemporaryDirectory() as d:
        p = {"store_ca": make_ca(d, "store"), "other_ca": make_ca(d, "other")}
        p["server"] = issue(d, "store", "server")
        p["client"] = issue(d, "store", "client")
        p["stranger"] = issue(d, "other", "stranger")
        yield p


def test_tls_master_with_a_trusted_ca_works_with_another_fails(pki):
    cert, key = pki["server"]
    m = Master(f"--tls_cert_file={cert}", f"--tls_key_file={key}", env=env(MC_AUTH_TOKEN=TOKEN))
    try:
        good = env(MC_AUTH_TOKEN=TOKEN, MC_TLS_CA_FILE=pki["store_ca"])
        prov = Provider(m.addr, good)
        try:
            ok(client(m.addr, [("put", "tls"), ("get", "tls")], good))
            ok(client(m.addr, [("get", "tls")], dict(good, MC_STORE_RPC="grpc")))
            for rpc in (None, "grpc"):
                res = client(m.addr, [], env(MC_AUTH_TOKEN=TOKEN, MC_TLS_CA_FILE=pki["other_ca"], MC_STORE_RPC=rpc))
                assert res["setup"] != 0 and "MC_TLS_CA_FILE" in res["error"] and "certificate" in res["error"], res
            # Plain TCP to a TLS master gets nowhere.
            res = client(m.addr, [], env(MC_AUTH_TOKEN=TOKEN), timeout=60)
            assert res["setup"] != 0, res
        finally:
            prov.stop()
    finally:
        m.stop()


def test_tls_master_requiring_client_certificates(pki):
    cert, key = pki["server"]
    m = Master(f"--tls_cert_file={cert}", f"--tls_key_file={key}", f"--tls_ca_file={pki['store_ca']}")
    try:
        ccert, ckey = pki["client"]
        good = env(MC_TLS_CA_FILE=pki["store_ca"], MC_TLS_CERT_FILE=ccert, MC_TLS_KEY_FILE=ckey)
        prov = Provider(m.addr, good)
        try:
            ok(client(m.addr, [("put", "mtls"), ("get", "mtls")], good))
            scert, skey = pki["stranger"]
            for e in (env(MC_TLS_CA_FILE=pki["store_ca"]),
                      env(MC_TLS_CA_FILE=pki["store_ca"], MC_TLS_CERT_FILE=scert, MC_TLS_KEY_FILE=skey)):
                res = client(m.addr, [], e, timeout=60)
                assert res["setup"] != 0, res
        finally:
            prov.stop()
    finally:
        m.stop()


@pytest.fixture
def tls_etcd(pki):
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.fail("etcd is not installed: `make setup` installs Debian's etcd-server")
    cert, key = pki["server"]
    port, peer = free_port(), free_port()
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(
            [etcd, "--name", "t", "--data-dir", d, "--cert-file", cert, "--key-file", key,
             "--listen-client-urls", f"https://127.0.0.1:{port}",
             "--advertise-client-urls", f"https://127.0.0.1:{port}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"t=http://127.0.0.1:{peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port, proc)
            yield f"127.0.0.1:{port}"
        finally:
            stop(proc)


def leader_of(masters) -> int:
    for i, m in enumerate(masters):
        try:
            code, body = http(f"http://127.0.0.1:{m.metrics_port}/health")
        except OSError:
            continue
        if code == 200 and json.loads(body).get("serving"):
            return i
    return -1


def test_ha_on_tls_etcd_with_a_token_survives_failover(pki, tls_etcd):
    """Two masters with a token and TLS on an etcd that speaks only TLS; a client following the
    leader through etcds:// puts, the leader is killed, and the same client reads its value back
    from the new leader, to which it had to connect (TLS) and authenticate anew."""
    e = env(MC_AUTH_TOKEN=TOKEN, MC_TLS_CA_FILE=pki["store_ca"])
    cert, key = pki["server"]
    flags = ["--enable_ha", f"--etcd_endpoints=https://{tls_etcd}", "--ha_lease_ttl_sec=2", "--client_ttl=10",
             f"--tls_cert_file={cert}", f"--tls_key_file={key}"]
    masters = [Master(*flags, env=e) for _ in range(2)]
    prov = None
    try:
        deadline = time.time() + 30
        while leader_of(masters) < 0 and time.time() < deadline:
            time.sleep(0.2)
        lead = leader_of(masters)
        assert lead >= 0, "no leader elected on the TLS etcd"
        prov = Provider(f"etcds://{tls_etcd}", e)
        spec = {"master": f"etcds://{tls_etcd}", "meta": "P2PHANDSHAKE", "segment": 0,
                "ops": [["put", "ha-tls"], ["get", "ha-tls"], "wait", ["get", "ha-tls"], ["put", "after"]]}
        p = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(spec)], env=e, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            line = p.stdout.readline()
            assert line.startswith("WAITING"), (line, p.stderr.read()[-3000:] if p.poll() is not None else "")
            masters[lead].stop()
            p.stdin.write("go\n")
            p.stdin.flush()
            out, err = p.communicate(timeout=120)
        finally:
            stop(p)
        res = json.loads(next(l for l in out.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
        ok(res)
        assert [op[:3] for op in res["ops"]] == [["put", "ha-tls", 0], ["get", "ha-tls", "same"],
                                                 ["get", "ha-tls", "same"], ["put", "after", 0]], res
        assert leader_of(masters) == 1 - lead
    finally:
        if prov:
            prov.stop()
        for m in masters:
            m.stop()
    # Without the CA the etcd's certificate is not trusted: the master does not start.
    bad = subprocess.run([go_command("mooncake_master"), "--enable_ha", f"--etcd_endpoints=https://{tls_etcd}",
                          f"--rpc_port={free_port()}", f"--metrics_port={free_port()}"],
                         env=env(), capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "MC_TLS_CA_FILE" in bad.stderr, bad.stderr[-2000:]
