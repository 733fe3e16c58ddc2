"""mooncake.http_metadata_server.KVBootstrapServer: the same HTTP metadata protocol as the Go
server (every request answered byte for byte alike), and a Python-only deployment on it: two
transfer engines in two processes, and store clients of a mooncake_master that runs no metadata
server of its own."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import free_port, go_command, stop, wait_port
from mooncake.engine import TransferEngine
from mooncake.http_metadata_server import MAX_VALUE_BYTES, KVBootstrapServer, KVPoll, MetadataResponse
from test_engine import SIZE, Peer, pattern

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def py_server():
    s = KVBootstrapServer(0, host="127.0.0.1")
    s.run()
    yield s
    s.close()


@pytest.fixture
def go_server():
    port = free_port()
    proc = subprocess.Popen([go_command("mooncake_http_metadata_server"), f"--port={port}",
                             "--host=127.0.0.1"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        yield port
    finally:
        stop(proc)


# Requests in order, on one keep-alive connection: (method, target, body).
KEY = "mooncake/ram/127.0.0.1:16001"
ODD = "mooncake/rpc_meta/a b+c&d=é/ü"  # spaces, '+', '&', '=', non-ASCII: URL-encoded
SCRIPT = [
    ("GET", f"/metadata?key={KEY}", None),                      # missing: 404
    ("PUT", f"/metadata?key={KEY}", b'{"name":"x","buffers":[]}'),
    ("GET", f"/metadata?key={KEY}", None),
    ("HEAD", f"/metadata?key={KEY}", None),
    ("PUT", f"/metadata?key={KEY}", b'{"name":"y"}'),           # replaces
    ("GET", f"/metadata?key={KEY}", None),
    ("PUT", "/metadata?key=" + ODD.replace("%", "%25").replace(" ", "%20").replace("+", "%2B")
     .replace("&", "%26").replace("=", "%3D").replace("é", "%C3%A9").replace("ü", "%C3%BC"),
     b"\x00\x01binary\xff"),
    ("GET", "/metadata?key=mooncake%2Frpc_meta%2Fa%20b%2Bc%26d%3D%C3%A9%2F%C3%BC", None),
    ("GET", "/metadata?key=mooncake/rpc_meta/a+b%2Bc%26d%3D%C3%A9/%C3%BC", None),  # '+' = space
    ("PUT", f"/metadata?key={KEY}x", b""),                      # empty value
    ("GET", f"/metadata?key={KEY}x", None),
    ("DELETE", f"/metadata?key={KEY}", None),
    ("DELETE", f"/metadata?key={KEY}", None),                   # gone: 404
    ("GET", f"/metadata?key={KEY}", None),
    ("GET", "/metadata", None),                                 # no key: 400
    ("GET", "/metadata?key=", None),
    ("PUT", "/metadata?other=1", b"ignored"),
    ("GET", f"/other?key={KEY}", None),                         # another path: 404
    ("POST", f"/metadata?key={KEY}", b"{}"),                    # 405
    ("GET", f"/metadata?key={KEY}x&key=second", None),          # the first key counts
    ("PUT", "/metadata?key=%20%09%20", b"blank"),               # a blank key: 400
    ("GET", f"/metadata?key=%20{KEY}x%20%20", None),            # keys are stripped
    ("DELETE", "/metadata?key=+", None),                        # '+' is a space: blank
]
HEADERS = ("Content-Type", "Content-Length", "Allow", "X-Content-Type-Options")


def replay(port: int):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out = []
    for method, target, body in SCRIPT:
        conn.request(method, target, body=body)
        r = conn.getresponse()
        data = r.read()
        out.append((method, target, r.status, data, {h: r.getheader(h) for h in HEADERS}))
    conn.close()
    return out


def test_same_answers_as_the_go_server(py_server, go_server):
    ours, go = replay(py_server.port), replay(go_server)
    for a, b in zip(ours, go):
        assert a == b
    statuses = [r[2] for r in ours]
    assert statuses == [404, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200, 404, 404,
                        400, 400, 400, 404, 405, 200, 400, 200, 400]
    # errors are JSON objects, labelled so
    for method, target, status, body, headers in ours:
        if status != 200:
            assert headers["Content-Type"] == "application/json", (method, target, headers)
            assert set(json.loads(body)) == {"error"}, body
    assert json.loads(ours[0][3]) == {"error": "metadata not found"}
    assert json.loads(ours[14][3]) == {"error": "missing key parameter: use /metadata?key=<url-encoded key>"}
    assert ours[5][3] == b'{"name":"y"}' and ours[7][3] == b"\x00\x01binary\xff"
    assert ours[8][3] == ours[7][3]
    assert py_server.keys() == ["mooncake/ram/127.0.0.1:16001x", "mooncake/rpc_meta/a b+c&d=é/ü"]


def put_raw(port: int, length: int) -> bytes:
    """PUTs a body of ``length`` bytes; the status line of the answer."""
    import threading

    with socket.create_connection(("127.0.0.1", port)) as s:
        def send():
            try:
                s.sendall(b"PUT /metadata?key=big HTTP/1.1\r\nHost: x\r\nContent-Length: "
                          + str(length).encode() + b"\r\n\r\n")
                chunk = b"x" * (1 << 20)
                left = length
                while left > 0:
                    s.sendall(chunk[:left])
                    left -= min(left, len(chunk))
            except OSError:
                pass  # the server may stop reading once it has answered

        t = threading.Thread(target=send)
        t.start()
        status = s.makefile("rb").readline()
        t.join()
    return status


def test_too_large_value_is_refused_and_stores_nothing(py_server, go_server):
    for port in (py_server.port, go_server):
        assert put_raw(port, MAX_VALUE_BYTES + 1) == b"HTTP/1.1 413 Request Entity Too Large\r\n"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metadata?key=big")
        assert conn.getresponse().status == 404
        conn.close()
    # exactly the limit is accepted
    conn = http.client.HTTPConnection("127.0.0.1", py_server.port, timeout=30)
    value = bytes(range(256)) * (MAX_VALUE_BYTES // 256)
    conn.request("PUT", "/metadata?key=big", body=value)
    assert conn.getresponse().read() == b"metadata updated\n"
    conn.request("GET", "/metadata?key=big")
    assert conn.getresponse().read() == value
    conn.close()


class Request:
    """A request as upstream's handler takes it (aiohttp's shape): method, query, async read()."""

    def __init__(self, method, key=None, body=b""):
        self.method = method
        self.query = {} if key is None else {"key": key}
        self.body = body

    async def read(self):
        return self.body


def test_upstream_handler_shape():
    """``_handle_metadata`` (upstream's handler, which upstream's tests call directly) answers as
    the HTTP server does: blank keys refused, keys stripped, errors as JSON."""
    s = KVBootstrapServer(0)  # not running: the handler needs no socket

    def call(*args):
        r = asyncio.run(s._handle_metadata(Request(*args)))
        assert isinstance(r, MetadataResponse)
        return r.status, r.content_type, r.body

    missing = json.dumps({"error": "missing key parameter: use /metadata?key=<url-encoded key>"},
                         separators=(",", ":")).encode() + b"\n"
    for method in ("GET", "PUT", "DELETE"):
        for key in (None, "", "   ", "\t\n"):
            assert call(method, key, b"value") == (400, "application/json", missing)
    assert s.store == {}
    assert call("PUT", "  valid  ", b"value") == (200, "text/plain", b"metadata updated\n")
    assert s.store == {"valid": b"value"}
    assert call("GET", "  valid  ") == (200, "application/json", b"value")
    assert call("HEAD", "valid") == (200, "application/json", b"value")
    assert call("GET", "other") == (404, "application/json", b'{"error":"metadata not found"}\n')
    r = asyncio.run(s._handle_metadata(Request("POST", "valid")))
    assert (r.status, r.text, r.headers["Allow"]) == (405, '{"error":"method not allowed: use GET, PUT or DELETE"}\n',
                                                      "GET, HEAD, PUT, DELETE")
    assert call("PUT", "big", b"x" * (MAX_VALUE_BYTES + 1))[0] == 413 and "big" not in s.store
    assert call("DELETE", " valid") == (200, "text/plain", b"metadata deleted\n")
    assert call("DELETE", "valid") == (404, "application/json", b'{"error":"metadata not found"}\n')
    assert s.store == {}


def test_chunked_put(py_server):
    with socket.create_connection(("127.0.0.1", py_server.port)) as s:
        s.sendall(b"PUT /metadata?key=c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                  b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200 OK")
    assert py_server.store["c"] == b"hello world"


def test_life_cycle_and_bad_arguments():
    s = KVBootstrapServer(0, "127.0.0.1")
    assert s.poll() is KVPoll.Failed  # not running yet (upstream's answer)
    thread = s.run()
    assert thread.is_alive() and s.poll() is KVPoll.Success and s.port > 0
    assert s.url == f"http://127.0.0.1:{s.port}/metadata"
    with pytest.raises(RuntimeError, match="already running"):
        s.run()
    busy = KVBootstrapServer(s.port, "127.0.0.1")
    with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{s.port}"):
        busy.run()
    s.close()
    assert s.poll() is KVPoll.Failed and not thread.is_alive()
    for bad in (-1, 65536, "8080", 1.5, True):
        with pytest.raises(ValueError, match="port must be an int"):
            KVBootstrapServer(bad)
    with KVBootstrapServer(0, "127.0.0.1") as again:  # a context manager runs and closes it
        assert again.poll() is KVPoll.Success
    assert again.poll() is KVPoll.Failed


def test_engines_in_two_processes_use_it(py_server):
    """A Python-only deployment: the engines find each other through KVBootstrapServer."""
    meta = py_server.url
    peer = Peer(meta, f"127.0.0.1:{free_port()}")
    eng = TransferEngine()
    try:
        assert eng.initialize(f"127.0.0.1:{free_port()}", meta, "tcp", "") == 0
        assert f"mooncake/ram/{peer.name}" in py_server.keys()
        assert f"mooncake/ram/{eng.get_segment_name()}" in py_server.keys()
        local = eng.allocate_managed_buffer(SIZE)
        data = pattern(SIZE, 11)
        assert eng.write_bytes_to_buffer(local, data, SIZE) == 0
        for kind in ("managed", "plain"):
            base = getattr(peer, kind)
            assert eng.transfer_sync_write(peer.name, local, base, SIZE) == 0
            assert peer.dump(kind, 0, SIZE) == data
            assert eng.transfer_sync_read(peer.name, local, base + 1, 4096) == 0
            assert eng.read_bytes_from_buffer(local, 4096) == data[1:4097]
            assert eng.write_bytes_to_buffer(local, data, SIZE) == 0
    finally:
        peer.close()
        eng.close()


def held_process(prog: str, ready: str):
    """Runs prog (a store client that prints "<ready> <its hostname>" once set up, then waits on
    its stdin) in a process of its own: the process and that hostname."""
    p = subprocess.Popen([sys.executable, "-c", prog], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith(ready + " "):
        stop(p)
        raise AssertionError(f"{ready} line expected, got {line!r}")
    return p, line.split()[1]


def test_store_clients_of_a_master_without_metadata_server(py_server):
    """mooncake_master serves only the store; the clients' metadata lives in KVBootstrapServer."""
    from test_store import Master

    master = Master()
    try:
        prog = textwrap.dedent(f"""
            from mooncake.store import MooncakeDistributedStore
            s = MooncakeDistributedStore()
            assert s.setup("127.0.0.1:{free_port()}", {py_server.url!r}, 64 << 20, 16 << 20,
                           "tcp", "", {master.addr!r}) == 0
            value = bytes((i * 13 + 5) % 256 for i in range(3 << 20))
            assert s.put("py-only", value) == 0
            print("PUT", s.get_hostname(), flush=True)
            import sys
            sys.stdin.readline()  # keep our segment (which holds the value) until told
            s.close()
        """)
        writer, writer_name = held_process(prog, "PUT")
        try:
            # The reader runs in a process of its own too: a process's store uses the first
            # transfer engine the process created (an earlier test's, here).
            reader = textwrap.dedent(f"""
                import hashlib
                from mooncake.store import MooncakeDistributedStore
                s = MooncakeDistributedStore()
                assert s.setup("127.0.0.1:{free_port()}", {py_server.url!r}, 0, 16 << 20,
                               "tcp", "", {master.addr!r}) == 0
                v = s.get("py-only")
                print(len(v), hashlib.sha256(v).hexdigest(), s.is_exist("py-only"))
                s.close()
            """)
            r = subprocess.run([sys.executable, "-c", reader], capture_output=True, text=True,
                               timeout=60)
            want = bytes((i * 13 + 5) % 256 for i in range(3 << 20))
            assert r.stdout == f"{len(want)} {hashlib.sha256(want).hexdigest()} 1\n", r.stderr
            assert any(k.endswith(writer_name) for k in py_server.keys()), py_server.keys()
            writer.stdin.write("\n")
            writer.stdin.flush()
            assert writer.wait(30) == 0
        finally:
            stop(writer)
    finally:
        master.stop()


