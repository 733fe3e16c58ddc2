"""The Mooncake Store deployment guide (docs/upstream/deployment__mooncake-store-deployment-
guide.md: the S3 snapshot backend and the Redis HA backend), on a fresh host (private network
namespace) so the page's port 50051 and Redis addresses work as written.

Substitutions (docs/docs-tests.md): the S3 bucket is a local MinIO started with the page's
keys as its credentials, reached through MOONCAKE_SNAPSHOT_S3_ENDPOINT (the page's literal command,
with no endpoint, is run first: it names the S3 host it cannot reach); --snapshot_interval_seconds
300 -> 1 so a snapshot is taken during the test; Redis 10.0.0.10 -> 127.0.0.1 (a redis-server on
the fresh host); the CMake line has no counterpart (Redis support is always built in)."""

from __future__ import annotations

import os
import re
import shutil
import textwrap

import pytest

from .conftest import block, blocks, page_text, shell_command, substitute

PAGE = "deployment__mooncake-store-deployment-guide"


def minio_bin():
    p = shutil.which("minio") or os.path.expanduser("~/go/bin/minio")
    return p if os.path.exists(p) else None


def test_the_page_has_these_blocks():
    bs = blocks(PAGE)
    assert [b.lang for b in bs] == ["bash"] * 4
    assert "--snapshot_backend_type=s3" in bs[0].text and "-DSTORE_USE_REDIS=ON" in bs[1].text
    assert '--etcd_endpoints="redis://10.0.0.10:6379"' in bs[2].text
    assert bs[3].text.startswith("# Redis Cluster")


def test_log_levels_line_and_rpc_thread_tip(fresh_host):
    """Prose the page states: the log levels, and --rpc_thread_num (Quick Tips)."""
    text = page_text(PAGE)
    assert "Available log levels: trace, debug, info, warn (or warning), error, and critical." in text
    assert "Scale `--rpc_thread_num`" in text
    r = fresh_host.sh("mooncake_master --help 2>&1 | grep -A1 -e '-rpc_thread_num'")
    assert "-rpc_thread_num" in r.output, r.output


S3_SCRIPT = textwrap.dedent('''
    import datetime, hashlib, hmac, os, sys, urllib.request
    def s3(method, path, query=""):
        ep = os.environ["MOONCAKE_SNAPSHOT_S3_ENDPOINT"]
        host = ep.split("://", 1)[1]
        ak, sk = os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]
        region = os.environ["AWS_DEFAULT_REGION"]
        amz = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        ph = hashlib.sha256(b"").hexdigest()
        canon = "\\n".join([method, path, query, "host:" + host, "x-amz-content-sha256:" + ph,
                           "x-amz-date:" + amz, "", "host;x-amz-content-sha256;x-amz-date", ph])
        scope = amz[:8] + "/" + region + "/s3/aws4_request"
        sts = "\\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(canon.encode()).hexdigest()])
        k = ("AWS4" + sk).encode()
        for part in (amz[:8], region, "s3", "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
        auth = ("AWS4-HMAC-SHA256 Credential=" + ak + "/" + scope + ", SignedHeaders=host;"
                "x-amz-content-sha256;x-amz-date, Signature=" + sig)
        req = urllib.request.Request(ep + path + ("?" + query if query else ""), method=method,
                                     headers={"x-amz-date": amz, "x-amz-content-sha256": ph,
                                              "Authorization": auth})
        return urllib.request.urlopen(req, timeout=10).read()
    if sys.argv[1] == "mkbucket":
        s3("PUT", "/" + os.environ["MOONCAKE_SNAPSHOT_S3_BUCKET"])
        print("BUCKET OK")
    else:
        out = s3("GET", "/" + os.environ["MOONCAKE_SNAPSHOT_S3_BUCKET"],
                 "list-type=2&prefix=" + os.environ["MOONCAKE_SNAPSHOT_S3_PREFIX"].replace("/", "%2F"))
        import re
        print("\\n".join(re.findall(r"<Key>([^<]+)</Key>", out.decode())))
''')


