"""The tensor family of MooncakeDistributedStore (mooncake.store_tensor) against a real
mooncake_master, with a second client process reading what this one wrote and writing what this
one reads. Values are compared byte for byte."""

from __future__ import annotations

import ctypes
import json
import os
import struct
import subprocess
import textwrap

import pytest

torch = pytest.importorskip("torch")

from test_store import Master, new_store, run_peer, start_master, MB  # noqa: E402,F401
from mooncake.store import (  # noqa: E402
    ErrorCode, ParallelAxis, ReadTarget, ReplicateConfig, TensorParallelism)
from mooncake.store_tensor import serialize_tensor_into, tensor_object_size  # noqa: E402

# Deterministic tensors both processes can build: every dtype the issue names, in several
# shapes (0-d, empty, non-contiguous views, 3-d).
CASES_SRC = textwrap.dedent("""
    import torch
    def cases(seed):
        g = torch.Generator().manual_seed(seed)
        f = lambda *s: torch.randn(*s, generator=g)
        i = lambda lo, hi, *s, dt: torch.randint(lo, hi, s, generator=g, dtype=dt)
        return {
            "f32": f(3, 4),
            "f32_0d": torch.tensor(2.5),
            "f32_empty": torch.empty(0, 3),
            "f32_T": f(4, 6).t(),
            "f32_step": f(10, 8)[::3, 1::2],
            "f16": f(2, 3, 5).half(),
            "f16_T": f(5, 7).half().t(),
            "bf16": f(17).to(torch.bfloat16),
            "bf16_0d": torch.tensor(-1.25, dtype=torch.bfloat16),
            "i8": i(-128, 127, 4, 4, dt=torch.int8),
            "i8_step": i(-128, 127, 9, 9, dt=torch.int8)[::2, ::4],
            "i64": i(-2**40, 2**40, 2, 2, 2, dt=torch.int64),
            "i64_empty": torch.empty(2, 0, 3, dtype=torch.int64),
            "bool": f(3, 5) > 0,
            "bool_0d": torch.tensor(True),
        }
    def raw(t):
        t = t.contiguous()
        return bytes(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b""
    def same(a, b):
        return a.dtype == b.dtype and list(a.shape) == list(b.shape) and raw(a) == raw(b)
""")
_ns: dict = {}
exec(CASES_SRC, _ns)
cases, raw, same = _ns["cases"], _ns["raw"], _ns["same"]


@pytest.fixture
def master():
    m = Master("--client_ttl=2")
    yield m
    try:
        while _LIVE:
            _LIVE.pop().close()
    finally:
        m.stop()


@pytest.fixture
def store(master):
    s = new_store(master)
    yield s
    s.close()


_LIVE: list = []


def peer(master, code: str):
    """Runs ``code`` in a second client process; it stays up (its segment holds replicas of
    what it wrote) until the test ends. Its assertions fail the test."""
    p = _Peer(master, code)
    _LIVE.append(p)
    return p


