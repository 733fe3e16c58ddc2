#!/usr/bin/env python3
"""Small operations: Mooncake Store against redis-server and upstream's release, in one run.

For 4 KiB and 64 KiB values, times single put and get (from one thread, and from 4 threads of
one process sharing the client: redis, one connection each) and batches of 64 keys
(batch_put_from, batch_get_into, put_batch, get_batch, batch_is_exist) through three peers, op by
op, alternated within each round (--rounds, median reported):

  - ours: this tree's mooncake_master and a mooncake_client holding the memory, the ops from a
    pure client process (no segment of its own) with MC_FORCE_TCP=1 (values over tcp);
  - upstream: the release wheel in a virtualenv of its own (--upstream-venv, default
    /work/upstream-venv; mooncake-transfer-engine-non-cuda 0.3.13.post1), its own mooncake_master
    and mooncake_client, protocol tcp, P2PHANDSHAKE metadata; left out when the venv is missing;
  - redis: redis-server (persistence off) over one RESP connection: SET/GET for single ops,
    one MSET/MGET of 64 keys for a batch put/get, 64 pipelined EXISTS for batch_is_exist.
  - baseline (with --baseline DIR): another checkout of this project (a `git worktree` of an
    older commit, say), its master, client and library built by the bench from DIR's sources
    into DIR/build/baseline/ and run exactly as ours: the same ops before and after a change,
    alternated in one run. Its Python package is this tree's. Compare builds with --cpus same:
    unpinned, where the kernel places each peer's worker against its master decides its single
    ops' rate for the whole run (the same commit as its own baseline: 0.55x on 4 KiB gets).

With --clients K, each peer's ops run in K worker processes at once (one master, one holder;
redis: K connections; each worker its own keys): an op's rate is the keys of all K over the span
from the first start to the last end, and the server's CPU per op is reported beside it (our
master, redis-server, upstream's master). --ops runs some of the ops (and the puts whose keys
they read); --peer-env NAME:VAR=VALUE,... adds a peer NAME: ours again, its master, holder and
workers with those environment variables (MOONCAKE_GC_HEAP_FLOOR=0, say, for the Go runtime's
own pacing of garbage collection). With K > 1, --write-doc writes the smallops_clients table.

--cpus pins the processes: `same` puts every process of the run on CPU 0, `split` the servers
(masters, holders, redis-server) on CPU 0 and the op workers on CPU 1. Unpinned (the default),
where the kernel places a worker against its server decides much of a single op's time on a VM:
a wake-up across virtual CPUs costs tens of microseconds, one on the same CPU a few, and the
kernel places peers with fewer threads (redis) beside their server more often than ours.

Everything runs in a network namespace of its own (the bench re-executes itself under
`unshare -n`) with loopback and a veth pair up (upstream's release needs a non-loopback
interface); every peer listens on 127.0.0.1. Each peer's ops run in a worker process of its own
(ours: this tree's .venv python; upstream: the venv's python). Batches count keys: a batch of 64
keys in 1 ms is 64,000 op/s. Needs root (unshare). Other work on the host shows in the figures:
the peers alternate so that it weighs on each alike.

    python bench/smallops_bench.py [--rounds 4] [--scale 1] [--baseline DIR] [--json out.json] [--write-doc]
    python bench/smallops_bench.py --clients 4 --scale 4 --ops get,get_batch,batch_is_exist \
        --peer-env gcpacing:MOONCAKE_GC_HEAP_FLOOR=0 --write-doc
    python bench/smallops_bench.py --preload 262144 --baseline DIR --ops batch_put_from,batch_get_into --write-doc

--preload N has every peer hold N more keys of 4 KiB (put before the first round, kept through
the rounds: between rounds only the rounds' keys are removed), so that the ops run against a
store in use; with --write-doc it writes the smallops_preload table, the baseline and the
servers' CPU per op included.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from perfdoc import write_section  # noqa: E402
from store_bench import binary, free_port, wait_line  # noqa: E402

BATCH = 64
# (bytes, label, single ops per round, batches per round)
SIZES = [(4 << 10, "4 KiB", 2000, 40), (64 << 10, "64 KiB", 500, 10)]
THREADS = 4
# --cpus: the CPUs each kind of process runs on ("server": masters, holders, redis-server;
# "worker": the processes doing the ops); empty: wherever the kernel places them.
CPUS_MODES = {"": {}, "same": {"server": {0}, "worker": {0}}, "split": {"server": {0}, "worker": {1}}}
AFFINITY: dict = {}


def pinned(role: str):
    """A preexec_fn that pins the child to --cpus's CPUs for role (None: not pinned)."""
    cpus = AFFINITY.get(role)
    return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None


