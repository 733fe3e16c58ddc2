#!/usr/bin/env python3
"""Failover of an HA master pair: N SIGKILLs of the leader, time to serving again and
acknowledged puts lost, for a client given a master's plain host:port and one given
etcd://... (issue 36, item 4).

Starts its own etcd (one member, temporary directory) and two mooncake_master processes with
the default flags besides HA (--enable_ha --etcd_endpoints --cluster_id; lease TTL 5 s,
client_ttl 10 s), each on a fixed port, and two store clients in their own processes: one set
up with the first master's plain address, one with etcd://. Each client puts small values
(512 B, a new key every 20 ms) for the whole run and records every put's start, end and code.
Then N times: SIGKILL the master that leads, restart it on its port (it comes back as the
standby), wait until both masters are up and every client has had a put acknowledged after
the kill, and settle 2 s. At the end each client reads back every key it had acknowledged.

Time to serving again, per kill and client: from the SIGKILL to the end of the first put
acknowledged after it (acks within 20 ms of the kill were answered by the old leader, which a
SIGKILL stops within microseconds, and are not counted). Lost: keys acknowledged (put
returned 0) and missing or different at the end.

    python bench/failover_bench.py [--kills 20] [--json FILE] [--write-doc]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from perfdoc import write_section  # noqa: E402
from store_bench import binary, free_port  # noqa: E402

CLUSTER = "failover_bench"

CLIENT = textwrap.dedent("""
    import json, sys, threading, time
    from mooncake.store import MooncakeDistributedStore
    spec = json.loads(sys.argv[1])
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 128 << 20, 8 << 20, "tcp", "", spec["master"])
    print("SETUP", rc, flush=True)
    stop, leave = threading.Event(), threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set(), sys.stdin.readline(), leave.set()), daemon=True).start()
    acked = []
    i = 0
    while not stop.is_set():
        key = f"{spec['name']}-{i}"
        t0 = time.time()
        rc = s.put(key, key.encode().ljust(512, b"."))
        t1 = time.time()
        print("P", i, rc, f"{t0:.6f}", f"{t1:.6f}", flush=True)
        if rc == 0:
            acked.append(i)
        i += 1
        time.sleep(max(0.0, 0.02 - (t1 - t0)))
    lost = [k for k in acked if s.get(f"{spec['name']}-{k}") != f"{spec['name']}-{k}".encode().ljust(512, b".")]
    print("DONE", json.dumps({"puts": i, "acked": len(acked), "lost": len(lost), "lost_keys": lost[:20]}), flush=True)
    leave.wait()  # the other client may hold replicas of this one's keys: close after both read
    s.close()
