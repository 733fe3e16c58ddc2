"""Shared fixtures: free ports, real services started by the tests (HTTP metadata server,
etcd), and the path of the Go commands shipped in the installed package."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Ports handed to servers the tests start come from below the kernel's ephemeral range
# (/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 by default): a port taken from inside it
# can become the local port of any outgoing connection on the host before the server binds it.
_PORTS = random.Random(os.getpid() ^ time.time_ns())


def free_port() -> int:
    """A port nothing listens on or connects from now, outside the ephemeral range."""
    low = 20000
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            eph_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        eph_low = 32768
    high = max(low + 1000, min(eph_low - 1, 32767))
    for _ in range(200):
        port = _PORTS.randint(low, high)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a host with most of those taken: fall back to the kernel's pick
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 20.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def go_command(name: str) -> str:
    """Path of a Go command from the installed package (falling back to the source tree)."""
    import mooncake

    for base in (os.path.dirname(mooncake.__file__), os.path.join(ROOT, "python", "mooncake")):
        p = os.path.join(base, "bin", name)
        if os.path.exists(p):
            return p
    p = shutil.which(name)
    if p:
        return p
    raise FileNotFoundError(f"{name} is not built: run `make setup`")


def run_child(script: str, spec: dict, env: dict, timeout: float, what: str = "child") -> dict:
    """Runs ``python -c script json(spec)`` with env and returns the JSON of the line it prints
    as ``RESULT {...}``; fails the test with its output when there is none."""
    import json
    p = subprocess.run([sys.executable, "-c", script, json.dumps(spec)], env=env,
                       capture_output=True, text=True, timeout=timeout)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"{what} failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-4000:]}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def http_metadata_server():
    port = free_port()
    proc = subprocess.Popen([go_command("mooncake_http_metadata_server"), f"--port={port}",
                             "--host=127.0.0.1"])
    try:
        wait_port(port, proc)
        yield f"http://127.0.0.1:{port}/metadata"
    finally:
        stop(proc)


@pytest.fixture
def etcd_server():
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.fail("etcd is not installed: `make setup` installs Debian's etcd-server")
    client, peer = free_port(), free_port()
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.Popen(
            [etcd, "--name", "t", "--data-dir", d,
             "--listen-client-urls", f"http://127.0.0.1:{client}",
             "--advertise-client-urls", f"http://127.0.0.1:{client}",
             "--listen-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"t=http://127.0.0.1:{peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(client, proc)
            yield f"127.0.0.1:{client}"
        finally:
            stop(proc)


@pytest.fixture
def python_exe() -> str:
    return sys.executable


@pytest.fixture
def job():
    """Makes elastic-membership jobs (elastic_harness.Job) and kills their leftover processes."""
    from elastic_harness import Job

    jobs = []

    def make(world):
        j = Job(world)
        jobs.append(j)
        return j

    yield make
    for j in jobs:
        j.close()
