"""mooncake.structured_object_store (upstream's API) against a real mooncake_master: structured
objects, bundles and DataProto batches written by one client and read by another process, the
keys they leave in the master, and the failure paths that must leave none."""

from __future__ import annotations

import ctypes
import gc
import json

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from test_store import run_peer  # noqa: E402
from store_fixtures import master, store  # noqa: E402,F401  (fixtures)
from mooncake.store import ReplicateConfig  # noqa: E402
from mooncake.structured_object_store import (  # noqa: E402
    BundleTransferPolicy, FieldSchema, MooncakeBundleTransfer, RemoteBundleRef, StructuredObjectPayload,
    export_ref, import_ref, is_dataproto_ref_handle, raw_destination, tensor_object_buffer)


def keys(master, prefix):
    return sorted(k for k in master.http("/get_all_keys").splitlines() if k.startswith(prefix + "/"))


class DataProto:
    def __init__(self, batch=None, non_tensor_batch=None, meta_info=None):
        self.batch, self.non_tensor_batch, self.meta_info = batch or {}, non_tensor_batch or {}, meta_info or {}


def test_structured_object_across_processes(master, store):
    t = MooncakeBundleTransfer(store, key_prefix="so")
    tokens = np.arange(96, dtype=np.int16).reshape(12, 8)
    logits = torch.arange(24, dtype=torch.float32).reshape(6, 4).to(torch.bfloat16)
    ref = t.put_structured_object(StructuredObjectPayload(metadata={"step": 3}, buffers={
        "tokens": tokens, "logits": logits, "raw": b"abc"}), chunk_bytes=40)
    oid = ref.manifest["object_id"]
    base = f"so/{oid}"
    # tokens: 192 bytes in 40-byte chunks (so is the JSON meta); logits: one put_tensor key
    meta_chunks = [c["key"] for c in ref.manifest["meta"]["chunks"]]
    assert len(meta_chunks) > 1 and meta_chunks[0] == f"{base}/meta/chunk/0"
    assert keys(master, "so") == sorted([f"{base}/manifest", f"{base}/buffer/raw", f"{base}/buffer/logits"] +
                                        [f"{base}/buffer/tokens/chunk/{i}" for i in range(5)] + meta_chunks)
    assert ref.manifest["buffers"]["logits"]["kind"] == "tensor"
    res = t.materialize(t.read_spec(ref))
    assert res.metadata["step"] == 3 and res.metadata["layout"] == "structured"
    assert res.metadata["__mooncake_structured_fields__"]["tokens"] == {"encoding": "ndarray", "dtype": "<i2",
                                                                         "shape": [12, 8]}
    assert res.objects["tokens"].tolist() == tokens.tolist() and bytes(res.objects["raw"]) == b"abc"
    assert torch.equal(res.objects["logits"], logits)
    # pool-backed arrays (the transfer made a BufferPool over the store) go back with release_result
    assert hasattr(res.objects["tokens"], "_mooncake_pool_owner")
    pool = t._transport._buffer_pool
    assert pool.active_leases == 2
    MooncakeBundleTransfer.release_result(res.objects)
    MooncakeBundleTransfer.release_result(res.objects)
    assert pool.active_leases == 0
    peer = run_peer(master, f"""
        import numpy as np
        from mooncake.structured_object_store import MooncakeBundleTransfer
        t = MooncakeBundleTransfer(s, key_prefix="so")
        spec = t.read_spec({{"manifest_key": {ref.manifest_key!r}}}).select_members(["tokens", "logits"])
        r = t.materialize(spec.slice_member("tokens", 0, 3, 9).slice_member("logits", 0, 1, 3))
        print("ROWS", r.objects["tokens"].tolist(), r.objects["logits"].float().tolist())
        dst = np.empty((4, 8), dtype=np.int16)
        got = t.materialize_into(spec.select_members(["tokens"]).slice_member("tokens", 0, 1, 12, 3),
                                 {{"tokens": dst}})
        print("STEP", got.objects["tokens"] is dst, dst.tolist())
    """)
    rows = json.loads("[" + [x for x in peer.output.splitlines() if x.startswith("ROWS")][0][5:].replace(
        "] [", "], [") + "]")
    assert rows == [tokens[3:9].tolist(), logits[1:3].float().tolist()]
    step = [x for x in peer.output.splitlines() if x.startswith("STEP")][0]
    assert step == f"STEP True {tokens[1:12:3].tolist()}"
    t.remove_bundle(ref)
    assert keys(master, "so") == []
    # the pool the transfer made is closed (its memory unregistered) when the transfer goes
    del t, res
    gc.collect()
    with pytest.raises(RuntimeError, match="closed"):
        pool.acquire(1)


