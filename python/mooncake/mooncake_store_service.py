"""``mooncake.mooncake_store_service``: a store client with a REST API (``mc_store_rest_server``).

The service sets up one ``MooncakeDistributedStore`` from a ``MooncakeConfig`` (``--config FILE``,
or ``MOONCAKE_CONFIG_PATH`` / ``MOONCAKE_*`` through ``MooncakeConfig.load_from_env()``;
``-Dkey=value`` overrides a key), retrying setup for up to ``--max-wait-time`` seconds while the
master comes up, then serves HTTP on ``--port`` (8080) until SIGINT or SIGTERM. The endpoints
are upstream's; bodies are JSON, answers ``{"status": "success", ...}`` or ``{"error": ...}``:

=================================  ================================================================
``PUT /api/put``                   ``{"key", "value"}``: stores the UTF-8 bytes of the string value
``GET /api/get/{key}``             the value's bytes (``application/octet-stream``); 404 on a miss
``GET /api/exist/{key}``           ``{"exists": true|false}``
``DELETE /api/remove/{key}``       removes the key; 404 when absent
``DELETE /api/remove_all``         removes every key: ``{"status": "success removed N keys"}``
``POST /api/mount_shm``            ``{"name", "size", "offset"?, "protocol"?, "location"?}``: mounts
                                   ``/dev/shm/<name>`` as a segment: ``{"segment_ids": [...]}``
``POST /api/unmount_shm``          ``{"segment_ids", "grace_period_seconds"?}``, one by one:
                                   500 with ``failed_segment_ids`` for those that failed
``POST /api/mount``                ``{"size", "protocol"?, "location"?}``: allocates and mounts a
                                   segment: ``{"segment_ids", "allocated_size"}``
``POST /api/unmount``              ``{"segment_ids", "grace_period_seconds"?}``: unmounts and frees
``POST /api/unmount_local_disk``   ``{"grace_period_seconds"?}`` (0-3600): withdraws this client's
                                   SSD offload tier (a preStop hook)
``POST /api/reconfigure``          ``{"mode": "decode", "path", "size", ...}`` mounts the file as
                                   this node's decode segment, replacing the previous one only once
                                   the new one is mounted; ``{"mode": "prefill"}`` unmounts it
=================================  ================================================================

Bad input gets 400 (a body that is not a JSON object, a missing or mistyped field), a store
failure 500 with the store's code in the message. The handlers are coroutines taking a request
with ``await request.json()`` and ``request.match_info``, returning a response with ``status``,
``text``, ``body`` and ``content_type`` (the shape of upstream's aiohttp handlers); the HTTP
layer is ``mooncake._rest_http`` (standard library only). docs/store.md, "REST service".
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import logging
import signal
import sys
import time
from typing import Any, Dict, List, Optional

from ._rest_http import Response, RestServer, json_response
from .mooncake_config import DEFAULT_CLIENT_HTTP_PORT, MooncakeConfig
from .store import MooncakeDistributedStore

__all__ = ["MooncakeStoreService", "parse_arguments", "main", "sync_main"]

log = logging.getLogger("mooncake.store_service")

# The longest grace period /api/unmount_local_disk takes (upstream's bound): a value in the wrong
# unit holds a preStop hook for an hour at most.
_MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS = 3600
_OBJECT_NOT_FOUND = -704
_RETRY_INTERVAL_S = 1.0


def _shm_name_to_path(name: Any) -> Optional[str]:
    """``/dev/shm/<name>`` for a POSIX shared-memory name ("seg" or "/seg"); None for anything
    that is not one plain file name ("", ".", "..", "a/b", not a string)."""
    if not isinstance(name, str) or not name:
        return None
    base = name[1:] if name.startswith("/") else name
    if not base or "/" in base or base in (".", ".."):
        return None
    return "/dev/shm/" + base


def _unblock_shutdown_signals() -> None:
    """Unblocks SIGINT and SIGTERM in this thread (a parent may have blocked them)."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _install_shutdown_signal_handlers(loop, shutdown_event: asyncio.Event) -> None:
    """SIGINT and SIGTERM set ``shutdown_event`` (through ``loop``)."""
    def request_shutdown(signum) -> None:
        log.info("signal %s: shutting down", signum)
        shutdown_event.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, request_shutdown, sig)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no unix loop
            signal.signal(sig, lambda signum, _frame: loop.call_soon_threadsafe(request_shutdown, signum))