""")


class Proc:
    """A child process whose stdout lines are collected by a thread."""

    def __init__(self, argv, env=None, log=None):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=log or subprocess.DEVNULL, text=True, env=env)
        self.lines: list[str] = []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()

    def wait_for(self, pred, limit=120.0):
        deadline = time.time() + limit
        with self.cv:
            while True:
                for line in self.lines:
                    if pred(line):
                        return line
                left = deadline - time.time()
                if left <= 0 or self.p.poll() is not None and not any(pred(x) for x in self.lines):
                    raise RuntimeError(f"{self.p.args[0]}: no expected line; last: {self.lines[-3:]}")
                self.cv.wait(min(left, 0.5))

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def start_etcd(d):
    client, peer = free_port(), free_port()
    p = subprocess.Popen([shutil.which("etcd") or "etcd", "--name", "b", "--data-dir", d,
                          "--listen-client-urls", f"http://127.0.0.1:{client}",
                          "--advertise-client-urls", f"http://127.0.0.1:{client}",
                          "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                          "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                          "--initial-cluster", f"b=http://127.0.0.1:{peer}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p, f"127.0.0.1:{client}"


class Master:
    def __init__(self, exe, etcd, logdir, name):
        self.exe, self.etcd, self.name = exe, etcd, name
        self.rpc, self.metrics = free_port(), free_port()
        self.log = open(os.path.join(logdir, f"master-{name}.log"), "a")
        self.proc = None
        self.start()

    @property
    def addr(self):
        return f"127.0.0.1:{self.rpc}"

    def start(self):
        self.proc = Proc([self.exe, f"--rpc_port={self.rpc}", f"--metrics_port={self.metrics}",
                          "--rpc_address=127.0.0.1", "--enable_ha", f"--etcd_endpoints=http://{self.etcd}",
                          f"--cluster_id={CLUSTER}"], log=self.log)
        self.proc.wait_for(lambda line: line.startswith("MOONCAKE_MASTER_READY"), 30)

    def serving(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/metrics", timeout=2) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("mooncake_master_ha_serving "):
                        return float(line.split()[1]) == 1
        except OSError:
            pass
        return False

    def kill(self):
        self.proc.p.send_signal(signal.SIGKILL)
        self.proc.p.wait()


def puts_of(c: Proc):
    with c.cv:
        lines = list(c.lines)
    out = []
    for line in lines:
        if line.startswith("P "):
            _, i, rc, t0, t1 = line.split()
            out.append((int(i), int(rc), float(t0), float(t1)))
    return out


def first_ack_after(c: Proc, t_kill: float):
    for _, rc, _, t1 in puts_of(c):
        if rc == 0 and t1 > t_kill + 0.02:
            return t1 - t_kill
    return None


def wait_until(cond, limit, what):
    deadline = time.time() + limit
    while not cond():
        if time.time() > deadline:
            raise RuntimeError(what)
        time.sleep(0.05)


def run(kills: int, workdir: str) -> dict:
    exe = binary("mooncake_master")
    etcd_dir = tempfile.mkdtemp(prefix="etcd-", dir=workdir)
    etcd, etcd_addr = start_etcd(etcd_dir)
    time.sleep(1)
    masters, clients = [], {}
    try:
        masters.append(Master(exe, etcd_addr, workdir, "a"))
        wait_until(masters[0].serving, 30, "master a never led")
        masters.append(Master(exe, etcd_addr, workdir, "b"))
        env = dict(os.environ)
        for name, addr in (("plain", masters[0].addr), ("etcd", f"etcd://{etcd_addr}")):
            e = dict(env, MC_STORE_CLUSTER_ID=CLUSTER) if name == "etcd" else env
            c = Proc([sys.executable, "-c", CLIENT, json.dumps({"master": addr, "name": name})], env=e,
                     log=open(os.path.join(workdir, f"client-{name}.log"), "a"))
            line = c.wait_for(lambda x: x.startswith("SETUP"), 60)
            if line != "SETUP 0":
                raise RuntimeError(f"client {name}: {line}")
            clients[name] = c
        time.sleep(3)
        t0 = time.time()
        kill_times = []
        times = {name: [] for name in clients}
        for k in range(kills):
            leader = next(m for m in masters if m.serving())
            t_kill = time.time()
            leader.kill()
            kill_times.append(round(t_kill - t0, 3))
            other = next(m for m in masters if m is not leader)
            wait_until(lambda: all(first_ack_after(c, t_kill) is not None for c in clients.values()), 120,
                       f"kill {k + 1}: a client never had a put acknowledged again")
            for name, c in clients.items():
                times[name].append(first_ack_after(c, t_kill))
            wait_until(other.serving, 60, "no leader")
            leader.start()  # back as the standby, on the same port
            print(f"kill {k + 1}/{kills}: " + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in times), flush=True)
            time.sleep(2)
        results = {}
        for c in clients.values():
            c.p.stdin.write("stop\n")
            c.p.stdin.flush()
        for name, c in clients.items():
            done = json.loads(c.wait_for(lambda x: x.startswith("DONE"), 300)[5:])
            puts = puts_of(c)
            ts = times[name]
            results[name] = {"kills": kills, "median_s": statistics.median(ts), "max_s": max(ts),
                             "min_s": min(ts), "times_s": ts, "puts": done["puts"], "acked": done["acked"],
                             "failed_puts": sum(1 for p in puts if p[1] != 0), "lost": done["lost"],
                             "failures": [(p[0], p[1], round(p[2] - t0, 3), round(p[3] - p[2], 3)) for p in puts if p[1] != 0][:20],
                             "lost_keys": done["lost_keys"], "longest_put_s": max(p[3] - p[2] for p in puts)}
        results["kill_times_s"] = kill_times
        for c in clients.values():
            c.p.stdin.write("leave\n")
            c.p.stdin.flush()
            c.p.wait(60)
        return results
    finally:
        for c in clients.values():
            c.stop()
        for m in masters:
            m.proc.stop()
        etcd.terminate()
        etcd.wait()


def table(res: dict) -> str:
    rows = ["| client | kills | median | max | min | acked puts | acked puts lost | failed puts | longest put |",
            "|---|---|---|---|---|---|---|---|---|"]
    label = {"plain": "plain address (`127.0.0.1:port` of the first master)", "etcd": "`etcd://...` + `MC_STORE_CLUSTER_ID`"}
    for name, r in res.items():
        if name not in label:
            continue
        rows.append(f"| {label[name]} | {r['kills']} | {r['median_s']:.2f} s | {r['max_s']:.2f} s | {r['min_s']:.2f} s | "
                    f"{r['acked']} | **{r['lost']}** | {r['failed_puts']} | {r['longest_put_s']:.2f} s |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--json", default="")
    ap.add_argument("--keep", action="store_true", help="keep the logs' directory")
    ap.add_argument("--write-doc", action="store_true", help="write the table into docs/performance.md")
    a = ap.parse_args()
    workdir = tempfile.mkdtemp(prefix="failover-bench-")
    try:
        res = run(a.kills, workdir)
    finally:
        print("logs in", workdir) if a.keep else shutil.rmtree(workdir, ignore_errors=True)
    print(table(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    if a.write_doc:
        note = (f"\n\nMeasured {time.strftime('%Y-%m-%d')} (`bench/failover_bench.py --kills {a.kills}`); both clients "
                "ran in the same run, so each kill is measured by both.")
        write_section('failover_bench', table(res) + note)


if __name__ == "__main__":
    main()
