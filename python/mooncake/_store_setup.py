"""``mooncake._store_setup``: setting a store up and closing it — size parsing
(``parse_size``), setup()'s defaults and config-dict keys, and the lifecycle calls
(``SetupMixin``: ``setup``, ``setup_dummy``, ``init_all``, ``close``, ``health_check``,
``get_hostname``)."""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Dict, Union

from . import _native
from ._store_abi import ErrorCode, _lib, _u64, byref, last_error
from ._store_memory import _host_free

log = logging.getLogger("mooncake.store")


_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgtp]?)(i?)(b?)\s*$", re.IGNORECASE)


def parse_size(v: Union[int, float, str], name: str = "size") -> int:
    """Parses a size: an int, a float (truncated: 1.5 is 1), or a string like ``"4 GB"``,
    ``"512MB"``, ``"1.5GiB"``, ``"80g"``, ``"1024"``, ``"1e9"``. Units are binary (1 GB = 1024**3
    bytes), as upstream's. A negative size, a percentage or an unknown unit raises ValueError
    naming ``name`` (the setting being parsed)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"{name}: bad size {v!r}: want an int or a string such as \"4GB\"")
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError(f"{name}: bad size {v!r}")
        v = int(v)
    if isinstance(v, int):
        if v < 0:
            raise ValueError(f"{name}: size {v} is negative")
        return v
    m = _SIZE_RE.match(v)
    if not m:
        raise ValueError(f"{name}: bad size {v!r}: want a number with an optional unit "
                         f"(B, KB, MB, GB, TB, PB; K/M/G/T; KiB...), e.g. \"80GB\"")
    mult = 1024 ** " kmgtp".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * mult)


# setup()'s defaults (upstream's).
DEFAULT_SETUP_GLOBAL_SEGMENT_SIZE = 16 * 1024 * 1024
DEFAULT_SETUP_LOCAL_BUFFER_SIZE = 1024 * 1024 * 1024
# the staging buffer the Go client keeps for zero-copy calls from unregistered memory when
# setup asked for no local buffer (local_buffer_size=0)
_NO_BUFFER_STAGING = 16 * 1024 * 1024

# setup(dict) keys: upstream's positional names, MooncakeConfig's spellings, and keys that config
# files carry and that mean nothing here.
_SETUP_KEYS = {"local_hostname", "metadata_server", "global_segment_size", "local_buffer_size",
               "protocol", "rdma_devices", "master_server_addr", "engine", "enable_ssd_offload",
               "ssd_offload_path", "tenant_id"}
_SETUP_ALIASES = {"device_name": "rdma_devices", "master_server_address": "master_server_addr"}
_SETUP_IGNORED = {"mode", "enable_egm_store_pool", "egm_numa_nodes"}
# upstream's client-local HTTP endpoints (/health, /metrics): this client has none, so only
# "off" is accepted (checked in _setup_kwargs; the port is validated and otherwise unused)
_SETUP_CLIENT_HTTP = {"enable_client_http_server", "client_http_port"}


def _is_mooncake_config(x) -> bool:
    return type(x).__name__ == "MooncakeConfig" and hasattr(x, "to_setup_dict")


def _parse_bool(v, name: str) -> bool:
    """A boolean setting from a bool, a number or a string (true/false, 1/0, yes/no, on/off,
    enable/disable)."""
    if isinstance(v, bool) or v is None:
        return bool(v)
    if isinstance(v, (int, float)):
        return v != 0
    low = str(v).strip().lower()
    if low in ("true", "1", "yes", "on", "enable"):
        return True
    if low in ("false", "0", "no", "off", "disable", ""):
        return False
    raise ValueError(f"{name}: {v!r} is not a boolean")


def _client_http(k: str, v: Any) -> None:
    """Checks upstream's client HTTP keys: a valid port, and the server off (ValueError else)."""
    if k == "client_http_port":
        try:
            port = int(str(v).strip()) if not isinstance(v, bool) else -1
        except ValueError:
            port = -1
        if not 0 < port <= 65535:
            raise ValueError(f"client_http_port: {v!r} is not a port (1-65535)")
    elif _parse_bool(v, k):
        raise ValueError("enable_client_http_server: this client has no HTTP endpoints (upstream's "
                         "/health, /metrics); leave it false and scrape mooncake_master's /metrics")