def test_objects_tensor_buffers_and_destinations(master, store):
    t = MooncakeBundleTransfer(store, key_prefix="obj")
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    ten = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    assert np.array_equal(t.get_object(t.put_object(arr)), arr)
    got = t.get_object(t.put_object({"a": arr, "t": ten, "s": torch.tensor(1.5)}))
    assert np.array_equal(got["a"], arr) and torch.equal(got["t"], ten) and torch.equal(got["s"], torch.tensor(1.5))
    # a serialized tensor object in caller memory, written with put_tensor_from (zero_copy)
    from mooncake.store import _deserialize_tensor, _serialize_tensor
    header, ptr, n, owner = _serialize_tensor(ten)
    src = ctypes.create_string_buffer(header + ctypes.string_at(ptr, n), len(header) + n)
    assert store.register_buffer(ctypes.addressof(src), len(src)) == 0
    ref = t.put_structured_object(StructuredObjectPayload(buffers={
        "w": tensor_object_buffer(ctypes.addressof(src), len(src), src, batch_size=3)}),
        policy=BundleTransferPolicy(copy_mode="zero_copy"))
    assert torch.equal(t.materialize(t.read_spec(ref)).objects["w"], ten)
    dst = ctypes.create_string_buffer(len(src))
    out = t.materialize_into(t.read_spec(ref), {"w": tensor_object_buffer(ctypes.addressof(dst), len(dst), dst)})
    assert out.objects["w"].ptr == ctypes.addressof(dst) and torch.equal(_deserialize_tensor(dst.raw), ten)
    store.unregister_buffer(ctypes.addressof(src))
    # rows of a tensor member into a raw destination: a tensor object of just those rows
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"t": ten}))
    dst = ctypes.create_string_buffer(4096)
    t.materialize_into(t.read_spec(ref).slice_member("t", 0, 1, 3), {"t": raw_destination(ctypes.addressof(dst), 4096)})
    assert torch.equal(_deserialize_tensor(dst.raw), ten[1:3])
    with pytest.raises(ValueError, match="BufferPool tensor-object buffer"):
        t.put_structured_object(StructuredObjectPayload(buffers={"t": ten}),
                                policy=BundleTransferPolicy(copy_mode="zero_copy"))
    with pytest.raises(RuntimeError, match="zero-copy put"):
        t.put_structured_object(StructuredObjectPayload(buffers={"b": b"x"}),
                                policy=BundleTransferPolicy(copy_mode="zero_copy"))


def test_bad_input_and_failed_writes_leave_no_keys(master, store):
    t = MooncakeBundleTransfer(store, key_prefix="bad")
    with pytest.raises(TypeError, match="needs buffers"):
        StructuredObjectPayload(metadata={})
    with pytest.raises(TypeError, match="JSON-serializable"):
        t.put_structured_object(StructuredObjectPayload(metadata={"x": object()}, buffers={"a": b"1"}))
    with pytest.raises(ValueError, match="reserved"):
        t.put_structured_object(StructuredObjectPayload(metadata={"__mooncake_structured_fields__": {}},
                                                        buffers={"a": b"1"}))
    with pytest.raises(ValueError, match="invalid bundle buffer name"):
        t.put_bundle(b"m", {"a/b": b"1"})
    with pytest.raises(ValueError, match="chunk_bytes"):
        t.put_bundle(b"m", {"a": b"1"}, chunk_bytes=0)
    with pytest.raises(ValueError, match="key_prefix"):
        MooncakeBundleTransfer(store, key_prefix="/")
    # the store refuses the big chunk (larger than the 64 MiB segment): every key written is removed
    big = np.zeros(80 << 20, dtype=np.uint8)
    for mode in ("auto", "copy"):
        with pytest.raises(RuntimeError, match="failed for bad/"):
            t.put_structured_object(StructuredObjectPayload(buffers={"small": b"x" * 100, "big": big}),
                                    policy=BundleTransferPolicy(copy_mode=mode), chunk_bytes=80 << 20)
    assert keys(master, "bad") == []
    ref = t.put_structured_object(StructuredObjectPayload(buffers={"w": np.zeros((4, 2)), "b": b"xy"}))
    spec = t.read_spec(ref)
    with pytest.raises(ValueError, match="axis=0"):
        t.materialize(spec.slice_member("w", 1, 0, 1))
    with pytest.raises(ValueError, match="does not support slicing"):
        t.materialize(spec.slice_member("b", 0, 0, 1))
    with pytest.raises(ValueError, match="destination shape mismatch"):
        t.materialize_into(spec.select_members(["w"]), {"w": np.empty((3, 2))})
    with pytest.raises(KeyError, match="unknown bundle buffers"):
        t.materialize(spec.select_members(["nope"]))
    # a manifest pointing outside its bundle is refused before anything is read
    bad = dict(ref.manifest, buffers={"w": {"key": "elsewhere/k", "bytes": 1, "chunks": [{"key": "elsewhere/k",
                                                                                            "bytes": 1}]}})
    with pytest.raises(ValueError, match="outside the bundle namespace"):
        t.materialize(t.read_spec(RemoteBundleRef(ref.manifest_key, bad)))
    t.remove_bundle(ref)
    assert keys(master, "bad") == []


