#!/usr/bin/env python3
"""Mooncake Store put/get throughput against redis-server SET/GET, side by side, in one run.

Starts its own mooncake_master, one mooncake_client process contributing the segment the values
land on (another process, as in a real deployment), and redis-server; then, for 4 KiB, 1 MiB and
64 MiB values, times sequential puts and gets from this process through MooncakeDistributedStore
(a pure client, no segment of its own) and SET/GET through a plain RESP socket. With --tcp the
store's data path is forced onto the engine's tcp transport (MC_FORCE_TCP=1) instead of shared
memory. Results go to stdout and, with --write-doc, to docs/performance.md (the table between
<!-- BEGIN store_bench --> and <!-- END store_bench -->, replaced in place); with --plot FILE.png, to a plot of throughput against value size (log axes),
Mooncake put/get and redis SET/GET as lines, and Mooncake's ratio to redis on a second axis
(matplotlib). One progress line per value size goes to stderr.

    python bench/store_bench.py --write-doc --plot docs/store_bench.png
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from perfdoc import write_section  # noqa: E402

SIZES = [(4 << 10, "4 KiB", 4000), (1 << 20, "1 MiB", 300), (64 << 20, "64 MiB", 8)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary(name: str) -> str:
    # In a checkout with Go, build the command from this tree (the packaged copies in
    # python/mooncake/bin may be older than the sources being measured).
    if shutil.which("go") and os.path.isdir(os.path.join(ROOT, "cmd", name)):
        out = os.path.join(ROOT, "build", "bin", name)
        subprocess.run(["go", "build", "-o", out, "./cmd/" + name], cwd=ROOT, check=True)
        return out
    import mooncake
    p = os.path.join(os.path.dirname(mooncake.__file__), "bin", name)
    if os.path.exists(p):
        return p
    p = shutil.which(name)
    if p:
        return p
    out = os.path.join(ROOT, "build", "bin", name)
    subprocess.run(["go", "build", "-o", out, "./cmd/" + name], cwd=ROOT, check=True)
    return out


def library() -> None:
    """In a checkout with Go, rebuild python/mooncake/libmooncake.so from this tree (what `make
    lib` does), as binary() does for the commands: the in-process client measured must be the
    sources' one, not whatever `make setup` built last. Call before importing mooncake."""
    if shutil.which("go") and os.path.isdir(os.path.join(ROOT, "capi")):
        subprocess.run(["go", "build", "-buildmode=c-shared", "-o", os.path.join("python", "mooncake", "libmooncake.so"), "./capi"],
                       cwd=ROOT, check=True)
        try:
            os.remove(os.path.join(ROOT, "python", "mooncake", "libmooncake.h"))
        except FileNotFoundError:
            pass


def wait_line(proc, prefix: str, timeout=30.0) -> str:
    deadline = time.time() + timeout
    for line in proc.stdout:
        if line.startswith(prefix):
            return line
        if time.time() > deadline:
            break
    raise RuntimeError(f"process did not print {prefix}")


