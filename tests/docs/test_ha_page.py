"""docs/upstream/deployment__ha-hot-standby.md: the deployment example (steps 1-4) run on one
host, as a user trying it would, with the page's commands as written (docs/docs-tests.md).

Everything runs on a fresh host (conftest.FreshHost): the page's ports (50051, 50052, 9003)
and its etcd endpoints (http://etcd-0:2379;http://etcd-1:2379;http://etcd-2:2379, three names
of one etcd here) are used literally. The page's snapshot directories (/tmp/mooncake_snapshots,
the default of step 1, and /data/mooncake_snapshots of step 2) are private tmpfs mounts of
that host.
"""

from __future__ import annotations

import re
import signal
import subprocess
import textwrap

import pytest

from .conftest import block, blocks, page_text, shell_command, venv_env

PAGE = "deployment__ha-hot-standby"

# A store client that follows the cluster's leader through etcd (the page: "Clients that
# retry their connections will automatically reconnect to the promoted standby"): it puts
# three objects, then, once told (a line on stdin), reads them back through whichever master
# leads by then.
CLIENT = textwrap.dedent("""
    import sys, time
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 4 << 20, "tcp", "", "etcd://etcd-0:2379")
    assert rc == 0, rc
    for i in range(3):
        assert s.put(f"ha-key-{i}", f"value-{i}".encode()) == 0
    print("PUT", flush=True)
    sys.stdin.readline()
    got = []
    for i in range(3):
        for attempt in range(120):  # the client finds the new leader through etcd
            v = s.get(f"ha-key-{i}")
            if v:
                break
            time.sleep(0.5)
        got.append(v.decode())
    print("GOT", " ".join(got), flush=True)
    s.close()
""")