def _bad(msg: str) -> Response:
    return json_response(400, {"error": msg})


def _failed(msg: str, **extra: Any) -> Response:
    return json_response(500, {"error": msg, **extra})


def _ok(**fields: Any) -> Response:
    return json_response(200, {"status": "success", **fields})


def _failures_answered(what: str):
    """Wraps a request handler: an exception it raises is logged under what and answered 500
    with its message (upstream's handlers catch everything the same way)."""
    def wrap(handler):
        @functools.wraps(handler)
        async def answer(self, request) -> Response:
            try:
                return await handler(self, request)
            except Exception as e:  # noqa: BLE001
                log.error("%s: %s", what, e)
                return _failed(str(e))
        return answer
    return wrap


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


async def _json_object(request) -> Any:
    """The request's JSON object body, or a 400 Response."""
    try:
        data = await request.json()
    except (ValueError, UnicodeDecodeError) as e:
        return _bad(f"Malformed JSON body: {e}")
    if not isinstance(data, dict):
        return _bad("Request body must be a JSON object")
    return data


def _segment_ids(data: Dict[str, Any]) -> Any:
    """The ``segment_ids`` of a request (a string is one id), or a 400 Response."""
    ids = data.get("segment_ids", [])
    if isinstance(ids, str):
        ids = [ids]
    if not ids:
        return _bad("Missing segment_ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) and i for i in ids):
        return _bad("segment_ids must be a segment id or a list of them (strings)")
    return ids


def _grace(data: Dict[str, Any], limit: Optional[int] = None) -> Any:
    """The ``grace_period_seconds`` of a request (default 0), or a 400 Response."""
    g = data.get("grace_period_seconds", 0)
    if not _is_count(g) or g < 0 or (limit is not None and g > limit):
        bound = f" no greater than {limit}" if limit is not None else ""
        return _bad(f"Invalid grace_period_seconds, must be a non-negative integer{bound}")
    return g


class MooncakeStoreService:
    """A store client and its REST API. ``MooncakeStoreService(config_path=None,
    cli_config=None)`` reads the config (the file, else the environment) and applies
    ``cli_config`` (key -> value, as ``-D`` gives them, parsed as the file's values);
    ``await start_store_service()`` sets the store up, ``await start_http_service(port)``
    serves, ``await stop()`` closes both."""

    def __init__(self, config_path: Optional[str] = None, cli_config: Optional[Dict[str, Any]] = None):
        self.store = None
        self.http = None
        self.current_mode = "prefill"  # "decode" while /api/reconfigure's segments are mounted
        self.mounted_segment_ids: List[str] = []  # the decode segments
        self.last_mount_info: Dict[str, Any] = {}  # the decode mount's parameters
        self._state_lock = asyncio.Lock()  # serializes reconfigure / unmount_shm
        config = MooncakeConfig.from_file(config_path) if config_path else MooncakeConfig.load_from_env()
        if cli_config:
            fields = dataclasses.asdict(config)
            extra = fields.pop("extra")
            fields.update(extra)
            fields.update(cli_config)
            config = MooncakeConfig.from_dict(fields, "-D overrides")
        self.config = config
        log.info("store service config: master %s, metadata %s, protocol %s, segment %d bytes",
                 config.master_server_address, config.metadata_server, config.protocol,
                 config.global_segment_size)

    # ---- life cycle ---------------------------------------------------------------------------
    def _setup_dict(self) -> Dict[str, Any]:
        c = self.config
        return {
            "local_hostname": c.local_hostname,
            "metadata_server": c.metadata_server,
            "global_segment_size": c.global_segment_size,
            "local_buffer_size": c.local_buffer_size,
            "protocol": c.protocol,
            "rdma_devices": c.device_name,
            "master_server_addr": c.master_server_address,
            "enable_ssd_offload": c.enable_ssd_offload,
            "ssd_offload_path": c.ssd_offload_path,
            "tenant_id": c.tenant_id,
            "enable_client_http_server": getattr(c, "enable_client_http_server", False),
            "client_http_port": getattr(c, "client_http_port", DEFAULT_CLIENT_HTTP_PORT),
        }

    async def start_store_service(self, max_wait_time: float = 60, shutdown_event: Optional[asyncio.Event] = None) -> bool:
        """Sets the store up, retrying every second until it works or ``max_wait_time`` seconds
        have passed (False then); False at once when ``shutdown_event`` is set, the store closed."""
        start = time.perf_counter()
        attempt = 0
        if shutdown_event is not None:
            await asyncio.sleep(0)  # a signal that came just before
        while True:
            if shutdown_event is not None and shutdown_event.is_set():
                log.info("store startup cancelled: shutdown requested")
                return False
            elapsed = time.perf_counter() - start
            if elapsed >= max_wait_time:
                log.error("store startup failed: no success in %.1f s (%d attempts)", max_wait_time, attempt)
                return False
            attempt += 1
            try:
                self.store = MooncakeDistributedStore()
                ret = self.store.setup(self._setup_dict())
                if shutdown_event is not None:
                    await asyncio.sleep(0)  # setup blocked the loop: see a signal it held up
                    if shutdown_event.is_set():
                        log.info("store startup cancelled: shutdown requested")
                        await self.stop()
                        return False
                if ret != 0:
                    raise RuntimeError(f"setup returned {ret}")
                log.info("store set up on %s (attempt %d)", self.config.local_hostname, attempt)
                return True
            except Exception as e:
                self.store = None
                left = max_wait_time - (time.perf_counter() - start)
                pause = min(_RETRY_INTERVAL_S, left) if left > 0 else 0
                log.warning("store startup attempt %d failed: %s; next in %.1f s (%.1f s left)",
                            attempt, e, pause, max(left, 0))
                if pause <= 0:
                    continue
                if shutdown_event is None:
                    await asyncio.sleep(pause)
                    continue
                try:
                    await asyncio.wait_for(shutdown_event.wait(), timeout=pause)
                except asyncio.TimeoutError:
                    continue
                log.info("store startup cancelled: shutdown requested")
                return False

    def _routes(self):
        return [
            ("POST", "/api/reconfigure", self.handle_reconfigure),
            ("POST", "/api/mount_shm", self.handle_mount_shm),
            ("POST", "/api/unmount_shm", self.handle_unmount_shm),
            ("POST", "/api/mount", self.handle_mount),
            ("POST", "/api/unmount", self.handle_unmount),
            ("POST", "/api/unmount_local_disk", self.handle_unmount_local_disk),
            ("PUT", "/api/put", self.handle_put),
            ("GET", "/api/get/{key}", self.handle_get),
            ("GET", "/api/exist/{key}", self.handle_exist),
            ("DELETE", "/api/remove/{key}", self.handle_remove),
            ("DELETE", "/api/remove_all", self.handle_remove_all),
        ]

    async def start_http_service(self, port: int = 8080, host: str = "0.0.0.0") -> bool:
        """Serves the REST API on ``host:port`` (0: a free port, then ``self.http.port``);
        OSError when the port cannot be bound."""
        self.http = RestServer(self._routes(), asyncio.get_running_loop(), host, port)
        self.http.start()
        log.info("REST API listening on %s:%d", host, self.http.port)
        return True

    async def stop(self) -> None:
        """Stops serving and closes the store (a no-op the second time)."""
        http, self.http = getattr(self, "http", None), None
        if http is not None:
            await asyncio.to_thread(http.close)
        store, self.store = self.store, None
        if store is not None:
            ret = store.close()
            if ret != 0:
                log.warning("store close returned %s", ret)
            else:
                log.info("store closed")

    # ---- /api/reconfigure -----------------------------------------------------------------------
    @_failures_answered("RECONFIGURE")
    async def handle_reconfigure(self, request) -> Response:
        data = await _json_object(request)
        if isinstance(data, Response):
            return data
        mode = data.get("mode", "")
        mode = mode.lower() if isinstance(mode, str) else ""
        if mode == "decode":
            return await self._to_decode(data)
        if mode == "prefill":
            return await self._to_prefill()
        return _bad("Invalid mode. Use 'decode' or 'prefill'")

    async def _to_decode(self, data: Dict[str, Any]) -> Response:
        path, size = data.get("path"), data.get("size")
        offset = data.get("offset", 0)
        protocol = data.get("protocol", self.config.protocol)
        location = data.get("location", "")
        if not path or size is None:
            return _bad("Missing path or size for decode mode")
        if not isinstance(path, str) or not _is_count(size) or size <= 0 or not _is_count(offset) or offset < 0:
            return _bad("Invalid path, size or offset: path a string, size a positive integer, offset >= 0")
        async with self._state_lock:
            previous = list(self.mounted_segment_ids)
            # make before break: the new segment first; the old ones go only once it is mounted
            result = self.store.mount_segment(path, size, offset, protocol, location)
            ret = result["ret"]
            if ret != 0:
                if previous:
                    log.warning("reconfigure decode: mounting %s failed (%s); keeping previous decode segments",
                                path, ret)
                    return _failed(f"Mount failed, ret={ret}; keeping previous decode segments",
                                   mode=self.current_mode)
                log.error("reconfigure decode: mounting %s failed (%s); rolled back to prefill", path, ret)
                self.current_mode = "prefill"
                self.mounted_segment_ids.clear()
                self.last_mount_info.clear()
                return _failed(f"Mount failed, ret={ret}; rolled back to prefill", mode=self.current_mode)
            # one id at a time: a batch reports only its first error, not which ids are gone
            left = [sid for sid in previous if self.store.unmount_segment([sid]) != 0]
            if left:
                log.warning("reconfigure decode: unmounting previous segments %s failed; still tracked", left)
            self.mounted_segment_ids = list(result["segment_ids"]) + left
            self.current_mode = "decode"
            self.last_mount_info = {"path": path, "offset": offset, "size": size, "protocol": protocol,
                                    "location": location}
            return _ok(mode=self.current_mode, segment_ids=list(self.mounted_segment_ids))

    async def _to_prefill(self) -> Response:
        async with self._state_lock:
            failed = []
            for sid in list(self.mounted_segment_ids):
                ret = self.store.unmount_segment([sid])
                if ret != 0:
                    failed.append((sid, ret))
                else:
                    self.mounted_segment_ids.remove(sid)
            if failed:
                log.error("reconfigure prefill: unmounting %s failed", failed)
                return _failed(f"Unmount failed, ret={failed[0][1]}", failed_segment_ids=[s for s, _ in failed],
                               mode=self.current_mode)
            self.current_mode = "prefill"
            self.last_mount_info.clear()
            return _ok(mode=self.current_mode)

    # ---- segments -----------------------------------------------------------------------------
    @_failures_answered("MOUNT_SHM")
    async def handle_mount_shm(self, request) -> Response:
        data = await _json_object(request)
        if isinstance(data, Response):
            return data
        path = _shm_name_to_path(data.get("name"))
        size, offset = data.get("size"), data.get("offset", 0)
        if not path or not _is_count(size) or size <= 0:
            return _bad("Missing or invalid name or size: name a file name in /dev/shm, size a positive integer")
        if not _is_count(offset) or offset < 0:
            return _bad("Invalid offset, must be a non-negative integer")
        result = self.store.mount_segment(path, size, offset, data.get("protocol", self.config.protocol),
                                          data.get("location", ""))
        if result["ret"] != 0:
            log.error("MOUNT_SHM %s: mount_segment returned %s", path, result["ret"])
            return _failed(f"Mount failed, ret={result['ret']}")
        return _ok(segment_ids=list(result["segment_ids"]))

    @_failures_answered("UNMOUNT_SHM")
    async def handle_unmount_shm(self, request) -> Response:
        data = await _json_object(request)
        if isinstance(data, Response):
            return data
        ids = _segment_ids(data)
        if isinstance(ids, Response):
            return ids
        grace = _grace(data)
        if isinstance(grace, Response):
            return grace
        failed = []
        async with self._state_lock:
            for sid in ids:
                if self.store.unmount_segment([sid], grace) != 0:
                    failed.append(sid)
                elif sid in self.mounted_segment_ids:
                    self.mounted_segment_ids.remove(sid)
            if not self.mounted_segment_ids:
                self.current_mode = "prefill"
        if failed:
            log.error("UNMOUNT_SHM: unmounting %s failed", failed)
            return _failed("Unmount failed for one or more segments", failed_segment_ids=failed)
        return _ok()

    @_failures_answered("MOUNT")
    async def handle_mount(self, request) -> Response:
        data = await _json_object(request)
        if isinstance(data, Response):
            return data
        size = data.get("size")
        if not _is_count(size) or size <= 0:
            return _bad("Invalid size, must be a positive integer")
        result = self.store.allocate_and_mount_segment(size, data.get("protocol", self.config.protocol),
                                                       data.get("location", ""))
        if result["ret"] != 0:
            log.error("MOUNT: allocate_and_mount_segment(%d) returned %s", size, result["ret"])
            return _failed(f"Allocate and mount failed, ret={result['ret']}")
        return _ok(segment_ids=list(result["segment_ids"]), allocated_size=result["allocated_size"])

    @_failures_answered("UNMOUNT")
    async def handle_unmount(self, request) -> Response:
        data = await _json_object(request)
        if isinstance(data, Response):
            return data
        ids = _segment_ids(data)
        if isinstance(ids, Response):
            return ids
        grace = _grace(data)
        if isinstance(grace, Response):
            return grace
        ret = self.store.unmount_and_free_segment(ids, grace)
        if ret != 0:
            log.error("UNMOUNT %s: unmount_and_free_segment returned %s", ids, ret)
            return _failed(f"Unmount and free failed, ret={ret}")
        return _ok()

    @_failures_answered("UNMOUNT_LOCAL_DISK")
    async def handle_unmount_local_disk(self, request) -> Response:
        """Withdraws this client's SSD offload tier: the master stops sending readers here; the
        call then waits ``grace_period_seconds`` (off the loop) for reads in flight."""
        data = await _json_object(request)
        if isinstance(data, Response):
            return data
        grace = _grace(data, _MAX_UNMOUNT_LOCAL_DISK_GRACE_PERIOD_SECONDS)
        if isinstance(grace, Response):
            return grace
        ret = await asyncio.to_thread(self.store.unmount_local_disk_segment, grace)
        if ret != 0:
            log.error("UNMOUNT_LOCAL_DISK: unmount_local_disk_segment returned %s", ret)
            return _failed(f"Unmount local disk failed, ret={ret}")
        return _ok()

    # ---- keys ---------------------------------------------------------------------------------
    @_failures_answered("PUT")
    async def handle_put(self, request) -> Response:
        data = await _json_object(request)
        if isinstance(data, Response):
            return data
        key, value = data.get("key"), data.get("value")
        if not key or value is None:
            return _bad("Missing key or value")
        if not isinstance(key, str) or not isinstance(value, str):
            return _bad("key and value must be strings")
        ret = self.store.put(key, value.encode())
        if ret != 0:
            log.error("PUT %r: put returned %s", key, ret)
            return _failed(f"PUT operation failed, ret={ret}")
        return _ok()

    def _exists(self, key: str) -> Optional[Response]:
        """None when ``key`` exists, else its 404 / 500 answer."""
        exists = self.store.is_exist(key)
        if exists == 0:
            return json_response(404, {"error": "Key not found"})
        if exists < 0:
            log.error("is_exist(%r) returned %s", key, exists)
            return _failed("Exist check failed")
        return None

    @_failures_answered("GET")
    async def handle_get(self, request) -> Response:
        key = request.match_info["key"]
        miss = self._exists(key)
        if miss is not None:
            return miss
        value = self.store.get(key)
        if value is None:
            log.error("GET %r: get returned None", key)
            return _failed("GET operation failed")
        if value == b"":  # an empty value, or the key went away in between
            miss = self._exists(key)
            if miss is not None:
                return miss
        return Response(status=200, body=value, content_type="application/octet-stream")

    @_failures_answered("EXIST")
    async def handle_exist(self, request) -> Response:
        key = request.match_info["key"]
        exists = self.store.is_exist(key)
        if exists < 0:
            log.error("EXIST %r: is_exist returned %s", key, exists)
            return _failed("Exist check failed")
        return json_response(200, {"exists": exists > 0})

    @_failures_answered("REMOVE")
    async def handle_remove(self, request) -> Response:
        key = request.match_info["key"]
        ret = self.store.remove(key)
        if ret == _OBJECT_NOT_FOUND:
            return json_response(404, {"error": "Key not found"})
        if ret != 0:
            log.error("REMOVE %r: remove returned %s", key, ret)
            return _failed(f"Remove operation failed, ret={ret}")
        return _ok()

    @_failures_answered("REMOVE_ALL")
    async def handle_remove_all(self, request) -> Response:
        ret = self.store.remove_all()
        if ret < 0:
            log.error("REMOVE_ALL: remove_all returned %s", ret)
            return _failed(f"RemoveAll operation failed, ret={ret}")
        return json_response(200, {"status": f"success removed {ret} keys"})


def parse_arguments(argv: Optional[List[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="mc_store_rest_server",
                                 description="A Mooncake Store client with a REST API (docs/store.md)")
    ap.add_argument("--config", help="MooncakeConfig JSON file (default: MOONCAKE_CONFIG_PATH, "
                                     "else the MOONCAKE_* environment variables)")
    ap.add_argument("-D", "--define", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config key, e.g. -Dlocal_hostname=node1 (repeatable)")
    ap.add_argument("--port", type=int, default=8080, help="HTTP port of the REST API (0: a free one)")
    ap.add_argument("--host", default="0.0.0.0", help="address the REST API binds")
    ap.add_argument("--max-wait-time", type=float, default=60,
                    help="seconds to keep retrying the store's setup (the master may be starting)")
    return ap.parse_args(argv)


def _defines(items: List[str]) -> Dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"-D {item!r}: want KEY=VALUE")
        out[key.strip()] = value
    return out


async def main() -> None:
    """Runs the service until SIGINT/SIGTERM (``mc_store_rest_server``)."""
    args = parse_arguments()
    service = MooncakeStoreService(args.config, _defines(args.define))
    shutdown_event = asyncio.Event()
    _install_shutdown_signal_handlers(asyncio.get_running_loop(), shutdown_event)
    _unblock_shutdown_signals()
    try:
        if not await service.start_store_service(max_wait_time=args.max_wait_time, shutdown_event=shutdown_event):
            if shutdown_event.is_set():
                return
            raise RuntimeError(f"the store could not be set up in {args.max_wait_time} s "
                               f"(master {service.config.master_server_address})")
        await asyncio.sleep(0)
        if shutdown_event.is_set():
            return
        await service.start_http_service(args.port, getattr(args, "host", "0.0.0.0"))
        # one line a script can wait for (the port really bound: --port 0 picks one)
        print(f"mc_store_rest_server: REST API ready on port {service.http.port}", flush=True)
        await shutdown_event.wait()
    finally:
        await service.stop()


def sync_main() -> int:
    """The ``mc_store_rest_server`` command: 0 after a clean shutdown, 1 with a message on error."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(main())
    except (ValueError, OSError, RuntimeError) as e:
        print(f"mc_store_rest_server: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(sync_main())
