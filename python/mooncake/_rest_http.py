"""``mooncake._rest_http``: the small HTTP layer under ``mooncake.mooncake_store_service``.

The service's handlers are coroutines that take a request (``await request.json()``,
``request.match_info["key"]``) and return a ``Response`` (``status``, ``text``, ``body``,
``content_type``): the shape of aiohttp's, which upstream's service uses and upstream's tests
drive directly. ``RestServer`` serves such handlers over HTTP/1.1 with the standard library
only: each connection has a thread that parses the request and runs the handler on the
service's event loop (``asyncio.run_coroutine_threadsafe``), so handlers and the service's
state lock live on one loop, as under aiohttp.

Routes are ``(method, path, handler)``; a path ending in ``/{key}`` matches any non-empty
rest, percent-decoded (``/api/get/a%2Fb`` is the key ``a/b``). Another path gets 404, another
method 405, a body over the limit 413, each with ``{"error": ...}``.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import threading
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["Response", "Request", "RestServer", "json_response", "MAX_BODY_BYTES"]

log = logging.getLogger("mooncake.store_service")

MAX_BODY_BYTES = 100 << 20  # upstream's client_max_size (100 MiB)


class Response:
    """One answer: ``status``, ``text`` (str) or ``body`` (bytes), ``content_type``."""

    def __init__(self, status: int = 200, text: Optional[str] = None, body: Optional[bytes] = None,
                 content_type: str = "application/json"):
        self.status = status
        self.text = text
        self.body = body
        self.content_type = content_type

    def payload(self) -> bytes:
        if self.body is not None:
            return bytes(self.body)
        return (self.text or "").encode()

    def __repr__(self) -> str:
        return f"Response({self.status}, {self.text if self.body is None else self.body[:64]!r})"


def json_response(status: int, obj: Any) -> Response:
    """``obj`` as JSON with ``status``."""
    return Response(status=status, text=json.dumps(obj), content_type="application/json")


class Request:
    """What a handler gets: ``method``, ``path``, ``query`` (first value of each parameter),
    ``match_info`` (``{"key": ...}`` for a ``/{key}`` route) and the body through ``read()``,
    ``text()`` and ``json()`` (which raises json.JSONDecodeError / UnicodeDecodeError on a bad
    body)."""

    def __init__(self, method: str, path: str, query: Dict[str, str], match_info: Dict[str, str],
                 body: bytes):
        self.method = method
        self.path = path
        self.query = query
        self.match_info = match_info
        self._body = body

    async def read(self) -> bytes:
        return self._body

    async def text(self) -> str:
        return self._body.decode("utf-8")

    async def json(self) -> Any:
        return json.loads(self._body.decode("utf-8"))


Handler = Callable[[Any], Awaitable[Response]]


def _match(routes: List[Tuple[str, str, Handler]], path: str) -> Tuple[Dict[str, Handler], Dict[str, str]]:
    """The handlers by method of the routes ``path`` matches, and the match info."""
    found: Dict[str, Handler] = {}
    info: Dict[str, str] = {}
    for method, pattern, handler in routes:
        if pattern.endswith("/{key}"):
            prefix = pattern[:-len("{key}")]
            if not path.startswith(prefix) or len(path) == len(prefix):
                continue
            info = {"key": unquote(path[len(prefix):])}
        elif unquote(path) != pattern:
            continue
        found.setdefault(method, handler)
    return found, info


class _HTTPHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server_version = "mc_store_rest_server"
    owner: "RestServer"  # set on the per-server subclass

    def log_message(self, fmt: str, *args) -> None:
        log.debug("%s %s", self.address_string(), fmt % args)

    def _send(self, r: Response) -> None:
        data = r.payload()
        self.send_response(r.status)
        ctype = r.content_type or "application/octet-stream"
        if r.body is None and "charset" not in ctype:
            ctype += "; charset=utf-8"
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data and self.command != "HEAD":
            self.wfile.write(data)

    def _error(self, status: int, msg: str) -> None:
        self._send(json_response(status, {"error": msg}))

    def _body(self) -> Optional[bytes]:
        """The request body, or None after answering 400/411/413."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.close_connection = True
            self._error(411, "chunked bodies are not accepted: send Content-Length")
            return None
        n = self.headers.get("Content-Length")
        if n is None:
            return b""
        try:
            length = int(n)
            if length < 0:
                raise ValueError(n)
        except ValueError:
            self.close_connection = True
            self._error(400, f"bad Content-Length {n!r}")
            return None
        if length > self.owner.max_body:
            self.close_connection = True
            self._error(413, f"request body too large: the limit is {self.owner.max_body} bytes")
            return None
        data = self.rfile.read(length)
        if len(data) != length:
            self.close_connection = True
            return None
        return data

    def _handle(self) -> None:
        url = urlsplit(self.path)
        handlers, info = _match(self.owner.routes, url.path)
        method = "GET" if self.command == "HEAD" else self.command
        body = self._body()
        if body is None:
            return
        if not handlers:
            self._error(404, f"no such endpoint: {url.path}")
            return
        handler = handlers.get(method)
        if handler is None:
            self._error(405, f"method {self.command} not allowed on {url.path}: use {', '.join(sorted(handlers))}")
            return
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        request = Request(self.command, url.path, query, info, body)
        t0 = time.perf_counter()
        try:
            resp = self.owner.run(handler(request))
        except Exception as e:  # the handlers answer their own errors; this is the loop gone
            log.error("%s %s: %s", self.command, url.path, e)
            self._error(503, f"service unavailable: {e}")
            return
        log.debug("%s %s: %d in %.2f ms", self.command, url.path, resp.status, (time.perf_counter() - t0) * 1e3)
        self._send(resp)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = _handle


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class RestServer:
    """Serves ``routes`` on ``host:port`` (0: a free port; ``port`` is the bound one after
    ``start()``); handlers run on ``loop``."""

    def __init__(self, routes: List[Tuple[str, str, Handler]], loop: asyncio.AbstractEventLoop,
                 host: str = "0.0.0.0", port: int = 8080, max_body: int = MAX_BODY_BYTES):
        self.routes = routes
        self.loop = loop
        self.host = host
        self.port = port
        self.max_body = max_body
        self._httpd: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    def run(self, coro: Awaitable[Response]) -> Response:
        """Runs a handler's coroutine on the loop and waits for its answer."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def start(self) -> None:
        """Binds and serves in a daemon thread; OSError naming the address when it cannot bind."""
        handler = type("Handler", (_HTTPHandler,), {"owner": self})
        try:
            self._httpd = _Server((self.host, self.port), handler)
        except OSError as e:
            raise OSError(e.errno, f"cannot listen on {self.host}:{self.port}: {e.strerror}") from e
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="mc-store-rest", daemon=True)
        self._thread.start()

    def close(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
