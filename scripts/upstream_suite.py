#!/usr/bin/env python3
"""Runs upstream Mooncake's wheel tests (mooncake-wheel/tests of kvcache-ai/Mooncake) against a
Python environment: ours (this repository's .venv) or upstream's release wheel in a virtualenv of
its own, the same way for both, and prints passed / failed / errors / skipped / not run per file.

    python scripts/upstream_suite.py --tests UPSTREAM/mooncake-wheel/tests --python .venv/bin/python
        [--files test_a.py,test_b.py] [--json out.json] [--timeout 900]

Upstream's tests are never part of this repository: get them with
`git -C MIRROR archive HEAD mooncake-wheel/tests | tar -x` into a scratch folder. They are copied
into a fresh folder for each run (some insert their parent folder on sys.path, which must not hold
a `mooncake` package, so the package under test is the installed one).

Each file runs the way upstream's scripts/run_tests.sh runs it, in a network namespace of its own
(so files, and several drivers, never share ports) with a veth pair up (upstream's release needs a
non-loopback interface): an HTTP metadata server on 8080, `mooncake_master
--default_kv_lease_ttl=500` (plus the file's own flags: offload, promotion), the environment
MC_METADATA_SERVER=http://127.0.0.1:8080/metadata DEFAULT_KV_LEASE_TTL=500, a `mooncake_client`
for the dummy-client files, then `python FILE -v` (unittest files, failfast where the file asks for
it) or `python -m pytest FILE` (pytest files). The commands come from the bin/ folder beside
--python. Files that need a GPU, RDMA, CXL or SPDK are left out.

Must run as root (unshare, ip)."""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

# Files that need hardware this suite does not assume, or are not tests of the package.
LEFT_OUT = {
    "test_distributed_object_store_cxl.py": "CXL",
    "test_transfer_on_cuda.py": "GPU",
    "test_transfer_on_hip.py": "GPU",
    "test_mooncake_ep.py": "GPU (expert parallelism)",
    "test_regmr_overhead.py": "RDMA memory registration",
    "test_spdk_tgt_create.py": "SPDK",
    "test_meta_server.py": "a load script, no tests",
    "test_release_wheel_tags.py": "upstream's CI workflow files, not the package",
}

# Per file: extra master flags, extra client environment, whether a mooncake_client runs beside.
OFFLOAD_DIR = "{tmp}/offload"
SPECIAL = {
    "test_dummy_client.py": {"client": True},
    "test_multi_dummy_clients.py": {"client": True, "multi": True},
    "test_ssd_offload_in_evict.py": {
        "master": ["--root_fs_dir=" + OFFLOAD_DIR],
        "env": {"MOONCAKE_STORAGE_ROOT_DIR": OFFLOAD_DIR}},
    "test_offload_on_eviction.py": {
        "master": ["--root_fs_dir=" + OFFLOAD_DIR, "--enable_offload=true", "--offload_on_evict=true"],
        "env": {"MOONCAKE_OFFLOAD_FILE_STORAGE_PATH": OFFLOAD_DIR}},
    "test_promotion_on_hit.py": {
        "master": ["--root_fs_dir=" + OFFLOAD_DIR, "--enable_offload=true", "--offload_on_evict=true",
                   "--promotion_on_hit=true", "--promotion_admission_threshold=1"],
        "env": {"MOONCAKE_OFFLOAD_FILE_STORAGE_PATH": OFFLOAD_DIR,
                "MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT": "10",
                "MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES": "10485760"}},
}