def test_command_line():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mooncake.http_metadata_server",
                             f"--port={port}", "--host=127.0.0.1", "--log-level=warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == f"HTTP metadata server ready at http://127.0.0.1:{port}/metadata\n"
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("PUT", "/metadata?key=k", body=b"v")
        assert conn.getresponse().read() == b"metadata updated\n"
        conn.request("GET", "/metadata?key=k")
        assert conn.getresponse().read() == b"v"
        conn.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        # the port is taken: exit 1 with the address in the message
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            s.listen()
            busy = s.getsockname()[1]
            r = subprocess.run([sys.executable, "-m", "mooncake.http_metadata_server",
                                f"--port={busy}", "--host=127.0.0.1"], capture_output=True,
                               text=True, timeout=30)
        assert r.returncode == 1
        assert f"cannot listen on 127.0.0.1:{busy}: Address already in use" in r.stderr
    finally:
        stop(proc)


def test_master_forgets_a_timed_out_clients_metadata():
    """--enable_metadata_cleanup_on_timeout: a client killed without closing leaves its segment
    descriptor and RPC endpoint in the master's HTTP metadata server until client_ttl expires it;
    then they are gone. Without the flag they stay."""
    from test_store import Master

    for cleanup in (True, False):
        md_port = free_port()
        flags = ["--enable_http_metadata_server", f"--http_metadata_server_port={md_port}",
                 "--http_metadata_server_host=127.0.0.1", "--client_ttl=2"]
        master = Master(*flags, *(["--enable_metadata_cleanup_on_timeout"] if cleanup else []))
        url = f"http://127.0.0.1:{md_port}/metadata"
        try:
            prog = textwrap.dedent(f"""
                import sys
                from mooncake.store import MooncakeDistributedStore
                s = MooncakeDistributedStore()
                assert s.setup("127.0.0.1:{free_port()}", {url!r}, 16 << 20, 4 << 20, "tcp", "", {master.addr!r}) == 0
                print("UP", s.get_hostname(), flush=True)
                sys.stdin.readline()
            """)
            client, name = held_process(prog, "UP")
            try:

                def status(key):
                    conn = http.client.HTTPConnection("127.0.0.1", md_port, timeout=10)
                    conn.request("GET", "/metadata?key=" + key)
                    code = conn.getresponse().status
                    conn.close()
                    return code

                keys = [f"mooncake/ram/{name}", f"mooncake/rpc_meta/{name}"]
                assert [status(k) for k in keys] == [200, 200]
                client.kill()  # no close(): its entries stay behind
                client.wait(10)
                deadline = time.time() + 20
                while time.time() < deadline and master.metric("mooncake_master_active_clients") > 0:
                    time.sleep(0.2)
                assert master.metric("mooncake_master_active_clients") == 0
                time.sleep(0.3)
                assert [status(k) for k in keys] == ([404, 404] if cleanup else [200, 200])
            finally:
                stop(client)
        finally:
            master.stop()
