"""``mooncake.http_metadata_server``: the transfer engine's HTTP metadata server in pure Python.

``KVBootstrapServer(port, host="0.0.0.0")`` keeps the metadata of a Mooncake cluster (segment
descriptors, RPC endpoints) in memory and serves the same protocol as the Go server
(``mooncake_http_metadata_server``, ``mooncake_master --enable_http_metadata_server``), so
engines and store clients given ``http://HOST:PORT/metadata`` work with either:

* ``GET /metadata?key=K``: 200 with the stored bytes (``application/json``), 404 when absent;
  ``HEAD`` the same without the body;
* ``PUT /metadata?key=K``: stores the request body (a later PUT replaces it), 200; bodies larger
  than 64 MiB get 413 and store nothing;
* ``DELETE /metadata?key=K``: 200, or 404 when absent;
* a request without ``key``, or with a blank one, gets 400, another path 404, another method
  405. Keys are stripped of surrounding white space (``?key=%20a`` is the key ``a``), as
  upstream's.

Errors are JSON objects, ``{"error": "metadata not found"}``, labelled ``application/json``
(upstream labels its plain-text error messages so; ours are JSON indeed).

``await server._handle_metadata(request)`` answers one request given as an object with
``method``, ``query`` (a mapping) and an async ``read()``, with a ``MetadataResponse``
(``status``, ``body``, ``text``, ``content_type``): upstream's aiohttp handler has that shape,
and its tests call it directly.

It needs nothing beyond the standard library (upstream's version needs aiohttp)::

    from mooncake.http_metadata_server import KVBootstrapServer
    server = KVBootstrapServer(8080)
    server.run()            # serves in a background thread; raises OSError if the port is taken
    ...
    server.close()

or from a shell: ``python -m mooncake.http_metadata_server --port 8080``.
"""

from __future__ import annotations

import argparse
import enum
import http.server
import json
import logging
import signal
import sys
import threading
from typing import Dict, List, Optional
from urllib.parse import parse_qs, urlsplit

__all__ = ["KVBootstrapServer", "KVPoll", "MetadataResponse", "DEFAULT_PATH", "MAX_VALUE_BYTES", "main"]

DEFAULT_PATH = "/metadata"
MAX_VALUE_BYTES = 64 << 20  # as the Go server (engine/metadata.MaxValueSize)

log = logging.getLogger("mooncake.http_metadata_server")


class KVPoll(enum.Enum):
    """What ``KVBootstrapServer.poll()`` reports (upstream's names)."""

    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


class MetadataResponse:
    """One answer of the server: ``status``, ``body`` (bytes), ``content_type`` (without a
    charset) and ``headers`` beyond Content-Type and Content-Length; ``text`` is the body
    decoded (the attributes upstream's tests read off aiohttp's responses)."""

    __slots__ = ("status", "body", "content_type", "headers")

    def __init__(self, status: int, body: bytes, content_type: str,
                 headers: Optional[Dict[str, str]] = None):
        self.status = status
        self.body = body
        self.content_type = content_type
        self.headers = headers or {}

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    @property
    def content_type_header(self) -> str:
        return self.content_type + ("; charset=utf-8" if self.content_type == "text/plain" else "")

    def __repr__(self) -> str:
        return f"MetadataResponse({self.status}, {self.body[:64]!r}, {self.content_type!r})"


def _error(status: int, msg: str, headers: Optional[Dict[str, str]] = None) -> MetadataResponse:
    """An error answer: {"error": msg} and a newline, byte for byte as the Go server's."""
    body = json.dumps({"error": msg}, ensure_ascii=False, separators=(",", ":")) + "\n"
    return MetadataResponse(status, body.encode(), "application/json",
                            {"X-Content-Type-Options": "nosniff", **(headers or {})})


def _ok_text(msg: str) -> MetadataResponse:
    return MetadataResponse(200, (msg + "\n").encode(), "text/plain")


# white space stripped off keys: ASCII's, as the Go server's (engine/metadata.keySpace)
_KEY_SPACE = " \t\n\r\v\f"