# What runs inside the namespace: loopback and a veth pair up, the services, then the tests.
NETNS_SCRIPT = r"""
set -u
ip link set lo up
ip link add mcv0 type veth peer name mcv1 && ip addr add 10.213.0.1/24 dev mcv0 && \
  ip link set mcv0 up && ip link set mcv1 up
cd "$RUN_DIR"
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; sleep 0.3; for p in $pids; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT
wait_port() { for i in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; return 1; }
"$BIN/mooncake_http_metadata_server" --port 8080 > "$LOGS/metadata.log" 2>&1 & pids="$pids $!"
wait_port 8080
"$BIN/mooncake_master" --default_kv_lease_ttl=500 $MASTER_FLAGS > "$LOGS/master.log" 2>&1 & pids="$pids $!"
wait_port 50051
if [ "$WITH_CLIENT" = 1 ]; then
  "$BIN/mooncake_client" > "$LOGS/client.log" 2>&1 & pids="$pids $!"
  sleep 2
fi
if [ "$MULTI" = 1 ]; then
  "$PY" "$FILE" --client-id client1 > "$LOGS/test1.log" 2>&1 & a=$!
  "$PY" "$FILE" --client-id client2 > "$LOGS/test2.log" 2>&1 & b=$!
  wait $a; ra=$?; wait $b; rb=$?
  cat "$LOGS/test1.log" "$LOGS/test2.log"
  exit $(( ra || rb ))
fi
exec_cmd="$RUNNER"
eval "$exec_cmd"
"""


def is_pytest_file(path: str) -> bool:
    """unittest files run as `python FILE -v` (as upstream's scripts do); the rest (pytest files
    and plain scripts of test functions) through pytest, which counts their tests."""
    return "unittest.main(" not in open(path).read()


def count_defined(path: str) -> int:
    """Test functions defined in the file (a floor for the total when collection fails)."""
    tree = ast.parse(open(path).read())
    return sum(1 for n in ast.walk(tree)
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test"))


def parse_unittest(out: str) -> dict:
    """Counts from `python FILE -v`: tests run and skipped from the summary, failed and errored
    tests by name from the report headers (a test whose subtests fail several times counts once;
    a failing setUpClass is not a test)."""
    r = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "ran": 0, "failures": []}
    ran = re.findall(r"^Ran (\d+) tests? in", out, re.M)
    if not ran:
        return r
    r["ran"] = int(ran[-1])
    tail = out[out.rfind("Ran "):]
    m = re.search(r"\bskipped=(\d+)", tail)
    r["skipped"] = int(m.group(1)) if m else 0
    m = re.search(r"expected failures=(\d+)", tail)
    xf = int(m.group(1)) if m else 0
    failed = dict.fromkeys(re.findall(r"^FAIL: (test\w*) ", out, re.M))
    errored = dict.fromkeys(n for n in re.findall(r"^ERROR: (test\w*) ", out, re.M) if n not in failed)
    r["failed"], r["errors"] = len(failed), len(errored)
    r["passed"] = max(0, r["ran"] - r["failed"] - r["errors"] - r["skipped"] - xf)
    r["failures"] = list(failed) + list(errored)
    return r


def parse_junit(path: str) -> dict:
    r = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "ran": 0, "failures": []}
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return r
    for case in root.iter("testcase"):
        r["ran"] += 1
        kinds = {c.tag for c in case}
        if "failure" in kinds:
            r["failed"] += 1
            r["failures"].append(case.get("name"))
        elif "error" in kinds:
            r["errors"] += 1
            r["failures"].append(case.get("name"))
        elif "skipped" in kinds:
            r["skipped"] += 1
        else:
            r["passed"] += 1
    return r


