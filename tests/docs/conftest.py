"""Shared helpers and fixtures of the docs suite (tests/docs/): every command and snippet of the
documentation pages we implement (docs/upstream/, a verbatim copy of Mooncake's pages), run as
the page writes it, with the substitutions docs/docs-tests.md lists.

What a test gets from here:

* ``blocks(page)`` / ``block(page, index=..., marker=...)``: the fenced code blocks of a page of
  docs/upstream/ (``page`` is its file name, with or without ``.md``), so a test runs the page's
  literal text; ``substitute(text, (old, new), ...)`` replaces text that cannot run here and
  fails when the page no longer contains ``old`` (the test and the table must follow the page).
* ``fresh_host`` (module-scoped fixture) / ``FreshHost``: a private network namespace with only
  a loopback and its own /etc/hosts, i.e. a machine nothing else runs on, where the pages' fixed
  ports (50051, 9003, 2379, 29500, ...) and host names (``etcd-0``..``etcd-2``) work as written,
  even while other test suites run on this machine. Commands run there with ``host.sh(...)``
  (to completion) or ``host.spawn(...)`` (a long-running process with a log file). Needs root
  (or CAP_SYS_ADMIN) and util-linux's unshare/nsenter; without them the tests using it skip.
* ``host.start_etcd()`` (one etcd serving etcd-0, etcd-1 and etcd-2 on port 2379, the pages'
  endpoints) and ``host.start_redis()``; ``etcd_on_free_port`` / ``redis_on_free_port`` for tests
  that run on this machine's network instead.
* ``torchrun(script, nproc, ...)``: runs a page's script under torchrun (--standalone) on this
  machine and returns each rank's output.

Each test module starts the servers it needs once (module-scoped fixtures) to keep the suite
short.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PAGES = os.path.join(ROOT, "docs", "upstream")

# The host names the pages use for their etcd cluster, and the loopback address each one gets
# on a fresh host (one etcd listens on all three).
ETCD_HOSTS = {"etcd-0": "127.0.0.1", "etcd-1": "127.0.0.2", "etcd-2": "127.0.0.3"}


# ------------------------------------------------------------------ the pages and their blocks


@dataclasses.dataclass
class Block:
    """One fenced code block of a page: its language tag ("" when none), its text (without the
    fences, ending with a newline), its 0-based index among the page's blocks and the 1-based
    line of its opening fence."""

    lang: str
    text: str
    index: int
    line: int


def page_path(page: str) -> str:
    name = page if page.endswith(".md") else page + ".md"
    path = os.path.join(PAGES, name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such page in docs/upstream/")
    return path


def page_text(page: str) -> str:
    with open(page_path(page), encoding="utf-8") as f:
        return f.read()


_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


def blocks(page: str) -> List[Block]:
    """The fenced code blocks of a page, in order."""
    out: List[Block] = []
    lines = page_text(page).splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3)
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            ln = lines[i]
            body.append(ln[len(indent):] if ln.startswith(indent) else ln.lstrip())
            i += 1
        if i >= len(lines):
            raise ValueError(f"{page}: the code block at line {start + 1} is never closed")
        out.append(Block(lang, "\n".join(body) + "\n", len(out), start + 1))
        i += 1
    return out


def block(page: str, index: Optional[int] = None, marker: Optional[str] = None) -> Block:
    """One block of a page: by its index, or the only block containing ``marker`` (both: the
    block at ``index``, which must contain ``marker``)."""
    bs = blocks(page)
    if index is not None:
        if index >= len(bs):
            raise IndexError(f"{page} has {len(bs)} code blocks, no block {index}")
        b = bs[index]
        if marker is not None and marker not in b.text:
            raise AssertionError(f"{page}: block {index} (line {b.line}) no longer contains "
                                 f"{marker!r}: the page changed; update the test")
        return b
    if marker is None:
        raise TypeError("block() needs an index or a marker")
    found = [b for b in bs if marker in b.text]
    if len(found) != 1:
        raise AssertionError(f"{page}: {len(found)} code blocks contain {marker!r} (want 1)")
    return found[0]


def substitute(text: str, *pairs: Tuple[str, str]) -> str:
    """Replaces each ``old`` by ``new`` (every occurrence); fails when the text has no ``old``,
    so a changed page cannot leave a substitution silently unused."""
    for old, new in pairs:
        if old not in text:
            raise AssertionError(f"the snippet no longer contains {old!r}: the page changed; "
                                 f"update the test and docs/docs-tests.md\n{text}")
        text = text.replace(old, new)
    return text


def shell_command(text: str) -> str:
    """A bash block as one command line: comment lines dropped, backslash continuations joined
    (what a user's shell does with the pasted block)."""
    kept = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    return re.sub(r"\\\n\s*", "", "\n".join(kept)).strip()


# ------------------------------------------------------------------ processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def venv_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Our environment with this interpreter's bin/ first on PATH (torchrun, mooncake_master and
    the other console scripts of the installed package)."""
    env = dict(os.environ)
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.setdefault("MOONCAKE_GOMAXPROCS", "2")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra:
        env.update(extra)
    return env


class Proc:
    """A long-running process (in its own session) whose stdout and stderr go to a log file."""

    def __init__(self, argv: Sequence[str], name: str, logdir: str, env: Dict[str, str],
                 cwd: Optional[str] = None):
        self.name = name
        self.log_path = os.path.join(logdir, f"{name}.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(list(argv), stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                                     start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def wait_log(self, pattern: str, timeout: float = 30.0) -> re.Match:
        """The first match of the regular expression ``pattern`` in the log, waiting for it
        (fails when the process exits first or after ``timeout``: a bound on a hang, not a
        timing assertion)."""
        rx = re.compile(pattern, re.M)
        deadline = time.time() + timeout
        while True:
            m = rx.search(self.log())
            if m:
                return m
            if not self.alive():
                m = rx.search(self.log())
                if m:
                    return m
                raise AssertionError(f"{self.name} exited ({self.proc.returncode}) without "
                                     f"logging /{pattern}/:\n{self.log()[-4000:]}")
            if time.time() > deadline:
                raise AssertionError(f"{self.name} logged no /{pattern}/ in {timeout}s:\n"
                                     f"{self.log()[-4000:]}")
            time.sleep(0.1)

    def send_signal(self, sig: int) -> None:
        if self.alive():
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        self.send_signal(sig)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._log.close()


@dataclasses.dataclass
class Result:
    returncode: int
    output: str  # stdout and stderr together

    def check(self) -> "Result":
        assert self.returncode == 0, f"exit {self.returncode}:\n{self.output[-6000:]}"
        return self


def wait_port(port: int, proc: Optional[Proc] = None, timeout: float = 30.0,
              host: str = "127.0.0.1") -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and not proc.alive():
            raise AssertionError(f"{proc.name} exited ({proc.proc.returncode}) before listening "
                                 f"on {port}:\n{proc.log()[-4000:]}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {host}:{port} after {timeout}s")


# ------------------------------------------------------------------ a fresh host


class FreshHost:
    """A private network namespace (only a loopback, all ports free) with its own /etc/hosts
    (localhost and the pages' etcd-0..etcd-2): the pages' commands run there as written."""

    def __init__(self, workdir: str, hosts: Optional[Dict[str, str]] = None):
        for tool in ("unshare", "nsenter", "ip"):
            if shutil.which(tool) is None:
                raise RuntimeError(f"{tool} is missing (util-linux / iproute2)")
        self.workdir = workdir
        self.procs: List[Proc] = []
        self._made_dirs: List[str] = []
        names = dict(ETCD_HOSTS)
        names.update(hosts or {})
        hosts_file = os.path.join(workdir, "hosts")
        with open(hosts_file, "w") as f:
            f.write("127.0.0.1 localhost\n::1 localhost ip6-localhost\n")
            for name, addr in names.items():
                f.write(f"{addr} {name}\n")
        self._holder = subprocess.Popen(
            ["unshare", "--net", "--mount", "--propagation", "private", "sh", "-c",
             f"ip link set lo up && mount --bind {hosts_file} /etc/hosts && echo ready && "
             "exec sleep 100000"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        line = self._holder.stdout.readline()
        if line.strip() != "ready":
            err = self._holder.stderr.read() if self._holder.poll() is not None else ""
            self._holder.kill()
            raise RuntimeError(f"cannot make a private network namespace: {err.strip()}")
        # unshare entered the namespaces and exec'd sh, which exec'd sleep: the same process.
        self._ns_pid = self._holder.pid

    def private_dir(self, path: str) -> None:
        """An empty tmpfs at ``path`` on this host only (the page's directories, e.g.
        /data/mooncake_snapshots, without writing to this machine's). A mount point that does
        not exist is created here (empty) and removed at close."""
        missing = []
        p = path
        while not os.path.exists(p):
            missing.append(p)
            p = os.path.dirname(p)
        os.makedirs(path, exist_ok=True)
        self._made_dirs.extend(missing)  # deepest first
        subprocess.run(self._enter() + ["mount", "-t", "tmpfs", "tmpfs", path], check=True,
                       capture_output=True)

    def _enter(self, cwd: Optional[str] = None) -> List[str]:
        # nsenter --mount starts in / unless told the directory (--wd).
        return ["nsenter", f"--target={self._ns_pid}", "--net", "--mount",
                f"--wd={cwd or self.workdir}"]

    def sh(self, command: str, env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
           timeout: float = 120.0, check: bool = False) -> Result:
        """Runs a shell command line (bash) on the host to completion."""
        p = subprocess.run(self._enter(cwd) + ["bash", "-c", command], env=venv_env(env),
                           cwd=cwd or self.workdir, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout)
        r = Result(p.returncode, p.stdout)
        return r.check() if check else r

    def spawn(self, command: str, name: str, env: Optional[Dict[str, str]] = None,
              cwd: Optional[str] = None) -> Proc:
        """Starts a long-running shell command line on the host (stopped at teardown)."""
        p = Proc(self._enter(cwd) + ["bash", "-c", command], name, self.workdir, venv_env(env),
                 cwd=cwd or self.workdir)
        self.procs.append(p)
        return p

    def popen(self, argv: Sequence[str], env: Optional[Dict[str, str]] = None,
              **kw) -> subprocess.Popen:
        """A process on the host with the caller's pipes (``kw``: subprocess.Popen's); the
        caller waits for it."""
        kw.setdefault("cwd", self.workdir)
        return subprocess.Popen(self._enter(kw["cwd"]) + list(argv), env=venv_env(env), **kw)

    def python(self, code: str, env: Optional[Dict[str, str]] = None, **kw) -> subprocess.Popen:
        """This interpreter running ``code`` on the host (see popen)."""
        return self.popen([sys.executable, "-c", code], env=env, **kw)

    def wait_port(self, port: int, proc: Optional[Proc] = None, timeout: float = 30.0,
                  addr: str = "127.0.0.1") -> None:
        deadline = time.time() + timeout
        while True:
            if proc is not None and not proc.alive():
                raise AssertionError(f"{proc.name} exited ({proc.proc.returncode}) before "
                                     f"listening on {port}:\n{proc.log()[-4000:]}")
            r = subprocess.run(self._enter() + ["bash", "-c", f"exec 3<>/dev/tcp/{addr}/{port}"],
                               capture_output=True)
            if r.returncode == 0:
                return
            if time.time() > deadline:
                raise AssertionError(f"nothing listens on {addr}:{port} of the fresh host "
                                     f"after {timeout}s")
            time.sleep(0.1)

    def start_etcd(self) -> Proc:
        """One etcd serving the pages' endpoints http://etcd-{0,1,2}:2379."""
        etcd = shutil.which("etcd")
        if etcd is None:
            pytest.fail("etcd is not installed: `make setup` installs Debian's etcd-server")
        data = tempfile.mkdtemp(prefix="etcd-", dir=self.workdir)
        urls = ",".join(f"http://{a}:2379" for a in ETCD_HOSTS.values())
        p = self.spawn(f"exec {etcd} --name docs --data-dir {data} --listen-client-urls {urls} "
                       f"--advertise-client-urls http://127.0.0.1:2379 "
                       f"--listen-peer-urls http://127.0.0.1:2380 "
                       f"--initial-advertise-peer-urls http://127.0.0.1:2380 "
                       f"--initial-cluster docs=http://127.0.0.1:2380", "etcd")
        self.wait_port(2379, p)
        return p

    def start_redis(self, port: int = 6379) -> Proc:
        redis = shutil.which("redis-server")
        if redis is None:
            pytest.fail("redis-server is not installed: `make setup` installs Debian's redis-server")
        p = self.spawn(f"exec {redis} --port {port} --bind 127.0.0.1 --save '' --appendonly no",
                       "redis")
        self.wait_port(port, p)
        return p

    def close(self) -> None:
        for p in reversed(self.procs):
            p.stop()
        if self._holder.poll() is None:
            os.killpg(self._holder.pid, signal.SIGKILL)
            self._holder.wait()
        for d in self._made_dirs:  # the namespace (and its mounts) is gone: remove mount points
            try:
                os.rmdir(d)
            except OSError:
                pass


@pytest.fixture(scope="module")
def fresh_host(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("a private network namespace (the pages' fixed ports) needs root")
    try:
        h = FreshHost(str(tmp_path_factory.mktemp("host")))
    except RuntimeError as e:
        pytest.skip(str(e))
    yield h
    h.close()


# ------------------------------------------------------------------ services on this machine


@pytest.fixture(scope="module")
def etcd_on_free_port(tmp_path_factory):
    """An etcd on free ports of this machine; yields its client URL (http://127.0.0.1:PORT)."""
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.fail("etcd is not installed: `make setup` installs Debian's etcd-server")
    d = str(tmp_path_factory.mktemp("etcd"))
    client, peer = free_port(), free_port()
    p = Proc([etcd, "--name", "t", "--data-dir", os.path.join(d, "data"),
              "--listen-client-urls", f"http://127.0.0.1:{client}",
              "--advertise-client-urls", f"http://127.0.0.1:{client}",
              "--listen-peer-urls", f"http://127.0.0.1:{peer}",
              "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
              "--initial-cluster", f"t=http://127.0.0.1:{peer}"], "etcd", d, dict(os.environ))
    wait_port(client, p)
    yield f"http://127.0.0.1:{client}"
    p.stop()


@pytest.fixture(scope="module")
def redis_on_free_port(tmp_path_factory):
    """A redis-server on a free port of this machine; yields its port."""
    redis = shutil.which("redis-server")
    if redis is None:
        pytest.fail("redis-server is not installed: `make setup` installs Debian's redis-server")
    d = str(tmp_path_factory.mktemp("redis"))
    port = free_port()
    p = Proc([redis, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
              "--appendonly", "no"], "redis", d, dict(os.environ))
    wait_port(port, p)
    yield port
    p.stop()


def torchrun(script: str, nproc: int = 2, args: Sequence[str] = (),
             env: Optional[Dict[str, str]] = None, timeout: float = 180.0,
             workdir: Optional[str] = None) -> Result:
    """Runs a page's script text under ``torchrun --standalone --nproc_per_node=nproc`` on this
    machine (a free rendezvous port, so it can run beside other jobs); stdout and stderr of all
    ranks together."""
    d = workdir or tempfile.mkdtemp(prefix="docs-torchrun-")
    path = os.path.join(d, "your_script.py")
    with open(path, "w") as f:
        f.write(script)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", path, *args]
    try:
        p = subprocess.run(cmd, env=venv_env(env), cwd=d, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        raise AssertionError(f"torchrun hung for {timeout}s:\n{out[-6000:]}")
    return Result(p.returncode, p.stdout)


def python(code: str, env: Optional[Dict[str, str]] = None, timeout: float = 120.0,
           cwd: Optional[str] = None) -> Result:
    """Runs a page's Python snippet in a new interpreter (this venv's)."""
    p = subprocess.run([sys.executable, "-c", code], env=venv_env(env), cwd=cwd,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return Result(p.returncode, p.stdout)
