"""mc_store_rest_server (mooncake.mooncake_store_service): the store's REST service as a real
process over a real mooncake_master, driven over HTTP; what it stores is read back by a store
client of our own, and what we store is read through it."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import uuid

import pytest

from mooncake.store import ErrorCode, MooncakeDistributedStore
from test_store import MB, Master

SERVICE = os.path.join(os.path.dirname(sys.executable), "mc_store_rest_server")


@pytest.fixture
def master():
    m = Master("--default_kv_lease_ttl=600000")  # a read key stays leased for the whole test
    yield m
    m.stop()


def write_config(tmp_path, master_addr: str, **extra) -> str:
    path = tmp_path / "mooncake.json"
    path.write_text(json.dumps({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                                "master_server_address": master_addr, "global_segment_size": "32MB",
                                "local_buffer_size": "16MB", "protocol": "tcp", "device_name": "", **extra}))
    return str(path)


class Service:
    """mc_store_rest_server on a free port, up once it printed its ready line."""

    def __init__(self, *args: str, env=None):
        self.proc = subprocess.Popen([SERVICE, "--host=127.0.0.1", "--port=0", *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if not line.startswith("mc_store_rest_server: REST API ready on port "):
            self.proc.kill()
            raise AssertionError(f"no ready line: {line!r}\n{self.proc.stderr.read()[-3000:]}")
        self.port = int(line.rsplit(" ", 1)[1])

    def request(self, method: str, path: str, body=None, raw: bytes | None = None):
        """(status, content type, parsed JSON or bytes)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        payload = r.read()
        ctype = r.getheader("Content-Type")
        conn.close()
        if ctype.startswith("application/json"):
            return r.status, ctype, json.loads(payload)
        return r.status, ctype, payload

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return rc


@pytest.fixture
def service(master, tmp_path):
    s = Service("--config", write_config(tmp_path, master.addr))
    yield s
    if s.proc.poll() is None:
        assert s.terminate() == 0


@pytest.fixture
def client(master):
    c = MooncakeDistributedStore()
    assert c.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MB, 16 * MB, "tcp", "", master.addr) == 0
    yield c
    c.close()


def test_keys_through_the_service_and_a_client(service, client):
    ok = {"status": "success"}
    assert service.request("PUT", "/api/put", {"key": "greeting", "value": "hello ✓"}) == (200, "application/json; charset=utf-8", ok)
    assert client.get("greeting") == "hello ✓".encode()
    assert service.request("GET", "/api/get/greeting") == (200, "application/octet-stream", "hello ✓".encode())
    # what a client stores, the service reads; a key with '/' and a space, percent-encoded
    value = os.urandom(3 * MB)
    assert client.put("dir/a key", value) == 0
    assert service.request("GET", "/api/get/dir%2Fa%20key") == (200, "application/octet-stream", value)
    assert service.request("GET", "/api/exist/dir%2Fa%20key")[2] == {"exists": True}
    assert service.request("GET", "/api/exist/nope") == (200, "application/json; charset=utf-8", {"exists": False})
    assert service.request("GET", "/api/get/nope") == (404, "application/json; charset=utf-8", {"error": "Key not found"})
    # the store keeps no empty values (as upstream's): the store's code comes back
    assert service.request("PUT", "/api/put", {"key": "empty", "value": ""})[:3] == \
        (500, "application/json; charset=utf-8", {"error": f"PUT operation failed, ret={client.put('empty', b'')}"})
    assert client.put("third", b"3") == 0

    # a key just read is leased: a plain remove is refused; one never read goes
    status, _, body = service.request("DELETE", "/api/remove/greeting")
    assert (status, body) == (500, {"error": f"Remove operation failed, ret={ErrorCode.OBJECT_HAS_LEASE}"})
    assert client.is_exist("greeting") == 1
    assert service.request("PUT", "/api/put", {"key": "fresh", "value": "v"})[0] == 200
    assert service.request("DELETE", "/api/remove/fresh") == (200, "application/json; charset=utf-8", ok)
    assert client.is_exist("fresh") == 0
    assert service.request("DELETE", "/api/remove/fresh") == (404, "application/json; charset=utf-8",
                                                              {"error": "Key not found"})
    # remove_all takes leased keys too
    assert service.request("DELETE", "/api/remove_all")[2] == {"status": "success removed 3 keys"}
    assert [client.is_exist(k) for k in ("greeting", "dir/a key", "third")] == [0, 0, 0]
    assert service.request("DELETE", "/api/remove_all")[2] == {"status": "success removed 0 keys"}