@pytest.fixture(scope="module")
def walkthrough(fresh_host):
    h = fresh_host
    h.private_dir("/tmp/mooncake_snapshots")
    h.private_dir("/data/mooncake_snapshots")
    h.start_etcd()
    procs = {}
    # Step 1: the primary, exactly as the page writes it.
    procs["primary"] = h.spawn(shell_command(block(PAGE, 1, "--rpc_port=50051").text), "primary")
    procs["primary"].wait_log(r"is the leader")
    # Step 2: the standby, on the same host.
    procs["standby"] = h.spawn(shell_command(block(PAGE, 2, "--rpc_port=50052").text), "standby")
    procs["standby"].wait_log(r"MOONCAKE_MASTER_READY")
    # A store client's objects give the oplog entries to replicate.
    client = h.python(CLIENT, env={"MC_STORE_CLUSTER_ID": "prod-cluster"}, stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = client.stdout.readline()
    assert line.strip() == "PUT", line + client.stdout.read() if client.poll() is not None else line
    procs["client"] = client
    yield h, procs
    if client.poll() is None:
        client.kill()
        client.wait()


def test_step1_snapshot_default_directory(walkthrough):
    """Step 1 passes --enable_snapshot=true --snapshot_backend_type=local and no directory: the
    primary uses upstream's default, /tmp/mooncake_snapshots, and says so in its log."""
    _, p = walkthrough
    m = p["primary"].wait_log(r"mooncake_master: snapshots in local directory (\S+) \(the default")
    assert m.group(1) == "/tmp/mooncake_snapshots"


def test_step2_standby_on_the_same_host(walkthrough):
    """Step 2 starts the standby on the primary's host with the default metrics port, which the
    primary holds: the standby serves its metrics on the next free port and says so."""
    _, p = walkthrough
    p["standby"].wait_log(r"metrics port 9003 is in use \(another mooncake_master on this host\?\): "
                          r"serving /metrics on port 9004 instead; pass --metrics_port to choose")
    m = p["standby"].wait_log(r"MOONCAKE_MASTER_READY rpc_port=(\d+) metrics_port=(\d+)")
    assert m.groups() == ("50052", "9004")
    # The snapshot directory of step 2 (MOONCAKE_SNAPSHOT_LOCAL_PATH) is the standby's.
    p["standby"].wait_log(r"snapshots in local directory /data/mooncake_snapshots\n")


def test_mooncake_client_default_port_beside_a_standby(walkthrough):
    """A mooncake_client started on this host with its default --port (50052) finds the port
    taken by the standby's --rpc_port=50052 and takes a free one, saying so."""
    h, _ = walkthrough
    c = h.spawn("mooncake_client --master_server_address=etcd://etcd-0:2379 "
                "--global_segment_size=16MB", "mooncake_client", env={"MC_STORE_CLUSTER_ID": "prod-cluster"})
    c.wait_log(r"mooncake_client: port 50052 on 127\.0\.0\.1 is in use \(a mooncake_master's "
               r"--rpc_port\?\): using a free port instead; pass --port to choose")
    m = c.wait_log(r"MOONCAKE_CLIENT_READY segment=127\.0\.0\.1:(\d+)")
    assert m.group(1) != "50052"
    c.stop()


def test_step3_sync_status_lines(walkthrough):
    """Step 3: the standby logs the two lines the page tells users to look for."""
    _, p = walkthrough
    want = block(PAGE, 3, "[HotStandbyService]").text.strip().splitlines()
    assert re.fullmatch(r"\[HotStandbyService\] applied_seq_id=\d+ lag=0 entries", want[0])
    assert re.fullmatch(r"\[HotStandbyService\] verification OK: primary_seq_id=(\d+) "
                        r"standby_seq_id=\1", want[1])
    m = p["standby"].wait_log(r"\[HotStandbyService\] applied_seq_id=(\d+) lag=0 entries")
    assert int(m.group(1)) >= 0
    m = p["standby"].wait_log(r"\[HotStandbyService\] verification OK: primary_seq_id=(\d+) "
                              r"standby_seq_id=(\d+)")
    assert m.group(1) == m.group(2) and int(m.group(1)) > 0, m.group(0)


def test_step4_failover(walkthrough):
    """Step 4: kill the primary; the standby takes the lease, serves on its own --rpc_port, and
    the client reads what it wrote through the primary."""
    test_step3_sync_status_lines(walkthrough)  # the standby is in sync first
    h, p = walkthrough
    p["primary"].send_signal(signal.SIGKILL)
    p["primary"].wait()
    p["standby"].wait_log(r"is the leader", timeout=60)
    health = h.sh("curl -s http://localhost:9004/health", check=True).output
    assert '"role":"leader"' in health.replace(" ", ""), health
    client = p["client"]
    client.stdin.write("go\n")
    client.stdin.flush()
    out = client.stdout.read()
    client.wait(60)
    assert "GOT value-0 value-1 value-2" in out, out


def test_defaults_table_matches():
    """The HotStandbyConfig table's defaults are mooncake_master's (--help)."""
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", page_text(PAGE), re.M))
    assert rows["verification_interval_sec"] == "30" and rows["enable_snapshot_bootstrap"] == "false"
    assert rows["max_replication_lag_entries"] == "1000" and rows["enable_verification"] == "true"
    assert rows["enable_oplog_following"] == "true"
    out = subprocess.run(["mooncake_master", "--help"], capture_output=True, text=True,
                         env=venv_env())
    text = out.stdout + out.stderr
    flags = {}
    for entry in re.split(r"\n(?=  -\w)", text):
        m = re.match(r"\s*-(\w+)", entry)
        if m:
            flags[m.group(1)] = entry
    for flag, want in [("verification_interval_sec", "30"), ("max_replication_lag_entries", "1000"),
                       ("enable_snapshot_bootstrap", None), ("enable_verification", "true"),
                       ("enable_oplog_following", "true"), ("client_ttl", "10"),
                       ("cluster_id", "mooncake_cluster"), ("enable_ha", None)]:
        entry = flags[flag]
        if want is None:  # a bool flag defaulting to false shows no default
            assert "(default" not in entry, entry
        else:
            assert f"(default {want})" in entry or f'(default "{want}")' in entry, entry


def test_every_block_is_covered():
    assert [b.lang for b in blocks(PAGE)] == ["", "bash", "bash", ""]