def test_s3_snapshot_backend(fresh_host, tmp_path):
    text = block(PAGE, 0, "--snapshot_backend_type=s3").text
    exports = "\n".join(ln for ln in text.splitlines() if ln.startswith("export "))
    master = shell_command("\n".join(ln for ln in text.splitlines() if not ln.startswith("export ")))
    assert master.startswith("mooncake_master --rpc_port=50051 --enable_snapshot=true")
    # As written: no S3 endpoint is reachable from here; the master names what it tried.
    r = fresh_host.sh(exports + "\n" + master, timeout=60)
    assert r.returncode == 1, r.output
    assert ('snapshot: checking s3 bucket "my-org-mooncake-snapshots" prefix "prod-cluster/" at '
            "s3.amazonaws.com (are the endpoint and AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
            "right?)") in r.output, r.output
    if minio_bin() is None:
        pytest.fail("minio is not installed: `make setup` builds it (scripts/setup.sh)")
    # A local S3 (MinIO) with the page's keys as its credentials, the bucket made once.
    data = tmp_path / "minio"
    data.mkdir()
    env = "export MINIO_ROOT_USER=$AWS_ACCESS_KEY_ID MINIO_ROOT_PASSWORD=$AWS_SECRET_ACCESS_KEY\n"
    fresh_host.spawn(exports + "\n" + env + f"exec {minio_bin()} server {data} --address "
                     "127.0.0.1:9000 --console-address 127.0.0.1:9001 --quiet", "minio")
    fresh_host.wait_port(9000)
    (tmp_path / "s3.py").write_text(S3_SCRIPT)
    endpoint = "export MOONCAKE_SNAPSHOT_S3_ENDPOINT=http://127.0.0.1:9000\n"
    for _ in range(50):
        r = fresh_host.sh(exports + "\n" + endpoint + f"python {tmp_path}/s3.py mkbucket")
        if "BUCKET OK" in r.output:
            break
    assert "BUCKET OK" in r.output, r.output
    fast = substitute(master, ("--snapshot_interval_seconds=300", "--snapshot_interval_seconds=1"))
    m = fresh_host.spawn(exports + "\n" + endpoint + "exec " + fast, "master_s3")
    m.wait_log("MOONCAKE_MASTER_READY")
    # a client puts a key, so the snapshot holds something
    (tmp_path / "put.py").write_text(textwrap.dedent("""
        from mooncake.store import MooncakeDistributedStore
        s = MooncakeDistributedStore()
        assert s.setup("localhost", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "", "localhost:50051") == 0
        assert s.put("snapshot-me", b"kept across a restart") == 0
        print("PUT OK", flush=True)
        import time
        time.sleep(3600)  # our segment holds the value: stay (stopped at teardown)
    """))
    client = fresh_host.spawn(f"exec python {tmp_path}/put.py", "client")
    client.wait_log("PUT OK", timeout=60)
    saved = m.wait_log(r"saved snapshot (\S+) \(seq (\d+), \d+ bytes\)$", timeout=60)
    while int(saved.group(2)) < 3:  # mount, put start, put end
        saved = m.wait_log(r"saved snapshot (\S+) \(seq ([3-9]|\d\d+), \d+ bytes\)$", timeout=60)
    r = fresh_host.sh(exports + "\n" + endpoint + f"python {tmp_path}/s3.py list")
    keys = r.output.split()
    assert any(k.startswith("prod-cluster/") and saved.group(1) in k for k in keys), keys
    m.stop()
    # Restore Procedure: a restarted master lists, downloads and applies the newest snapshot.
    m2 = fresh_host.spawn(exports + "\n" + endpoint + "exec " + master, "master_s3_restart")
    restored = m2.wait_log(r"restored snapshot at seq (\d+)$")
    assert int(restored.group(1)) >= 3
    m2.wait_log("MOONCAKE_MASTER_READY")
    r = fresh_host.sh("python -c \"import urllib.request as u; "
                      "print(u.urlopen('http://127.0.0.1:9003/get_all_keys').read().decode())\"")
    assert "snapshot-me" in r.output, r.output
    m2.stop()
    client.stop()


def test_redis_build_flag_has_no_counterpart(fresh_host):
    b = block(PAGE, 1, "STORE_USE_REDIS")
    assert b.text.startswith("cmake ..")
    # No CMake here: the master always speaks Redis (redis:// in --etcd_endpoints).
    r = fresh_host.sh("mooncake_master --help 2>&1 | grep -A1 -e '-etcd_endpoints'")
    assert 'redis://h:6379' in r.output, r.output


