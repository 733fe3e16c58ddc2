#!/usr/bin/env python3
"""Writes Mooncake's Grafana dashboards (provisioning/dashboards/*.json) from the panel lists
below, so the JSON stays consistent (ids, grid, data source) and docs/monitoring.md's panel
tables come from the same source.

    python3 monitoring/grafana/make_dashboards.py            # rewrite the JSON files
    python3 monitoring/grafana/make_dashboards.py --check    # exit 1 when a JSON file is stale
    python3 monitoring/grafana/make_dashboards.py --markdown # the panel tables of the docs

Every query names a metric the master (store/metrics, store/snapshot) or the process-group
exporter (pg/pgmetrics) exports: tests/test_monitoring*.py run each against a real
Prometheus scraping a real master / torchrun job and fail on an empty result."""

from __future__ import annotations

import json
import os
import sys

DS = {"type": "prometheus", "uid": "mooncake-prometheus"}
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "provisioning", "dashboards")

M = '{instance=~"$instance"}'
MS = '{instance=~"$instance", segment=~"$segment"}'
R = "$__rate_interval"


def _query_var(name, label, query, all_value=".*"):
    return {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "definition": query, "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2, "includeAll": True, "multi": True, "allValue": all_value, "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "options": [],
    }


# A panel: (title, type, unit, description, [(expr, legend), ...]); a row: ("row", title).
MASTER_VARS = [
    _query_var("instance", "Instance", "label_values(mooncake_master_capacity_bytes, instance)"),
    _query_var("segment", "Segment", 'label_values(mooncake_master_segment_capacity_bytes{instance=~"$instance"}, segment)'),
]