def test_dataproto_stages_rows_handles_and_cleanup(master, store):
    t = MooncakeBundleTransfer(store, key_prefix="dp")
    ids = torch.arange(40, dtype=torch.int64).reshape(8, 5)
    mask = np.ones((8, 5), dtype=np.int8)
    text = np.asarray([f"s{i}" * (i % 3) if i != 4 else None for i in range(8)], dtype=object)
    ragged = np.empty(8, dtype=object)
    ragged[:] = [np.arange(i, dtype=np.int32) for i in range(8)]
    cfg = ReplicateConfig()
    cfg.replica_num = 1
    ref = t.put_dataproto(DataProto({"input_ids": ids, "mask": mask}, {"text": text, "ragged": ragged},
                                    {"step": 1}), namespace="roll", partition="p1", stage="rollout", config=cfg)
    assert ref._storage_group_id.startswith("structured-") and cfg.group_ids is None  # not changed
    assert ref.encoded_non_tensor["text"]["codec"] == "utf8_ragged"
    assert ref.encoded_non_tensor["ragged"]["codec"] == "typed_ragged"
    ref = t.append_dataproto_fields(ref, DataProto({"rewards": torch.linspace(0, 1, 8)}), stage="reward")
    ref = t.append_dataproto_fields(ref, DataProto({"values": np.arange(8.0)}), stage="rollout")
    handle = export_ref(ref)
    assert is_dataproto_ref_handle(handle) and handle["storage_group_id"] == ref._storage_group_id
    peer = run_peer(master, f"""
        import json, numpy as np
        from mooncake.structured_object_store import MooncakeBundleTransfer, import_ref
        t = MooncakeBundleTransfer(s, key_prefix="dp")
        ref = import_ref(json.loads({json.dumps(json.dumps(handle))}))
        sub = t.get_dataproto(ref, fields=["input_ids", "rewards", "text", "ragged", "values"], rows=[6, 1, 4])
        print("IDS", sub["batch"]["input_ids"].tolist())
        print("TEXT", json.dumps(sub["non_tensor_batch"]["text"].tolist()))
        print("RAGGED", [r.tolist() for r in sub["non_tensor_batch"]["ragged"]])
        print("VALUES", sub["batch"]["values"].tolist(), sub["batch"]["rewards"].tolist())
        flat = t.get(ref, type="dict", rows=slice(2, 4), fields=["mask", "text"])
        print("FLAT", sorted(flat), flat["mask"].tolist(), flat["text"])
    """)
    out = dict(line.split(" ", 1) for line in peer.output.splitlines() if " " in line)
    assert out["IDS"] == str(ids[[6, 1, 4]].tolist())
    assert json.loads(out["TEXT"]) == [text[6], text[1], None]
    assert out["RAGGED"] == "[[0, 1, 2, 3, 4, 5], [0], [0, 1, 2, 3]]"
    assert out["VALUES"] == f"{[6.0, 1.0, 4.0]} {torch.linspace(0, 1, 8)[[6, 1, 4]].tolist()}"
    assert out["FLAT"] == f"['mask', 'step', 'text'] {mask[2:4].tolist()} {text[2:4].tolist()}"
    view = t.dataproto_manifest_view(handle)
    assert set(view["batch_fields"]) == {"input_ids", "mask", "rewards", "values"}
    assert view["batch_fields"]["values"]["stage"] == "rollout" and view["meta_info_keys"] == ["step"]
    with pytest.raises(ValueError, match="already exist"):
        t.append_dataproto_fields(ref, DataProto({"input_ids": ids}), stage="again")
    with pytest.raises(ValueError, match="must include existing fields"):
        t.append_dataproto_fields(ref, DataProto({"input_ids": ids}), stage="rollout", overwrite=True)
    with pytest.raises(ValueError, match="conflicts"):
        other = ReplicateConfig()
        other.group_ids = ["other"]
        t.append_dataproto_fields(handle, DataProto({"x": ids}), stage="x", config=other)
    t.cleanup_dataproto(handle)
    assert keys(master, "dp") == []