class _Peer:

    def __init__(self, master, code: str):
        tail = '\nprint("PEER_DONE", flush=True)\nsys.stdin.read()\ns.close()\n'
        self.p = run_peer(master, CASES_SRC + textwrap.dedent(code) + tail, wait=False,
                          stdin=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = []
        for line in self.p.stdout:
            if line.startswith("PEER_DONE"):
                break
            out.append(line)
        else:
            self.p.wait()
            raise AssertionError("the peer client failed:\n" + "".join(out))

    def close(self):
        self.p.stdin.close()
        self.p.wait(60)
        assert self.p.returncode == 0, self.p.stdout.read()


class Registered:
    """A host buffer registered with the store for the zero-copy calls."""

    def __init__(self, store, size):
        self.store, self.size = store, size
        self.buf = (ctypes.c_char * size)()
        self.ptr = ctypes.addressof(self.buf)
        assert store.register_buffer(self.ptr, size) == 0

    def close(self):
        self.store.unregister_buffer(self.ptr)


# ---- plain put/get across processes -----------------------------------------------------------

def test_dtypes_and_shapes_between_two_clients(master, store):
    mine = cases(1)
    for k, t in mine.items():
        assert store.put_tensor(f"a/{k}", t) == 0, k
    assert store.batch_put_tensor([f"ab/{k}" for k in mine], list(mine.values())) == [0] * len(mine)
    peer(master, """
        mine = cases(1)
        for k, t in mine.items():
            got = s.get_tensor(f"a/{k}")
            assert same(got, t), (k, got, t)
            assert got.is_contiguous()
        got = s.batch_get_tensor([f"ab/{k}" for k in mine] + ["ab/missing"])
        assert got[-1] is None
        assert all(same(g, t) for g, t in zip(got, mine.values()))
        theirs = cases(2)
        for k, t in theirs.items():
            assert s.put_tensor(f"b/{k}", t) == 0
        assert s.pub_tensor("b/pub", theirs["bf16"], ReplicateConfig(replica_num=2)) == 0
        assert s.batch_pub_tensor(["b/p1", "b/p2"], tensors_list=[theirs["i8"], theirs["bool"]], config=ReplicateConfig()) == [0, 0]
    """)
    theirs = cases(2)
    for k, t in theirs.items():
        assert same(store.get_tensor(f"b/{k}"), t), k
    assert same(store.get_tensor("b/pub"), theirs["bf16"])
    assert len(store.get_replica_desc("b/pub")) == 2
    got = store.batch_get_tensor(["b/p1", "b/p2"])
    assert same(got[0], theirs["i8"]) and same(got[1], theirs["bool"])
    assert store.get_tensor("nothing/here") is None


def test_nested_values_keep_their_structure(store):
    t = cases(3)
    value = {"obs": t["f32"], "act": [t["i64"], (t["bool_0d"],)], "mask": t["f16_T"]}
    assert store.put_tensor("nested", value) == 0
    got = store.get_tensor("nested")
    assert list(got) == ["obs", "act", "mask"]
    assert same(got["obs"], t["f32"]) and same(got["act"][0], t["i64"])
    assert isinstance(got["act"][1], tuple) and same(got["act"][1][0], t["bool_0d"])
    assert same(got["mask"], t["f16_T"])


# ---- zero copy --------------------------------------------------------------------------------

def test_from_and_into_buffers(master, store):
    t = cases(4)
    a, b = t["f32_step"], t["bf16"]
    src = Registered(store, 1 << 16)
    dst = Registered(store, 1 << 16)
    try:
        n = serialize_tensor_into(a, src.ptr, src.size)
        assert n == tensor_object_size(a)
        assert store.put_tensor_from("z/a", src.ptr, n) == 0
        n2 = serialize_tensor_into(b, src.ptr + 8192, 8192)
        assert store.batch_put_tensor_from(["z/b", "z/a2"], [src.ptr + 8192, src.ptr], [n2, n]) == [0, 0]
        got = store.get_tensor_into("z/a", dst.ptr, dst.size)
        assert same(got, a)
        # the result views the caller's buffer (no copy)
        assert dst.ptr <= got.data_ptr() < dst.ptr + dst.size
        outs = store.batch_get_tensor_into(["z/b", "z/missing"], [dst.ptr, dst.ptr + 8192], [8192, 8192])
        assert same(outs[0], b) and outs[1] is None
        # lists of different lengths: INVALID_PARAMS per key, as upstream's (its dummy-client test)
        assert store.batch_get_tensor_into(["z/b", "z/missing"], [dst.ptr], [8192]) == [ErrorCode.INVALID_PARAMS] * 2
        with pytest.raises(ValueError, match="smaller than"):
            store.get_tensor_into("z/a", dst.ptr, 16)
        # bytes that are not a tensor object are refused and nothing is stored
        ctypes.memmove(src.ptr, b"garbage!" * 8, 64)
        with pytest.raises(ValueError, match="not a tensor object"):
            store.put_tensor_from("z/bad", src.ptr, 64)
        with pytest.raises(ValueError, match="lengths differ"):
            store.batch_put_tensor_from(["z/x", "z/y"], [src.ptr], [64, 64])
        assert store.is_exist("z/bad") == 0 and store.batch_is_exist(["z/x", "z/y"]) == [0, 0]
        with pytest.raises(ValueError, match="needs"):
            serialize_tensor_into(a, src.ptr, 10)
    finally:
        src.close()
        dst.close()
    peer(master, """
        t = cases(4)
        assert same(s.get_tensor("z/a"), t["f32_step"]) and same(s.get_tensor("z/a2"), t["f32_step"])
        assert same(s.get_tensor("z/b"), t["bf16"])
    """)


def test_get_tensor_into_cuda_with_a_cpu_destination(store):
    t = cases(5)["f16"]
    assert store.put_tensor("c/x", t) == 0
    dst = torch.zeros(40, dtype=torch.float16)
    assert store.get_tensor_into_cuda("c/x", dst) == t.numel() * 2
    assert raw(dst[:30]) == raw(t) and raw(dst[30:]) == raw(torch.zeros(10, dtype=torch.float16))
    assert store.get_tensor_into_cuda("c/missing", dst) == ErrorCode.OBJECT_NOT_FOUND
    assert store.batch_get_tensor_into_cuda(["c/missing", "c/x"], [dst, dst]) == [ErrorCode.OBJECT_NOT_FOUND, 60]
    with pytest.raises(ValueError, match="float16, the destination is torch.float32"):
        store.get_tensor_into_cuda("c/x", torch.zeros(30))
    with pytest.raises(ValueError, match="room for 4"):
        store.get_tensor_into_cuda("c/x", torch.zeros(4, dtype=torch.float16))
    with pytest.raises(TypeError, match="torch.Tensor"):
        store.get_tensor_into_cuda("c/x", 12345)


# ---- tensor parallelism -----------------------------------------------------------------------

def test_tp_shards_reassemble_exactly_in_another_process(master, store):
    t = cases(6)
    full = torch.arange(4 * 10 * 3, dtype=torch.int64).reshape(4, 10, 3)
    assert store.put_tensor_with_tp("tp/x", full, tp_rank=0, tp_size=3, split_dim=1) == 0
    assert store.get_tensor("tp/x") is None  # only shards are stored
    assert [list(store.get_tensor(f"tp/x_tp_{r}").shape) for r in range(3)] == [[4, 4, 3], [4, 3, 3], [4, 3, 3]]
    assert store.batch_put_tensor_with_tp(["tp/f16", "tp/bf16"], [t["f16"], t["bf16"]], tp_size=2,
                                          split_dim=-1) == [0, 0]
    assert store.pub_tensor_with_tp("tp/pub", t["f32"], ReplicateConfig(with_soft_pin=True), tp_size=2) == 0
    peer(master, """
        import torch
        from mooncake.store import ReadTarget
        full = torch.arange(4 * 10 * 3, dtype=torch.int64).reshape(4, 10, 3)
        shards = [s.get_tensor_with_tp("tp/x", r, 3, 1) for r in range(3)]
        assert same(torch.cat(shards, dim=1), full)
        assert same(s.get_tensor_with_parallelism("tp/x", ReadTarget("full")), full)
        t = cases(6)
        got = [s.batch_get_tensor_with_tp(["tp/f16", "tp/bf16"], r, 2) for r in range(2)]
        assert same(torch.cat([got[0][0], got[1][0]], dim=-1), t["f16"])
        assert same(torch.cat([got[0][1], got[1][1]], dim=-1), t["bf16"])
        assert same(torch.cat([s.get_tensor_with_tp("tp/pub", r, 2) for r in range(2)]), t["f32"])
        # tp_size 1 is the plain key
        assert s.put_tensor_with_tp("tp/one", t["i8"]) == 0
        assert same(s.get_tensor("tp/one"), t["i8"]) and same(s.get_tensor_with_tp("tp/one"), t["i8"])
    """)
    # the zero-copy forms
    buf = Registered(store, 1 << 16)
    try:
        n = serialize_tensor_into(full, buf.ptr, buf.size)
        assert store.put_tensor_with_tp_from("tp/z", buf.ptr, n, tp_size=2, split_dim=0) == 0
        got = store.get_tensor_with_tp_into("tp/z", buf.ptr, buf.size, tp_rank=1, tp_size=2)
        assert same(got, full[2:])
        n = serialize_tensor_into(t["i64"], buf.ptr, 4096)
        assert store.batch_put_tensor_with_tp_from(["tp/z2"], [buf.ptr], [n], tp_size=2) == [0]
        outs = store.batch_get_tensor_with_tp_into(["tp/z2", "tp/none"], [buf.ptr, buf.ptr + 8192],
                                                   [8192, 8192], tp_rank=0, tp_size=2)
        assert same(outs[0], t["i64"][:1]) and outs[1] is None
    finally:
        buf.close()


def test_tp_bad_arguments_raise_and_store_nothing(store):
    x = torch.ones(4, 4)
    bad = [
        (dict(tp_size=0), ValueError, "tp_size must be >= 1"),
        (dict(tp_rank=2, tp_size=2), ValueError, r"tp_rank 2 is outside \[0, 2\)"),
        (dict(tp_size=2, split_dim=2), ValueError, "split_dim 2 is out of range for a 2-d tensor"),
        (dict(tp_size=2, split_dim=1.0), TypeError, "split_dim must be an int"),
    ]
    for kw, exc, msg in bad:
        with pytest.raises(exc, match=msg):
            store.put_tensor_with_tp("bad/x", x, **kw)
    with pytest.raises(ValueError, match="0-d tensor cannot be split"):
        store.put_tensor_with_tp("bad/x", torch.tensor(1.0), tp_size=2)
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        store.put_tensor_with_tp("bad/x", [x], tp_size=2)
    with pytest.raises(ValueError, match="lengths differ"):
        store.batch_put_tensor_with_tp(["bad/a", "bad/b"], [x], tp_size=2)
    # one bad tensor in a batch: nothing of the batch is written
    with pytest.raises(ValueError, match="0-d"):
        store.batch_put_tensor_with_tp(["bad/a", "bad/b"], [x, torch.tensor(2.0)], tp_size=2)
    with pytest.raises(TypeError, match="put_tensor: expected a tensor"):
        store.put_tensor("bad/y", {"a": 1})
    with pytest.raises(ValueError, match="keys=2, tensors=1"):
        store.batch_put_tensor(["bad/a", "bad/b"], [x])
    with pytest.raises(TypeError, match="key must be str"):
        store.put_tensor(7, x)
    keys = ["bad/x", "bad/y", "bad/a", "bad/b"] + [f"bad/{k}_tp_{r}" for k in "xab" for r in range(3)]
    assert store.batch_is_exist(keys) == [0] * len(keys)


def test_failed_tp_put_leaves_no_shard_visible(start_master):
    # two 64 MiB segments; hard-pinned 40 MiB shards: two fit, the fourth cannot be placed
    m = start_master()
    a = new_store(m)
    b = new_store(m)
    pin = ReplicateConfig(with_hard_pin=True)
    try:
        # a shard that existed before the call (puts are write-once): left alone by the rollback
        assert a.put("tp/big_tp_0", b"someone else's", pin) == 0
        big = torch.arange(4 * 10 * MB, dtype=torch.int32)  # 160 MiB
        rc = a.pub_tensor_with_tp("tp/big", big, pin, tp_size=4)
        assert rc == ErrorCode.NO_AVAILABLE_HANDLE, rc
        assert a.batch_is_exist([f"tp/big_tp_{r}" for r in range(4)]) == [1, 0, 0, 0]
        assert a.get("tp/big_tp_0") == b"someone else's"
        # the space the failed call took is free again: two 40 MiB shards fit
        half = big[: 20 * MB]
        assert a.put_tensor_with_tp("tp/half", half, tp_size=2, config=pin) == 0
        assert same(torch.cat([b.get_tensor(f"tp/half_tp_{r}") for r in range(2)]), half)
    finally:
        a.close()
        b.close()


# ---- unified parallelism ----------------------------------------------------------------------

def tp(rank, size, split_dim=None):
    return ParallelAxis("tp", rank, size, split_dim)


def test_writer_partitions_from_two_processes_rebuild_the_full_tensor(master, store):
    full = cases(7)["f32"]  # 3 x 4
    assert store.put_tensor_with_parallelism("wp/x", full, writer_partition=(0, 2, 1)) == 0
    peer(master, """
        t = cases(7)["f32"]
        assert s.put_tensor_with_parallelism("wp/x", t, writer_partition=(1, 2, 1)) == 0
    """)
    got = store.get_tensor_with_parallelism("wp/x", ReadTarget("full"))
    assert same(got, full)
    shard1 = store.get_tensor_with_parallelism("wp/x", ReadTarget("shard", TensorParallelism([tp(1, 2, 1)])))
    assert same(shard1, full[:, 2:])
    as_stored = store.get_tensor_with_parallelism("wp/x", ReadTarget("as_stored", TensorParallelism([tp(0, 2)])))
    assert same(as_stored, full[:, :2])
    assert store.get_tensor_with_parallelism("wp/x") is None  # nothing at the plain key
    # batch forms
    assert store.batch_put_tensor_with_parallelism(
        ["wp/b0", "wp/b1"], [full, full], writer_partitions=[(0, 3, 0), (2, 3, 0)]) == [0, 0]
    got = store.batch_get_tensor_with_parallelism(
        ["wp/b0", "wp/b1"], [ReadTarget("shard", TensorParallelism([tp(0, 3)])),
                             ReadTarget("shard", TensorParallelism([tp(2, 3)]))])
    assert same(got[0], full[:1]) and same(got[1], full[2:])
    assert store.get_tensor_with_parallelism("wp/b0", ReadTarget("full")) is None  # rank 1 missing


def test_multi_axis_layouts(master, store):
    full = torch.arange(2 * 6, dtype=torch.int64).reshape(2, 6)
    # DP+TP: each writer passes the full tensor; its TP shard is stored
    for dp in range(2):
        for r in range(3):
            par = TensorParallelism([ParallelAxis("dp", dp, 2), tp(r, 3, 1)])
            assert store.put_tensor_with_parallelism("ma/x", full + 100 * dp, par) == 0
    assert same(store.get_tensor("ma/x_dp_1_tp_2"), (full + 100)[:, 4:])
    peer(master, """
        import torch
        from mooncake.store import ParallelAxis, TensorParallelism, ReadTarget
        full = torch.arange(2 * 6, dtype=torch.int64).reshape(2, 6)
        for dp in range(2):
            par = TensorParallelism([ParallelAxis("dp", dp, 2), ParallelAxis("tp", 0, 3)])
            assert same(s.get_tensor_with_parallelism("ma/x", ReadTarget("full", par)), full + 100 * dp)
        # EP with an expert id and PP: stored as given
        ep = TensorParallelism([ParallelAxis("ep", 1, 4, expert_id=9)])
        assert s.put_tensor_with_parallelism("ma/e", full[0], ep) == 0
        assert same(s.get_tensor("ma/e_ep_1_e9"), full[0])
        pp = TensorParallelism([ParallelAxis("pp", 0, 2, stage_id=0), ParallelAxis("tp", 1, 2)])
        assert s.put_tensor_with_parallelism("ma/p", full, pp) == 0
        assert same(s.get_tensor_with_parallelism("ma/p", ReadTarget("as_stored", pp)), full[1:])
    """)
    # a shard read of a full object cuts the shard
    assert store.put_tensor_with_parallelism("ma/full", full) == 0
    got = store.get_tensor_with_parallelism("ma/full", ReadTarget("shard", TensorParallelism([tp(1, 2, 1)])))
    assert same(got, full[:, 3:])
    assert same(store.get_tensor_with_parallelism("ma/full", ReadTarget("full")), full)
    # single-axis TP: the tensor given is the shard itself
    assert store.put_tensor_with_parallelism("ma/s", full, TensorParallelism([tp(1, 2)])) == 0
    assert same(store.get_tensor("ma/s_tp_1"), full)


def test_parallelism_zero_copy_forms(store):
    full = cases(8)["i64"]  # 2x2x2
    buf = Registered(store, 1 << 16)
    try:
        n = serialize_tensor_into(full, buf.ptr, 8192)
        assert store.put_tensor_with_parallelism_from("pz/x", buf.ptr, n) == 0
        assert store.batch_put_tensor_with_parallelism_from(
            ["pz/y", "pz/y"], [buf.ptr, buf.ptr], [n, n], writer_partitions=[(0, 2, 2), (1, 2, 2)]) == [0, 0]
        got = store.get_tensor_with_parallelism_into("pz/y", buf.ptr + 8192, 8192, ReadTarget("full"))
        assert same(got, full) and buf.ptr + 8192 <= got.data_ptr() < buf.ptr + 16384
        outs = store.batch_get_tensor_with_parallelism_into(
            ["pz/x", "pz/y"], [buf.ptr + 16384, buf.ptr + 24576], [8192, 8192],
            [None, ReadTarget("shard", TensorParallelism([tp(1, 2, 2)]))])
        assert same(outs[0], full) and same(outs[1], full[:, :, 1:])
    finally:
        buf.close()


def test_parallelism_bad_arguments(store):
    x = torch.ones(4, 4)
    with pytest.raises(ValueError, match="not both"):
        store.put_tensor_with_parallelism("pb/x", x, TensorParallelism([tp(0, 2)]), writer_partition=(0, 2, 0))
    with pytest.raises(ValueError, match="kind must be one of"):
        store.put_tensor_with_parallelism("pb/x", x, TensorParallelism([ParallelAxis("xp", 0, 2)]))
    with pytest.raises(ValueError, match="appears twice"):
        store.put_tensor_with_parallelism("pb/x", x, TensorParallelism([tp(0, 2), tp(1, 2)]))
    with pytest.raises(ValueError, match="non-empty"):
        store.put_tensor_with_parallelism("pb/x", x, TensorParallelism([]))
    with pytest.raises(ValueError, match="writer_partition must be"):
        store.put_tensor_with_parallelism("pb/x", x, writer_partition=(0, 2))
    with pytest.raises(ValueError, match=r"rank 3 is outside \[0, 2\)"):
        store.put_tensor_with_parallelism("pb/x", x, writer_partition=(3, 2, 0))
    with pytest.raises(ValueError, match="mode must be one of"):
        store.get_tensor_with_parallelism("pb/x", ReadTarget("everything"))
    with pytest.raises(ValueError, match="needs parallelism"):
        store.get_tensor_with_parallelism("pb/x", ReadTarget("shard"))
    with pytest.raises(ValueError, match="parallelisms=1"):
        store.batch_put_tensor_with_parallelism(["pb/a", "pb/b"], [x, x], [None])
    assert store.batch_is_exist(["pb/x", "pb/x_tp_0", "pb/x_tp_3", "pb/a", "pb/b"]) == [0] * 5


# ---- upsert -----------------------------------------------------------------------------------

def test_upsert_family_replaces_values(master, store):
    t = cases(9)
    assert store.upsert_tensor("u/a", t["f32"]) == 0
    assert store.upsert_tensor("u/a", t["bf16"]) == 0
    assert same(store.get_tensor("u/a"), t["bf16"])
    assert store.upsert_pub_tensor("u/b", t["i8"], ReplicateConfig(with_soft_pin=True)) == 0
    assert store.batch_upsert_tensor(["u/a", "u/c"], [t["bool"], t["i64"]]) == [0, 0]
    assert store.batch_upsert_pub_tensor(["u/b"], [t["f16_T"]], ReplicateConfig()) == [0]
    buf = Registered(store, 1 << 16)
    try:
        n = serialize_tensor_into(t["f32_T"], buf.ptr, 8192)
        assert store.upsert_tensor_from("u/c", buf.ptr, n) == 0
        n2 = serialize_tensor_into(t["i8_step"], buf.ptr + 8192, 8192)
        assert store.batch_upsert_tensor_from(["u/d", "u/a"], [buf.ptr + 8192, buf.ptr], [n2, n]) == [0, 0]
        assert store.upsert_tensor_with_tp_from("u/tpz", buf.ptr, n, tp_size=2, split_dim=1) == 0
        assert store.batch_upsert_tensor_with_tp_from(["u/tpz"], [buf.ptr + 8192], [n2], tp_size=2) == [0]
    finally:
        buf.close()
    assert store.upsert_tensor_with_tp("u/tp", t["f32"], tp_size=2) == 0
    assert store.upsert_tensor_with_tp("u/tp", t["f32"] * 2, tp_size=2) == 0
    assert store.batch_upsert_tensor_with_tp(["u/tp2"], [t["i64"]], tp_size=2) == [0]
    assert store.upsert_pub_tensor_with_tp("u/tp3", t["f16"], ReplicateConfig(), tp_size=2) == 0
    assert store.batch_upsert_pub_tensor_with_tp(["u/tp3"], [t["f16"] + 1], None, tp_size=2) == [0]
    par = TensorParallelism([tp(0, 2, 1)])
    assert store.upsert_tensor_with_parallelism("u/par", t["f32"], par) == 0
    assert store.batch_upsert_tensor_with_parallelism(["u/par"], [t["f32"] + 1], [par]) == [0]
    peer(master, """
        import torch
        from mooncake.store import ReadTarget
        t = cases(9)
        assert same(s.get_tensor("u/a"), t["f32_T"])
        assert same(s.get_tensor("u/b"), t["f16_T"])
        assert same(s.get_tensor("u/c"), t["f32_T"])
        assert same(s.get_tensor("u/d"), t["i8_step"])
        assert same(s.get_tensor_with_parallelism("u/tp", ReadTarget("full")), t["f32"] * 2)
        assert same(s.get_tensor_with_parallelism("u/tpz", ReadTarget("full")), t["i8_step"])
        assert same(s.get_tensor_with_parallelism("u/tp3", ReadTarget("full")), t["f16"] + 1)
        assert same(torch.cat([s.get_tensor_with_tp("u/tp2", r, 2) for r in range(2)]), t["i64"])
        assert same(s.get_tensor("u/par_tp_0"), t["f32"] + 1)
    """)


# ---- safetensors ------------------------------------------------------------------------------

def read_safetensors_by_hand(path):
    raw = open(path, "rb").read()
    (hl,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hl])
    return header, raw[8 + hl:]