MASTER = [
    ("row", "Overview"),
    ("Objects", "stat", "short", "Complete objects (keys) in the store, per master.",
     [(f"mooncake_master_kv_object_count{M}", "{{instance}}")]),
    ("Memory used", "stat", "percentunit", "Allocated bytes / capacity of all mounted segments.",
     [(f"mooncake_master_usage_ratio{M}", "{{instance}}")]),
    ("Active clients", "stat", "short", "Clients heard from within client_ttl.",
     [(f"mooncake_master_active_clients{M}", "{{instance}}")]),
    ("HA role", "stat", "short", "This master's HA role (1 marks the current one); only with --enable_ha.",
     [(f'mooncake_master_ha_role{M} == 1', "{{instance}} {{role}}")]),
    ("row", "Objects and memory"),
    ("Objects by state", "timeseries", "short",
     "Stored objects, and how many of them hold a soft pin, a hard pin or an unexpired lease.",
     [(f"mooncake_master_kv_object_count{M}", "objects {{instance}}"),
      (f"mooncake_master_soft_pinned_objects{M}", "soft pinned {{instance}}"),
      (f"mooncake_master_hard_pinned_objects{M}", "hard pinned {{instance}}"),
      (f"mooncake_master_leased_objects{M}", "leased {{instance}}")]),
    ("Capacity and allocation", "timeseries", "bytes",
     "Total bytes of the mounted segments and the bytes allocated to replicas.",
     [(f"mooncake_master_capacity_bytes{M}", "capacity {{instance}}"),
      (f"mooncake_master_allocated_bytes{M}", "allocated {{instance}}")]),
    ("Memory used per segment", "timeseries", "bytes",
     "Bytes allocated to replicas in each mounted segment (client buffer).",
     [(f"mooncake_master_segment_allocated_bytes{MS}", "{{segment}}")]),
    ("Memory free per segment", "timeseries", "bytes",
     "Free bytes in each mounted segment. A segment near 0 makes puts placed there evict.",
     [(f"mooncake_master_segment_free_bytes{MS}", "{{segment}}")]),
    ("row", "Eviction and puts"),
    ("Evictions", "timeseries", "ops",
     "Objects evicted per second, and eviction passes per second (a pass runs when usage is above --eviction_high_watermark_ratio).",
     [(f"rate(mooncake_master_eviction_total{M}[{R}])", "objects/s {{instance}}"),
      (f"rate(mooncake_master_eviction_passes_total{M}[{R}])", "passes/s {{instance}}")]),
    ("Evicted bytes", "timeseries", "Bps", "Replica bytes freed by eviction per second.",
     [(f"rate(mooncake_master_evicted_bytes_total{M}[{R}])", "{{instance}}")]),
    ("Pending puts", "timeseries", "short",
     "Puts started (PutStart) and not yet ended or revoked, and unfinished puts reclaimed per second.",
     [(f"mooncake_master_pending_tasks{M}", "pending {{instance}}"),
      (f"rate(mooncake_master_reclaimed_puts_total{M}[{R}])", "reclaimed/s {{instance}}")]),
    ("row", "RPC"),
    ("RPC rate by method", "timeseries", "reqps", "gRPC requests per second, by method.",
     [(f"sum by (method) (rate(mooncake_master_rpc_requests_total{M}[{R}]))", "{{method}}")]),
    ("RPC latency p99 by method", "timeseries", "s",
     "99th percentile of the time the master takes to answer, by method (oplog durability included under HA).",
     [(f"histogram_quantile(0.99, sum by (method, le) (rate(mooncake_master_rpc_duration_seconds_bucket{M}[{R}])))", "p99 {{method}}")]),
    ("RPC latency p50 by method", "timeseries", "s", "Median time the master takes to answer, by method.",
     [(f"histogram_quantile(0.5, sum by (method, le) (rate(mooncake_master_rpc_duration_seconds_bucket{M}[{R}])))", "p50 {{method}}")]),
    ("Errors by code", "timeseries", "reqps",
     "Requests answered with an error per second, by Mooncake error code (OBJECT_NOT_FOUND for a get of a missing key is normal traffic).",
     [(f"sum by (code) (rate(mooncake_master_rpc_errors_total{M}[{R}]))", "{{code}}")]),
    ("Errors by method and code", "timeseries", "reqps", "The same, split by method.",
     [(f"sum by (method, code) (rate(mooncake_master_rpc_errors_total{M}[{R}]))", "{{method}} {{code}}")]),
    ("row", "High availability"),
    ("Serving leader", "timeseries", "short", "1 while the master is the serving leader (--enable_ha); exactly one master should be 1.",
     [(f"mooncake_master_ha_serving{M}", "{{instance}}")]),
    ("Oplog applied and durable seq", "timeseries", "short",
     "Sequence id of the last oplog entry applied (leader: appended) and, on the leader, the last one known durable.",
     [(f"mooncake_master_oplog_applied_seq{M}", "applied {{instance}}"),
      (f"mooncake_master_oplog_durable_seq{M}", "durable {{instance}}")]),
    ("Standby lag", "timeseries", "short",
     "Oplog entries a standby has not applied yet, and its lag alert (1 above --max_replication_lag_entries).",
     [(f"mooncake_master_standby_lag_entries{M}", "lag {{instance}}"),
      (f"mooncake_master_standby_lag_alert{M}", "alert {{instance}}")]),
    ("Role changes and verifications", "timeseries", "short",
     "HA role changes, and standby verification entries checked (match / mismatch), in each interval.",
     [(f"increase(mooncake_master_ha_state_transitions_total{M}[{R}])", "role changes {{instance}}"),
      (f"sum by (instance, result) (increase(mooncake_master_standby_verifications_total{M}[{R}]))", "verify {{result}} {{instance}}")]),
    ("row", "Snapshots"),
    ("Snapshots saved and failed", "timeseries", "short", "Metadata snapshots saved and failed in each interval (--enable_snapshot).",
     [(f"increase(mooncake_master_snapshot_success_total{M}[{R}])", "saved {{instance}}"),
      (f"increase(mooncake_master_snapshot_failure_total{M}[{R}])", "failed {{instance}}")]),
    ("Snapshot duration p99", "timeseries", "s", "99th percentile of the time to save one snapshot.",
     [(f"histogram_quantile(0.99, sum by (instance, le) (rate(mooncake_master_snapshot_duration_seconds_bucket{M}[{R}])))", "{{instance}}")]),
    ("Last snapshot age", "timeseries", "s", "Seconds since the last saved snapshot.",
     [(f"time() - mooncake_master_snapshot_last_success_timestamp_seconds{M}", "age {{instance}}")]),
    ("Snapshot size", "timeseries", "bytes", "Payload size of the last saved snapshot.",
     [(f"mooncake_master_snapshot_size_bytes{M}", "{{instance}}")]),
    ("row", "G3 tier"),
    ("G3 usage", "timeseries", "bytes",
     "Bytes held in the shared file/DFS tier (--root_fs_dir) and its capacity; both 0 until the tier is configured.",
     [(f"mooncake_master_dfs_segment_used_bytes{M}", "used {{instance}}"),
      (f"mooncake_master_dfs_segment_capacity_bytes{M}", "capacity {{instance}}")]),
    ("G3 used", "stat", "percentunit", "Used / capacity of the G3 tier (empty without the tier).",
     [(f"mooncake_master_dfs_segment_used_bytes{M} / mooncake_master_dfs_segment_capacity_bytes{M}", "{{instance}}")]),
    ("row", "Clients"),
    ("Clients", "timeseries", "short", "Clients heard from within client_ttl, clients with a mounted segment, and mounted segments.",
     [(f"mooncake_master_active_clients{M}", "active {{instance}}"),
      (f"mooncake_master_mounted_clients{M}", "mounted {{instance}}"),
      (f"mooncake_master_mounted_segments{M}", "segments {{instance}}")]),
    ("Expired clients", "timeseries", "short", "Clients unmounted after missing client_ttl, in each interval (their replicas are dropped).",
     [(f"increase(mooncake_master_expired_clients_total{M}[{R}])", "{{instance}}")]),
]

