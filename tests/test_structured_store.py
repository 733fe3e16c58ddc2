"""mooncake.structured_object_store against a real mooncake_master, one object written here and
read (fully and partially) by a second client process, and the other way round."""

from __future__ import annotations

import ctypes
import json
import subprocess
import textwrap

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from test_store import run_peer  # noqa: E402
from store_fixtures import master, store  # noqa: E402,F401  (fixtures)
from mooncake.structured_object_store import (  # noqa: E402
    BundleTransferPolicy, MooncakeBundleTransfer, StructuredMemberSlice, StructuredObjectPayload,
    export_dataproto_ref, import_dataproto_ref, raw_destination, tensor_object_buffer)
from mooncake.store_tensor import serialize_tensor_into, tensor_object_size  # noqa: E402


def live_peer(master, code: str):
    """A second client that runs ``code`` and stays up (its segment holds what it wrote) until
    finish() is called; returns (process, its output so far)."""
    tail = '\nprint("PEER_DONE", flush=True)\nsys.stdin.read()\ns.close()\n'
    p = run_peer(master, textwrap.dedent(code) + tail, wait=False, stdin=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = []
    for line in p.stdout:
        if line.startswith("PEER_DONE"):
            return p, "".join(out)
        out.append(line)
    p.wait()
    raise AssertionError("the peer client failed:\n" + "".join(out))


def finish(p):
    p.stdin.close()
    p.wait(60)
    assert p.returncode == 0


def payload():
    g = torch.Generator().manual_seed(5)
    return StructuredObjectPayload(
        metadata={"step": 7, "layout": "rollout"},
        buffers={
            "tokens": np.arange(24, dtype=np.int32).reshape(6, 4),
            "mask": np.ones((6, 4), dtype=np.int8),
            "prompt_ids": b"sample-ids",
            "obs": {"rgb": torch.randn(6, 3, generator=g).to(torch.bfloat16),
                    "depth": [torch.arange(6, dtype=torch.float16), (np.float64(2.5) * np.ones(2),)],
                    "info": {"name": "ep-1", "ok": True, "scores": [1, 2.5, None]}},
            "text": np.array(["a", "bb", None, "dddd"], dtype=object),
            "note": "hello",
            "empty": np.empty((0, 3), dtype=np.float32),
        })


def test_full_and_partial_reads_across_processes(master, store):
    transfer = MooncakeBundleTransfer(store, key_prefix="demo/structured")
    ref = transfer.put_structured_object(payload())
    p = payload()
    res = transfer.materialize(transfer.read_spec(ref))
    assert res.metadata == {"step": 7, "layout": "rollout"}
    o = res.objects
    assert o["tokens"].dtype == np.int32 and o["tokens"].tobytes() == p.buffers["tokens"].tobytes()
    assert o["mask"].tobytes() == p.buffers["mask"].tobytes() and o["prompt_ids"] == b"sample-ids"
    assert torch.equal(o["obs"]["rgb"], p.buffers["obs"]["rgb"]) and o["obs"]["rgb"].dtype == torch.bfloat16
    assert torch.equal(o["obs"]["depth"][0], p.buffers["obs"]["depth"][0])
    assert isinstance(o["obs"]["depth"][1], tuple) and (o["obs"]["depth"][1][0] == 2.5).all()
    assert o["obs"]["info"] == {"name": "ep-1", "ok": True, "scores": [1, 2.5, None]}
    assert list(o["text"]) == ["a", "bb", None, "dddd"] and o["text"].dtype == object
    assert o["note"] == "hello" and o["empty"].shape == (0, 3)
    # each leaf has its own key and codec
    codecs = {k: v["codec"] for k, v in ref.manifest["leaves"].items()}
    assert codecs == {"tokens": "ndarray", "mask": "ndarray", "prompt_ids": "bytes", "obs/rgb": "tensor",
                      "obs/depth/0": "tensor", "obs/depth/1/0": "ndarray", "obs/info": "json",
                      "text": "object_array", "note": "str", "empty": "ndarray"}
    peer, output = live_peer(master, f"""
        import numpy as np, torch
        from mooncake.structured_object_store import MooncakeBundleTransfer, StructuredObjectPayload
        t = MooncakeBundleTransfer(s, key_prefix="demo/structured")
        spec = t.read_spec({ref.object_id!r}).select_members(["tokens", "obs/depth"]).slice_member(
            "tokens", axis=0, start=2, end=5)
        r = t.materialize(spec)
        assert sorted(r.objects) == ["obs", "tokens"] and list(r.objects["obs"]) == ["depth"]
        assert r.objects["tokens"].tolist() == np.arange(24, dtype=np.int32).reshape(6, 4)[2:5].tolist()
        assert torch.equal(r.objects["obs"]["depth"][0], torch.arange(6, dtype=torch.float16))
        cols = t.materialize(t.read_spec({ref.object_id!r}).select_members(["obs/rgb"]).slice_member(
            "obs/rgb", axis=1, start=1))
        print("COLS", cols.objects["obs"]["rgb"].float().tolist())
        dst = np.empty((3, 4), dtype=np.int32)
        r = t.materialize_into(t.read_spec({ref.object_id!r}).select_members(["tokens"]).slice_member(
            "tokens", 0, 2, 5), {{"tokens": dst}})
        assert r.objects["tokens"] is dst and dst.tolist() == np.arange(24).reshape(6, 4)[2:5].tolist()
        mine = t.put_structured_object(StructuredObjectPayload({{"w": torch.full((2, 2), 3, dtype=torch.int64)}},
                                                                {{"by": "peer"}}), object_id="from-peer")
    """)
    try:
        cols = [line for line in output.splitlines() if line.startswith("COLS")][0]
        assert json.loads(cols[5:]) == p.buffers["obs"]["rgb"][:, 1:].float().tolist()
        res = transfer.materialize(transfer.read_spec("from-peer"))
        assert res.metadata == {"by": "peer"} and torch.equal(res.objects["w"], torch.full((2, 2), 3))
    finally:
        finish(peer)


def test_copy_modes_and_tensor_object_buffers(store):
    transfer = MooncakeBundleTransfer(store, key_prefix="modes")
    p = payload()
    ref = transfer.put_structured_object(p, policy=BundleTransferPolicy(copy_mode="copy"))
    assert transfer.materialize(transfer.read_spec(ref)).objects["tokens"].tobytes() == p.buffers["tokens"].tobytes()
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    buf = (ctypes.c_char * 4096)()
    n = serialize_tensor_into(t, ctypes.addressof(buf), 4096)
    assert n == tensor_object_size(t)
    tob = tensor_object_buffer(ctypes.addressof(buf), n, buf, batch_size=3)
    ref = transfer.put_structured_object(StructuredObjectPayload({"h": tob}),
                                         policy=BundleTransferPolicy(copy_mode="zero_copy"))
    assert ref.manifest["leaves"]["h"]["codec"] == "tensor_object"
    assert torch.equal(transfer.materialize(transfer.read_spec(ref)).objects["h"], t)
    out = (ctypes.c_char * 4096)()
    dest = tensor_object_buffer(ctypes.addressof(out), 4096, out)
    got = transfer.materialize_into(transfer.read_spec(ref), {"h": dest}).objects["h"]
    assert torch.equal(got, t) and ctypes.addressof(out) <= got.data_ptr() < ctypes.addressof(out) + 4096
    with pytest.raises(ValueError, match="zero_copy.*tensor_object_buffer"):
        transfer.put_structured_object(StructuredObjectPayload({"x": b"bytes"}),
                                       policy=BundleTransferPolicy(copy_mode="zero_copy"))
    with pytest.raises(ValueError, match="copy_mode must be"):
        BundleTransferPolicy(copy_mode="fast")
    rd = (ctypes.c_char * 64)()
    ref = transfer.put_structured_object(StructuredObjectPayload({"b": b"raw-bytes"}))
    dst = raw_destination(ctypes.addressof(rd), 64, rd)
    got = transfer.materialize_into(transfer.read_spec(ref), {"b": dst}).objects["b"]
    assert got is dst and dst.nbytes == 9 and rd.raw[:9] == b"raw-bytes"


def test_bad_input_leaves_nothing(master, store):
    transfer = MooncakeBundleTransfer(store, key_prefix="bad")

    def keys():
        return [k for k in master.http("/get_all_keys").splitlines() if k.startswith("bad/")]
    with pytest.raises(TypeError, match="member 'obs/x': object has no codec"):
        transfer.put_structured_object(StructuredObjectPayload({"a": np.ones(3), "obs": {"x": object(), "t": b"1"}}))
    with pytest.raises(ValueError, match="non-empty dict"):
        transfer.put_structured_object(StructuredObjectPayload({}))
    with pytest.raises(ValueError, match="without '/'"):
        transfer.put_structured_object(StructuredObjectPayload({"a/b": b"x"}))
    with pytest.raises(TypeError, match="metadata must be JSON-like"):
        transfer.put_structured_object(StructuredObjectPayload({"a": b"x"}, {"bad": object()}))
    with pytest.raises(TypeError, match="object array whose values are not JSON-like"):
        transfer.put_structured_object(StructuredObjectPayload({"o": np.array([object()], dtype=object)}))
    assert keys() == []
    # a write that fails in the store (the value cannot be placed) removes the leaves it wrote
    big = np.zeros(200 << 20, dtype=np.uint8)  # more than the 64 MiB segment
    with pytest.raises(RuntimeError, match="failed with error code"):
        transfer.put_structured_object(StructuredObjectPayload({"small": b"x" * 100, "big": big}), object_id="o1")
    with pytest.raises(RuntimeError, match="failed with error code"):
        transfer.put_structured_object(StructuredObjectPayload({"small": b"x" * 100, "big": big}), object_id="o2",
                                       policy=BundleTransferPolicy(copy_mode="copy"))
    assert keys() == []
    ref = transfer.put_structured_object(StructuredObjectPayload({"t": np.zeros((4, 2)), "b": b"x"}))
    spec = transfer.read_spec(ref)
    with pytest.raises(KeyError, match="no member 'nope'"):
        spec.select_members(["nope"])
    with pytest.raises(ValueError, match="only ndarray and tensor members can be sliced"):
        spec.slice_member("b", 0, 0, 1)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        spec.slice_member("t", 2, 0, 1)
    with pytest.raises(ValueError, match=r"reads as float64\[4, 2\], the destination is float32\[4, 2\]"):
        transfer.materialize_into(spec, {"t": np.empty((4, 2), dtype=np.float32)})
    with pytest.raises(KeyError, match="no structured object"):
        transfer.read_spec("does-not-exist")
    assert transfer.remove_structured_object(ref) == 3 and keys() == []


def test_bundles(master, store):
    transfer = MooncakeBundleTransfer(store, key_prefix="bun")
    ref = transfer.put_bundle({"a": b"A" * 1000, "b": bytearray(b"bee"), "e": b""}, {"n": 3}, bundle_id="b1")
    manifest, got = transfer.get_bundle("b1")
    assert manifest == {"n": 3} and got == {"a": b"A" * 1000, "b": b"bee", "e": b""}
    assert transfer.get_bundle(ref, ["b"])[1] == {"b": b"bee"}
    peer = run_peer(master, """
        from mooncake.structured_object_store import MooncakeBundleTransfer
        t = MooncakeBundleTransfer(s, key_prefix="bun")
        m, got = t.get_bundle("b1", ["a"])
        print("PEER", m, len(got["a"]), got["a"][:3])
    """)
    assert "PEER {'n': 3} 1000 b'AAA'" in peer.output
    with pytest.raises(TypeError, match="payload 'x' is a int"):
        transfer.put_bundle({"x": 1})
    with pytest.raises(KeyError, match="no payload 'z'"):
        transfer.get_bundle("b1", ["z"])
    assert transfer.remove_bundle("b1") == 3  # manifest, a, b (the empty e has no key)
    assert transfer.remove_bundle("b1") == 0
    with pytest.raises(KeyError):
        transfer.get_bundle("b1")


class FakeDataProto:
    def __init__(self, batch=None, non_tensor_batch=None, meta_info=None):
        self.batch, self.non_tensor_batch, self.meta_info = batch, non_tensor_batch, meta_info

    @classmethod
    def from_dict(cls, tensors, non_tensors, meta_info=None):
        return cls(tensors, non_tensors, meta_info)


def test_dataproto_stages_rows_and_handles(master, store):
    transfer = MooncakeBundleTransfer(store, key_prefix="rl")
    ids = torch.arange(8 * 5, dtype=torch.int64).reshape(8, 5)
    data = FakeDataProto({"input_ids": ids, "attn": torch.ones(8, 5, dtype=torch.bool)},
                         {"text": np.array([f"s{i}" for i in range(8)], dtype=object)}, {"step": 1, "temp": 0.7})
    ref = transfer.put_dataproto(data, namespace="rollout", partition="step-1", stage="rollout")
    ref = transfer.append_dataproto_fields(ref, {"old_log_probs": torch.linspace(0, 1, 8)}, stage="old_log_prob")
    with pytest.raises(ValueError, match="already stored"):
        transfer.append_dataproto_fields(ref, {"input_ids": ids}, stage="again")
    handle = export_dataproto_ref(ref)
    json.dumps(handle)  # JSON-safe
    peer = run_peer(master, f"""
        import json, torch
        from mooncake.structured_object_store import MooncakeBundleTransfer, import_dataproto_ref
        t = MooncakeBundleTransfer(s, key_prefix="rl")
        ref = import_dataproto_ref(json.loads({json.dumps(json.dumps(handle))}))
        sub = t.get_dataproto(ref, fields=["input_ids", "old_log_probs", "text"], meta_info_keys=["step"],
                              rows=slice(2, 5))
        assert sub["batch"]["input_ids"].tolist() == torch.arange(40).reshape(8, 5)[2:5].tolist()
        assert sub["batch"]["old_log_probs"].tolist() == torch.linspace(0, 1, 8)[2:5].tolist()
        assert list(sub["non_tensor_batch"]["text"]) == ["s2", "s3", "s4"] and sub["meta_info"] == {{"step": 1}}
        g = t.get_dataproto(ref, batch_fields=["input_ids"], rows=[7, 3, 0])
        assert g["batch"]["input_ids"].tolist() == torch.arange(40).reshape(8, 5)[[7, 3, 0]].tolist()
        print("VIEW", json.dumps(t.dataproto_manifest_view(ref)["input_ids"]))
    """)
    view = json.loads([line for line in peer.output.splitlines() if line.startswith("VIEW")][0][5:])
    assert view == {"stage": "rollout", "section": "batch", "codec": "tensor", "dtype": "int64", "shape": [8, 5]}
    dst = torch.empty(3, 5, dtype=torch.int64)
    obj = transfer.get_dataproto(handle, batch_fields=["input_ids"], rows=StructuredMemberSlice(0, 5, 8),
                                 destinations={"input_ids": dst}, data_cls=FakeDataProto)
    assert isinstance(obj, FakeDataProto) and obj.batch["input_ids"] is dst and torch.equal(dst, ids[5:])
    assert obj.meta_info == {"step": 1, "temp": 0.7}
    with pytest.raises(ValueError, match="'text' is a non_tensor_batch field, not batch"):
        transfer.get_dataproto(ref, batch_fields=["text"])
    # overwrite replaces a whole stage and removes the old one
    before = set(master.http("/get_all_keys").splitlines())
    ref2 = transfer.append_dataproto_fields(ref, {"old_log_probs": torch.zeros(8)}, stage="old_log_prob2",
                                            overwrite=True)
    assert torch.equal(transfer.get_dataproto(ref2, fields=["old_log_probs"])["batch"]["old_log_probs"], torch.zeros(8))
    after = set(master.http("/get_all_keys").splitlines())
    assert not any(k.startswith(ref.stage_refs["old_log_prob"].manifest_key.rsplit("/", 1)[0]) for k in after)
    assert len(after - before) == 2
    assert transfer.cleanup_dataproto(export_dataproto_ref(ref2)) == (1 + 3) + (1 + 1)  # manifests + leaves
    assert [k for k in master.http("/get_all_keys").splitlines() if k.startswith("rl/")] == []
    with pytest.raises(ValueError, match="different batch sizes"):
        transfer.put_dataproto({"a": torch.zeros(3), "b": torch.zeros(4)})
    assert import_dataproto_ref(handle).namespace == "rollout"


class RangedStore:
    """The real store plus a get_into_ranges served from get(), to exercise the ranged path of
    partial reads (it counts the bytes it was asked for)."""

    def __init__(self, store):
        self._s, self.asked = store, []

    def __getattr__(self, name):
        return getattr(self._s, name)

    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst, all_src, all_sizes):
        out = []
        for ptr, keys, dsts, srcs, sizes in zip(buffer_ptrs, all_keys, all_dst, all_src, all_sizes):
            per_key = []
            for k, d, so, sz in zip(keys, dsts, srcs, sizes):
                v = self._s.get(k)
                res = []
                for dd, ss, nn in zip(d, so, sz):
                    self.asked.append(nn)
                    ctypes.memmove(ptr + dd, v[ss:ss + nn], nn)
                    res.append(nn)
                per_key.append(res)
            out.append(per_key)
        return out


def test_axis0_slices_read_only_their_range(store):
    ranged = RangedStore(store)
    transfer = MooncakeBundleTransfer(ranged, key_prefix="ranged")
    a = np.arange(100 * 7, dtype=np.int64).reshape(100, 7)
    t = torch.arange(50 * 3, dtype=torch.float16).reshape(50, 3)
    ref = transfer.put_structured_object(StructuredObjectPayload({"a": a, "t": t}))
    spec = transfer.read_spec(ref).slice_member("a", 0, 10, 13).slice_member("t", 0, -4)
    res = transfer.materialize(spec)
    assert res.objects["a"].tolist() == a[10:13].tolist() and torch.equal(res.objects["t"], t[-4:])
    assert ranged.asked == [3 * 7 * 8, 4 * 3 * 2]
    dst = np.empty((3, 7), dtype=np.int64)
    assert transfer.materialize_into(spec.select_members(["a"]), {"a": dst}).objects["a"] is dst
    assert dst.tolist() == a[10:13].tolist()