def test_flat_dicts_schemas_and_recursive_columns(master, store):
    t = MooncakeBundleTransfer(store, key_prefix="fd")
    samples = [{"tokens": torch.arange(i + 1), "score": float(i), "tags": ["a"] * i} for i in range(3)] + [None]
    data = {
        "input_ids": np.arange(8).reshape(4, 2),
        "uid": ["u0", "u1", "u2", "u3"],
        "samples": samples,
        "mm": [{"image": torch.ones(2, 2)}, None, {"image": torch.zeros(1, 2)}, {}],
        "temperature": 0.7,
    }
    # with a schema fixing the row count, only fields with a schema (or dense arrays) are columns
    column = {"section": "non_tensor_batch"}
    ref = t.put(data, type="dict", field_schemas={
        "mm": FieldSchema(codec="ragged_tensor_dict", metadata=column),
        "uid": FieldSchema(codec="auto", metadata=column), "samples": FieldSchema(codec="auto", metadata=column)})
    assert {n: e["codec"] for n, e in ref.encoded_non_tensor.items()} == {
        "uid": "utf8_ragged", "samples": "structured_recursive", "mm": "ragged_tensor_dict"}
    got = t.get(import_ref(export_ref(ref)), type="dict")
    assert sorted(got) == ["input_ids", "mm", "samples", "temperature", "uid"]
    assert got["uid"] == data["uid"] and got["temperature"] == 0.7
    assert got["input_ids"].tolist() == data["input_ids"].tolist()
    for a, b in zip(got["samples"], samples):
        assert (a is None and b is None) or (torch.equal(a["tokens"], b["tokens"]) and a["score"] == b["score"]
                                             and a["tags"] == b["tags"])
    assert torch.equal(got["mm"][0]["image"], torch.ones(2, 2)) and got["mm"][1] is None and got["mm"][3] == {}
    with pytest.raises(ValueError, match="unsupported Mooncake payload type"):
        t.put(data, type="list")
    with pytest.raises(ValueError, match="inconsistent batch sizes"):
        t.put({"a": np.zeros(3), "b": np.zeros(4)})
    assert keys(master, "fd") == sorted(
        [k for stage in ref.stage_refs.values() for k in keys(master, "fd") if k.startswith(
            stage.manifest_key.rsplit("/", 1)[0])])
    t.cleanup_dataproto(ref)
    assert keys(master, "fd") == []


def test_codec_inference_and_msgpack_subset():
    from mooncake import _structured_msgpack as mp
    from mooncake.structured_object_store import MISSING, _choose_leaf_codec, _escape_key, infer_structure

    cases = [([torch.tensor([1]), None, torch.tensor([2, 3])], (True, "ragged_tensor")),
             ([[1, 2], (3,)], (True, "typed_ragged")), ([1, 2.5, None], (True, "ndarray")),
             ([b"a", bytearray(b"b")], (True, "bytes_ragged")), (["x", None], (True, "utf8_ragged")),
             ([{"a": 1}, [1, "x"]], (True, "msgpack_ragged")), ([{"a": object()}], (False, "msgpack_ragged")),
             ([object()], (False, "msgpack_ragged")), ([None, None], (False, "msgpack_ragged"))]
    for values, want in cases:
        d = _choose_leaf_codec(values)
        assert (d.accepted, d.codec) == want, values
    leaves, nodes = [], []
    infer_structure("r", [{"a.b": 1, "l": [{"k": "x"}]}, {"l": []}, None], leaves, nodes)
    assert [(n.path, n.node_type, n.row_mask) for n in nodes] == [
        ("r", "dict", [True, True, False]), ("r.l", "list", [True, True, False]), ("r.l[0]", "dict", [True, False, False])]
    by_path = {leaf.path: leaf.values for leaf in leaves}
    assert by_path == {"r.a\\.b": [1, MISSING, None], "r.l[0].k": ["x", None, None]}  # row 1 has no l[0]
    assert _escape_key("a\\.[") == "a\\\\\\.\\["
    for v in [None, True, 0, 127, 128, -1, -33, 2**63, -(2**63), 1.5, "", "é" * 40, b"\x00" * 300,
              list(range(20)), {"k": [1, {"z": None}]}, {str(i): i for i in range(20)}]:
        assert mp.unpackb(mp.packb(v)) == v
    assert mp.unpackb(mp.packb((1, 2))) == [1, 2]
    with pytest.raises(TypeError, match="cannot serialize object"):
        mp.packb({"a": object()})
    with pytest.raises(ValueError, match="truncated"):
        mp.unpackb(mp.packb("abc")[:-1])