P = '{group=~"$group", instance=~"$instance"}'
PC = '{group=~"$group", instance=~"$instance", collective=~"$collective"}'

PG_VARS = [
    _query_var("group", "Group", "label_values(mooncake_pg_epoch, group)"),
    _query_var("instance", "Instance", 'label_values(mooncake_pg_epoch{group=~"$group"}, instance)'),
    _query_var("collective", "Collective", 'label_values(mooncake_pg_ops_total{group=~"$group"}, collective)'),
]

PG = [
    ("row", "Membership"),
    ("Epoch", "stat", "short", "The group's membership epoch as each rank sees it; ranks that disagree have not applied the same decisions yet.",
     [(f"max by (group) (mooncake_pg_epoch{P})", "{{group}}")]),
    ("Active ranks", "stat", "short", "Active ranks of the group (the fewest any rank reports) out of its slots (max_group_size).",
     [(f"min by (group) (mooncake_pg_active_ranks{P})", "active {{group}}"),
      (f"max by (group) (mooncake_pg_group_slots{P})", "slots {{group}}")]),
    ("Epoch and active ranks per rank", "timeseries", "short", "Each rank's view: epoch and active ranks.",
     [(f"mooncake_pg_epoch{P}", "epoch rank {{rank}}"),
      (f"mooncake_pg_active_ranks{P}", "active rank {{rank}}")]),
    ("Membership changes", "timeseries", "short", "Membership decisions (fault, deactivate, activate, sync) applied in each interval, and whether each rank is an active member.",
     [(f"sum by (group) (increase(mooncake_pg_membership_changes_total{P}[{R}]))", "changes {{group}}"),
      (f"mooncake_pg_member{P}", "member rank {{rank}}")]),
    ("row", "Ops"),
    ("Ops per second by collective", "timeseries", "ops", "Finished ops per second on all selected ranks, by collective and backend.",
     [(f"sum by (collective, backend) (rate(mooncake_pg_ops_total{PC}[{R}]))", "{{collective}} {{backend}}")]),
    ("Ops per second by rank", "timeseries", "ops", "Finished ops per second, by rank.",
     [(f"sum by (rank) (rate(mooncake_pg_ops_total{PC}[{R}]))", "rank {{rank}}")]),
    ("Bytes per second by collective", "timeseries", "Bps", "Bytes of the ranks' buffers in finished ops per second (input; scatter: output).",
     [(f"sum by (collective, backend) (rate(mooncake_pg_op_bytes_total{PC}[{R}]))", "{{collective}} {{backend}}")]),
    ("Mean message size", "timeseries", "bytes", "Bytes per op, by collective.",
     [(f"sum by (collective) (rate(mooncake_pg_op_bytes_total{PC}[{R}])) / sum by (collective) (rate(mooncake_pg_ops_total{PC}[{R}]))", "{{collective}}")]),
    ("row", "Latency"),
    ("Op latency p50", "timeseries", "s", "Median op time, by collective and backend.",
     [(f"histogram_quantile(0.5, sum by (collective, backend, le) (rate(mooncake_pg_op_duration_seconds_bucket{PC}[{R}])))", "{{collective}} {{backend}}")]),
    ("Op latency p99", "timeseries", "s", "99th percentile op time, by collective and backend.",
     [(f"histogram_quantile(0.99, sum by (collective, backend, le) (rate(mooncake_pg_op_duration_seconds_bucket{PC}[{R}])))", "{{collective}} {{backend}}")]),
    ("Op latency p99 by rank", "timeseries", "s", "99th percentile op time per rank: a slow or overloaded rank stands out (every other rank waits for it).",
     [(f"histogram_quantile(0.99, sum by (rank, le) (rate(mooncake_pg_op_duration_seconds_bucket{PC}[{R}])))", "rank {{rank}}")]),
    ("row", "Failures"),
    ("Failed ops by reason", "timeseries", "short", "Ops that failed in each interval, by collective and reason (timeout, transfer_fail, invalid_params, closed, other).",
     [(f"sum by (collective, reason) (increase(mooncake_pg_op_failures_total{PC}[{R}]))", "{{collective}} {{reason}}")]),
    ("Degraded ops", "timeseries", "short", "Ops that completed over the survivors of a peer failure (get_local_success False), in each interval.",
     [(f"sum by (collective, rank) (increase(mooncake_pg_op_degraded_total{PC}[{R}]))", "{{collective}} rank {{rank}}")]),
]


