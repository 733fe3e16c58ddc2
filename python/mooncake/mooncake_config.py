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

Sizes are integers (bytes) or strings with a binary unit ("80GB" = 80 GiB, "512MB", "1.5g",
"4096"); a percentage or an unknown unit is refused with an error naming the key. Missing keys
take these defaults: ``local_hostname`` the machine's host name (vLLM's guides leave it out),
``metadata_server`` "P2PHANDSHAKE", ``global_segment_size`` DEFAULT_GLOBAL_SEGMENT_SIZE,
``local_buffer_size`` DEFAULT_LOCAL_BUFFER_SIZE, ``protocol`` "tcp", ``device_name`` "".
``master_server_address`` is required. Other keys that clients' configuration files carry
(``mode``, ...) are kept in ``extra`` and do not change the store; a key nobody knows is an error.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from .store import parse_size

__all__ = ["MooncakeConfig", "DEFAULT_GLOBAL_SEGMENT_SIZE", "DEFAULT_LOCAL_BUFFER_SIZE"]

DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200  # 3.125 GiB, as upstream's
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824  # 1 GiB, as upstream's

# keys of a config file that the store does not use but that clients' files carry
_PASSIVE_KEYS = {"mode", "enable_egm_store_pool", "egm_numa_nodes", "transfer_timeout", "replica_num",
                 "fast_transfer", "fast_transfer_buffer_size"}
_KEYS = {"local_hostname", "metadata_server", "global_segment_size", "local_buffer_size", "protocol",
         "device_name", "master_server_address", "enable_ssd_offload", "ssd_offload_path", "tenant_id"}


def _parse_bool(v: Any, key: str) -> bool:
    if isinstance(v, bool) or v is None:
        return bool(v)
    if isinstance(v, (int, float)):
        return v != 0
    low = str(v).strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off", ""):
        return False
    raise ValueError(f"mooncake config: {key}: {v!r} is not a boolean")


def _size(v: Any, key: str) -> int:
    try:
        return parse_size(v, key)
    except ValueError as e:
        raise ValueError(f"mooncake config: {e}") from None


@dataclass
class MooncakeConfig:
    """The arguments of ``MooncakeDistributedStore.setup`` (upstream's names)."""

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
    extra: Dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def from_dict(config: Dict[str, Any], source: str = "config") -> "MooncakeConfig":
        """A config from a dict of a config file's keys (see the module doc)."""
        if not isinstance(config, dict):
            raise ValueError(f"mooncake config {source}: want a JSON object, got {type(config).__name__}")
        unknown = set(config) - _KEYS - _PASSIVE_KEYS
        if unknown:
            raise ValueError(f"mooncake config {source}: unknown key(s) {sorted(unknown)}; "
                             f"known: {sorted(_KEYS | _PASSIVE_KEYS)}")
        if not config.get("master_server_address"):
            raise ValueError(f"mooncake config {source}: missing required key 'master_server_address'")
        tenant = config.get("tenant_id")
        return MooncakeConfig(
            local_hostname=str(config.get("local_hostname") or socket.gethostname()),
            metadata_server=str(config.get("metadata_server") or "P2PHANDSHAKE"),
            global_segment_size=_size(config.get("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE),
                                      "global_segment_size"),
            local_buffer_size=_size(config.get("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE), "local_buffer_size"),
            protocol=str(config.get("protocol") or "tcp"),
            device_name=str(config.get("device_name") or ""),
            master_server_address=str(config["master_server_address"]),
            enable_ssd_offload=_parse_bool(config.get("enable_ssd_offload", False), "enable_ssd_offload"),
            ssd_offload_path=str(config.get("ssd_offload_path") or ""),
            tenant_id=str(tenant) if tenant is not None else "default",
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
        MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, MOONCAKE_TENANT_ID."""
        path = os.environ.get("MOONCAKE_CONFIG_PATH")
        if path:
            return MooncakeConfig.from_file(path)
        master = os.environ.get("MOONCAKE_MASTER")
        if not master:
            raise ValueError("neither MOONCAKE_CONFIG_PATH nor MOONCAKE_MASTER is set")
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
            enable_ssd_offload=_parse_bool(env("MOONCAKE_OFFLOAD_ENABLED", "false"), "MOONCAKE_OFFLOAD_ENABLED"),
            ssd_offload_path=env("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""),
            tenant_id=env("MOONCAKE_TENANT_ID", "default"),
        )

    def to_setup_dict(self) -> Dict[str, Any]:
        """The keyword arguments of ``MooncakeDistributedStore.setup`` for this config."""
        return {
            "local_hostname": self.local_hostname, "metadata_server": self.metadata_server,
            "global_segment_size": self.global_segment_size, "local_buffer_size": self.local_buffer_size,
            "protocol": self.protocol, "rdma_devices": self.device_name or "",
            "master_server_addr": self.master_server_address, "enable_ssd_offload": self.enable_ssd_offload,
            "ssd_offload_path": self.ssd_offload_path, "tenant_id": self.tenant_id,
        }