class Redis:
    """A minimal RESP client (SET/GET/FLUSHALL), enough for the benchmark."""

    def __init__(self, port: int, host: str = "127.0.0.1"):
        self.s = socket.create_connection((host, port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.s.makefile("rb", buffering=1 << 20)

    def _cmd(self, *parts: bytes):
        out = [b"*%d\r\n" % len(parts)]
        for p in parts:
            out += [b"$%d\r\n" % len(p), p, b"\r\n"]
        self.s.sendall(b"".join(out))
        return self._reply()

    def _reply(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t in (b"+", b":"):
            return rest
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        raise RuntimeError(f"unexpected reply {line!r}")

    def set(self, k: bytes, v: bytes):
        return self._cmd(b"SET", k, v)

    def get(self, k: bytes):
        return self._cmd(b"GET", k)

    def flush(self):
        return self._cmd(b"FLUSHALL")


def timed(fn, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        fn(i)
    return time.perf_counter() - t0


def bench(args):
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig
    procs = []
    rows = []
    # --netns-child: the servers (master, mooncake_client, redis) run in another network namespace
    # (reached over a veth pair); this process is already in the client one.
    pre = ["ip", "netns", "exec", args.server_ns] if args.server_ns else []
    sip, cip = (args.server_ip, args.client_ip) if args.server_ns else ("127.0.0.1", "127.0.0.1")
    try:
        # ports are picked here; the server namespace has its own, all free, port space
        rpc, mport = free_port(), free_port()
        m = subprocess.Popen(pre + [binary("mooncake_master"), f"--rpc_port={rpc}", f"--metrics_port={mport}",
                                    f"--rpc_address={sip}", "--enable_metric_reporting=false"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(m)
        wait_line(m, "MOONCAKE_MASTER_READY")
        addr = f"{sip}:{rpc}"
        c = subprocess.Popen(pre + [binary("mooncake_client"), f"--master_server_address={addr}", "--port=0",
                                    f"--host={sip}", "--global_segment_size=1.5 GB", "--local_buffer_size=64 MB"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(c)
        wait_line(c, "MOONCAKE_CLIENT_READY")
        rport = free_port()
        r = subprocess.Popen(pre + ["redis-server", "--port", str(rport), "--bind", sip, "--save", "",
                                    "--appendonly", "no", "--proto-max-bulk-len", "1gb"]
                             + (["--protected-mode", "no"] if args.server_ns else []),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(r)
        for _ in range(200):
            try:
                red = Redis(rport, sip)
                break
            except OSError:
                time.sleep(0.05)
        store = MooncakeDistributedStore()
        rc = store.setup(cip, "P2PHANDSHAKE", 0, 128 << 20, "tcp", "", addr)
        assert rc == 0, f"setup failed: {rc}"
        cfg = ReplicateConfig(replica_num=1)
        start = time.perf_counter()
        for size, label, n in SIZES:
            t_size = time.perf_counter()
            n = max(2, int(n * args.scale))
            val = os.urandom(size)
            keys = [f"b/{label}/{i}".encode() for i in range(n)]
            skeys = [k.decode() for k in keys]
            # warm-up (connections, segment open) outside the timing
            store.put("warm", val[:4096])
            store.get("warm")
            put_t = timed(lambda i: store.put(skeys[i], val, cfg) == 0 or sys.exit(f"put failed at {i}"), n)
            get_t = timed(lambda i: len(store.get(skeys[i])) == size or sys.exit(f"get failed at {i}"), n)
            store.remove_all()
            red.flush()
            rset_t = timed(lambda i: red.set(keys[i], val), n)
            rget_t = timed(lambda i: len(red.get(keys[i])) == size or sys.exit("redis get failed"), n)
            red.flush()
            row = dict(size=label, n=n,
                       mc_put=(n / put_t, n * size / put_t / 2**30), mc_get=(n / get_t, n * size / get_t / 2**30),
                       r_set=(n / rset_t, n * size / rset_t / 2**30), r_get=(n / rget_t, n * size / rget_t / 2**30))
            row["bytes"] = size
            rows.append(row)
            print(f"store_bench: {label} x {n} done (mooncake and redis {time.perf_counter() - t_size:.1f} s); "
                  f"elapsed {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
            print(f"{label:>7}  n={n:<5} mooncake put {row['mc_put'][0]:9.0f} op/s {row['mc_put'][1]:6.2f} GiB/s"
                  f" | get {row['mc_get'][0]:9.0f} op/s {row['mc_get'][1]:6.2f} GiB/s"
                  f" || redis SET {row['r_set'][0]:9.0f} op/s {row['r_set'][1]:6.2f} GiB/s"
                  f" | GET {row['r_get'][0]:9.0f} op/s {row['r_get'][1]:6.2f} GiB/s", flush=True)
        store.close()
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
    return rows


def plot(sections, path: str) -> None:
    """Throughput (GiB/s) against value size for each section (one panel each): Mooncake put and
    get, redis SET and GET, and Mooncake's ratio to redis (put/SET, get/GET) on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    sections = [(t, rows) for t, rows in sections if rows]
    if not sections:
        return
    fig, axes = plt.subplots(1, len(sections), figsize=(6.2 * len(sections), 5.2), dpi=110, squeeze=False)
    for ax, (title, rows) in zip(axes[0], sections):
        sizes = [r.get("bytes") or next(s for s, lab, _ in SIZES if lab == r["size"]) for r in rows]
        series = [("mc_put", "Mooncake put", "tab:blue", "-"), ("mc_get", "Mooncake get", "tab:blue", "--"),
                  ("r_set", "redis SET", "tab:red", "-"), ("r_get", "redis GET", "tab:red", "--")]
        for key, label, color, ls in series:
            ax.plot(sizes, [r[key][1] for r in rows], marker="o", color=color, linestyle=ls, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes)
        ax.set_xticklabels([r["size"] for r in rows])
        ax.set_xlabel("value size")
        ax.set_ylabel("throughput (GiB/s, log)")
        ax.grid(True, alpha=0.3)
        ax2 = ax.twinx()
        ax2.plot(sizes, [r["mc_put"][1] / r["r_set"][1] for r in rows], marker="x", color="tab:green",
                 linestyle="-", linewidth=2.5, alpha=0.6, label="put / SET (right axis)")
        ax2.plot(sizes, [r["mc_get"][1] / r["r_get"][1] for r in rows], marker="x", color="tab:green",
                 linestyle=":", linewidth=2.5, alpha=0.6, label="get / GET (right axis)")
        ax2.axhline(1.0, color="tab:green", linewidth=0.8, linestyle=":")
        ax2.set_yscale("log")
        ax2.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax2.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        ax2.set_ylabel("Mooncake / redis (log; green)")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, fontsize=8,
                  frameon=False)
        ax.set_title(title, fontsize=10)
    fig.suptitle("Mooncake Store vs redis-server: sequential put/get from one Python client")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"store_bench: plot written to {path}", file=sys.stderr, flush=True)


PATHS = {"Same host (shared memory)": "same host, shm",
         "MC_FORCE_TCP=1 (tcp transport)": "`MC_FORCE_TCP=1`, tcp",
         "Two network namespaces (veth pair, tcp: the cross-host path)": "two namespaces, veth, tcp"}


def doc_section(sections, scale: float) -> str:
    """The store_bench section of docs/performance.md: the command, the date and one table."""
    netns = any(t in PATHS and "namespaces" in PATHS[t] for t, _ in sections)
    cmd = "python bench/store_bench.py --write-doc" + (" --netns" if netns else "") + \
        (f" --scale {scale:g}" if scale != 1 else "")
    cell = lambda v: f"{v[0]:,.0f} op/s, {v[1]:.2f} GiB/s"
    out = [f"`{cmd}`, {time.strftime('%Y-%m-%d')}; {os.cpu_count()} cores, {platform.machine()}, "
           f"Python {platform.python_version()}. One run: sequential ops from one Python client, "
           "`replica_num=1`, values landing on a `mooncake_client` process of the same host; "
           "redis-server (persistence off) over one RESP connection from the same process.", "",
           "| path | value | ops | Mooncake put | Mooncake get | redis SET | redis GET | put / SET | get / GET |",
           "|---|---|---|---|---|---|---|---|---|"]
    for title, rows in sections:
        for r in rows:
            out.append(f"| {PATHS.get(title, title)} | {r['size']} | {r['n']} | {cell(r['mc_put'])} | "
                       f"{cell(r['mc_get'])} | {cell(r['r_set'])} | {cell(r['r_get'])} | "
                       f"{r['mc_put'][1] / r['r_set'][1]:.2f}x | {r['mc_get'][1] / r['r_get'][1]:.2f}x |")
    return "\n".join(out)


NETNS_NET = "10.231.0"


def run_netns(args) -> list:
    """Runs the benchmark with the servers in one network namespace and this client in another,
    joined by a veth pair: the engine sees two hosts (HostID includes the netns), so values move
    over tcp through the kernel network stack as across hosts (minus a NIC). Needs root and
    iproute2; the namespaces and the veth pair are removed at the end."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        raise SystemExit("--netns needs root and iproute2 (ip)")
    tag = f"mcb{os.getpid() % 100000}"
    ns_s, ns_c, v_s, v_c = tag + "s", tag + "c", tag + "vs", tag + "vc"
    sip, cip = NETNS_NET + ".1", NETNS_NET + ".2"
    sh = lambda *a: subprocess.run(["ip", *a], check=True)
    rows = []
    try:
        sh("netns", "add", ns_s)
        sh("netns", "add", ns_c)
        sh("link", "add", v_s, "type", "veth", "peer", "name", v_c)
        sh("link", "set", v_s, "netns", ns_s)
        sh("link", "set", v_c, "netns", ns_c)
        for ns, dev, ip in ((ns_s, v_s, sip), (ns_c, v_c, cip)):
            sh("-n", ns, "addr", "add", ip + "/24", "dev", dev)
            sh("-n", ns, "link", "set", "dev", dev, "up")
            sh("-n", ns, "link", "set", "dev", "lo", "up")
        for name in ("mooncake_master", "mooncake_client"):
            binary(name)  # build before entering the namespaces
        out = subprocess.run(["ip", "netns", "exec", ns_c, sys.executable, os.path.abspath(__file__),
                              "--netns-child", f"--server-ns={ns_s}", f"--server-ip={sip}", f"--client-ip={cip}",
                              f"--scale={args.scale}"], stdout=subprocess.PIPE, text=True)
        for line in out.stdout.splitlines():
            if line.startswith("ROWS "):
                import json
                rows = json.loads(line[5:])
            else:
                print(line)
        if out.returncode != 0:
            print(f"the two-namespace run failed (exit {out.returncode})", file=sys.stderr)
    finally:
        for ns in (ns_c, ns_s):  # deleting a namespace removes its end of the veth pair, and so the pair
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the op counts")
    ap.add_argument("--write-doc", action="store_true", help="replace the store table of docs/performance.md (its store_bench section)")
    ap.add_argument("--plot", default="", metavar="FILE.png",
                    help="draw throughput vs value size against redis-server (matplotlib)")
    ap.add_argument("--netns", action="store_true",
                    help="also run with the servers and this client in two network namespaces joined by a "
                         "veth pair (cross-host path over tcp; root and iproute2 required)")
    ap.add_argument("--tcp-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--netns-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--server-ns", default="", help=argparse.SUPPRESS)
    ap.add_argument("--server-ip", default="", help=argparse.SUPPRESS)
    ap.add_argument("--client-ip", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    library()
    if args.tcp_only or args.netns_child:
        import json
        print("ROWS " + json.dumps(bench(args)))
        return
    print("== same host, shared memory ==")
    shm = bench(args)
    print("== MC_FORCE_TCP=1 (the engine's tcp transport) ==")
    env = dict(os.environ, MC_FORCE_TCP="1")
    out = subprocess.run([sys.executable, __file__, "--tcp-only", f"--scale={args.scale}"], env=env,
                         stdout=subprocess.PIPE, text=True)  # stderr (progress, errors) passes through
    tcp = []
    for line in out.stdout.splitlines():
        if line.startswith("ROWS "):
            import json
            tcp = json.loads(line[5:])
        else:
            print(line)
    if out.returncode != 0:
        print(f"the MC_FORCE_TCP=1 run failed (exit {out.returncode})", file=sys.stderr)
    sections = [("Same host (shared memory)", shm)] + ([("MC_FORCE_TCP=1 (tcp transport)", tcp)] if tcp else [])
    if args.netns:
        print("== two network namespaces (veth; servers in one, this client in the other) ==")
        ns = run_netns(args)
        if ns:
            sections.append(("Two network namespaces (veth pair, tcp: the cross-host path)", ns))
    if args.write_doc:
        print(f"wrote today's store figures into {write_section('store_bench', doc_section(sections, args.scale))}")
    if args.plot:
        plot(sections, args.plot)


if __name__ == "__main__":
    main()
