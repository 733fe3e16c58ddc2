"""The tensor family with CUDA tensors (staged through host memory), against a real
mooncake_master and a second client process. Skipped where torch has no CUDA device."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

from test_store import run_peer  # noqa: E402
from store_fixtures import master, store  # noqa: E402,F401  (fixtures)
from mooncake.store import ErrorCode, ParallelAxis, ReadTarget, ReplicateConfig, TensorParallelism  # noqa: E402


def raw(t):
    t = t.detach().cpu().contiguous()
    return bytes(t.reshape(-1).view(torch.uint8).numpy()) if t.numel() else b""


def same(a, b):
    return a.dtype == b.dtype and list(a.shape) == list(b.shape) and raw(a) == raw(b)


def cuda_cases():
    g = torch.Generator(device="cuda").manual_seed(3)
    f = lambda *s: torch.randn(*s, generator=g, device="cuda")  # noqa: E731
    return {
        "f32": f(64, 33),
        "f16_T": f(16, 9).half().t(),
        "bf16": f(1000).to(torch.bfloat16),
        "i8": torch.randint(-128, 127, (7, 7), generator=g, device="cuda", dtype=torch.int8),
        "i64_0d": torch.tensor(-5, device="cuda"),
        "bool": f(5, 5) > 0,
        "empty": torch.empty(0, 4, device="cuda"),
    }


def test_cuda_tensors_put_and_read_back(master, store):
    cases = cuda_cases()
    for k, t in cases.items():
        assert store.put_tensor(f"cu/{k}", t) == 0, k
        got = store.get_tensor(f"cu/{k}")
        assert got.device.type == "cpu" and same(got, t), k
    assert store.pub_tensor("cu/pub", cases["f32"], ReplicateConfig(with_soft_pin=True)) == 0
    assert store.batch_put_tensor(["cu/b1", "cu/b2"], [cases["bf16"], cases["bool"]]) == [0, 0]
    assert store.upsert_tensor("cu/f32", cases["f32"] * 2) == 0
    assert same(store.get_tensor("cu/f32"), cases["f32"] * 2)
    expect = {k: raw(v) for k, v in cases.items()}
    peer = run_peer(master, f"""
        import torch
        expect = {expect!r}
        for k, b in expect.items():
            t = s.get_tensor("cu/" + k) if k != "f32" else None
            if t is not None:
                assert bytes(t.contiguous().reshape(-1).view(torch.uint8).numpy()) == b, k
        print("PEER_OK")
    """)
    assert "PEER_OK" in peer.output


def test_get_tensor_into_cuda(store):
    t = cuda_cases()["f32"]
    assert store.put_tensor("cu/x", t) == 0
    dst = torch.full((64 * 33 + 10,), -1.0, device="cuda")
    n = store.get_tensor_into_cuda("cu/x", dst)
    assert n == t.numel() * 4
    assert same(dst[: t.numel()].view(64, 33), t) and same(dst[t.numel():], torch.full((10,), -1.0))
    dsts = [torch.empty_like(t), torch.empty_like(t)]
    assert store.batch_get_tensor_into_cuda(["cu/missing", "cu/x"], dsts) == [ErrorCode.OBJECT_NOT_FOUND, n]
    assert same(dsts[1], t)
    with pytest.raises(ValueError, match="the destination is torch.float16"):
        store.get_tensor_into_cuda("cu/x", torch.empty(64 * 33, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match="contiguous"):
        store.get_tensor_into_cuda("cu/x", torch.empty(66, 64, device="cuda").t())


def test_cuda_tensor_parallel_and_parallelism(master, store):
    full = cuda_cases()["f32"]  # 64 x 33
    assert store.put_tensor_with_tp("cu/tp", full, tp_size=4, split_dim=1) == 0
    shards = [store.get_tensor_with_tp("cu/tp", r, 4, 1) for r in range(4)]
    assert [s.shape[1] for s in shards] == [9, 8, 8, 8]
    assert same(torch.cat(shards, dim=1), full)
    assert same(store.get_tensor_with_parallelism("cu/tp", ReadTarget("full")), full)
    for r in range(2):
        assert store.put_tensor_with_parallelism("cu/wp", full, writer_partition=(r, 2, 0)) == 0
    assert same(store.get_tensor_with_parallelism("cu/wp", ReadTarget("full")), full)
    par = TensorParallelism([ParallelAxis("dp", 1, 2), ParallelAxis("tp", 1, 2, 1)])
    assert store.put_tensor_with_parallelism("cu/dt", full, par) == 0
    assert same(store.get_tensor("cu/dt_dp_1_tp_1"), full[:, 17:])


def test_cuda_leaves_in_structured_objects(store):
    from mooncake.structured_object_store import MooncakeBundleTransfer, StructuredObjectPayload
    cases = cuda_cases()
    t = MooncakeBundleTransfer(store, key_prefix="cu-struct")
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"w": cases["bf16"], "m": cases["i8"]}))
    res = t.materialize(t.read_spec(ref))
    assert same(res.objects["w"], cases["bf16"]) and same(res.objects["m"], cases["i8"])
