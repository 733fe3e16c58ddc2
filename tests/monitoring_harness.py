"""Shared by tests/test_monitoring*.py: a real Prometheus started on the shipped
monitoring/prometheus/prometheus.yml (targets rewritten to the test's processes, intervals
shortened), and the evaluation of every query of the shipped dashboards and alert rules
through Prometheus's HTTP API."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

from conftest import ROOT, free_port, stop

MON = os.path.join(ROOT, "monitoring")
DASHBOARDS = os.path.join(MON, "grafana", "provisioning", "dashboards")
RATE_INTERVAL = "1m"  # what the test puts for Grafana's $__rate_interval


def tool(name: str) -> str:
    p = shutil.which(name)
    if p is None:
        pytest.fail(f"{name} is not installed: `apt-get install prometheus` provides prometheus and promtool")
    return p


def shipped_config(targets: dict[str, list[str]], interval: str = "1s") -> str:
    """The shipped prometheus.yml with each host.docker.internal:PORT target replaced by the
    addresses targets maps it to (dropped when it maps to nothing) and every 15 s interval
    shortened to `interval`. Nothing else changes."""
    out = []
    with open(os.path.join(MON, "prometheus", "prometheus.yml")) as f:
        for line in f:
            m = re.match(r'^(\s*)- "host\.docker\.internal:(\d+)"', line)
            if m:
                for addr in targets.get(m.group(2), []):
                    out.append(f'{m.group(1)}- "{addr}"\n')
                continue
            out.append(re.sub(r"^(\s*(?:scrape|evaluation)_interval:) 15s", rf"\1 {interval}", line))
    return "".join(out)


class Prometheus:
    def __init__(self, targets: dict[str, list[str]]):
        self.dir = tempfile.mkdtemp(prefix="mcprom-")
        with open(os.path.join(self.dir, "prometheus.yml"), "w") as f:
            f.write(shipped_config(targets))
        shutil.copy(os.path.join(MON, "prometheus", "alerts.yml"), self.dir)
        r = subprocess.run([tool("promtool"), "check", "config", os.path.join(self.dir, "prometheus.yml")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        self.port = free_port()
        self.proc = subprocess.Popen(
            [tool("prometheus"), f"--config.file={self.dir}/prometheus.yml", f"--storage.tsdb.path={self.dir}/data",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "log"), "w"))

    def stop(self):
        stop(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)

    def api(self, path: str, **params) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:  # 400/422: a query that does not parse or evaluate
            return json.load(e)

    def query(self, expr: str) -> list:
        """Evaluates expr now; fails the test when it does not parse or evaluate."""
        res = self.api("query", query=expr)
        assert res.get("status") == "success", f"{expr!r}: {res.get('errorType')}: {res.get('error')}"
        return res["data"]["result"]

    def wait_up(self, job: str, n: int, timeout: float = 60.0) -> None:
        deadline = time.time() + timeout
        while True:
            assert self.proc.poll() is None, "prometheus exited: " + open(os.path.join(self.dir, "log")).read()[-2000:]
            try:
                res = self.api("query", query=f'up{{job="{job}"}} == 1')
                if res.get("status") == "success" and len(res["data"]["result"]) == n:
                    return
            except OSError:
                pass
            assert time.time() < deadline, f"{job}: {n} targets never all UP: {self.api('targets')}"
            time.sleep(0.5)


def load_dashboard(name: str) -> dict:
    with open(os.path.join(DASHBOARDS, name)) as f:
        return json.load(f)


def exprs(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, expr) of every query of the dashboard, rows' nested panels included."""
    out = []
    for p in dashboard["panels"]:
        for q in [p] + p.get("panels", []):
            for t in q.get("targets", []):
                out.append((q["title"], t["expr"]))
    return out


def _regex_value(v: str) -> str:
    """A single variable value as Grafana puts it into =~ (regex-escaped, in a PromQL string)."""
    return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\\\1", v)


