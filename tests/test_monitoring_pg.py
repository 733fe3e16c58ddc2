"""Process-group metrics against a real Prometheus: a 2-rank torchrun job on the mooncake-cpu
backend with MOONCAKE_PG_METRICS_PORT set (rank r serves port+r) runs every collective on two
groups; a real Prometheus runs the shipped prometheus.yml and alerts.yml (the mooncake-pg job's
targets rewritten to the ranks' ports), and EVERY query of the mooncake_pg dashboard and every
process-group alert rule is evaluated through its HTTP API and must return series."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from conftest import ROOT, stop
from monitoring_harness import Prometheus, check_alert_rules, check_dashboard, tool

WORKER = os.path.join(ROOT, "tests", "monitoring_pg_worker.py")


def _two_free_ports() -> int:
    """A port p with p and p+1 free."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p >= 65535:
            continue
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("", p))
                b.bind(("", p + 1))
            return p
        except OSError:
            continue
    raise RuntimeError("no two consecutive free ports")


def test_pg_dashboard_and_alerts_against_torchrun_job():
    base = _two_free_ports()
    d = tempfile.mkdtemp(prefix="mcpgmon-")
    env = dict(os.environ, MOONCAKE_PG_METRICS_PORT=str(base), MOONCAKE_GOMAXPROCS="2", OMP_NUM_THREADS="1")
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                            WORKER, d], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    prom = None
    try:
        deadline = time.time() + 180
        while not all(os.path.exists(os.path.join(d, f"ready.{r}")) for r in (0, 1)):
            assert job.poll() is None, "torchrun job exited: " + job.stdout.read()[-4000:]
            assert time.time() < deadline, "ranks never got ready"
            time.sleep(0.5)
        ranks = [f"127.0.0.1:{base + r}" for r in (0, 1)]
        # Each rank serves its own port; both groups are on it.
        for r, addr in enumerate(ranks):
            with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as resp:
                body = resp.read().decode()
            groups = {line.split('group="')[1].split('"')[0] for line in body.splitlines()
                      if line.startswith("mooncake_pg_epoch{")}
            assert len(groups) == 2, (addr, groups)
            assert f'rank="{r}"' in body and 'backend="mooncake-cpu"' in body
            lint = subprocess.run([tool("promtool"), "check", "metrics"], input=body, capture_output=True, text=True)
            assert lint.returncode == 0 and not (lint.stdout + lint.stderr).strip(), lint.stdout + lint.stderr

        prom = Prometheus({"9100": [ranks[0]], "9101": [ranks[1]]})
        prom.wait_up("mooncake-pg", 2)
        time.sleep(4)  # a few scrapes while the ranks keep running ops

        n = check_dashboard(prom, "mooncake_pg.json", {"instance": ranks[0]})
        assert n >= 2 * 15
        fired = check_alert_rules(prom, "mooncake-pg")
        assert fired == {"MooncakePGOpFailures": [], "MooncakePGRanksLost": []}, fired
        # The counts behind the panels are real: every collective ran on both ranks.
        per = prom.query('count by (collective) (mooncake_pg_ops_total{job="mooncake-pg"} > 0)')
        assert {s["metric"]["collective"] for s in per} == {
            "all_reduce", "broadcast", "reduce", "all_gather", "gather", "scatter", "reduce_scatter",
            "all_to_all", "barrier", "send", "recv"}, per
        active = prom.query('mooncake_pg_active_ranks{job="mooncake-pg"}')
        assert len(active) == 4 and all(s["value"][1] == "2" for s in active), active  # 2 ranks x 2 groups
        assert all(s["value"][1] == "0" for s in prom.query('mooncake_pg_epoch{job="mooncake-pg"}'))
    finally:
        open(os.path.join(d, "done"), "w").close()
        try:
            out, _ = job.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            stop(job)
            out = job.stdout.read() if job.stdout else ""
        if prom is not None:
            prom.stop()
    assert job.returncode == 0, out[-4000:]