def test_bad_requests_change_nothing(service, client):
    bad = [
        ("PUT", "/api/put", b"{not json", 400, "Malformed JSON body"),
        ("PUT", "/api/put", b"[1, 2]", 400, "Request body must be a JSON object"),
        ("PUT", "/api/put", b'{"key": "k"}', 400, "Missing key or value"),
        ("PUT", "/api/put", b'{"key": "", "value": "v"}', 400, "Missing key or value"),
        ("PUT", "/api/put", b'{"key": "k", "value": 5}', 400, "key and value must be strings"),
        ("POST", "/api/mount", b'{"size": "1024"}', 400, "Invalid size, must be a positive integer"),
        ("POST", "/api/mount", b'{"size": 0}', 400, "Invalid size, must be a positive integer"),
        ("POST", "/api/mount_shm", b'{"name": "../etc", "size": 4096}', 400, "Missing or invalid name or size"),
        ("POST", "/api/unmount", b'{"segment_ids": []}', 400, "Missing segment_ids"),
        ("POST", "/api/unmount_shm", b'{"segment_ids": [1]}', 400, "segment_ids must be"),
        ("POST", "/api/unmount_shm", b'{"segment_ids": "x", "grace_period_seconds": -1}', 400,
         "Invalid grace_period_seconds"),
        ("POST", "/api/unmount_local_disk", b'{"grace_period_seconds": 3601}', 400,
         "Invalid grace_period_seconds, must be a non-negative integer no greater than 3600"),
        ("POST", "/api/unmount_local_disk", b'{"grace_period_seconds": true}', 400, "Invalid grace_period_seconds"),
        ("POST", "/api/reconfigure", b'{"mode": "sideways"}', 400, "Invalid mode. Use 'decode' or 'prefill'"),
        ("POST", "/api/reconfigure", b'{"mode": "decode", "size": 4096}', 400, "Missing path or size for decode mode"),
        ("GET", "/api/nothing", None, 404, "no such endpoint: /api/nothing"),
        ("GET", "/api/get/", None, 404, "no such endpoint: /api/get/"),
        ("GET", "/api/put", None, 405, "method GET not allowed on /api/put: use PUT"),
        ("POST", "/api/remove/k", b"{}", 405, "method POST not allowed on /api/remove/k: use DELETE"),
    ]
    for method, path, raw, status, msg in bad:
        got = service.request(method, path, raw=raw)
        assert got[0] == status and msg in got[2]["error"], (method, path, raw, got)
    assert client.is_exist("k") == 0
    assert service.request("GET", "/api/exist/k")[2] == {"exists": False}


def test_segments_and_reconfigure(service, client, tmp_path):
    # /api/mount: memory of the service's process becomes another segment; a client's put can
    # land there, and unmounting it loses nothing the other segment holds
    status, _, body = service.request("POST", "/api/mount", {"size": 8 * MB})
    assert status == 200 and body["status"] == "success" and body["allocated_size"] == 8 * MB
    assert len(body["segment_ids"]) == 1
    assert service.request("POST", "/api/unmount", {"segment_ids": body["segment_ids"]})[2] == {"status": "success"}
    assert service.request("POST", "/api/unmount", {"segment_ids": body["segment_ids"]})[0] == 500

    name = f"mc-rest-{uuid.uuid4().hex[:12]}"
    shm = f"/dev/shm/{name}"
    with open(shm, "wb") as f:
        f.truncate(8 * MB)
    try:
        status, _, body = service.request("POST", "/api/mount_shm", {"name": name, "size": 8 * MB})
        assert status == 200 and len(body["segment_ids"]) == 1
        assert service.request("POST", "/api/unmount_shm", {"segment_ids": body["segment_ids"][0]})[2] == \
            {"status": "success"}
        ids = body["segment_ids"]
        status, _, body = service.request("POST", "/api/unmount_shm", {"segment_ids": ids})
        assert (status, body) == (500, {"error": "Unmount failed for one or more segments", "failed_segment_ids": ids})

        # decode: the file becomes this node's segment; again: the new one replaces it; prefill: gone
        status, _, first = service.request("POST", "/api/reconfigure", {"mode": "decode", "path": shm, "size": 4 * MB})
        assert status == 200 and first["mode"] == "decode" and len(first["segment_ids"]) == 1
        status, _, second = service.request("POST", "/api/reconfigure",
                                            {"mode": "DECODE", "path": shm, "size": 8 * MB})
        assert status == 200 and second["mode"] == "decode" and len(second["segment_ids"]) == 1
        assert second["segment_ids"] != first["segment_ids"]
        # a failed remount keeps the segment that works
        status, _, body = service.request("POST", "/api/reconfigure",
                                          {"mode": "decode", "path": "/dev/shm/no-such-file-here", "size": 4 * MB})
        assert status == 500 and body["mode"] == "decode" and "keeping previous decode segments" in body["error"]
        assert service.request("POST", "/api/reconfigure", {"mode": "prefill"})[2] == \
            {"status": "success", "mode": "prefill"}
        # nothing left to unmount: the decode segment went with prefill
        assert service.request("POST", "/api/unmount_shm", {"segment_ids": second["segment_ids"]})[0] == 500
        # a failed first mount rolls back to prefill
        status, _, body = service.request("POST", "/api/reconfigure",
                                          {"mode": "decode", "path": "/dev/shm/no-such-file-here", "size": 4 * MB})
        assert status == 500 and body["mode"] == "prefill" and "rolled back to prefill" in body["error"]
    finally:
        os.unlink(shm)
    assert service.request("PUT", "/api/put", {"key": "after", "value": "still works"})[0] == 200
    assert client.get("after") == b"still works"


