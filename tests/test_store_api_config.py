"""Types and configuration of upstream's store API: SoftPinAction, ReplicateConfig's properties
(wired to the master), setup()'s positional order and config-dict keys, sizes as strings,
MooncakeConfig (file, MOONCAKE_CONFIG_PATH, environment), local_buffer_size=0, the port range of
get_hostname(), and mooncake_master's upstream flag names. Real master, real clients."""

from __future__ import annotations

import ctypes
import json
import logging
import os
import re
import subprocess
from datetime import datetime

import pytest

from conftest import free_port, stop
from test_store import MB, Master, master, master_bin, new_store, run_peer, start_master, store  # noqa: F401
from mooncake.store import ErrorCode, MooncakeDistributedStore, ReplicateConfig, SoftPinAction, parse_size
from mooncake.mooncake_config import DEFAULT_GLOBAL_SEGMENT_SIZE, DEFAULT_LOCAL_BUFFER_SIZE, MooncakeConfig


def _ns(ts: str) -> int:
    """Unix nanoseconds of an RFC 3339 time with up to 9 fractional digits."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", ts)
    assert m, ts
    base = datetime.fromisoformat(m.group(1) + ("+00:00" if m.group(3) == "Z" else m.group(3)))
    return int(base.timestamp()) * 10**9 + int((m.group(2) or "0").ljust(9, "0"))


def _pin(master, key):
    q = json.loads(master.http(f"/query_key?key={key}"))
    if not q["soft_pinned"]:
        return None
    return (_ns(q["soft_pin_until"]) - _ns(q["last_access"])) // 10**6  # ms


# ---- SoftPinAction and ReplicateConfig -----------------------------------------------------

def test_replicate_config_properties():
    assert [a.name for a in SoftPinAction] == ["PRESERVE", "ENABLE", "DISABLE"]
    assert [int(a) for a in SoftPinAction] == [0, 1, 2]
    c = ReplicateConfig()
    assert (c.replica_num, c.nof_replica_num, c.dfs_replica_num) == (1, 0, 0)
    assert c.with_soft_pin is False and c.soft_pin_action == SoftPinAction.PRESERVE
    assert c.soft_pin_ttl_ms is None and c.with_hard_pin is False
    assert c.preferred_segment == "" and c.preferred_segments == []
    assert c.prefer_alloc_in_same_node is False and c.group_ids is None
    c.with_soft_pin = True
    assert c.soft_pin_action == SoftPinAction.ENABLE
    c.with_soft_pin = False
    assert c.soft_pin_action == SoftPinAction.PRESERVE
    c.soft_pin_action = SoftPinAction.DISABLE
    assert not c.with_soft_pin
    c.soft_pin_ttl_ms = 0
    c.soft_pin_ttl_ms = 2**64 - 1
    c.soft_pin_ttl_ms = None
    for bad in (-1, 2**64, 1.5, "10"):
        with pytest.raises(TypeError, match="soft_pin_ttl_ms"):
            c.soft_pin_ttl_ms = bad
    with pytest.raises(ValueError, match="soft_pin_action"):
        c.soft_pin_action = 3
    with pytest.raises(TypeError, match="replica_num"):
        c.replica_num = "2"
    with pytest.raises(ValueError, match="nof_replica_num"):
        c.nof_replica_num = -1
    c.prefer_alloc_in_same_node = "True"  # upstream's reference writes a string
    assert c.prefer_alloc_in_same_node is True
    with pytest.raises(ValueError, match="prefer_alloc_in_same_node"):
        c.prefer_alloc_in_same_node = "maybe"
    c.group_ids = ["a", ""]
    with pytest.raises(TypeError, match="group_ids"):
        c.group_ids = "a"
    with pytest.raises(ValueError, match="preferred_segments"):
        c.preferred_segments = ["a,b"]
    assert "soft_pin_action=DISABLE" in repr(c)
    c2 = ReplicateConfig(replica_num=2, soft_pin_action=SoftPinAction.ENABLE, soft_pin_ttl_ms=5)
    assert c2.with_soft_pin and c2.soft_pin_ttl_ms == 5 and c2.replica_num == 2


def test_soft_pin_ttl_and_action_reach_the_master(master, store):
    c = ReplicateConfig()
    c.soft_pin_action = SoftPinAction.ENABLE
    c.soft_pin_ttl_ms = 60_000
    assert store.put("pin60", b"x" * 100, c) == 0
    assert _pin(master, "pin60") == 60_000
    c.soft_pin_ttl_ms = None  # the master's --default_kv_soft_pin_ttl (30 min)
    assert store.put("pindefault", b"y", c) == 0
    assert _pin(master, "pindefault") == 30 * 60 * 1000
    c.soft_pin_ttl_ms = 0
    assert store.put("pinzero", b"z", c) == 0
    assert _pin(master, "pinzero") is None
    # a TTL without the pin is refused; nothing is stored
    bad = ReplicateConfig()
    bad.soft_pin_ttl_ms = 10
    assert store.put("pinbad", b"w", bad) == ErrorCode.INVALID_PARAMS
    assert store.is_exist("pinbad") == 0
    # upsert: PRESERVE keeps the pin, DISABLE drops it, ENABLE sets a new TTL
    assert store.upsert("pin60", b"new" * 10) == 0
    assert store.get("pin60") == b"new" * 10
    assert _pin(master, "pin60") is not None
    d = ReplicateConfig(soft_pin_action=SoftPinAction.DISABLE)
    assert store.upsert("pin60", b"newer", d) == 0
    assert _pin(master, "pin60") is None
    e = ReplicateConfig(soft_pin_action=SoftPinAction.ENABLE, soft_pin_ttl_ms=5000)
    assert store.upsert("pin60", b"newest", e) == 0
    assert _pin(master, "pin60") == 5000
    # hard pin: a plain remove refuses, a forced one works
    h = ReplicateConfig(with_hard_pin=True)
    assert store.put("hard", b"h", h) == 0
    assert store.remove("hard") == ErrorCode.OBJECT_HAS_LEASE
    assert store.remove("hard", force=True) == 0


def test_preferred_segment_and_same_node(master, store):
    p = run_peer(master, """
        print("READY", flush=True)
        sys.stdin.readline()
        s.close()
    """, wait=False, stdin=subprocess.PIPE)
    try:
        peer = p.stdout.readline().split()[1]
        assert p.stdout.readline().strip() == "READY"
        for i in range(4):
            assert store.put(f"onpeer{i}", os.urandom(1000), ReplicateConfig(preferred_segment=peer)) == 0
            assert master_seg(master, f"onpeer{i}") == peer
            c = ReplicateConfig(preferred_segments=[peer])
            assert store.put(f"onpeer-list{i}", b"v", c) == 0
            assert master_seg(master, f"onpeer-list{i}") == peer
            c = ReplicateConfig(prefer_alloc_in_same_node=True)
            assert store.put(f"local{i}", b"v", c) == 0
            assert master_seg(master, f"local{i}") == store.get_hostname()
        # group_ids: checked for length
        g = ReplicateConfig(group_ids=["a", "b"])
        assert store.put("grouped", b"v", g) == ErrorCode.INVALID_PARAMS
        assert store.put_batch(["g1", "g2"], [b"1", b"2"], g) == 0
        assert store.put_batch(["g3"], [b"3"], g) == ErrorCode.INVALID_PARAMS
        assert store.is_exist("g3") == 0
    finally:
        p.stdin.close()
        p.wait(timeout=60)


def master_seg(master, key):
    return json.loads(master.http(f"/query_key?key={key}"))["replicas"][0]["segment_name"]


# ---- setup ---------------------------------------------------------------------------------

def test_setup_upstream_positional_order_and_keywords(master):
    from mooncake.engine import TransferEngine  # noqa: F401  (the type engine= takes)
    s = MooncakeDistributedStore()
    # local_hostname, metadata_server, global_segment_size, local_buffer_size, protocol,
    # rdma_devices, master_server_addr, engine, enable_ssd_offload, ssd_offload_path, tenant_id
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", "32MB", "8 MB", "tcp", "", master.addr, None, False, "", "default") == 0
    assert s.put("k", b"v") == 0 and s.get("k") == b"v"
    s.close()
    s = MooncakeDistributedStore()
    assert s.setup(local_hostname="127.0.0.1", metadata_server="P2PHANDSHAKE", global_segment_size=32 * MB,
                   local_buffer_size="8MiB", protocol="tcp", rdma_devices="", master_server_addr=master.addr,
                   engine=None, enable_ssd_offload=False) == 0
    s.close()
    # enable_ssd_offload positionally and by keyword: flows to the client, which refuses it here
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 32 * MB, 8 * MB, "tcp", "", master.addr, None, True) == ErrorCode.INVALID_PARAMS
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 32 * MB, 8 * MB, "tcp", "", master.addr,
                   enable_ssd_offload=True, ssd_offload_path="/tmp/x") == ErrorCode.INVALID_PARAMS
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 32 * MB, 8 * MB, "tcp", "", master.addr, tenant_id="a\x1fb") == ErrorCode.INVALID_PARAMS
    with pytest.raises(TypeError, match="unexpected keyword"):
        s.setup("127.0.0.1", bogus=1)
    with pytest.raises(TypeError, match="engine"):
        s.setup("127.0.0.1", "P2PHANDSHAKE", 32 * MB, 8 * MB, "tcp", "", master.addr, "not an engine")
    assert s.health_check() == 1


def test_setup_config_dict_keys_and_sizes(master, caplog):
    s = MooncakeDistributedStore()
    rc = s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                  "master_server_addr": master.addr, "protocol": "tcp", "rdma_devices": "",
                  "global_segment_size": "32MB", "local_buffer_size": str(8 * MB), "mode": "kv_both"})
    assert rc == 0
    v = os.urandom(3 * MB)
    assert s.put("dict", v) == 0 and s.get("dict") == v
    s.close()
    # a bad value returns INVALID_PARAMS, as upstream's setup(dict) (upstream's
    # test_distributed_object_store: "50%"), and the log names it
    for key, val, msg in (("global_segment_size", "50%", "global_segment_size: bad size '50%'"),
                          ("local_buffer_size", "12XB", "local_buffer_size: bad size '12XB'"),
                          ("global_segment_size", "", "global_segment_size: bad size ''"),
                          ("bogus", 1, "unknown option(s) ['bogus']"),
                          ("master_server_address", master.addr, "both 'master_server_address' and"),
                          ("enable_ssd_offload", "maybe", "enable_ssd_offload: 'maybe' is not a boolean"),
                          ("enable_client_http_server", True, "enable_client_http_server: this client has no HTTP"),
                          ("client_http_port", "x", "client_http_port: 'x' is not a port"),
                          ("client_http_port", 0, "client_http_port: 0 is not a port")):
        with caplog.at_level(logging.ERROR, logger="mooncake.store"):
            caplog.clear()
            bad = MooncakeDistributedStore()
            assert bad.setup({"master_server_addr": master.addr, key: val}) == ErrorCode.INVALID_PARAMS
            assert bad.health_check() == 1  # not set up
        assert [r.getMessage() for r in caplog.records if msg in r.getMessage()], (key, caplog.text)
    # upstream's client HTTP keys, off: accepted
    ok = MooncakeDistributedStore()
    assert ok.setup({"local_hostname": "127.0.0.1", "master_server_addr": master.addr, "global_segment_size": "16MB",
                     "local_buffer_size": "4 MB", "enable_client_http_server": "false", "client_http_port": 9300}) == 0
    assert ok.put("http-keys", b"v") == 0 and ok.get("http-keys") == b"v"
    ok.close()
    with pytest.raises(TypeError):
        MooncakeDistributedStore().setup({"master_server_addr": master.addr}, "http://elsewhere/metadata")
    assert parse_size("80GB") == 80 << 30 and parse_size("1.5g") == 3 << 29 and parse_size("4096") == 4096
    with pytest.raises(ValueError, match="global_segment_size"):
        parse_size("10%", "global_segment_size")


def test_local_buffer_size_zero(master):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 32 * MB, 0, "tcp", "", master.addr) == 0
    try:
        assert s.put("nb", b"value") == ErrorCode.INVALID_PARAMS
        assert s.put_batch(["nb"], [b"value"]) == ErrorCode.INVALID_PARAMS
        assert s.upsert("nb", b"value") == ErrorCode.INVALID_PARAMS
        assert s.is_exist("nb") == 0
        # the zero-copy calls work without a local buffer
        n = MB
        src = (ctypes.c_char * n).from_buffer_copy(os.urandom(n))
        dst = (ctypes.c_char * n)()
        assert s.register_buffer(ctypes.addressof(src), n) == 0
        assert s.register_buffer(ctypes.addressof(dst), n) == 0
        assert s.put_from("nb", ctypes.addressof(src), n) == 0
        assert s.get_into("nb", ctypes.addressof(dst), n) == n
        assert bytes(dst) == bytes(src)
        assert s.get("nb") == b""
    finally:
        s.close()


def test_get_hostname_port_range(master):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 32 * MB, 8 * MB, "tcp", "", master.addr) == 0
    host = s.get_hostname()
    s.close()
    # this process's engine was created by an earlier test or by this setup: check in a fresh one
    p = run_peer(master, "")
    port = int(p.output.split()[1].rsplit(":", 1)[1])
    assert 12300 <= port < 14300, p.output
    assert host.startswith("127.0.0.1:")


# ---- MooncakeConfig ------------------------------------------------------------------------

def test_mooncake_config_file_env_and_setup(master, tmp_path, monkeypatch):
    assert DEFAULT_GLOBAL_SEGMENT_SIZE == 3355443200 and DEFAULT_LOCAL_BUFFER_SIZE == 1 << 30
    path = tmp_path / "mooncake.json"
    path.write_text(json.dumps({
        "local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE", "master_server_address": master.addr,
        "global_segment_size": "48MB", "local_buffer_size": "16MB", "protocol": "tcp", "device_name": "",
        "mode": "kv_both"}))
    c = MooncakeConfig.from_file(str(path))
    assert (c.global_segment_size, c.local_buffer_size) == (48 * MB, 16 * MB)
    assert c.master_server_address == master.addr and c.extra == {"mode": "kv_both"}
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", str(path))
    assert MooncakeConfig.load_from_env() == c
    s = MooncakeDistributedStore()
    assert s.setup(c) == 0
    assert s.put("cfg", b"from-config") == 0 and s.get("cfg") == b"from-config"
    s.close()

    # defaults: only the three required keys
    required = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE", "master_server_address": master.addr}
    path.write_text(json.dumps(required))
    d = MooncakeConfig.from_file(str(path))
    assert d.global_segment_size == DEFAULT_GLOBAL_SEGMENT_SIZE and d.local_buffer_size == DEFAULT_LOCAL_BUFFER_SIZE
    assert (d.protocol, d.device_name, d.tenant_id, d.enable_ssd_offload, d.ssd_offload_path) == ("tcp", "", "default", False, "")
    assert (d.enable_client_http_server, d.client_http_port) == (False, 9300)

    for body, msg in (({**required, "global_segment_size": "80%"}, "global_segment_size"),
                      ({**required, "local_buffer_size": "2 parsecs"}, "local_buffer_size"),
                      ({"local_hostname": "h", "metadata_server": "P2PHANDSHAKE"},
                       "Missing required config field: master_server_address"),
                      ({"metadata_server": "P2PHANDSHAKE", "master_server_address": master.addr},
                       "Missing required config field: local_hostname"),
                      ({"local_hostname": "h", "master_server_address": master.addr},
                       "Missing required config field: metadata_server"),
                      ({**required, "local_hostname": "  "}, "'local_hostname' must be a non-empty string"),
                      ({**required, "master_server_address": ""}, "'master_server_address' must be a non-empty"),
                      ({**required, "protocol": " "}, "Invalid protocol"),
                      ({**required, "client_http_port": 70000}, "client_http_port"),
                      ({**required, "client_http_port": "port"}, "client_http_port"),
                      ({**required, "enable_client_http_server": "maybe"}, "enable_client_http_server"),
                      ({**required, "nonsense": 1}, "nonsense")):
        path.write_text(json.dumps(body))
        with pytest.raises(ValueError, match=msg):
            MooncakeConfig.from_file(str(path))
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        MooncakeConfig.from_file(str(path))

    monkeypatch.delenv("MOONCAKE_CONFIG_PATH")
    monkeypatch.setenv("MOONCAKE_MASTER", master.addr)
    monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", "64MB")
    monkeypatch.setenv("MOONCAKE_LOCAL_BUFFER_SIZE", "8MB")
    e = MooncakeConfig.load_from_env()
    assert e.master_server_address == master.addr and e.global_segment_size == 64 * MB and e.local_buffer_size == 8 * MB
    monkeypatch.delenv("MOONCAKE_MASTER")
    with pytest.raises(ValueError, match="MOONCAKE_CONFIG_PATH"):
        MooncakeConfig.load_from_env()


def test_mooncake_config_checks_and_upstream_names(tmp_path, monkeypatch, caplog):
    from mooncake import mooncake_config
    from mooncake.mooncake_config import _parse_segment_size

    # upstream's size parser: ints, floats (truncated), binary units, exponents; bad forms refused
    for given, want in ((1024, 1024), (0, 0), (1.5, 1), ("  2048  ", 2048), ("1KB", 1024), ("512k", 512 << 10),
                        ("1.5kb", 1536), ("512MB", 512 << 20), ("3 gb", 3 << 30), ("1t", 1 << 40),
                        ("4096B", 4096), ("1.5", 1), ("1e9", 10**9)):
        assert _parse_segment_size(given) == want, given
    for bad in ("", "   ", "gb", "mb", "abc", "50%", "1 parsec", None, True):
        with pytest.raises(ValueError):
            _parse_segment_size(bad)

    base = dict(local_hostname="h", metadata_server="P2PHANDSHAKE", global_segment_size=0, local_buffer_size=0,
                protocol="tcp", device_name="", master_server_address="m:50051")
    assert mooncake_config.logger.name == "mooncake.mooncake_config"
    with caplog.at_level(logging.WARNING, logger="mooncake.mooncake_config"):
        caplog.clear()
        for given, want in ((" RDMA ", "rdma"), ("Tcp", "tcp"), ("rpc_only", "rpc_only")):
            assert MooncakeConfig(**{**base, "protocol": given}).protocol == want
        assert caplog.records == []  # known protocols: no warning
        assert MooncakeConfig(**{**base, "protocol": "Foo"}).protocol == "foo"
        assert [r.getMessage()[:33] for r in caplog.records] == ["Unrecognised protocol 'foo': pass"]
    for field, bad, msg in (("protocol", "", "Invalid protocol"), ("protocol", None, "Invalid protocol"),
                            ("global_segment_size", -1, "Invalid global_segment_size: -1"),
                            ("local_buffer_size", -1024, "Invalid local_buffer_size: -1024"),
                            ("local_hostname", "  ", "'local_hostname' must be a non-empty string"),
                            ("metadata_server", "", "'metadata_server' must be a non-empty string"),
                            ("master_server_address", None, "'master_server_address' must be a non-empty string"),
                            ("client_http_port", 0, "client_http_port: 0 is not a port")):
        with pytest.raises(ValueError, match=re.escape(msg)):
            MooncakeConfig(**{**base, field: bad})

    # the client HTTP keys: from a file, from the environment, into setup's dict
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"local_hostname": "h", "metadata_server": "P2PHANDSHAKE",
                                "master_server_address": "m:1", "enable_client_http_server": "enable",
                                "client_http_port": "19444", "protocol": "TCP"}))
    c = MooncakeConfig.from_file(str(path))
    assert (c.enable_client_http_server, c.client_http_port, c.protocol) == (True, 19444, "tcp")
    assert c.to_setup_dict()["enable_client_http_server"] is True and c.to_setup_dict()["client_http_port"] == 19444
    monkeypatch.delenv("MOONCAKE_CONFIG_PATH", raising=False)
    monkeypatch.setenv("MOONCAKE_MASTER", "m:2")
    monkeypatch.setenv("MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "true")
    monkeypatch.setenv("MOONCAKE_CLIENT_HTTP_PORT", "19300")
    e = MooncakeConfig.load_from_env()
    assert (e.enable_client_http_server, e.client_http_port) == (True, 19300)
    monkeypatch.setenv("MOONCAKE_CLIENT_HTTP_PORT", "ninety")
    with pytest.raises(ValueError, match="MOONCAKE_CLIENT_HTTP_PORT: 'ninety' is not a port"):
        MooncakeConfig.load_from_env()
    monkeypatch.delenv("MOONCAKE_MASTER")
    with pytest.raises(ValueError, match=re.escape(
            "Neither the environment variable 'MOONCAKE_CONFIG_PATH' nor 'MOONCAKE_MASTER' is set.")):
        MooncakeConfig.load_from_env()


# ---- mooncake_master's upstream flag names -------------------------------------------------

def test_master_port_and_max_threads_flags():
    port, mport = free_port(), free_port()
    p = subprocess.Popen([master_bin(), f"--port={port}", "--max_threads=2", f"--metrics_port={mport}",
                          "--rpc_address=127.0.0.1", "--enable_metric_reporting=false"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("MOONCAKE_MASTER_READY") and f"rpc_port={port}" in line, line
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MB, 4 * MB, "tcp", "", f"127.0.0.1:{port}") == 0
        assert s.put("viaport", b"ok") == 0 and s.get("viaport") == b"ok"
        s.close()
    finally:
        stop(p)
    r = subprocess.run([master_bin(), "--port=99999"], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "--port=99999 is not a valid port" in r.stderr


def test_mooncake_client_upstream_flags(master):
    from conftest import go_command
    p = subprocess.Popen([go_command("mooncake_client"), f"--master_server_address={master.addr}", "--host=127.0.0.1",
                          "--port=0", "--global_segment_size=16MB", "--threads=4", "--tenant_id=default",
                          "--enable_offload=false"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("MOONCAKE_CLIENT_READY segment=127.0.0.1:"), line
    finally:
        stop(p)
    r = subprocess.run([go_command("mooncake_client"), f"--master_server_address={master.addr}", "--enable_offload=true",
                        "--port=0", "--global_segment_size=16MB"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "enable_ssd_offload" in r.stderr
    r = subprocess.run([go_command("mooncake_client"), "--help"], capture_output=True, text=True, timeout=60)
    assert "-port int" in r.stderr and "(default 50052)" in r.stderr


def test_init_all_from_environment(master, monkeypatch):
    monkeypatch.setenv("MOONCAKE_MASTER", master.addr)
    monkeypatch.setenv("MC_LOCAL_HOSTNAME", "127.0.0.1")
    s = MooncakeDistributedStore()
    assert s.init_all("tcp", "", 16 * MB) == 0
    try:
        assert s.put("ia", b"init_all") == 0 and s.get("ia") == b"init_all"
    finally:
        s.close()


def test_hardware_protocols_fail_clearly(master, caplog):
    for proto in ("rdma", "efa", "ascend"):
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MB, 8 * MB, proto, "mlx5_0", master.addr) == ErrorCode.INVALID_PARAMS
        assert f'protocol "{proto}"' in s._setup_error and "not supported on this host" in s._setup_error
        assert s.health_check() == 1