OPS = ["put", "get", "put_mt", "get_mt", "batch_put_from", "batch_get_into", "put_batch", "get_batch", "batch_is_exist"]
PEERS = ["ours", "baseline", "redis", "upstream"]
SINGLE = ("put", "get", "put_mt", "get_mt")
# the op whose keys each read op reads
SOURCE = {"get": "put", "get_mt": "put_mt", "batch_get_into": "batch_put_from", "get_batch": "put_batch",
          "batch_is_exist": "put_batch"}
LABELS = {"put_mt": f"put, {THREADS} threads", "get_mt": f"get, {THREADS} threads"}

# The worker: reads one JSON command a line, answers one JSON line. argv[1]: the peer's spec.
WORKER = r'''
import ctypes, json, os, socket, sys, time
spec = json.loads(sys.argv[1])
kind = spec["kind"]
BATCH = spec["batch"]

class Redis:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.s.makefile("rb", buffering=1 << 20)
    @staticmethod
    def enc(*parts):
        out = [b"*%d\r\n" % len(parts)]
        for p in parts:
            out += [b"$%d\r\n" % len(p), p, b"\r\n"]
        return b"".join(out)
    def reply(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t in (b"+", b":"):
            return rest
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if t == b"*":
            return [self.reply() for _ in range(int(rest))]
        raise RuntimeError("unexpected reply %r" % line)
    def cmd(self, *parts):
        self.s.sendall(self.enc(*parts))
        return self.reply()
    def pipeline(self, cmds):
        self.s.sendall(b"".join(self.enc(*c) for c in cmds))
        return [self.reply() for _ in cmds]

THREADS = spec["threads"]
if kind == "redis":
    r = Redis(spec["port"])
    pool = [Redis(spec["port"]) for _ in range(THREADS)]
else:
    from mooncake.store import MooncakeDistributedStore
    s = MooncakeDistributedStore()
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 256 << 20, "tcp", "", spec["master"])
    if rc != 0:
        print(json.dumps({"error": "setup failed: %d" % rc}), flush=True)
        sys.exit(1)
    arena = ctypes.create_string_buffer(BATCH * spec["max_size"])
    base = ctypes.addressof(arena)
    rc = s.register_buffer(base, len(arena))
    if rc != 0:
        print(json.dumps({"error": "register_buffer failed: %d" % rc}), flush=True)
        sys.exit(1)
print(json.dumps({"ready": True}), flush=True)

def check(cond, what):
    if not cond:
        raise RuntimeError(what)

def run(op, size, n, tag):
    """n single ops, or n batches of BATCH keys; keys tag/i."""
    val = bytes([i % 251 for i in range(size)])
    single = op in ("put", "get", "put_mt", "get_mt")
    keys = ["%s/%d" % (tag, i) for i in range(n * (1 if single else BATCH))]
    if op in ("put_mt", "get_mt"):  # THREADS threads, each its share of the keys
        import threading
        errs = []
        def part(t):
            try:
                mine = keys[t::THREADS]
                if kind == "redis":
                    c = pool[t]
                    for k in mine:
                        if op == "put_mt":
                            c.cmd(b"SET", k.encode(), val)
                        else:
                            check(len(c.cmd(b"GET", k.encode())) == size, "GET")
                else:
                    for k in mine:
                        if op == "put_mt":
                            check(s.put(k, val) == 0, "put " + k)
                        else:
                            check(len(s.get(k)) == size, "get " + k)
            except Exception as e:
                errs.append(e)
        ts = [threading.Thread(target=part, args=(t,)) for t in range(THREADS)]
        t0 = time.perf_counter()
        [t.start() for t in ts]
        [t.join() for t in ts]
        secs = time.perf_counter() - t0
        if errs:
            raise errs[0]
        return secs, len(keys)
    bkeys = [k.encode() for k in keys]
    batches = [slice(j * BATCH, (j + 1) * BATCH) for j in range(n)]
    if kind != "redis" and op == "batch_put_from":
        for j in range(BATCH):
            ctypes.memmove(base + j * size, val, size)
    ptrs = [base + j * size for j in range(BATCH)] if kind != "redis" else []
    t0 = time.perf_counter()
    if kind == "redis":
        if op == "put":
            for k in bkeys:
                r.cmd(b"SET", k, val)
        elif op == "get":
            for k in bkeys:
                check(len(r.cmd(b"GET", k)) == size, "GET")
        elif op in ("batch_put_from", "put_batch"):
            for b in batches:
                args = [b"MSET"]
                for k in bkeys[b]:
                    args += [k, val]
                r.cmd(*args)
        elif op in ("batch_get_into", "get_batch"):
            for b in batches:
                check(all(v is not None and len(v) == size for v in r.cmd(b"MGET", *bkeys[b])), "MGET")
        elif op == "batch_is_exist":
            for b in batches:
                check(r.pipeline([(b"EXISTS", k) for k in bkeys[b]]) == [b"1"] * BATCH, "EXISTS")
    else:
        if op == "put":
            for k in keys:
                check(s.put(k, val) == 0, "put " + k)
        elif op == "get":
            for k in keys:
                check(len(s.get(k)) == size, "get " + k)
        elif op == "batch_put_from":
            sizes = [size] * BATCH
            for b in batches:
                check(s.batch_put_from(keys[b], ptrs, sizes) == [0] * BATCH, "batch_put_from")
        elif op == "batch_get_into":
            sizes = [size] * BATCH
            for b in batches:
                check(s.batch_get_into(keys[b], ptrs, sizes) == [size] * BATCH, "batch_get_into")
        elif op == "put_batch":
            vals = [val] * BATCH
            for b in batches:
                check(s.put_batch(keys[b], vals) == 0, "put_batch")
        elif op == "get_batch":
            for b in batches:
                check([len(v) for v in s.get_batch(keys[b])] == [size] * BATCH, "get_batch")
        elif op == "batch_is_exist":
            for b in batches:
                check(list(s.batch_is_exist(keys[b])) == [1] * BATCH, "batch_is_exist")
    return time.perf_counter() - t0, len(keys)

def preload(n, tag):
    """n keys tag/i of 4 KiB, in batches, that the rounds keep (--preload)."""
    val = bytes([i % 251 for i in range(4096)])
    t0 = time.perf_counter()
    for j in range(0, n, BATCH):
        keys = ["%s/%d" % (tag, i) for i in range(j, min(n, j + BATCH))]
        if kind == "redis":
            args = [b"MSET"]
            for k in keys:
                args += [k.encode(), val]
            r.cmd(*args)
        else:
            for i in range(len(keys)):
                ctypes.memmove(base + i * 4096, val, 4096)
            ptrs = [base + i * 4096 for i in range(len(keys))]
            check(s.batch_put_from(keys, ptrs, [4096] * len(keys)) == [0] * len(keys), "preload")
    return time.perf_counter() - t0, n

def clear(keep):
    """Between rounds: every peer starts the next one empty, but for the preloaded keys."""
    if not keep:
        r.cmd(b"FLUSHALL") if kind == "redis" else s.remove_all()
    elif kind == "redis":  # the rounds' keys: r<N>/...
        cur = b"0"
        while True:
            cur, found = r.cmd(b"SCAN", cur, b"MATCH", b"r[0-9]*/*", b"COUNT", b"10000")
            if found:
                r.cmd(b"DEL", *found)
            if cur == b"0":
                break
    else:
        check(s.remove_by_regex("^r[0-9]+/") >= 0, "remove_by_regex")

for line in sys.stdin:
    c = json.loads(line)
    try:
        if c["op"] == "clear":
            clear(c.get("keep", False))
            print(json.dumps({"ok": True}), flush=True)
            continue
        if c["op"] == "preload":
            secs, ops = preload(c["n"], c["tag"])
            print(json.dumps({"secs": secs, "ops": ops, "t0": 0, "t1": secs}), flush=True)
            continue
        time.sleep(max(0.0, c.get("start_at", 0) - time.time()))  # --clients: the workers start together
        t0 = time.time()
        secs = ops = 0
        for _ in range(c.get("reps", 1)):
            s_, o_ = run(c["op"], c["size"], c["n"], c["tag"])  # --read-reps: a read op goes over its keys again
            secs, ops = secs + s_, ops + o_
        print(json.dumps({"secs": secs, "ops": ops, "t0": t0, "t1": time.time()}), flush=True)
    except Exception as e:
        print(json.dumps({"error": "%s: %s" % (type(e).__name__, e)}), flush=True)
'''