def test_config_overrides_and_errors(master, tmp_path):
    cfg = write_config(tmp_path, "127.0.0.1:1")  # a master that is not there, fixed by -D
    s = Service("--config", cfg, f"-Dmaster_server_address={master.addr}", "-Dtenant_id=rest-tenant")
    try:
        assert s.request("PUT", "/api/put", {"key": "t", "value": "tenant's"})[0] == 200
        other = MooncakeDistributedStore()
        assert other.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MB, 16 * MB, "tcp", "", master.addr,
                           tenant_id="rest-tenant") == 0
        assert other.get("t") == b"tenant's"
        other.close()
    finally:
        assert s.terminate() == 0

    for args, msg in (([f"-Dglobal_segment_size=50%"], "global_segment_size"),
                      (["-Dbogus=1"], "unknown key(s) ['bogus']"),
                      (["-Dtenant_id"], "-D 'tenant_id': want KEY=VALUE")):
        p = subprocess.run([SERVICE, "--config", cfg, "--port=0", *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == 1 and msg in p.stderr, (args, p.returncode, p.stderr[-2000:])
    p = subprocess.run([SERVICE, "--config", str(tmp_path / "missing.json")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1 and "missing.json" in p.stderr
    # setup keeps failing (no master): it gives up after --max-wait-time
    p = subprocess.run([SERVICE, "--config", cfg, "--port=0", "--max-wait-time=1"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 1 and "the store could not be set up in 1.0 s (master 127.0.0.1:1)" in p.stderr


def test_config_from_the_environment_and_port_in_use(master):
    env = dict(os.environ, MOONCAKE_MASTER=master.addr, MOONCAKE_LOCAL_HOSTNAME="127.0.0.1",
               MOONCAKE_GLOBAL_SEGMENT_SIZE="16MB", MOONCAKE_LOCAL_BUFFER_SIZE="16MB")
    env.pop("MOONCAKE_CONFIG_PATH", None)
    s = Service(env=env)
    try:
        assert s.request("PUT", "/api/put", {"key": "env", "value": "from env"})[0] == 200
        assert s.request("GET", "/api/get/env")[2] == b"from env"
        p = subprocess.run([SERVICE, "--host=127.0.0.1", f"--port={s.port}"], env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 1 and f"cannot listen on 127.0.0.1:{s.port}" in p.stderr, p.stderr[-2000:]
    finally:
        assert s.terminate() == 0


def test_sigterm_closes_the_store(master, tmp_path):
    s = Service("--config", write_config(tmp_path, master.addr))
    assert s.request("PUT", "/api/put", {"key": "gone", "value": "with the service"})[0] == 200
    assert s.terminate() == 0
    # the service's segment held the only copy: closed, it is unmounted and the key is gone
    c = MooncakeDistributedStore()
    assert c.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MB, "tcp", "", master.addr) == 0
    try:
        assert c.get("gone") == b""
    finally:
        c.close()
    with pytest.raises(ConnectionRefusedError):
        http.client.HTTPConnection("127.0.0.1", s.port, timeout=5).request("GET", "/api/exist/x")
