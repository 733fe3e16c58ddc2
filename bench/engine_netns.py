#!/usr/bin/env python3
"""The transfer engine's tcp transport between two network namespaces, against the TCP bound.

    sudo python bench/engine_netns.py                       # 64 KiB, 1 MiB, 16 MiB; write, read
    sudo python bench/engine_netns.py --blocks 1M,64M --rounds 3 --duration 3 --json out.json
    sudo python bench/engine_netns.py --upstream /venv/bin/transfer_engine_bench
    sudo python bench/engine_netns.py --upstream none --ops write --zerocopy

Two namespaces joined by a veth pair (MTU 1500), as `bench/pgbench.py --netns` builds them: the
target (`transfer_engine_bench --mode=target`) runs in one, the initiator in the other, so the
engine sees two hosts and moves every byte over its tcp transport. Each block size and operation
runs --rounds rounds that alternate, in this order: ours, upstream's release (when --upstream
names its transfer_engine_bench, or the default upstream virtualenv has one), and the bound.

The bound is what the link carries one way, the way the operation moves its bytes (write: from
the initiator's namespace to the target's; read: back): a sender streams over 1 and over 4 TCP
connections for the same duration, and the receiver counts the bytes that arrived; the faster
of the two is the row's bound. `bench/tcpstream` (Go, plain net.Conn writes, no copy beyond the
kernel's) moves them, 4 MiB a write (or the block, when larger): the link's capacity does not
depend on the engine's block size. The bound is measured again in every row, so a machine whose
speed drifts moves both figures alike. Each figure is the median of its rounds, in GB/s (1 GB = 1e9 B); "%tcp" is
ours as a share of the bound, "x upstream" ours over upstream's.

--zerocopy also times the bound's sender with MSG_ZEROCOPY (`tcpstream -zerocopy`, columns "TCP
zc"), counts in the bound when faster, and prints how many of its sends the kernel reported
copied all the same (between namespaces of one host it copies at delivery).

Flags passed to both engines' initiators: --batch_size (default 16), --threads (default 1),
--buffer_size (default 256 MiB). Needs root and iproute2.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NS_ADDR = ("10.233.7.1", "10.233.7.2")  # target's namespace, initiator's namespace
UPSTREAM_DEFAULT = "/work/upstream-venv/bin/transfer_engine_bench"


def parse_size(s: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", s.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {s!r} (e.g. 65536, 64K, 16M)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def human(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


# ---- the run ----

class Netns:
    """Two namespaces joined by a veth pair; removed on exit."""

    def __init__(self):
        tag = uuid.uuid4().hex[:6]
        self.ns = (f"eb{tag}t", f"eb{tag}i")
        self.dev = (f"ev{tag}t", f"ev{tag}i")

    def ip(self, *a: str) -> None:
        subprocess.run(["ip", *a], check=True, capture_output=True)

    def __enter__(self):
        for n in self.ns:
            self.ip("netns", "add", n)
        self.ip("link", "add", self.dev[0], "type", "veth", "peer", "name", self.dev[1])
        for n, d, a in zip(self.ns, self.dev, NS_ADDR):
            self.ip("link", "set", d, "netns", n)
            self.ip("-n", n, "addr", "add", f"{a}/24", "dev", d)
            self.ip("-n", n, "link", "set", d, "up")
            self.ip("-n", n, "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc):
        for n in self.ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)

    def popen(self, side: int, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.ns[side], *argv], **kw)

    def run(self, side: int, argv: list[str], timeout: float) -> str:
        p = subprocess.run(["ip", "netns", "exec", self.ns[side], *argv], capture_output=True,
                           text=True, timeout=timeout)
        return p.stdout + p.stderr


def wait_line(path: str, pattern: str, proc: subprocess.Popen, timeout: float = 60) -> re.Match:
    end = time.time() + timeout
    while time.time() < end:
        with open(path, errors="replace") as f:
            m = re.search(pattern, f.read())
        if m:
            return m
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    with open(path, errors="replace") as f:
        raise SystemExit(f"engine_netns: target did not start:\n{f.read()[-2000:]}")


THROUGHPUT = re.compile(r"throughput ([0-9.]+) GB/s")


class Engine:
    """One implementation's target in the target namespace, and its initiator runs."""

    def __init__(self, name: str, binary: str, env: dict, net: Netns, args, upstream: bool):
        self.name, self.binary, self.env, self.net, self.args = name, binary, env, net, args
        self.upstream = upstream
        self.log = tempfile.NamedTemporaryFile(prefix=f"engine-{name}-", suffix=".log", delete=False)
        argv = [binary, "--mode=target", f"--buffer_size={args.buffer_size}"]
        if upstream:
            argv += ["--metadata_server=P2PHANDSHAKE", "--protocol=tcp",
                     f"--local_server_name={NS_ADDR[0]}:12345"]
            pattern = r"listening on ([0-9.]+:\d+)"
        else:
            argv += [f"--local_server_name={NS_ADDR[0]}"]
            pattern = r"READY (\S+)"
        self.proc = net.popen(0, argv, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.segment = wait_line(self.log.name, pattern, self.proc).group(1)

    def measure(self, op: str, block: int) -> float:
        a = self.args
        argv = [self.binary, "--mode=initiator", f"--segment_id={self.segment}",
                f"--operation={op}", f"--block_size={block}", f"--batch_size={a.batch_size}",
                f"--threads={a.threads}", f"--duration={a.duration}",
                f"--buffer_size={a.buffer_size}"]
        if self.upstream:
            argv += ["--metadata_server=P2PHANDSHAKE", "--protocol=tcp",
                     f"--local_server_name={NS_ADDR[1]}:12346"]
        else:
            argv += [f"--local_server_name={NS_ADDR[1]}"]
        out = subprocess.run(["ip", "netns", "exec", self.net.ns[1], *argv], env=self.env,
                             capture_output=True, text=True, timeout=a.duration * 4 + 60)
        m = THROUGHPUT.findall(out.stdout + out.stderr)
        if not m:
            raise SystemExit(f"engine_netns: {self.name} initiator printed no throughput:\n"
                             f"{(out.stdout + out.stderr)[-2000:]}")
        return float(m[-1])

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.unlink(self.log.name)


def bound(net: Netns, stream: str, op: str, block: int, conns: int, seconds: int,
          zerocopy: bool = False, copies: list | None = None) -> float:
    # write moves bytes from the initiator's namespace (1) to the target's (0); read the other way
    recv_side, send_side = (0, 1) if op == "write" else (1, 0)
    port = 17000 + conns
    r = net.popen(recv_side, [stream, "-recv", f"-port={port}", f"-conns={conns}"],
                  stdout=subprocess.PIPE, text=True)
    try:
        r.stdout.readline()  # LISTENING
        out = net.run(send_side, [stream, "-send", f"-addr={NS_ADDR[recv_side]}:{port}",
                                  f"-conns={conns}", f"-seconds={seconds}",
                                  f"-chunk={max(block, 4 << 20)}"] + (["-zerocopy"] if zerocopy else []),
                    timeout=seconds * 4 + 30)
    finally:
        r.wait(30)
    m = re.search(r"BOUND ([0-9.]+)", out)
    if not m:
        raise SystemExit(f"engine_netns: the bound's sender failed:\n{out[-2000:]}")
    z = re.search(r"ZEROCOPY ([0-9]+) ([0-9]+)", out)
    if z and copies is not None:
        copies.append((int(z.group(1)), int(z.group(2))))
    return float(m.group(1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blocks", default="64K,1M,16M", help="block sizes, comma-separated")
    p.add_argument("--ops", default="write,read")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--duration", type=int, default=2, help="seconds per measurement")
    p.add_argument("--batch-size", dest="batch_size", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--buffer-size", dest="buffer_size", type=parse_size, default=256 << 20)
    p.add_argument("--binary", help="our transfer_engine_bench (default: built from this tree)")
    p.add_argument("--upstream", default=None,
                   help="upstream's transfer_engine_bench (default: %s if present; 'none' "
                        "leaves it out)" % UPSTREAM_DEFAULT)
    p.add_argument("--json", help="write the rows (every round) to this file")
    p.add_argument("--zerocopy", action="store_true",
                   help="also time the bound with MSG_ZEROCOPY sends (columns 'TCP zc')")
    args = p.parse_args()
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise SystemExit("engine_netns: needs root and iproute2 (ip)")

    blocks = [parse_size(b) for b in args.blocks.split(",")]
    ops = [o.strip() for o in args.ops.split(",")]
    for b in blocks:
        if b * args.batch_size > args.buffer_size:
            raise SystemExit(f"engine_netns: block {human(b)} x batch {args.batch_size} does not "
                             f"fit --buffer-size {human(args.buffer_size)}")
    tmp = tempfile.mkdtemp()
    stream = os.path.join(tmp, "tcpstream")
    subprocess.run(["go", "build", "-o", stream, "./bench/tcpstream"], cwd=ROOT, check=True)
    ours = args.binary
    if not ours:
        ours = os.path.join(tmp, "transfer_engine_bench")
        subprocess.run(["go", "build", "-o", ours, "./cmd/transfer_engine_bench"], cwd=ROOT,
                       check=True)
    upstream = args.upstream if args.upstream is not None else (
        UPSTREAM_DEFAULT if os.access(UPSTREAM_DEFAULT, os.X_OK) else "none")
    rows = []
    copies: list = []  # (completions, copied) of every zerocopy bound run
    with Netns() as net:
        engines = [Engine("ours", ours, dict(os.environ, MC_FORCE_TCP="1"), net, args, False)]
        if upstream != "none":
            libdirs = glob.glob(os.path.join(os.path.dirname(os.path.dirname(upstream)), "lib",
                                             "python3*", "site-packages", "mooncake"))
            env = dict(os.environ)
            if libdirs:
                env["LD_LIBRARY_PATH"] = ":".join([libdirs[0], env.get("LD_LIBRARY_PATH", "")])
            engines.append(Engine("upstream", upstream, env, net, args, True))
        try:
            for block in blocks:
                for op in ops:
                    rounds = []
                    for _ in range(args.rounds):
                        r = {e.name: e.measure(op, block) for e in engines}
                        r["tcp1"] = bound(net, stream, op, block, 1, args.duration)
                        r["tcp4"] = bound(net, stream, op, block, 4, args.duration)
                        if args.zerocopy:
                            r["tcp1zc"] = bound(net, stream, op, block, 1, args.duration, True, copies)
                            r["tcp4zc"] = bound(net, stream, op, block, 4, args.duration, True, copies)
                        rounds.append(r)
                    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
                    row = {"op": op, "block": block, **med,
                           "bound": max(v for k, v in med.items() if k.startswith("tcp")),
                           "rounds": rounds}
                    rows.append(row)
                    print(f"{op} {human(block)}: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()),
                          file=sys.stderr, flush=True)
        finally:
            for e in engines:
                e.close()

    have_up = upstream != "none"
    print(f"\ntransfer engine over tcp between two network namespaces (veth); batch "
          f"{args.batch_size}, {args.threads} thread(s), {args.duration} s per figure, median "
          f"of {args.rounds} alternated rounds; GB/s\n")
    head = "| op | block | ours |" + (" upstream |" if have_up else "") + \
        " TCP 1 conn | TCP 4 conns |" + (" TCP zc 1 / 4 conns |" if args.zerocopy else "") + \
        " ours %tcp |" + (" ours / upstream |" if have_up else "")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        line = f"| {r['op']} | {human(r['block'])} | {r['ours']:.2f} |"
        if have_up:
            line += f" {r['upstream']:.2f} |"
        line += f" {r['tcp1']:.2f} | {r['tcp4']:.2f} |"
        if args.zerocopy:
            line += f" {r['tcp1zc']:.2f} / {r['tcp4zc']:.2f} |"
        line += f" {100 * r['ours'] / r['bound']:.0f} % |"
        if have_up:
            line += f" {r['ours'] / r['upstream']:.2f}x |" if r["upstream"] > 0 else " - |"
        print(line)
    if copies:
        done, copied = sum(c[0] for c in copies), sum(c[1] for c in copies)
        print(f"\nMSG_ZEROCOPY: the kernel reported {done} sends complete, {copied} of them copied "
              f"all the same (SO_EE_CODE_ZEROCOPY_COPIED)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items() if not k.startswith("stream")},
                       "rows": rows, "zerocopy_sends": copies}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