class Worker:
    def __init__(self, python: str, spec: dict, env: dict, quiet: bool = False):
        # upstream's library logs every setup step to stderr: quiet drops it
        self.p = subprocess.Popen([python, "-c", WORKER, json.dumps(spec)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL if quiet else None,
                                  text=True, env=env, preexec_fn=pinned("worker"))
        got = self.read()
        if not got.get("ready"):
            raise RuntimeError(f"{spec['kind']} worker: {got}")

    def read(self) -> dict:
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("worker exited")
        return json.loads(line)

    def ask(self, **cmd) -> dict:
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        return self.read()

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.p.kill()


class Group:
    """--clients K: K workers of one peer (K processes), asked together. An op's count is the
    sum of theirs and its time the span from the first start to the last end; each worker puts
    and gets keys of its own (the tag with /wI)."""

    def __init__(self, make, k: int):
        self.ws = [make() for _ in range(k)]

    def ask(self, **cmd) -> dict:
        if cmd["op"] != "clear":
            cmd["start_at"] = time.time() + 0.05 * len(self.ws)
        for i, w in enumerate(self.ws):
            c = dict(cmd, tag=f"{cmd['tag']}/w{i}") if "tag" in cmd else cmd
            w.p.stdin.write(json.dumps(c) + "\n")
            w.p.stdin.flush()
        got = [w.read() for w in self.ws]
        err = next((g for g in got if "error" in g), None)
        if err or cmd["op"] == "clear":
            return err or got[0]
        return {"ops": sum(g["ops"] for g in got), "secs": max(g["t1"] for g in got) - min(g["t0"] for g in got)}

    def close(self):
        for w in self.ws:
            w.close()


def start(cmd, ready: str | None, env=None, port: int = 0):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                         preexec_fn=pinned("server"))
    if ready:
        wait_line(p, ready)
    elif port:
        import socket
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"{cmd[0]} never opened port {port}")
    return p