def substitute(expr: str, values: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    for name, v in sorted(values.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace("${" + name + "}", v).replace("$" + name, v)
    assert "$" not in expr, f"undefined variable left in {expr!r}"
    return expr


def variable_values(prom: Prometheus, dashboard: dict, prefer: dict[str, str]) -> list[dict[str, str]]:
    """Resolves the dashboard's variables in order, as Grafana does, through Prometheus:
    label_values(selector, label) is evaluated as `count by (label) (selector)` now. Returns
    two settings to evaluate the panels with: every variable at "All" (its allValue), and every
    variable at one concrete value (prefer[name] when given, which must be among the values)."""
    all_values, one = {}, {}
    for v in dashboard["templating"]["list"]:
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", v["query"]["query"].strip())
        assert m, f"variable {v['name']}: unsupported query {v['query']!r}"
        selector, label = m.group(1), m.group(2)
        vals_all = sorted(r["metric"][label] for r in prom.query(f"count by ({label}) ({substitute(selector, all_values)})"))
        vals_one = sorted(r["metric"][label] for r in prom.query(f"count by ({label}) ({substitute(selector, one)})"))
        assert vals_all and vals_one, f"variable {v['name']}: {v['query']['query']} has no values"
        all_values[v["name"]] = v["allValue"]
        pick = prefer.get(v["name"], vals_one[0])
        assert pick in vals_one, f"variable {v['name']}: {pick!r} not among {vals_one}"
        one[v["name"]] = _regex_value(pick)
    return [all_values, one]


def check_dashboard(prom: Prometheus, name: str, prefer: dict[str, str]) -> int:
    """Evaluates every query of dashboard `name` with the variables at All and at one value;
    fails listing every query that does not parse or returns no series. Returns the count."""
    d = load_dashboard(name)
    bad, n = [], 0
    for values in variable_values(prom, d, prefer):
        for title, e in exprs(d):
            q = substitute(e, values)
            res = prom.api("query", query=q)
            n += 1
            if res.get("status") != "success":
                bad.append(f"{title}: {q}: {res.get('error')}")
            elif not res["data"]["result"]:
                bad.append(f"{title}: {q}: no series")
    assert not bad, f"{len(bad)} of {n} dashboard queries of {name} failed:\n" + "\n".join(bad)
    return n


_CMP = re.compile(r"^(.*\S)\s*(==|!=|>=|<=|>|<)\s*(-?[0-9.]+(?:e-?[0-9]+)?)\s*$", re.S)


def rules(prom: Prometheus, group: str) -> list[dict]:
    for g in prom.api("rules")["data"]["groups"]:
        if g["name"] == group:
            return g["rules"]
    raise AssertionError(f"rule group {group} not loaded")


def check_alert_rules(prom: Prometheus, group: str, timeout: float = 30.0) -> dict[str, list]:
    """Every rule of the group, as Prometheus loaded it from the shipped alerts.yml: evaluated
    by Prometheus without error (health ok), and of the form `signal <cmp> number` with the
    signal returning at least one series (evaluated as `signal <cmp> bool number`). Returns
    each alert's current result of its full expr."""
    deadline = time.time() + timeout
    while any(r.get("health") != "ok" for r in rules(prom, group)):
        assert time.time() < deadline, "rules not evaluated ok: " + json.dumps(
            [(r["name"], r.get("health"), r.get("lastError")) for r in rules(prom, group)])
        time.sleep(0.5)
    bad, out = [], {}
    for r in rules(prom, group):
        m = _CMP.match(r["query"])
        if not m:
            bad.append(f"{r['name']}: expr {r['query']!r} is not `signal <cmp> number`")
            continue
        signal, op, num = m.groups()
        res = prom.api("query", query=f"({signal}) {op} bool {num}")
        if res.get("status") != "success":
            bad.append(f"{r['name']}: {res.get('error')}")
        elif not res["data"]["result"]:
            bad.append(f"{r['name']}: signal {signal!r} returns no series")
        out[r["name"]] = prom.query(r["query"])
    assert not bad, "\n".join(bad)
    return out


def alert_states(prom: Prometheus) -> dict[str, set]:
    states: dict[str, set] = {}
    for a in prom.api("alerts")["data"]["alerts"]:
        states.setdefault(a["labels"]["alertname"], set()).add(a["state"])
    return states
