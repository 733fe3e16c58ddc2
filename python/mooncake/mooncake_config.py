"""``mooncake.mooncake_config``: the client configuration file of Mooncake Store.

``MooncakeConfig`` holds the arguments of ``MooncakeDistributedStore.setup``. It is read from a
JSON file (``MooncakeConfig.from_file(path)``), or by ``MooncakeConfig.load_from_env()`` from the
file named by ``MOONCAKE_CONFIG_PATH`` or, without it, from ``MOONCAKE_*`` environment
variables. Pass it to ``store.setup(config)``.

A file (the keys of upstream's)::

    {
      "local_hostname": "node1",
      "metadata_server": "P2PHANDSHAKE",
      "master_server_address": "node0:50051",
      "global_segment_size": "80GB",
      "local_buffer_size": "512MB",
      "protocol": "tcp",
      "device_name": ""
    }

``local_hostname``, ``metadata_server`` and ``master_server_address`` are required (present and
not blank), as upstream's. Sizes are integers (bytes) or strings with a binary unit ("80GB" =
80 GiB, "512MB", "1.5g", "4096", "1e9"); a percentage or an unknown unit is refused with an
error naming the key. Missing keys take these defaults: ``global_segment_size``
DEFAULT_GLOBAL_SEGMENT_SIZE, ``local_buffer_size`` DEFAULT_LOCAL_BUFFER_SIZE, ``protocol``
"tcp", ``device_name`` "", ``tenant_id`` "default", ``enable_client_http_server`` false,
``client_http_port`` 9300. The protocol is lower-cased; one this module does not know is logged
as a warning (``logger``) and passed on, as upstream's (setup refuses what the store cannot
use). Other keys that clients' configuration files carry (``mode``, ...) are kept in ``extra``
and do not change the store; a key nobody knows is an error.

``enable_client_http_server`` (upstream's client-local /health and /metrics endpoints) is read,
but this client has none: ``setup`` refuses a config that turns it on (INVALID_PARAMS).
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from .store import _parse_bool, parse_size

__all__ = ["MooncakeConfig", "DEFAULT_GLOBAL_SEGMENT_SIZE", "DEFAULT_LOCAL_BUFFER_SIZE", "DEFAULT_CLIENT_HTTP_PORT",
           "KNOWN_PROTOCOLS"]

logger = logging.getLogger(__name__)

DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200  # 3.125 GiB, as upstream's
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824  # 1 GiB, as upstream's
DEFAULT_CLIENT_HTTP_PORT = 9300  # upstream's

# Protocols the engines of Mooncake know (upstream's list); another one gets a warning, not an
# error, and setup decides.
KNOWN_PROTOCOLS = frozenset({"tcp", "rdma", "efa", "nvmeof", "nvlink", "musa", "nvlink_intra", "hip",
                             "barex", "cxl", "ascend", "ub", "ubshmem", "maca", "sunrise_link", "rpc_only"})
_REQUIRED = ("local_hostname", "metadata_server", "master_server_address")

# keys of a config file that the store does not use but that clients' files carry
_PASSIVE_KEYS = {"mode", "enable_egm_store_pool", "egm_numa_nodes", "transfer_timeout", "replica_num",
                 "fast_transfer", "fast_transfer_buffer_size"}
_KEYS = {"local_hostname", "metadata_server", "global_segment_size", "local_buffer_size", "protocol",
         "device_name", "master_server_address", "enable_ssd_offload", "ssd_offload_path", "tenant_id",
         "enable_client_http_server", "client_http_port"}


def _parse_segment_size(value: Any) -> int:
    """A size in bytes from an int, a float (truncated) or a string with an optional binary
    unit ("3 GB", "512mb", "1.5k", "4096b", "1e9"); ValueError for "", "gb", "50%", "abc"
    (upstream's name; the store's ``parse_size`` does the parsing)."""
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        return value  # MooncakeConfig refuses it, naming the field
    return parse_size(value, "size")


def _size(v: Any, key: str) -> int:
    try:
        return parse_size(v, key)
    except ValueError as e:
        raise ValueError(f"mooncake config: {e}") from None


def _port(v: Any, key: str) -> int:
    try:
        if isinstance(v, bool) or (isinstance(v, float) and not math.isfinite(v)):
            raise ValueError
        port = int(v.strip()) if isinstance(v, str) else int(v)
        if port != v and not isinstance(v, str):
            raise ValueError
    except (TypeError, ValueError):
        raise ValueError(f"mooncake config: {key}: {v!r} is not a port") from None
    if not 0 < port <= 65535:
        raise ValueError(f"mooncake config: {key}: {port} is not a port (1-65535)")
    return port


@dataclass
class MooncakeConfig:
    """The arguments of ``MooncakeDistributedStore.setup`` (upstream's names). Constructing one
    checks it: ``protocol`` a non-blank string (lower-cased and stripped; an unknown one is
    logged as a warning), sizes not negative, ``local_hostname``, ``metadata_server`` and
    ``master_server_address`` non-blank strings, ``client_http_port`` a port; ValueError naming
    the field otherwise."""

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: Optional[str]
    master_server_address: str
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""
    tenant_id: str = "default"
    enable_client_http_server: bool = False
    client_http_port: int = DEFAULT_CLIENT_HTTP_PORT
    extra: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.protocol, str) or not self.protocol.strip():
            raise ValueError(f"Invalid protocol: {self.protocol!r}: want a non-empty string such as 'tcp'")
        self.protocol = self.protocol.strip().lower()
        if self.protocol not in KNOWN_PROTOCOLS:
            logger.warning("Unrecognised protocol %r: passed on to setup, which refuses it if the store "
                           "cannot use it; known protocols: %s", self.protocol, ", ".join(sorted(KNOWN_PROTOCOLS)))
        for name in ("global_segment_size", "local_buffer_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"Invalid {name}: {v!r}: want a size in bytes, 0 or more")
        for name in _REQUIRED:
            v = getattr(self, name)
            if not isinstance(v, str) or not v.strip():
                raise ValueError(f"Config field {name!r} must be a non-empty string, got {v!r}")
        self.client_http_port = _port(self.client_http_port, "client_http_port")

    @staticmethod
    def from_dict(config: Dict[str, Any], source: str = "config") -> "MooncakeConfig":
        """A config from a dict of a config file's keys (see the module doc)."""
        if not isinstance(config, dict):
            raise ValueError(f"mooncake config {source}: want a JSON object, got {type(config).__name__}")
        unknown = set(config) - _KEYS - _PASSIVE_KEYS
        if unknown:
            raise ValueError(f"mooncake config {source}: unknown key(s) {sorted(unknown)}; "
                             f"known: {sorted(_KEYS | _PASSIVE_KEYS)}")
        for name in _REQUIRED:
            if name not in config:
                raise ValueError(f"Missing required config field: {name} (in {source})")
        tenant = config.get("tenant_id")
        ssd_path = config.get("ssd_offload_path")
        protocol = config.get("protocol", "tcp")
        return MooncakeConfig(
            local_hostname=config["local_hostname"],
            metadata_server=config["metadata_server"],
            global_segment_size=_size(config.get("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE),
                                      "global_segment_size"),
            local_buffer_size=_size(config.get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE), "local_buffer_size"),
            protocol="tcp" if protocol is None else protocol,
            device_name=str(config.get("device_name") or ""),
            master_server_address=config["master_server_address"],
            enable_ssd_offload=_parse_bool(config.get("enable_ssd_offload", False), "mooncake config: enable_ssd_offload"),
            ssd_offload_path=str(ssd_path) if ssd_path is not None else "",
            tenant_id=str(tenant) if tenant is not None else "default",
            enable_client_http_server=_parse_bool(config.get("enable_client_http_server", False),
                                                  "mooncake config: enable_client_http_server"),
            client_http_port=_port(config.get("client_http_port", DEFAULT_CLIENT_HTTP_PORT), "client_http_port"),
            extra={k: v for k, v in config.items() if k in _PASSIVE_KEYS},
        )

    @staticmethod
    def from_file(file_path: str) -> "MooncakeConfig":
        """Loads the config from a JSON file."""
        with open(file_path) as f:
            try:
                config = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"mooncake config {file_path}: not valid JSON: {e}") from None
        return MooncakeConfig.from_dict(config, file_path)

    @staticmethod
    def load_from_env() -> "MooncakeConfig":
        """The config of the file MOONCAKE_CONFIG_PATH names; without it, one from the
        environment: MOONCAKE_MASTER (required), MOONCAKE_LOCAL_HOSTNAME,
        MOONCAKE_TE_META_DATA_SERVER, MOONCAKE_GLOBAL_SEGMENT_SIZE, MOONCAKE_LOCAL_BUFFER_SIZE,
        MOONCAKE_PROTOCOL, MOONCAKE_DEVICE, MOONCAKE_OFFLOAD_ENABLED,
        MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, MOONCAKE_TENANT_ID, MOONCAKE_ENABLE_CLIENT_HTTP_SERVER,
        MOONCAKE_CLIENT_HTTP_PORT."""
        path = os.environ.get("MOONCAKE_CONFIG_PATH")
        if path:
            return MooncakeConfig.from_file(path)
        master = os.environ.get("MOONCAKE_MASTER")
        if not master:
            raise ValueError("Neither the environment variable 'MOONCAKE_CONFIG_PATH' nor 'MOONCAKE_MASTER' is set.")
        env = os.environ.get
        return MooncakeConfig(
            local_hostname=env("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            metadata_server=env("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            global_segment_size=_size(env("MOONCAKE_GLOBAL_SEGMENT_SIZE", DEFAULT_GLOBAL_SEGMENT_SIZE),
                                      "MOONCAKE_GLOBAL_SEGMENT_SIZE"),
            local_buffer_size=_size(env("MOONCAKE_LOCAL_BUFFER_SIZE", DEFAULT_LOCAL_BUFFER_SIZE),
                                    "MOONCAKE_LOCAL_BUFFER_SIZE"),
            protocol=env("MOONCAKE_PROTOCOL", "tcp"),
            device_name=env("MOONCAKE_DEVICE", ""),
            master_server_address=master,
            enable_ssd_offload=_parse_bool(env("MOONCAKE_OFFLOAD_ENABLED", "false"), "mooncake config: MOONCAKE_OFFLOAD_ENABLED"),
            ssd_offload_path=env("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""),
            tenant_id=env("MOONCAKE_TENANT_ID", "default"),
            enable_client_http_server=_parse_bool(env("MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "false"),
                                                  "mooncake config: MOONCAKE_ENABLE_CLIENT_HTTP_SERVER"),
            client_http_port=_port(env("MOONCAKE_CLIENT_HTTP_PORT", DEFAULT_CLIENT_HTTP_PORT), "MOONCAKE_CLIENT_HTTP_PORT"),
        )

    def to_setup_dict(self) -> Dict[str, Any]:
        """The keyword arguments of ``MooncakeDistributedStore.setup`` for this config."""
        return {
            "local_hostname": self.local_hostname, "metadata_server": self.metadata_server,
            "global_segment_size": self.global_segment_size, "local_buffer_size": self.local_buffer_size,
            "protocol": self.protocol, "rdma_devices": self.device_name or "",
            "master_server_addr": self.master_server_address, "enable_ssd_offload": self.enable_ssd_offload,
            "ssd_offload_path": self.ssd_offload_path, "tenant_id": self.tenant_id,
            "enable_client_http_server": self.enable_client_http_server, "client_http_port": self.client_http_port,
        }
