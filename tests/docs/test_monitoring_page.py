"""docs/upstream/deployment__monitoring.md, block by block (docs/docs-tests.md lists each one
and what the test changes).

The master runs on a fresh host (a private network namespace, conftest.FreshHost), so the
page's ports 9003 and 50051 are used as written.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import textwrap

import pytest

from .conftest import ROOT, block, blocks, page_text, shell_command, substitute

PAGE = "deployment__monitoring"
OBJECTS = 4096  # the value the page's sample output shows

# Puts OBJECTS small objects through the master of the fresh host and stays mounted (the
# objects live in its segment) until stdin closes.
FILL = textwrap.dedent(f"""
    import sys
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", "127.0.0.1:50051") == 0
    keys = [f"object-{{i}}" for i in range({OBJECTS})]
    for i in range(0, len(keys), 512):
        rc = s.put_batch(keys[i:i + 512], [b"x" * 64] * len(keys[i:i + 512]))
        assert rc == 0, rc
    print("FILLED", flush=True)
    sys.stdin.read()
    s.close()
""")


def test_step1_docker_compose_needs_docker(tmp_path):
    """Block 0 (`cd monitoring && docker-compose up -d`) needs Docker, which this machine does
    not have: the literal command fails naming the missing command. The stack's Prometheus
    configuration is checked by monitoring/monitoring_test.go (promtool) instead."""
    b = block(PAGE, 0, "docker-compose up -d")
    if shutil.which("docker-compose") is not None:
        pytest.skip("docker-compose is installed here: the suite does not start the stack")
    r = subprocess.run(["bash", "-c", b.text], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 127, r
    assert "docker-compose: command not found" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def monitored(fresh_host):
    """Step 3: the page's master command, then OBJECTS objects put through it."""
    cmd = shell_command(block(PAGE, 1, "--metrics_port=9003").text)
    # pip puts mooncake_master on PATH; there is no ./build directory (no CMake build).
    cmd = substitute(cmd, ("./build/mooncake_master", "mooncake_master"))
    master = fresh_host.spawn(cmd, "master")
    fresh_host.wait_port(50051, master)
    fresh_host.wait_port(9003, master)
    filler = fresh_host.python(FILL, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = filler.stdout.readline()
        assert line.strip() == "FILLED", f"filling the store failed: {line!r}"
        yield fresh_host, master
    finally:
        filler.stdin.close()
        filler.wait(30)


def test_metrics_head_shows_the_pages_sample(monitored):
    """Blocks 2 and 3: `curl -s http://localhost:9003/metrics | head -20`, run as written,
    shows the page's sample lines (HELP, TYPE gauge, the count) first."""
    host, _ = monitored
    curl = block(PAGE, 2, "curl -s http://localhost:9003/metrics | head -20").text.strip()
    out = host.sh(curl, check=True).output
    lines = out.splitlines()
    assert len(lines) == 20, out
    sample = block(PAGE, 3, "mooncake_master_kv_object_count").text.strip().splitlines()
    assert sample[-1] == f"mooncake_master_kv_object_count {OBJECTS}"
    assert lines[:3] == sample, out
    # Only the master's own metrics in the first 20 lines (the Go runtime's come last).
    assert all(re.match(r"(# (HELP|TYPE) )?mooncake_master_", ln) for ln in lines), out


def test_available_metrics_table(monitored):
    """The "Available Metrics" table: each example metric is exported with the type and help
    text the page gives."""
    host, _ = monitored
    body = host.sh("curl -s http://localhost:9003/metrics", check=True).output
    rows = re.findall(r"^\| [^|]+ \| `(mooncake_master_\w+)` \| ([^|]+) \|$", page_text(PAGE), re.M)
    assert [r[0] for r in rows] == [
        "mooncake_master_kv_object_count", "mooncake_master_segment_free_bytes",
        "mooncake_master_eviction_total", "mooncake_master_pending_tasks",
        "mooncake_master_rpc_requests_total"], rows
    types = {"mooncake_master_kv_object_count": "gauge", "mooncake_master_segment_free_bytes": "gauge",
             "mooncake_master_eviction_total": "counter", "mooncake_master_pending_tasks": "gauge",
             "mooncake_master_rpc_requests_total": "counter"}
    for name, desc in rows:
        assert f"# TYPE {name} {types[name]}\n" in body, name
        help_line = re.search(rf"^# HELP {name} (.*)$", body, re.M)
        assert help_line, name
        if name != "mooncake_master_kv_object_count":  # its HELP is the sample's, above
            assert help_line.group(1).startswith(desc.strip()), (name, help_line.group(1))
    assert f"mooncake_master_kv_object_count {OBJECTS}\n" in body
    assert re.search(r'^mooncake_master_segment_free_bytes\{segment="[^"]+"\} [0-9.e+]+$', body, re.M)


def test_metrics_summary(monitored):
    """Block 6: `curl -s http://localhost:9003/metrics/summary`, as written."""
    host, _ = monitored
    cmd = block(PAGE, 6, "/metrics/summary").text.strip()
    out = host.sh(cmd, check=True).output
    assert f"keys={OBJECTS} " in out, out
    assert "segments=1 " in out, out


def test_metrics_port_flag_is_the_pages(monitored):
    """The master the page starts logs where it serves (rpc 50051, metrics 9003)."""
    _, master = monitored
    m = master.wait_log(r"MOONCAKE_MASTER_READY rpc_port=(\d+) metrics_port=(\d+)")
    assert m.groups() == ("50051", "9003")


def _promtool():
    p = shutil.which("promtool")
    if p is None:
        pytest.fail("promtool is not installed: `make setup` installs Debian's prometheus")
    return p


@pytest.mark.parametrize("index", [5, 7])
def test_scrape_config_snippets_are_valid(tmp_path, index):
    """Blocks 5 and 7 (a remote target; several masters with relabelling): each is a complete
    Prometheus configuration, which `promtool check config` accepts as written."""
    b = block(PAGE, index, "scrape_configs:")
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(b.text)
    r = subprocess.run([_promtool(), "check", "config", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 0 and "SUCCESS" in r.stdout + r.stderr, r.stdout + r.stderr


def test_extra_hosts_is_in_the_compose_file():
    """Block 4 (`extra_hosts: host.docker.internal:host-gateway` for Linux): our
    monitoring/docker-compose.yml already has it under the prometheus service."""
    b = block(PAGE, 4, "extra_hosts:")
    want = [ln.strip() for ln in b.text.strip().splitlines()]
    with open(os.path.join(ROOT, "monitoring", "docker-compose.yml")) as f:
        compose = f.read()
    prom = compose.split("prometheus:", 1)[1].split("\n  grafana:", 1)[0]
    got = [ln.split("#")[0].strip() for ln in prom.splitlines()]
    i = got.index(want[0])
    assert got[i + 1] == want[1], prom


def test_every_block_is_covered():
    """The page has the 8 blocks this file and docs/docs-tests.md know."""
    assert [b.lang for b in blocks(PAGE)] == ["bash", "bash", "bash", "", "yaml", "yaml", "bash", "yaml"]