def _clean_key(key: Optional[str]) -> str:
    """The key a request names: stripped of surrounding white space ("" when blank or absent)."""
    return (key or "").strip(_KEY_SPACE)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the engines' HTTP clients expect
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm holds the
    # body until the client's delayed ACK (40 ms per request on Linux).
    disable_nagle_algorithm = True
    server_version = "mooncake-http-metadata"
    owner: "KVBootstrapServer"  # set on the per-server subclass

    def log_message(self, fmt: str, *args) -> None:  # quiet by default: DEBUG level
        log.debug("%s %s", self.address_string(), fmt % args)

    # -- responses --------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, content_type: str, head_only: bool = False,
              extra: Optional[Dict[str, str]] = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if body and not head_only:
            self.wfile.write(body)

    def _answer(self, r: MetadataResponse) -> None:
        self._send(r.status, r.body, r.content_type_header, head_only=self.command == "HEAD",
                   extra=r.headers)

    def _fail(self, status: int, msg: str, extra: Optional[Dict[str, str]] = None) -> None:
        # An error: the Go server's writeError ({"error": msg}, application/json).
        self._answer(_error(status, msg, extra))

    # -- request parsing --------------------------------------------------------------------
    def _key(self) -> Optional[str]:
        """The request's key, or None after answering an error (wrong path, no key)."""
        path = self.owner.path
        url = urlsplit(self.path)
        if url.path != path:
            self._fail(404, f"not found: the metadata server answers on {path}")
            return None
        key = _clean_key(parse_qs(url.query, keep_blank_values=True).get("key", [""])[0])
        if not key:
            self._answer(self.owner._missing_key())
            return None
        return key

    def _discard_body(self) -> None:
        """Reads and drops a request body we do not use, so the connection stays usable."""
        n = self.headers.get("Content-Length")
        if n is not None and n.strip().isdigit() and int(n) <= MAX_VALUE_BYTES:
            self.rfile.read(int(n))
        elif n is not None or self.headers.get("Transfer-Encoding"):
            self.close_connection = True

    def _read_body(self) -> Optional[bytes]:
        """The PUT body, or None after answering 413 / 400."""
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            return self._read_chunked()
        n = self.headers.get("Content-Length")
        if n is None:
            return b""
        try:
            length = int(n)
            if length < 0:
                raise ValueError(n)
        except ValueError:
            self.close_connection = True
            self._fail(400, f"reading request body: bad Content-Length {n!r}")
            return None
        if length > MAX_VALUE_BYTES:
            if length <= 4 * MAX_VALUE_BYTES:  # read and drop it: the client sees our answer
                left = length
                while left > 0:
                    got = self.rfile.read(min(left, 1 << 20))
                    if not got:
                        break
                    left -= len(got)
            self.close_connection = True
            self._fail(413, f"value too large: the limit is {MAX_VALUE_BYTES} bytes")
            return None
        data = self.rfile.read(length)
        if len(data) != length:
            self.close_connection = True
            self._fail(400, "reading request body: unexpected EOF")
            return None
        return data

    def _read_chunked(self) -> Optional[bytes]:
        parts: List[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                self.close_connection = True
                self._fail(400, "reading request body: bad chunk header")
                return None
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(parts)
            total += size
            if total > MAX_VALUE_BYTES:
                self.close_connection = True
                self._fail(413, f"value too large: the limit is {MAX_VALUE_BYTES} bytes")
                return None
            parts.append(self.rfile.read(size))
            self.rfile.readline(8)  # the CRLF after the chunk

    # -- methods ----------------------------------------------------------------------------
    def do_GET(self) -> None:
        key = self._key()
        if key is not None:
            self._answer(self.owner.respond("GET", key))

    do_HEAD = do_GET

    def do_PUT(self) -> None:
        key = self._key()
        if key is None:
            self._discard_body()
            return
        body = self._read_body()
        if body is not None:
            self._answer(self.owner.respond("PUT", key, body))

    def do_DELETE(self) -> None:
        key = self._key()
        if key is not None:
            self._answer(self.owner.respond("DELETE", key))

    def _not_allowed(self) -> None:
        self._discard_body()
        self._fail(405, "method not allowed: use GET, PUT or DELETE",
                   extra={"Allow": "GET, HEAD, PUT, DELETE"})

    do_POST = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _not_allowed


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class KVBootstrapServer:
    """An in-memory HTTP metadata server (upstream's name and constructor).

    ``port`` 0 picks a free port; after ``run()`` ``self.port`` is the one bound. ``store``
    holds the values (bytes by key)."""

    def __init__(self, port: int, host: str = "0.0.0.0", path: str = DEFAULT_PATH):
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ValueError(f"KVBootstrapServer: port must be an int in [0, 65535], got {port!r}")
        if not path.startswith("/"):
            raise ValueError(f"KVBootstrapServer: path must start with '/', got {path!r}")
        self.port = port
        self.host = host
        self.path = path
        self.store: Dict[str, bytes] = {}
        self.lock = threading.Lock()
        self.thread: Optional[threading.Thread] = None
        self._httpd: Optional[_Server] = None

    # -- answering requests -----------------------------------------------------------------
    def _missing_key(self) -> MetadataResponse:
        return _error(400, f"missing key parameter: use {self.path}?key=<url-encoded key>")

    def respond(self, method: str, key: str, body: bytes = b"") -> MetadataResponse:
        """The answer to ``method`` (GET, HEAD, PUT, DELETE) on ``key`` (already stripped, not
        blank); PUT stores ``body``."""
        if method in ("GET", "HEAD"):
            value = self._get(key)
            if value is None:
                return _error(404, "metadata not found")
            return MetadataResponse(200, value, "application/json")
        if method == "PUT":
            if len(body) > MAX_VALUE_BYTES:
                return _error(413, f"value too large: the limit is {MAX_VALUE_BYTES} bytes")
            self._put(key, bytes(body))
            return _ok_text("metadata updated")
        if method == "DELETE":
            if not self._delete(key):
                return _error(404, "metadata not found")
            return _ok_text("metadata deleted")
        return _error(405, "method not allowed: use GET, PUT or DELETE",
                      {"Allow": "GET, HEAD, PUT, DELETE"})

    async def _handle_metadata(self, request) -> MetadataResponse:
        """Upstream's request handler: ``request`` has ``method``, ``query`` (a mapping of the
        query parameters) and an async ``read()`` giving the body; the path is not checked."""
        method = str(request.method).upper()
        if method not in ("GET", "HEAD", "PUT", "DELETE"):
            return self.respond(method, "")
        key = _clean_key(request.query.get("key"))
        if not key:
            return self._missing_key()
        body = await request.read() if method == "PUT" else b""
        return self.respond(method, key, body)

    # -- the key-value map (the handler's calls) --------------------------------------------
    def _get(self, key: str) -> Optional[bytes]:
        with self.lock:
            return self.store.get(key)

    def _put(self, key: str, value: bytes) -> None:
        with self.lock:
            self.store[key] = value

    def _delete(self, key: str) -> bool:
        with self.lock:
            return self.store.pop(key, None) is not None

    def keys(self) -> List[str]:
        """The stored keys, sorted (for diagnostics and tests)."""
        with self.lock:
            return sorted(self.store)

    # -- life cycle -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The metadata server string for engines and store clients: http://host:port/path
        (127.0.0.1 when bound to every address)."""
        host = self.host if self.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}{self.path}"

    def run(self) -> threading.Thread:
        """Binds the port and serves in a background (daemon) thread, which it returns.
        Raises OSError (naming the address) when the port cannot be bound, RuntimeError when
        already running."""
        if self._httpd is not None:
            raise RuntimeError("KVBootstrapServer is already running")
        handler = type("Handler", (_Handler,), {"owner": self})
        try:
            httpd = _Server((self.host, self.port), handler)
        except OSError as e:
            raise OSError(e.errno, f"HTTP metadata server: cannot listen on "
                                   f"{self.host}:{self.port}: {e.strerror}") from e
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self.thread = threading.Thread(target=httpd.serve_forever, name="mooncake-http-metadata",
                                       daemon=True)
        self.thread.start()
        log.info("HTTP metadata server listening on %s:%d%s", self.host, self.port, self.path)
        return self.thread

    def close(self) -> None:
        """Stops serving and releases the port (the stored values stay in ``store``)."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self.thread is not None:
            self.thread.join(timeout=5)

    def poll(self) -> KVPoll:
        """Success while serving, Failed otherwise."""
        if self._httpd is None or self.thread is None or not self.thread.is_alive():
            return KVPoll.Failed
        return KVPoll.Success

    def __enter__(self) -> "KVBootstrapServer":
        if self._httpd is None:
            self.run()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m mooncake.http_metadata_server",
        description="Mooncake's HTTP metadata server (pure Python; the protocol of "
                    "mooncake_http_metadata_server)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--port", type=int, default=8080, help="port to listen on")
    ap.add_argument("--host", default="0.0.0.0", help="address to bind")
    ap.add_argument("--log-level", "--log_level", dest="log_level", default="INFO",
                    type=str.upper,
                    choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                    help="logging level (DEBUG logs every request)")
    return ap.parse_args(argv)


def serve(port: int = 8080, host: str = "0.0.0.0", log_level: str = "INFO") -> int:
    """Runs a server in the foreground until SIGINT/SIGTERM; the exit status."""
    logging.basicConfig(level=getattr(logging, log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = KVBootstrapServer(port=port, host=host)
    try:
        server.run()
    except OSError as e:
        log.error("%s", e.strerror or e)
        return 1
    stop = threading.Event()

    def on_signal(signum, frame):
        log.info("signal %d: shutting down", signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    # One line a script can wait for (the address really bound: --port=0 picks one).
    print(f"HTTP metadata server ready at {server.url}", flush=True)
    while not stop.wait(3600):
        pass
    server.close()
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    return serve(args.port, args.host, args.log_level)


if __name__ == "__main__":
    sys.exit(main())
