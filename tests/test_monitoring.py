"""The monitoring stack (monitoring/) against real processes, everything short of Docker:
promtool on the shipped Prometheus files, the dashboards' generator in sync, and a real
Prometheus running the shipped prometheus.yml and alerts.yml (targets rewritten to this test's
masters) scraping a real HA pair of mooncake_master (leader + hot standby on etcd, snapshots
on) while a store client puts, gets, evicts and another client is killed: then EVERY query of
the mooncake_master dashboard and every master alert rule is evaluated through Prometheus's
HTTP API and must parse and return series, and the alerts whose conditions the test created
must be pending or firing. (The process-group dashboard: tests/test_monitoring_pg.py.)"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import ROOT, stop
from monitoring_harness import MON, Prometheus, alert_states, check_alert_rules, check_dashboard, tool
from test_store import MB, Master, new_store, run_peer


def test_promtool_check_shipped_files():
    cfg = os.path.join(MON, "prometheus", "prometheus.yml")
    r = subprocess.run([tool("promtool"), "check", "config", cfg], capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS: 1 rule files found" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([tool("promtool"), "check", "rules", os.path.join(MON, "prometheus", "alerts.yml")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS: 10 rules found" in r.stdout, r.stdout + r.stderr


def test_dashboards_match_their_generator():
    r = subprocess.run([sys.executable, os.path.join(MON, "grafana", "make_dashboards.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_docs_describe_every_panel():
    r = subprocess.run([sys.executable, os.path.join(MON, "grafana", "make_dashboards.py"), "--markdown"],
                       capture_output=True, text=True, check=True)
    with open(os.path.join(ROOT, "docs", "monitoring.md")) as f:
        doc = f.read()
    assert r.stdout.strip() in doc, "docs/monitoring.md's panel tables differ from make_dashboards.py --markdown"


def _metrics(m: Master) -> dict[str, float]:
    out = {}
    for line in m.http("/metrics").splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def _wait(cond, what: str, timeout: float = 30.0):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.2)


def test_master_dashboard_and_alerts_against_real_prometheus(etcd_server):
    snapdir = tempfile.mkdtemp(prefix="mcsnap-")
    # The watermark is 0.95 (the default is 0.90, upstream's) so 15 of 16 MiB stays allocated below
    # it, and the free-space alert sees less than 10 % free.
    flags = ["--client_ttl=2", "--eviction_high_watermark_ratio=0.95", "--enable_ha", f"--etcd_endpoints=http://{etcd_server}", "--cluster_id=monitoring_test",
             "--ha_lease_ttl_sec=2", "--enable_snapshot", "--snapshot_backend_type=local",
             f"--snapshot_backup_dir={snapdir}", "--snapshot_interval_seconds=1"]
    leader = Master(*flags)
    standby = prom = store = None
    try:
        _wait(lambda: _metrics(leader).get("mooncake_master_ha_serving") == 1, "the first master never became leader")
        standby = Master(*flags)
        _wait(lambda: "mooncake_master_ha_serving" in _metrics(standby), "the standby exports no HA metrics")
        assert _metrics(standby)["mooncake_master_ha_serving"] == 0
        lead_addr, stby_addr = f"127.0.0.1:{leader.metrics_port}", f"127.0.0.1:{standby.metrics_port}"
        prom = Prometheus({"9003": [lead_addr, stby_addr]})
        prom.wait_up("mooncake-master", 2)  # scraping before the traffic, so rates see it

        # Traffic: puts, gets, a miss, evictions: 80 x 1 MiB through a 16 MiB segment evict over
        # 3x the capacity within the alert's 5 minute window (over 1 % of it per second).
        store = new_store(leader, segment=16 * MB, buffer=4 * MB)
        last = b""
        for i in range(80):
            last = os.urandom(MB)
            assert store.put(f"e{i}", last) == 0, i
        assert store.get("e79") == last
        assert store.get("missing") == b""
        assert _metrics(leader)["mooncake_master_eviction_total"] > 0
        # A client that dies: unmounted after client_ttl.
        peer = run_peer(leader, 'print("UP", flush=True)\ntime.sleep(120)\n', wait=False)
        try:
            for line in peer.stdout:
                if line.startswith("UP"):
                    break
            peer.send_signal(signal.SIGKILL)
            peer.wait()
        finally:
            stop(peer)
        _wait(lambda: _metrics(leader)["mooncake_master_expired_clients_total"] >= 1, "the killed client never expired")
        # Leave exactly 15 of 16 MiB allocated: under the 95 % eviction watermark, under 10 % free.
        assert store.remove_all() >= 0
        for i in range(15):
            assert store.put(f"k{i}", os.urandom(MB)) == 0, i
        m = _metrics(leader)
        assert m["mooncake_master_allocated_bytes"] == 15 * MB and m["mooncake_master_capacity_bytes"] == 16 * MB, m
        _wait(lambda: _metrics(leader).get("mooncake_master_snapshot_success_total", 0) >= 1, "no snapshot saved")

        time.sleep(4)  # a few more scrapes, so every rate() has samples after the traffic

        n = check_dashboard(prom, "mooncake_master.json", {"instance": lead_addr})
        assert n >= 2 * 40
        fired = check_alert_rules(prom, "mooncake-master")
        assert set(fired) == {"MooncakeMasterDown", "MooncakeSegmentFreeSpaceLow", "MooncakeNoServingLeader",
                              "MooncakeStandbyLagging", "MooncakeEvictionStorm", "MooncakeG3NearlyFull",
                              "MooncakeClientsExpiring", "MooncakeSnapshotFailing"}
        instances = {name: sorted(s["metric"].get("instance", "") for s in res) for name, res in fired.items()}
        # The conditions this test created hold (on the standby too for state it mirrors from the
        # oplog: free space); the others do not.
        assert lead_addr in instances["MooncakeSegmentFreeSpaceLow"], instances
        assert lead_addr in instances["MooncakeEvictionStorm"], instances
        assert lead_addr in instances["MooncakeClientsExpiring"], instances
        for quiet in ("MooncakeMasterDown", "MooncakeNoServingLeader", "MooncakeStandbyLagging",
                      "MooncakeG3NearlyFull", "MooncakeSnapshotFailing"):
            assert fired[quiet] == [], (quiet, fired[quiet])
        # And Prometheus's rule evaluation agrees: alerts without `for` fire, the others wait.
        _wait(lambda: "firing" in alert_states(prom).get("MooncakeClientsExpiring", set()),
              f"MooncakeClientsExpiring not firing: {alert_states(prom)}")
        states = alert_states(prom)
        assert states.get("MooncakeSegmentFreeSpaceLow") == {"pending"}, states
        assert states.get("MooncakeEvictionStorm") == {"pending"}, states
        assert not set(states) & {"MooncakeMasterDown", "MooncakeNoServingLeader", "MooncakeG3NearlyFull"}, states

        # The leader stops: the standby takes over, and the no-leader / master-down signals see it.
        leader.stop()
        _wait(lambda: _metrics(standby).get("mooncake_master_ha_serving") == 1, "the standby never took over", 30)
    finally:
        if store is not None:
            store.close()
        for p in (prom, standby, leader):
            if p is not None:
                p.stop()