def test_safetensors_round_trip(master, store, tmp_path):
    t = cases(10)
    assert store.put_tensor("st/w", t["bf16"]) == 0
    path = str(tmp_path / "w.safetensors")
    assert store.save_tensor_to_safetensor("st/w", path) == 0
    header, data = read_safetensors_by_hand(path)
    assert header["st/w"] == {"dtype": "BF16", "shape": [17], "data_offsets": [0, 34]}
    assert header["__metadata__"] == {"format": "pt"}
    assert data == raw(t["bf16"])
    assert store.remove("st/w", force=True) == 0
    got = store.load_tensor_from_safetensor("st/w", path)
    assert same(got, t["bf16"]) and same(store.get_tensor("st/w"), t["bf16"])
    # a dict of tensors: one safetensors entry each
    d = {"a": t["i8_step"], "b": t["bool"], "c": t["f32_0d"], "e": t["i64_empty"]}
    assert store.put_tensor("st/d", d) == 0
    p2 = str(tmp_path / "d.safetensors")
    assert store.save_tensor_to_safetensor("st/d", p2) == 0
    header, data = read_safetensors_by_hand(p2)
    assert [header[k]["dtype"] for k in "abce"] == ["I8", "BOOL", "F32", "I64"]
    assert header["c"]["shape"] == [] and header["e"]["shape"] == [2, 0, 3]
    assert data == b"".join(raw(d[k]) for k in "abce")
    peer(master, f"""
        t = cases(10)
        got = s.load_tensor_from_safetensor("st/d2", {p2!r})
        for k, v in {{"a": t["i8_step"], "b": t["bool"], "c": t["f32_0d"], "e": t["i64_empty"]}}.items():
            assert same(got[k], v) and same(s.get_tensor("st/d2")[k], v)
        # the path-only form takes the key from the file's single tensor name
        assert s.remove("st/w", force=True) == 0
        assert same(s.load_tensor_from_safetensor({path!r}), t["bf16"])
        assert same(s.get_tensor("st/w"), t["bf16"])
    """)
    # a missing key writes no file; a missing file stores nothing
    p3 = str(tmp_path / "none.safetensors")
    assert store.save_tensor_to_safetensor("st/missing", p3) == ErrorCode.OBJECT_NOT_FOUND
    assert not os.path.exists(p3)
    assert store.load_tensor_from_safetensor("st/none", p3) is None and store.is_exist("st/none") == 0
    with open(p3, "wb") as f:
        f.write(b"\xff" * 7)
    with pytest.raises(ValueError, match="not a safetensors file"):
        store.load_tensor_from_safetensor("st/none", p3)
    assert store.is_exist("st/none") == 0