def test_dataproto_catalog():
    from mooncake.dataproto_catalog import DataProtoCatalog

    def handle(key, fields, n):
        return {"type": "mooncake_dataproto_ref", "version": 1, "kind": "bundle_stages", "batch_size": n,
                "stage_refs": {"s": {"manifest_key": key}},
                "field_index": {f: {"stage": "s", "member": f"batch.{f}", "section": "batch"} for f in fields}}

    c = DataProtoCatalog()
    assert c.update("p", ["a", "b"], tags=[{"x": 1}, {}], handle=handle("m1", ["ids"], 2))["fields"] == ["ids"]
    c.update("p", ["b"], tags=[{"y": 2}], handle=handle("m2", ["ids", "r"], 1))
    plan = c.resolve("p", ["b", "a"], ["ids"])
    assert plan["field_groups"] == [{"fields": ["ids"], "locations": [("m2", 0), ("m1", 0)]}]
    assert sorted(plan["handles"]) == ["m1", "m2"] and plan["tags"] == [{"y": 2}, {"x": 1}]
    with pytest.raises(ValueError, match="not ready"):
        c.resolve("p", ["a", "b"], ["r"])
    with pytest.raises(ValueError, match="batch size"):
        c.update("p", ["a"], handle=handle("m3", ["ids"], 2))
    assert c.list() == {"p": {"a": {"x": 1}, "b": {"y": 2}}}
    c.remove("p", ["a", "b"])
    assert c.list() == {} and c._handles == {} and c._refs == {}


class CountingStore:
    """The real store, recording the (key, size) of every range get_into_ranges is asked for."""

    def __init__(self, store):
        self._s, self.asked = store, []

    def __getattr__(self, name):
        return getattr(self._s, name)

    def get_into_ranges(self, ptrs, all_keys, all_dst, all_src, all_sizes):
        for keys, sizes in zip(all_keys, all_sizes):
            self.asked += [(k, n) for k, per in zip(keys, sizes) for n in per]
        return self._s.get_into_ranges(ptrs, all_keys, all_dst, all_src, all_sizes)


def test_row_reads_of_encoded_columns_read_only_those_rows(master, store):
    counting = CountingStore(store)
    t = MooncakeBundleTransfer(counting, key_prefix="rows")
    col = np.empty(100, dtype=object)
    col[:] = [np.full(1000, i, dtype=np.int32) for i in range(100)]
    col[6] = None
    text = np.asarray([f"row-{i}" * 50 for i in range(100)], dtype=object)
    ref = t.put_dataproto(DataProto(non_tensor_batch={"col": col, "text": text}))
    counting.asked.clear()
    got = t.get_dataproto(ref, rows=[7, 5, 6, 99])["non_tensor_batch"]
    assert [None if r is None else r.tolist() for r in got["col"]] == [[7] * 1000, [5] * 1000, None, [99] * 1000]
    assert got["text"].tolist() == [text[7], text[5], text[6], text[99]]
    data = [(k.rsplit("/", 2)[-1], n) for k, n in counting.asked if k.endswith(".data")]
    # col: rows 7, 5, 99 (6 is null); text: 7, then 5 and 6 (adjacent both sides: one range), 99
    assert sorted(data) == sorted([("non_tensor_batch.col.data", 4000)] * 3 + [
        ("non_tensor_batch.text.data", n) for n in (len(text[7]), len(text[5]) + len(text[6]), len(text[99]))])
    counting.asked.clear()
    got = t.get_dataproto(ref, non_tensor_fields=["col"], rows=slice(10, 13))["non_tensor_batch"]
    assert [r.tolist() for r in got["col"]] == [[i] * 1000 for i in (10, 11, 12)]
    assert [n for k, n in counting.asked if k.endswith(".data")] == [12000]  # three adjacent rows: one range
    t.cleanup_dataproto(ref)
    assert keys(master, "rows") == []