def run_file(name: str, tests: str, python: str, timeout: int, keep: str | None) -> dict:
    tmp = tempfile.mkdtemp(prefix="upstream-suite-")
    run_dir = os.path.join(tmp, "wheel", "tests")  # parents[1] = tmp/wheel: no mooncake package
    shutil.copytree(tests, run_dir)
    logs = os.path.join(tmp, "logs")
    os.makedirs(logs)
    special = SPECIAL.get(name, {})
    os.makedirs(OFFLOAD_DIR.format(tmp=tmp), exist_ok=True)
    junit = os.path.join(tmp, "junit.xml")
    pytest_style = is_pytest_file(os.path.join(run_dir, name))
    if pytest_style:
        runner = f'"$PY" -m pytest -q -p no:cacheprovider --junitxml="{junit}" "$FILE" 2>&1'
    else:
        runner = '"$PY" "$FILE" -v 2>&1'
    env = dict(os.environ)
    env.update({
        "RUN_DIR": run_dir, "LOGS": logs, "PY": python, "FILE": name,
        "BIN": os.path.dirname(os.path.abspath(python)),
        "MASTER_FLAGS": " ".join(f.format(tmp=tmp) for f in special.get("master", [])),
        "WITH_CLIENT": "1" if special.get("client") else "0",
        "MULTI": "1" if special.get("multi") else "0",
        "RUNNER": runner,
        "PATH": os.path.dirname(os.path.abspath(python)) + os.pathsep + os.environ.get("PATH", ""),
        "MC_METADATA_SERVER": "http://127.0.0.1:8080/metadata",
        "DEFAULT_KV_LEASE_TTL": "500",
        "PYTHONUNBUFFERED": "1",
    })
    env.update({k: v.format(tmp=tmp) for k, v in special.get("env", {}).items()})
    env.pop("PYTHONPATH", None)
    t0 = time.time()
    try:
        p = subprocess.run(["unshare", "-n", "bash", "-c", NETNS_SCRIPT], env=env, cwd=run_dir,
                           capture_output=True, text=True, timeout=timeout)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += "\n[driver] timed out"
        rc = 124
    secs = time.time() - t0
    if special.get("multi"):
        # Two processes, each with its own unittest summary: add them up.
        res = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "ran": 0, "failures": []}
        for chunk in re.split(r"(?=^Ran \d+ tests? in)", out, flags=re.M)[1:]:
            part = parse_unittest(chunk)
            for k in ("passed", "failed", "errors", "skipped", "ran"):
                res[k] += part[k]
        res["failures"] = sorted(set(re.findall(r"^(?:FAIL|ERROR): (test\w*) ", out, re.M)))
    elif pytest_style:
        res = parse_junit(junit)
    else:
        res = parse_unittest(out)
    res.update(file=name, rc=rc, seconds=round(secs, 1), defined=count_defined(os.path.join(run_dir, name)))
    if special.get("multi"):
        res["defined"] *= 2
    if keep:
        os.makedirs(keep, exist_ok=True)
        with open(os.path.join(keep, name + ".log"), "w") as f:
            f.write(out)
            for lf in sorted(os.listdir(logs)):
                f.write(f"\n===== {lf}\n" + open(os.path.join(logs, lf), errors="replace").read()[-20000:])
    shutil.rmtree(tmp, ignore_errors=True)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tests", required=True, help="upstream's mooncake-wheel/tests folder")
    ap.add_argument("--python", required=True, help="the environment's python (its bin/ has the commands)")
    ap.add_argument("--files", default="", help="comma-separated file names (default: all)")
    ap.add_argument("--json", default="", help="write the results here")
    ap.add_argument("--logs", default="", help="keep each file's output in this folder")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per file")
    a = ap.parse_args()
    files = [f for f in a.files.split(",") if f] or sorted(
        f for f in os.listdir(a.tests) if f.startswith("test_") and f.endswith(".py"))
    rows = []
    print(f"{'file':45} {'defined':>7} {'ran':>4} {'pass':>5} {'fail':>5} {'err':>4} {'skip':>5} {'rc':>4} {'s':>6}")
    for name in files:
        if name in LEFT_OUT:
            print(f"{name:45} left out: {LEFT_OUT[name]}")
            continue
        r = run_file(name, a.tests, a.python, a.timeout, a.logs or None)
        rows.append(r)
        print(f"{name:45} {r['defined']:7} {r['ran']:4} {r['passed']:5} {r['failed']:5} {r['errors']:4} "
              f"{r['skipped']:5} {r['rc']:4} {r['seconds']:6}", flush=True)
    tot = {k: sum(r[k] for r in rows) for k in ("defined", "ran", "passed", "failed", "errors", "skipped")}
    print(f"{'total':45} {tot['defined']:7} {tot['ran']:4} {tot['passed']:5} {tot['failed']:5} "
          f"{tot['errors']:4} {tot['skipped']:5}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"python": a.python, "files": rows, "total": tot}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