def test_safetensors_default_file_is_the_key(store, tmp_path, monkeypatch):
    """Without a file name the file is named after the key, in the working directory (upstream's
    default), and load finds it there by the key alone."""
    monkeypatch.chdir(tmp_path)
    t = cases(12)
    assert store.put_tensor("st_default", t["f32"]) == 0
    assert store.save_tensor_to_safetensor("st_default") == 0
    assert sorted(os.listdir(tmp_path)) == ["st_default"]
    header, data = read_safetensors_by_hand(str(tmp_path / "st_default"))
    assert header["st_default"]["dtype"] == "F32" and data == raw(t["f32"])
    assert store.remove("st_default", force=True) == 0
    assert same(store.load_tensor_from_safetensor("st_default"), t["f32"])
    assert same(store.get_tensor("st_default"), t["f32"])
    assert store.load_tensor_from_safetensor("st_absent") is None and store.is_exist("st_absent") == 0


def test_safetensors_files_read_by_the_safetensors_package(store, tmp_path):
    st = pytest.importorskip("safetensors.torch")
    t = cases(11)
    d = {"w": t["bf16"], "m": t["bool"], "i": t["i64"], "h": t["f16_T"].contiguous()}
    assert store.put_tensor("stp/d", d) == 0
    path = str(tmp_path / "d.safetensors")
    assert store.save_tensor_to_safetensor("stp/d", path) == 0
    loaded = st.load_file(path)
    assert sorted(loaded) == sorted(d) and all(same(loaded[k], d[k]) for k in d)
    p2 = str(tmp_path / "theirs.safetensors")
    st.save_file(d, p2)
    got = store.load_tensor_from_safetensor("stp/theirs", p2)
    assert all(same(got[k], d[k]) for k in d)


# ---- devices --------------------------------------------------------------------------------

def test_cuda_calls_refuse_other_devices(store):
    assert store.put_tensor("dev/x", torch.ones(3)) == 0
    with pytest.raises(ValueError, match="device meta"):
        store.get_tensor_into_cuda("dev/x", torch.empty(3, device="meta"))
