"""mooncake.engine.TransferEngine across two real processes, on each metadata backend:
P2PHANDSHAKE, the HTTP metadata server, and a real etcd. Every sync and async call, with
Mooncake's return conventions, byte-exact."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import free_port, stop
from mooncake.engine import TransferEngine, TransferOpcode

HERE = os.path.dirname(os.path.abspath(__file__))
SIZE = 1 << 20


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 7 + seed) % 256 for i in range(n))


class Peer:
    def __init__(self, meta: str, name: str):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "engine_peer.py"), meta,
                                      name, str(SIZE)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        info = json.loads(self.proc.stdout.readline())
        assert "error" not in info, info
        self.name, self.managed, self.plain = info["name"], info["managed"], info["plain"]

    def dump(self, kind: str, off: int, n: int) -> bytes:
        self.proc.stdin.write(f"dump {kind} {off} {n}\n")
        self.proc.stdin.flush()
        return bytes.fromhex(self.proc.stdout.readline().strip())

    def notifies(self):
        self.proc.stdin.write("notifies\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            stop(self.proc)


@pytest.fixture(params=["p2p", "http", "etcd"])
def setup_pair(request):
    if request.param == "p2p":
        meta, names = "P2PHANDSHAKE", ("127.0.0.1", "127.0.0.1")
    elif request.param == "http":
        meta = request.getfixturevalue("http_metadata_server")
        names = (f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}")
    else:
        meta = "etcd://" + request.getfixturevalue("etcd_server")
        names = (f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}")
    peer = Peer(meta, names[1])
    eng = TransferEngine()
    assert eng.initialize(names[0], meta, "tcp", "") == 0
    yield eng, peer
    peer.close()
    eng.close()


def test_every_call(setup_pair):
    eng, peer = setup_pair
    assert eng.get_rpc_port() > 0
    local = eng.allocate_managed_buffer(SIZE)
    assert local != 0
    data = pattern(SIZE, 3)
    assert eng.write_bytes_to_buffer(local, data, SIZE) == 0
    assert eng.read_bytes_from_buffer(local, 16) == data[:16]

    for kind in ("managed", "plain"):  # shared memory path and listener path
        base = getattr(peer, kind)
        # sync write and read
        assert eng.transfer_sync_write(peer.name, local, base + 100, 4096) == 0
        assert peer.dump(kind, 100, 4096) == data[:4096]
        assert peer.dump(kind, 99, 1) == bytes([99 % 251])  # neighbours untouched
        assert peer.dump(kind, 4196, 1) == bytes([4196 % 251])
        assert eng.transfer_sync_read(peer.name, local + 8192, base, 1000) == 0
        assert eng.read_bytes_from_buffer(local + 8192, 100) == bytes(range(100))
        assert eng.transfer_sync(peer.name, local, base + 5, 1, TransferOpcode.Write) == 0
        assert peer.dump(kind, 5, 1) == data[:1]
        # batches
        offs = [0, 10000, 20000, 30000]
        assert eng.batch_transfer_sync_write(peer.name, [local + o for o in offs],
                                             [base + o for o in offs], [333] * 4) == 0
        for o in offs:
            assert peer.dump(kind, o, 333) == data[o:o + 333]
        assert eng.batch_transfer_sync_read(peer.name, [local + 500000 + o for o in offs],
                                            [base + o for o in offs], [333] * 4) == 0
        for o in offs:
            assert eng.read_bytes_from_buffer(local + 500000 + o, 333) == data[o:o + 333]
        # async batches
        b1 = eng.batch_transfer_async_write(peer.name, [local + 100000], [base + 100000], [65536])
        b2 = eng.batch_transfer_async_read(peer.name, [local + 700000], [base + 100000], [65536])
        assert b1 != 0 and b2 != 0
        assert eng.get_batch_transfer_status([b1, b2]) == 0
        assert peer.dump(kind, 100000, 65536) == data[100000:165536]
        b = eng.transfer_submit_write(peer.name, local + 200000, base + 200000, 300000)
        assert b != 0
        deadline = time.time() + 30
        while (st := eng.transfer_check_status(b)) == 0:
            assert time.time() < deadline
            time.sleep(0.001)
        assert st == 1
        assert peer.dump(kind, 200000, 300000) == data[200000:500000]
        # out of bounds: rejected, nothing written past the buffer
        assert eng.transfer_sync_write(peer.name, local, base + SIZE - 10, 100) == -1
        assert eng.batch_transfer_async_write(peer.name, [local], [base + SIZE], [8]) == 0

    assert eng.get_first_buffer_address(peer.name) in (peer.managed, peer.plain)
    topo = json.loads(eng.get_local_topology())
    assert any(k.startswith("cpu:") for k in topo)
    assert eng.send_probe(peer.name) == 0
    assert eng.send_notify(peer.name, "hello", "world") == 0
    assert eng.transfer_sync_write_with_notify(peer.name, local, peer.managed, 8, "done", "8") == 0
    deadline = time.time() + 10
    got = []
    while len(got) < 2 and time.time() < deadline:
        got += peer.notifies()
        time.sleep(0.01)
    assert got == [["hello", "world"], ["done", "8"]]
    assert eng.free_managed_buffer(local, SIZE) == 0


def test_registration_rules(setup_pair):
    eng, _ = setup_pair
    a = ctypes.create_string_buffer(8192)
    b = ctypes.create_string_buffer(8192)
    addr_a, addr_b = ctypes.addressof(a), ctypes.addressof(b)
    assert eng.register_memory(addr_a, 0) == -1  # zero length
    assert eng.register_memory(addr_a, 8192) == 0
    assert eng.register_memory(addr_a + 4096, 100) == -1  # overlap
    assert eng.unregister_memory(addr_a) == 0
    assert eng.unregister_memory(addr_a) == -1  # unknown
    assert eng.batch_register_memory([addr_a, addr_b], [8192, 8192]) == 0
    assert eng.batch_unregister_memory([addr_a, addr_b]) == 0


def test_bad_targets(setup_pair):
    eng, peer = setup_pair
    local = eng.allocate_managed_buffer(4096)
    assert eng.transfer_sync_write("127.0.0.1:1", local, peer.managed, 8) == -1
    assert eng.transfer_sync_write("no-such-segment", local, peer.managed, 8) == -1
    assert eng.transfer_check_status(123456789) == -1
    # a source outside any registered buffer
    assert eng.transfer_sync_write(peer.name, 4096, peer.managed, 8) == -1
    assert eng.send_probe("127.0.0.1:1") == -1


def test_dead_peer_fails_instead_of_hanging(setup_pair):
    eng, peer = setup_pair
    local = eng.allocate_managed_buffer(4096)
    assert eng.transfer_sync_write(peer.name, local, peer.plain, 8) == 0
    peer.proc.kill()
    peer.proc.wait()
    t0 = time.time()
    assert eng.transfer_sync_write(peer.name, local, peer.plain, 8) == -1
    assert time.time() - t0 < 35