def test_redis_ha_backend(fresh_host):
    fresh_host.start_redis(6379)
    cmd = substitute(shell_command(block(PAGE, 2, "--enable_ha=true").text),
                     ("redis://10.0.0.10:6379", "redis://127.0.0.1:6379"))
    m = fresh_host.spawn("exec " + cmd, "master_redis")
    m.wait_log(r"HA on redis store redis://127\.0\.0\.1:6379: standing as \S+:50051")
    m.wait_log("MOONCAKE_MASTER_READY")
    m.wait_log(r"won the election")
    # Key hash tags: every key of the cluster carries {prod-cluster}
    r = fresh_host.sh("redis-cli -p 6379 --raw KEYS '*'")
    keys = sorted(r.output.split())
    assert keys and all("{prod-cluster}" in k for k in keys), keys
    assert "mooncake-store/{prod-cluster}/master_view" in keys
    # a client reaches the leader through the page's --rpc_port
    r = fresh_host.sh("python -c \"from mooncake.store import MooncakeDistributedStore as S; "
                      "s = S(); print(s.setup('localhost', 'P2PHANDSHAKE', 16 << 20, 16 << 20, "
                      "'tcp', '', 'localhost:50051'), s.put('k', b'v'), s.get('k'))\"", timeout=60)
    assert "0 0 b'v'" in r.output, r.output
    m.stop()


def test_redis_db_index_and_password(fresh_host):
    """MC_REDIS_DB_INDEX and MC_REDIS_PASSWORD, read from the environment as the page says."""
    fresh_host.spawn("exec redis-server --port 6380 --bind 127.0.0.1 --save '' --appendonly no "
                     "--requirepass s3cret", "redis_auth")
    fresh_host.wait_port(6380)
    cmd = substitute(shell_command(block(PAGE, 2, "--enable_ha=true").text),
                     ("redis://10.0.0.10:6379", "redis://127.0.0.1:6380"),
                     ("--rpc_port=50051", "--rpc_port=50061 --metrics_port=9013"))
    bad = fresh_host.sh(cmd + " 2>&1 | head -5", env={"MC_REDIS_DB_INDEX": "3"}, timeout=60)
    assert "NOAUTH" in bad.output or "auth" in bad.output.lower(), bad.output
    m = fresh_host.spawn("exec " + cmd, "master_redis_auth",
                         env={"MC_REDIS_PASSWORD": "s3cret", "MC_REDIS_DB_INDEX": "3"})
    m.wait_log("won the election")
    r = fresh_host.sh("redis-cli -p 6380 -a s3cret -n 3 --no-auth-warning --raw KEYS '*'; echo ---; "
                      "redis-cli -p 6380 -a s3cret -n 0 --no-auth-warning --raw KEYS '*'")
    in3, in0 = r.output.split("---")
    assert "mooncake-store/{prod-cluster}/master_view" in in3.split() and in0.split() == [], r.output
    m.stop()


def test_redis_cluster_endpoints(fresh_host):
    """Several redis:// endpoints name a Redis Cluster; with nodes that do not answer, the
    master says which one."""
    frag = block(PAGE, 3, "redis://10.0.0.11").text
    value = shell_command(frag)
    assert value.startswith('--etcd_endpoints="redis://10.0.0.10:6379;redis://10.0.0.11:6379;')
    cmd = ("mooncake_master --rpc_port=50071 --metrics_port=9023 --enable_ha=true "
           "--cluster_id=prod-cluster " + substitute(value, ("10.0.0.10", "127.0.0.1"),
                                                     ("10.0.0.11", "127.0.0.2"),
                                                     ("10.0.0.12", "127.0.0.3")))
    r = fresh_host.sh(cmd, timeout=120)
    assert r.returncode == 1, r.output
    # 127.0.0.1:6379 is the plain redis-server of test_redis_ha_backend (no cluster mode);
    # the other two nodes do not exist.
    assert re.search(r"ha: redis at 127\.0\.0\.1:6379,127\.0\.0\.2:6379,127\.0\.0\.3:6379 does not "
                     r"answer: (ERR This instance has cluster support disabled|dial tcp "
                     r"127\.0\.0\.[123]:6379: connect: connection refused)$", r.output, re.M), r.output