def _panel(pid, spec, x, y, w, h):
    title, kind, unit, desc, queries = spec
    p = {
        "id": pid, "type": kind, "title": title, "description": desc, "datasource": DS,
        "gridPos": {"h": h, "w": w, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": chr(ord("A") + i), "datasource": DS, "expr": e, "legendFormat": lg, "range": True}
                    for i, (e, lg) in enumerate(queries)],
    }
    if kind == "stat":
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "value", "graphMode": "area", "textMode": "auto"}
    else:
        p["options"] = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                        "tooltip": {"mode": "multi", "sort": "desc"}}
        p["fieldConfig"]["defaults"]["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                                                  "showPoints": "never", "spanNulls": True}
    return p


def dashboard(uid, title, description, variables, specs):
    panels, pid, y = [], 1, 0
    x, row_h = 0, 0
    for spec in specs:
        if spec[0] == "row":
            if x:
                y, x = y + row_h, 0
            panels.append({"id": pid, "type": "row", "title": spec[1], "collapsed": False,
                           "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
            pid, y = pid + 1, y + 1
            continue
        w, h = (6, 4) if spec[1] == "stat" else (12, 8)
        if x + w > 24:
            y, x = y + row_h, 0
        if x == 0:
            row_h = 0
        panels.append(_panel(pid, spec, x, y, w, h))
        pid, x, row_h = pid + 1, x + w, max(row_h, h)
    return {
        "uid": uid, "title": title, "description": description, "tags": ["mooncake"],
        "editable": True, "graphTooltip": 1, "schemaVersion": 39, "version": 1,
        "refresh": "15s", "time": {"from": "now-1h", "to": "now"}, "timezone": "browser",
        "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                                  "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                                  "name": "Annotations & Alerts", "type": "dashboard"}]},
        "templating": {"list": variables},
        "panels": panels,
    }


DASHBOARDS = {
    "mooncake_master.json": dashboard(
        "mooncake-master", "mooncake_master",
        "Mooncake Store master: objects, memory per segment, eviction, puts, RPCs, HA, snapshots, G3, clients.",
        MASTER_VARS, MASTER),
    "mooncake_pg.json": dashboard(
        "mooncake-pg", "mooncake process groups",
        "Mooncake process groups (MOONCAKE_PG_METRICS_PORT): ops, bytes, latency, failures and membership per rank.",
        PG_VARS, PG),
}


def render(d) -> str:
    return json.dumps(d, indent=2) + "\n"


def markdown() -> str:
    out = []
    for name, d in DASHBOARDS.items():
        out.append(f"#### `{name}` — {d['title']}\n\n| Panel | Shows | Query |\n|---|---|---|")
        for p in d["panels"]:
            if p["type"] == "row":
                out.append(f"| **{p['title']}** | | |")
                continue
            qs = "<br>".join("`" + t["expr"].replace("|", "\\|") + "`" for t in p["targets"])
            out.append(f"| {p['title']} | {p['description']} | {qs} |")
        out.append("")
    return "\n".join(out)


def main(argv) -> int:
    if "--markdown" in argv:
        print(markdown())
        return 0
    stale = []
    for name, d in DASHBOARDS.items():
        path = os.path.join(OUT, name)
        text = render(d)
        cur = open(path).read() if os.path.exists(path) else None
        if cur != text:
            if "--check" in argv:
                stale.append(path)
            else:
                with open(path, "w") as f:
                    f.write(text)
                print("wrote", path)
    if stale:
        print("stale (run monitoring/grafana/make_dashboards.py):", *stale)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
