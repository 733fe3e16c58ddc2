"""The raw TCP bound of a ring step, measured between the benchmark's own ranks.

Each rank sends `nbytes` to the next rank of the ring and receives `nbytes` from the previous one
at the same time, over `conns` TCP connections per neighbour pair with the bytes striped across
them: the traffic every rank of a ring collective carries, with no algorithm, no copy and no
reduction around it. With two ranks that is the two-way exchange a two-rank all_reduce of S
bytes makes (S each way). bench/pgbench.py --netns (and --tcp-bound under torchrun on several
hosts) times it in the same rounds as the backends and reports each op's share of it.

Python moves the bytes (socket.sendall and recv_into, which release the GIL, one thread per
connection and direction), so for large messages the figure is what the kernel and the link
carry; for small ones it also holds a few tens of microseconds of Python and thread hand-off,
which flatters the share at 8 B to 64 KiB.
"""

from __future__ import annotations

import socket
import struct
import threading

import torch.distributed as dist


def local_address(peer_host: str) -> str:
    """The address this host uses to reach peer_host (the interface of the route to it)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((peer_host, 9))
        return s.getsockname()[0]
    finally:
        s.close()


def _tune(s: socket.socket) -> None:
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _recv_exact(s: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = s.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("tcpbound: the previous rank closed its connection")
        got += n


class RingExchange:
    """conns connections to the next rank and from the previous one, and the threads that move
    one stripe each. Collective: every rank of `group` constructs it with the same conns and
    calls exchange() with the same nbytes at the same time."""

    def __init__(self, group, conns: int, host: str, capacity: int):
        self.conns = conns
        self.rank, self.n = dist.get_rank(group), dist.get_world_size(group)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", 0))
        listener.listen(conns)
        me = (host, listener.getsockname()[1])
        everyone = [None] * self.n
        dist.all_gather_object(everyone, me, group=group)
        nxt = everyone[(self.rank + 1) % self.n]
        self.out: list[socket.socket] = []
        failed: list[BaseException] = []

        def connect():
            try:
                for i in range(conns):
                    s = socket.create_connection(nxt, timeout=60)
                    s.settimeout(None)
                    _tune(s)
                    s.sendall(struct.pack("<I", i))  # which stripe this connection carries
                    self.out.append(s)
            except BaseException as e:  # reported below, on the calling thread
                failed.append(e)

        t = threading.Thread(target=connect, daemon=True)
        t.start()
        self.inc: list[socket.socket | None] = [None] * conns
        listener.settimeout(60)
        for _ in range(conns):
            s, _ = listener.accept()
            s.settimeout(None)
            _tune(s)
            idx = bytearray(4)
            _recv_exact(s, memoryview(idx))
            self.inc[struct.unpack("<I", idx)[0]] = s
        listener.close()
        t.join()
        if failed:
            raise failed[0]
        self.send_buf = bytearray(b"\x01" * capacity)
        self.recv_buf = bytearray(capacity)
        self.nbytes = 0
        self.errors: list[BaseException] = []
        self.go = threading.Barrier(2 * conns + 1)
        self.done = threading.Barrier(2 * conns + 1)
        self.closing = False
        self.threads = []
        for i in range(conns):
            for fn in (self._sender, self._receiver):
                th = threading.Thread(target=fn, args=(i,), daemon=True)
                th.start()
                self.threads.append(th)

    def _stripe(self, i: int) -> tuple[int, int]:
        per = -(-self.nbytes // self.conns)
        lo = min(i * per, self.nbytes)
        return lo, min(lo + per, self.nbytes)

    def _loop(self, i: int, move) -> None:
        while True:
            self.go.wait()
            if self.closing:
                return
            try:
                lo, hi = self._stripe(i)
                if hi > lo:
                    move(i, lo, hi)
            except BaseException as e:
                self.errors.append(e)
            self.done.wait()

    def _sender(self, i: int) -> None:
        view = memoryview(self.send_buf)
        self._loop(i, lambda i, lo, hi: self.out[i].sendall(view[lo:hi]))

    def _receiver(self, i: int) -> None:
        view = memoryview(self.recv_buf)
        self._loop(i, lambda i, lo, hi: _recv_exact(self.inc[i], view[lo:hi]))

    def exchange(self, nbytes: int) -> None:
        """Sends nbytes to the next rank and receives nbytes from the previous one."""
        if nbytes > len(self.send_buf):
            raise ValueError(f"tcpbound: {nbytes} B is more than the {len(self.send_buf)} B sized for")
        self.nbytes = nbytes
        self.go.wait()
        self.done.wait()
        if self.errors:
            raise self.errors[0]

    def close(self) -> None:
        self.closing = True
        self.go.wait()
        for th in self.threads:
            th.join()
        for s in self.out + [s for s in self.inc if s is not None]:
            s.close()
