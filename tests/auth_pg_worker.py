"""Rank bodies of tests/test_auth_pg.py (spawned by pg_harness.run_ranks)."""

from __future__ import annotations

import json
import os
import re
import socket
import struct

import torch.distributed as dist

import pg_workers
from pg_harness import Checker, init

REQ_MAGIC = 0x5154434D
OP_READ, OP_WRITE, OP_DESCRIPTOR = 1, 2, 3


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        c = s.recv(n - len(buf))
        if not c:
            raise ConnectionError("closed")
        buf += c
    return buf


def _call(addr: tuple, op: int, at: int, payload: bytes = b"", length: int | None = None) -> tuple[int, bytes]:
    """One frame on a new, unauthenticated connection (a stranger who read the store)."""
    n = len(payload) if length is None else length
    with socket.create_connection(addr, timeout=10) as s:
        s.sendall(struct.pack("<IBBHIIQQ", REQ_MAGIC, 1, op, 0, 1, 0, at, n) + payload)
        _magic, status, _seq, _r, m = struct.unpack("<IiIIQ", _recv(s, 24))
        return status, _recv(s, m)


def _endpoints(store_path: str) -> dict[int, dict]:
    data = open(store_path, "rb").read()
    eps = {}
    for m in re.finditer(rb'\{"rank":\d+,"segment":"[^"]*","addr":\d+[^}]*\}', data):
        e = json.loads(m.group(0))
        eps[e["rank"]] = e
    return eps


def stranger_checks(ck: Checker, store_path: str, auth_on: bool) -> None:
    """What an unauthenticated process that can reach rank 1's engine gets of its group buffer."""
    data = open(store_path, "rb").read()
    ck.true("token in the store", (b"mooncake/auth_token" in data) == auth_on, f"auth_on={auth_on}")
    ep = _endpoints(store_path)[1]
    host, port = ep["segment"].rsplit(":", 1)
    addr = (host, int(port))
    status, body = _call(addr, OP_READ, ep["addr"], length=64)
    if auth_on:
        ck.true("stranger READ refused", status != 0 and b"did not authenticate" in body, f"{status} {body[:200]!r}")
        status, body = _call(addr, OP_WRITE, ep["addr"] + (1 << 20), b"\0" * 64)
        ck.true("stranger WRITE refused", status != 0, f"{status} {body[:200]!r}")
        status, body = _call(addr, OP_DESCRIPTOR, 0)
        desc = json.loads(body)
        ck.true("descriptor hides the group's buffer",
                status == 0 and all(b["addr"] != ep["addr"] for b in desc["buffers"]), str(desc)[:300])
    else:
        ck.true("MOONCAKE_PG_AUTH=0: stranger READ served", status == 0 and len(body) == 64, f"{status} {body[:200]!r}")


def worker_auth_ops(ck: Checker, rank: int, world: int, tmpdir: str, tcp_only: bool, auth_on: bool):
    if tcp_only:
        os.environ.update(MC_FORCE_TCP="1", MC_PG_SHM="0")
    if not auth_on:
        os.environ["MOONCAKE_PG_AUTH"] = "0"
    os.environ.pop("MC_AUTH_TOKEN", None)
    store = os.path.join(tmpdir, "store")
    init(rank, world, store)
    pg_workers.check_reductions(ck, rank, world)
    pg_workers.check_data_movement(ck, rank, world)
    if auth_on and not tcp_only:
        pg_workers.check_layouts(ck, rank, world)
        pg_workers.check_async_and_objects(ck, rank, world)
        pg_workers.check_subgroups(ck, rank, world)
    dist.barrier()
    if rank == 0:
        stranger_checks(ck, store, auth_on)
    dist.barrier()
    dist.destroy_process_group()