def baseline_dir(tree: str) -> str:
    return os.path.join(os.path.abspath(tree), "build", "baseline")


def build_baseline(tree: str) -> None:
    """Builds the master, the client and the library of the checkout tree into baseline_dir."""
    out = baseline_dir(tree)
    for name in ("mooncake_master", "mooncake_client"):
        subprocess.run(["go", "build", "-o", os.path.join(out, name), "./cmd/" + name], cwd=tree, check=True)
    subprocess.run(["go", "build", "-buildmode=c-shared", "-o", os.path.join(out, "libmooncake.so"), "./capi"],
                   cwd=tree, check=True)


def server_cpu(pid: int) -> float:
    """Seconds of CPU the process has used (user and system)."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def bench(args) -> dict:
    """Runs in the namespace: starts the servers and the workers, runs the rounds; returns
    {"rows": [...], "peers": [...]}."""
    AFFINITY.update(CPUS_MODES[args.cpus])
    procs, workers, servers = [], {}, {}  # servers: peer -> the pid whose CPU each op is charged
    py = os.path.join(ROOT, ".venv", "bin", "python")
    if not os.path.exists(py):
        py = sys.executable
    up = args.upstream_venv
    have_up = bool(up) and os.path.exists(os.path.join(up, "bin", "mooncake_master"))
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",) and not k.startswith("MC_")}
    group = lambda make: Group(make, args.clients) if args.clients > 1 else make()  # noqa: E731

    def ours(name: str, bdir: str = "", env: dict | None = None):
        """A master, a client holding the memory and the op workers of this tree (or of the
        checkout built into bdir), with env added to all three."""
        env = dict(clean, **(env or {}))
        exe = (lambda n: os.path.join(bdir, n)) if bdir else binary
        rpc, mport = free_port(), free_port()
        master = start([exe("mooncake_master"), f"--rpc_port={rpc}", f"--metrics_port={mport}",
                        "--rpc_address=127.0.0.1", "--enable_metric_reporting=false"], "MOONCAKE_MASTER_READY", env=env)
        procs.append(master)
        addr = f"127.0.0.1:{rpc}"
        procs.append(start([exe("mooncake_client"), f"--master_server_address={addr}", "--port=0",
                            "--host=127.0.0.1", "--global_segment_size=2 GB", "--local_buffer_size=64 MB"],
                           "MOONCAKE_CLIENT_READY", env=env))
        wenv = dict(env, MC_FORCE_TCP="1", **({"MOONCAKE_LIB": os.path.join(bdir, "libmooncake.so")} if bdir else {}))
        workers[name] = group(lambda: Worker(py, {"kind": "ours", "master": addr, "batch": BATCH, "threads": THREADS,
                                                  "max_size": SIZES[-1][0]}, wenv))
        servers[name] = master.pid

    try:
        ours("ours")
        if args.baseline:  # another checkout, built by main() into DIR/build/baseline
            ours("baseline", bdir=baseline_dir(args.baseline))
        for name, env in peer_envs(args.peer_env).items():  # ours again, with other settings
            ours(name, env=env)
        # redis
        rport = free_port()
        rs = start(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no"], None, port=rport)
        procs.append(rs)
        servers["redis"] = rs.pid
        workers["redis"] = group(lambda: Worker(py, {"kind": "redis", "port": rport, "batch": BATCH, "threads": THREADS}, clean))
        # upstream's release
        if have_up:
            urpc, uhttp, umetrics, ucport = free_port(), free_port(), free_port(), free_port()
            upath = os.path.join(up, "bin")
            uenv = dict(clean, PATH=upath + os.pathsep + clean.get("PATH", ""))
            um = start([os.path.join(upath, "mooncake_master"), f"--rpc_port={urpc}",
                        f"--http_metadata_server_port={uhttp}", f"--metrics_port={umetrics}"], None, env=uenv, port=urpc)
            procs.append(um)
            servers["upstream"] = um.pid
            up_addr = f"127.0.0.1:{urpc}"
            procs.append(start([os.path.join(upath, "mooncake_client"), f"--master_server_address={up_addr}",
                                "--metadata_server=P2PHANDSHAKE", "--host=127.0.0.1", f"--port={ucport}",
                                "--global_segment_size=2 GB", "--protocol=tcp"], None, env=uenv, port=ucport))
            time.sleep(1)  # its segment mounted
            workers["upstream"] = group(lambda: Worker(os.path.join(upath, "python"), {
                "kind": "upstream", "master": up_addr, "batch": BATCH, "threads": THREADS,
                "max_size": SIZES[-1][0]}, uenv, quiet=True))
        peers = [p for p in PEERS if p in workers] + [p for p in workers if p not in PEERS]
        if args.preload:  # every peer holds these keys through the rounds
            for peer in peers:
                r = workers[peer].ask(op="preload", n=args.preload // args.clients, tag="preload")
                if "error" in r:
                    raise RuntimeError(f"{peer} preload: {r['error']}")
                print(f"smallops_bench: {peer} preloaded {args.preload} keys in {r['secs']:.1f} s",
                      file=sys.stderr, flush=True)
        asked = set(args.ops.split(",")) if args.ops else set(OPS)
        ops = [o for o in OPS if o in asked or any(SOURCE.get(a) == o for a in asked)]  # a get needs its put
        got, cpu = {}, {}  # (op, label, peer) -> [ops/s per round], [server CPU µs per op per round]
        t_start = time.perf_counter()
        for rnd in range(args.rounds):
            order = peers[rnd % len(peers):] + peers[:rnd % len(peers)]
            for size, label, n_single, n_batch in SIZES:
                for op in ops:
                    n = max(THREADS, int((n_single if op in SINGLE else n_batch) * args.scale))
                    src = SOURCE.get(op, op)
                    for peer in order:
                        c0 = server_cpu(servers[peer])
                        r = workers[peer].ask(op=op, size=size, n=n, tag=f"r{rnd}/{label}/{src}",
                                              reps=args.read_reps if op in SOURCE else 1)  # --read-reps: reads only
                        if "error" in r:
                            raise RuntimeError(f"{peer} {op} {label}: {r['error']}")
                        got.setdefault((op, label, peer), []).append(r["ops"] / r["secs"])
                        cpu.setdefault((op, label, peer), []).append((server_cpu(servers[peer]) - c0) / r["ops"] * 1e6)
                for w in workers.values():
                    w.ask(op="clear", keep=args.preload > 0)
            print(f"smallops_bench: round {rnd + 1}/{args.rounds} done; elapsed "
                  f"{time.perf_counter() - t_start:.1f} s", file=sys.stderr, flush=True)
        rows = []
        for _, label, _, _ in SIZES:
            for op in ops:
                row = {"op": op, "size": label, "batch": 1 if op in SINGLE else BATCH}
                for peer in peers:
                    row[peer] = statistics.median(got[(op, label, peer)])
                    row[peer + "_rounds"] = got[(op, label, peer)]
                    row[peer + "_server_cpu_us"] = statistics.median(cpu[(op, label, peer)])
                rows.append(row)
        return {"rows": rows, "peers": peers, "rounds": args.rounds, "scale": args.scale, "clients": args.clients,
                "peer_env": args.peer_env, "read_reps": args.read_reps, "ops": args.ops, "preload": args.preload,
                "cpus": args.cpus}
    finally:
        for w in workers.values():
            w.close()
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def peer_envs(specs: list) -> dict:
    """--peer-env NAME:VAR=VALUE[,VAR=VALUE...] -> {NAME: {VAR: VALUE}}."""
    out = {}
    for spec in specs or []:
        name, _, assigns = spec.partition(":")
        env = dict(a.split("=", 1) for a in assigns.split(",") if "=" in a)
        if not name or name in PEERS or not env:
            raise SystemExit(f"--peer-env {spec!r}: want NAME:VAR=VALUE[,VAR=VALUE], NAME not one of {PEERS}")
        out[name] = env
    return out


def table(res: dict, leave_out: tuple = ()) -> list[str]:
    peers = [p for p in res["peers"] if p not in leave_out]
    head = "| op | value | keys per call | " + " | ".join(f"{p} (op/s)" for p in peers) + \
        "".join(f" | ours / {p}" for p in peers if p != "ours") + " |"
    out = [head, "|" + "---|" * (3 + len(peers) + len(peers) - 1)]
    for r in res["rows"]:
        cells = [f"{r[p]:,.0f}" for p in peers] + [f"{r['ours'] / r[p]:.2f}x" for p in peers if p != "ours"]
        out.append(f"| {LABELS.get(r['op'], r['op'])} | {r['size']} | {r['batch']} | " + " | ".join(cells) + " |")
    return out


def cpu_table(res: dict, leave_out: tuple = ()) -> list[str]:
    """The server's CPU per op (per key for batches): our master, redis-server, upstream's master."""
    peers = [p for p in res["peers"] if p not in leave_out]
    out = ["| op | value | keys per call | " + " | ".join(f"{p} (µs)" for p in peers) + " |",
           "|" + "---|" * (3 + len(peers))]
    for r in res["rows"]:
        out.append(f"| {LABELS.get(r['op'], r['op'])} | {r['size']} | {r['batch']} | " +
                   " | ".join(f"{r[p + '_server_cpu_us']:.1f}" for p in peers) + " |")
    return out


def doc_section(res: dict) -> str:
    k = res.get("clients", 1)
    cmd = "python bench/smallops_bench.py --write-doc" + \
        (" --baseline DIR" if "baseline" in res["peers"] else "") + \
        (f" --rounds {res['rounds']}" if res["rounds"] != 4 else "") + \
        (f" --scale {res['scale']:g}" if res["scale"] != 1 else "") + \
        (f" --clients {k}" if k != 1 else "") + \
        (f" --read-reps {res['read_reps']}" if res.get("read_reps", 1) != 1 else "") + \
        (f" --ops {res['ops']}" if res.get("ops") else "") + \
        (f" --preload {res['preload']}" if res.get("preload") else "") + \
        (f" --cpus {res['cpus']}" if res.get("cpus") else "") + \
        "".join(f" --peer-env {p}" for p in res.get("peer_env", []))
    up = "upstream = mooncake-transfer-engine-non-cuda 0.3.13.post1 (its own master and client, tcp)" \
        if "upstream" in res["peers"] else "upstream's release was not installed: left out"
    who = "one client process doing the ops" if k == 1 else \
        f"{k} client processes doing each op at once (keys of their own; their ops summed over the span from the first start to the last end)"
    conns = "one connection" if k == 1 else f"{k} connections, one per process"
    extra = "".join(f"; `{p.split(':', 1)[0]}`: ours with `{p.split(':', 1)[1]}` on master, holder and clients"
                    for p in res.get("peer_env", []))
    if res.get("cpus") == "same":
        extra += "; every process pinned to one CPU (`--cpus same`)"
    elif res.get("cpus") == "split":
        extra += "; masters, holders and redis-server pinned to one CPU, the op workers to the other (`--cpus split`)"
    if res.get("preload"):
        extra += (f"; every peer holds {res['preload']:,} more keys of 4 KiB through the rounds (put before "
                  "the first; between rounds only the rounds' keys are removed)")
    # A preloaded run is about the server under a full store: the baseline and the servers' CPU
    # stay in its tables.
    leave_out = () if res.get("preload") else ("baseline",)
    lines = [
        f"`{cmd}`, {time.strftime('%Y-%m-%d')}; {os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}. Median of {res['rounds']} rounds, the peers alternated "
        f"op by op; one master, one client process holding the memory, {who}, values over tcp "
        "(ours: `MC_FORCE_TCP=1`); " + up + f"; redis-server over {conns} (batches: one "
        "MSET/MGET of 64 keys, 64 pipelined EXISTS)" + extra + ". Batches count keys.", ""] + table(res, leave_out)
    if k != 1 or res.get("preload"):
        lines += ["", "The server's CPU per op (per key for batches), median of the rounds: our master, "
                  "redis-server, upstream's master.", ""] + cpu_table(res, leave_out)
    return "\n".join(lines)


def in_namespace(args) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run("ip link add mcsv0 type veth peer name mcsv1 && ip addr add 10.214.0.1/24 dev mcsv0 && "
                   "ip link set mcsv0 up && ip link set mcsv1 up", shell=True, check=True)
    print("RESULT " + json.dumps(bench(args)), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4, help="alternated rounds (median reported)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the op counts")
    ap.add_argument("--upstream-venv", default="/work/upstream-venv",
                    help="virtualenv with upstream's release wheel ('' leaves upstream out)")
    ap.add_argument("--baseline", default="", metavar="DIR",
                    help="also run another checkout of this project (built from DIR) as peer 'baseline'")
    ap.add_argument("--clients", type=int, default=1, metavar="K",
                    help="K client processes per peer doing each op at once (one master; their keys/s summed)")
    ap.add_argument("--read-reps", type=int, default=1, metavar="R",
                    help="each read op goes over its keys R times (longer windows for fast reads)")
    ap.add_argument("--preload", type=int, default=0, metavar="N",
                    help="each peer holds N more keys of 4 KiB through the rounds (a store in use)")
    ap.add_argument("--ops", default="", help="comma-separated ops to run (default: all)")
    ap.add_argument("--peer-env", action="append", default=[], metavar="NAME:VAR=VALUE[,VAR=VALUE]",
                    help="also run ours with these environment variables (master, holder and workers) as peer NAME")
    ap.add_argument("--cpus", default="", choices=sorted(CPUS_MODES),
                    help="pin every process to CPU 0 (same), or the servers to CPU 0 and the op workers to "
                         "CPU 1 (split); default: the kernel places them")
    ap.add_argument("--json", default="", metavar="FILE", help="write the results as JSON")
    ap.add_argument("--write-doc", action="store_true", help="replace the smallops table of docs/performance.md")
    ap.add_argument("--in-ns", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.in_ns:
        in_namespace(args)
        return
    if os.geteuid() != 0 or not shutil.which("unshare"):
        raise SystemExit("smallops_bench needs root and unshare (it runs in a network namespace)")
    for name in ("mooncake_master", "mooncake_client"):
        binary(name)  # built once, before entering the namespace
    if args.baseline:
        build_baseline(args.baseline)
    peer_envs(args.peer_env)  # checked before the run
    if args.cpus == "split" and 1 not in os.sched_getaffinity(0):
        raise SystemExit("smallops_bench: --cpus split needs CPUs 0 and 1")
    cmd = ["unshare", "-n", sys.executable, os.path.abspath(__file__), "--in-ns", f"--rounds={args.rounds}",
           f"--scale={args.scale}", f"--upstream-venv={args.upstream_venv}", f"--baseline={args.baseline}",
           f"--clients={args.clients}", f"--ops={args.ops}", f"--read-reps={args.read_reps}", f"--preload={args.preload}", f"--cpus={args.cpus}"] + [f"--peer-env={p}" for p in args.peer_env]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    res = None
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
        else:
            print(line)
    if res is None:
        raise SystemExit(f"smallops_bench: the run failed (exit {out.returncode})")
    print("\n".join(table(res)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    if args.write_doc:
        if args.preload:
            path = write_section('smallops_preload', doc_section(res))
        elif args.clients == 1:
            path = write_section('smallops_bench', doc_section(res))
        else:
            path = write_section('smallops_clients', doc_section(res))
        print(f"wrote the small-op figures into {path}")


if __name__ == "__main__":
    main()