def _setup_kwargs(d: Dict[str, Any]) -> Dict[str, Any]:
    """setup()'s keyword arguments from a config dict (upstream's keys); ValueError naming the
    key for a bad value or an unknown key."""
    known = _SETUP_KEYS | set(_SETUP_ALIASES) | _SETUP_IGNORED | _SETUP_CLIENT_HTTP
    unknown = set(d) - known
    if unknown:
        raise ValueError(f"setup: unknown option(s) {sorted(unknown)}; known: {sorted(known)}")
    out: Dict[str, Any] = {}
    for k, v in d.items():
        if k in _SETUP_IGNORED:
            continue
        if k in _SETUP_CLIENT_HTTP:
            _client_http(k, v)
            continue
        key = _SETUP_ALIASES.get(k, k)
        if key in out:
            raise ValueError(f"setup: both {k!r} and {key!r} given")
        if key in ("global_segment_size", "local_buffer_size"):
            v = parse_size(v, key)
        elif key == "enable_ssd_offload":
            v = _parse_bool(v, key)
        out[key] = v
    return out


class SetupMixin:
    """Lifecycle calls of ``MooncakeDistributedStore``."""

    # ---- lifecycle ----
    def setup(self, local_hostname: Any = "localhost", metadata_server: str = "P2PHANDSHAKE",
              global_segment_size: Union[int, str] = DEFAULT_SETUP_GLOBAL_SEGMENT_SIZE,
              local_buffer_size: Union[int, str] = DEFAULT_SETUP_LOCAL_BUFFER_SIZE,
              protocol: str = "tcp", rdma_devices: str = "",
              master_server_addr: str = "127.0.0.1:50051", engine: Any = None,
              enable_ssd_offload: bool = False, ssd_offload_path: str = "",
              tenant_id: str = "default", **aliases) -> int:
        """Connects to the master and contributes ``global_segment_size`` bytes; 0 or a negative
        code. Upstream's positional order; sizes are ints or strings ("4GB", "512MB").

        Also ``setup(config_dict)`` with those names as keys (and ``device_name`` /
        ``master_server_address``, the MooncakeConfig spellings), or ``setup(MooncakeConfig)``.
        ``engine``: a TransferEngine (or its ``get_engine()``) for the store to run on, so the
        store's segment is that engine's (``get_hostname()`` is its segment name) and it shares
        the engine with the program and, after ``mooncake.pg.set_transfer_engine(engine)``, the
        process groups; the engine must outlive the store and publish its segments where the
        store's ``metadata_server`` says (else INVALID_PARAMS). Without it the first store of
        the process runs on the process's transfer engine, and a store set up while another is
        gets an engine of its own, so each store is its own segment. ``local_buffer_size=0``
        gives a client without a local buffer: the copying calls (put, get, ...) then fail with
        INVALID_PARAMS, as upstream's; the zero-copy ones (put_from, get_into) work.
        ``enable_ssd_offload=True`` keeps evicted objects on this host's disk, in
        ``ssd_offload_path`` or else ``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH`` (master
        ``--enable_offload``); the shared file tier (G3, the master's ``--root_fs_dir``) needs
        nothing here (docs/multi-tier.md). ``tenant_id`` names the key namespace this client
        uses ("default": the one of clients that name none; docs/store.md).

        In the config forms a bad value or an unknown key returns INVALID_PARAMS (logged, naming
        the key), as upstream's; ``enable_client_http_server`` must be false (this client has no
        HTTP endpoints) and ``client_http_port`` is checked."""
        if isinstance(local_hostname, dict) or _is_mooncake_config(local_hostname):
            if _is_mooncake_config(local_hostname):
                d = local_hostname.to_setup_dict()
            else:
                d = dict(local_hostname)
            extra = (metadata_server, global_segment_size, local_buffer_size, protocol, rdma_devices,
                     master_server_addr, engine, enable_ssd_offload, ssd_offload_path, tenant_id)
            defaults = ("P2PHANDSHAKE", DEFAULT_SETUP_GLOBAL_SEGMENT_SIZE, DEFAULT_SETUP_LOCAL_BUFFER_SIZE,
                        "tcp", "", "127.0.0.1:50051", None, False, "", "default")
            if extra != defaults or aliases:
                raise TypeError("setup(config): pass the configuration alone, without other arguments")
            try:
                kwargs = _setup_kwargs(d)
            except ValueError as e:
                # upstream's setup(dict) answers a bad value with INVALID_PARAMS, not an exception
                log.error("MooncakeDistributedStore.setup: %s", e)
                self._setup_error = str(e)
                return ErrorCode.INVALID_PARAMS
            return self.setup(**kwargs)
        unknown = set(aliases) - {"device_name", "master_server_address"}
        if unknown:
            raise TypeError(f"setup() got unexpected keyword argument(s) {sorted(unknown)}")
        if aliases.get("device_name") is not None:
            rdma_devices = aliases["device_name"]
        if aliases.get("master_server_address") is not None:
            master_server_addr = aliases["master_server_address"]
        seg = parse_size(global_segment_size, "global_segment_size")
        buf = parse_size(local_buffer_size, "local_buffer_size")
        if tenant_id is not None and not isinstance(tenant_id, str):
            raise TypeError(f"setup(tenant_id=...): want a str, got {type(tenant_id).__name__}")
        if engine is not None and not hasattr(engine, "get_engine_ptr"):
            raise TypeError(f"setup(engine=...): want a mooncake.engine.TransferEngine, got {type(engine).__name__}")
        opts = {
            "local_hostname": local_hostname or "", "metadata_server": metadata_server or "",
            "global_segment_size": seg, "local_buffer_size": buf or _NO_BUFFER_STAGING,
            "protocol": protocol or "tcp", "rdma_devices": rdma_devices or "",
            "master_server_addr": master_server_addr or "",
            # client-local SSD offload: one flag, read by the Go client (store/client Config)
            "enable_ssd_offload": bool(enable_ssd_offload), "ssd_offload_path": ssd_offload_path or "",
            "tenant_id": tenant_id or "",
            "engine": int(engine.get_engine_ptr()) if engine is not None else 0,
        }
        return self._set_up("setup", lambda l, h: l.mc_store_setup_json(h, json.dumps(opts).encode()), buf)

    def _set_up(self, what: str, call, buf: int) -> int:
        """Creates the native store and runs call(lib, handle) to set it up; 0 or its code."""
        l = _lib()
        with self._lock:
            if self._h:
                log.error("%s: this store is already set up; close() it first", what)
                return ErrorCode.INVALID_PARAMS
            h = _u64()
            rc = l.mc_store_create(byref(h))
            if rc != 0:
                return rc
            rc = call(l, h)
            if rc != 0:
                msg = last_error()
                l.mc_store_close(h)
                log.error("MooncakeDistributedStore.%s failed: %s", what, msg)
                self._setup_error = msg
                return rc
            self._h = h.value
            self._no_buffer = buf == 0
        return 0

    def init_all(self, protocol: str, device_name: str, mount_segment_size: int = 16 * 1024 * 1024) -> int:
        """Upstream compatibility: setup from the environment (MOONCAKE_MASTER, MC_METADATA_SERVER)."""
        import os
        return self.setup(os.environ.get("MC_LOCAL_HOSTNAME", "localhost"),
                          os.environ.get("MC_METADATA_SERVER", "P2PHANDSHAKE"), mount_segment_size,
                          16 * 1024 * 1024, protocol, device_name,
                          os.environ.get("MOONCAKE_MASTER", "127.0.0.1:50051"))

    def close(self) -> int:
        """Unmounts this client's segment (replicas on other clients survive) and releases it."""
        runner, self._task_runner = self._task_runner, None
        if runner is not None:
            runner.stop()
        for ptr in self._pool:
            if ptr not in self._pool_unregistered:
                self.unregister_buffer(ptr)
        with self._lock:
            h, self._h = self._h, 0
        rc = _lib().mc_store_close(h) if h else 0
        pool, self._pool = self._pool, {}
        self._pool_unregistered = set()
        self._pool_bytes, self._mem_pool_limit = 0, None
        for ptr in pool:
            _host_free(ptr)
        return rc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if self._h:
                self.close()
        except Exception:
            pass

    def health_check(self) -> int:
        """0 healthy, 1 not set up, 2 master unreachable."""
        if not self._h:
            return 1
        return _lib().mc_store_health_check(self._h)

    def get_hostname(self) -> str:
        """This client's segment name (``host:port``); "" before setup."""
        if not self._h:
            return ""
        return _native.read_string(_lib().mc_store_get_hostname, self._h, initial=256)

    # ---- hardware- or deployment-bound ----
    def setup_dummy(self, mem_pool_size: Union[int, str], local_buffer_size: Union[int, str],
                    server_address: str) -> int:
        """Sets up as a dummy client of the real client (``mooncake_client --port``) at
        ``server_address`` ("host:port"): the master, metadata server and protocol come from it,
        and this client owns no segment, so what it puts lands in real clients' memory. 0, or
        INVALID_PARAMS when no real client answers there or it refuses (MC_AUTH_TOKEN).
        ``mem_pool_size`` bounds what ``alloc_from_mem_pool`` hands out; ``local_buffer_size``
        is the staging buffer (0: none, as in setup). This client moves its own bytes
        (docs/store.md, "Dummy clients")."""
        pool = parse_size(mem_pool_size, "mem_pool_size")
        buf = parse_size(local_buffer_size, "local_buffer_size")
        if not isinstance(server_address, str):
            raise TypeError(f"setup_dummy(server_address=...): want 'host:port', got {type(server_address).__name__}")
        rc = self._set_up("setup_dummy", lambda l, h: l.mc_store_setup_dummy(
            h, pool, buf or _NO_BUFFER_STAGING, server_address.encode()), buf)
        if rc == 0:
            self._mem_pool_limit = pool
        return rc
