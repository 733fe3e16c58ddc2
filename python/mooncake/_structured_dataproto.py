"""``mooncake._structured_dataproto``: DataProto-like objects over structured objects —
``DataProtoMixin`` (``put_dataproto``, ``get_dataproto``, ``append_dataproto_fields``,
``cleanup_dataproto``, ...) of ``MooncakeBundleTransfer``, ``MooncakeDataProtoRef`` and its
export / import as JSON-safe data."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from ._structured_types import (_FORMAT, BundleTransferPolicy, StructuredMemberSlice, StructuredObjectPayload,
                                StructuredObjectRef, StructuredReadSpec, _is_numpy, _is_torch)

if TYPE_CHECKING:
    from .structured_object_store import MooncakeBundleTransfer



class DataProtoMixin:
    """DataProto calls of ``MooncakeBundleTransfer`` (one structured object per stage)."""

    # ---- DataProto-like objects ----
    def put_dataproto(self, data, namespace: str = "default", partition: str = "0", stage: str = "initial",
                      policy: Optional[BundleTransferPolicy] = None) -> "MooncakeDataProtoRef":
        """Stores ``data`` (``batch`` / ``non_tensor_batch`` / ``meta_info``) as one stage."""
        batch, non_tensor, meta = _dataproto_parts(data)
        ref = MooncakeDataProtoRef(stage_refs={}, field_index={}, batch_size=None, namespace=namespace,
                                   partition=partition, meta_info=dict(meta))
        return self._add_stage(ref, batch, non_tensor, meta, stage, policy, overwrite=False)

    def append_dataproto_fields(self, ref, data, stage: str, overwrite: bool = False,
                                policy: Optional[BundleTransferPolicy] = None) -> "MooncakeDataProtoRef":
        """Stores more fields as a new stage; a field name already in ``ref`` is refused unless
        ``overwrite`` (then the old stage is removed once the new one is written)."""
        ref = self._dp_ref(ref)
        batch, non_tensor, meta = _dataproto_parts(data)
        return self._add_stage(ref, batch, non_tensor, meta, stage, policy, overwrite)

    def _add_stage(self, ref, batch, non_tensor, meta, stage, policy, overwrite):
        if not isinstance(stage, str) or not stage or "/" in stage:
            raise ValueError(f"stage must be a non-empty str without '/', got {stage!r}")
        names = list(batch) + list(non_tensor)
        dup_inside = set(batch) & set(non_tensor)
        if dup_inside:
            raise ValueError(f"field name(s) {sorted(dup_inside)} are both in batch and non_tensor_batch")
        if not names:
            raise ValueError("the DataProto has no fields")
        old_stages = set()
        for n in names:
            if n in ref.field_index:
                if not overwrite:
                    raise ValueError(f"field {n!r} is already stored (stage {ref.field_index[n][0]!r}); "
                                     "pass overwrite=True to replace its stage")
                old_stages.add(ref.field_index[n][0])
        if stage in ref.stage_refs and stage not in old_stages:
            raise ValueError(f"stage {stage!r} already exists in this ref")
        sizes = {len(v) for v in list(batch.values()) + list(non_tensor.values()) if hasattr(v, "__len__")}
        if ref.batch_size is not None:
            sizes.add(ref.batch_size)
        if len(sizes) > 1:
            raise ValueError(f"fields have different batch sizes {sorted(sizes)}")
        buffers = {}
        for n, v in batch.items():
            buffers[n] = v
        for n, v in non_tensor.items():
            buffers[n] = v
        oid = f"{ref.namespace}.{ref.partition}.{stage}.{uuid.uuid4().hex[:12]}"
        sref = self.put_structured_object(StructuredObjectPayload(buffers, {"stage": stage}), policy, object_id=oid)
        new = MooncakeDataProtoRef(dict(ref.stage_refs), dict(ref.field_index), ref.batch_size, ref.namespace,
                                   ref.partition, dict(ref.meta_info), ref.global_indexes)
        for s in old_stages:
            for f in [f for f, (st, _, _) in new.field_index.items() if st == s]:
                del new.field_index[f]
            new.stage_refs.pop(s)
        new.stage_refs[stage] = sref
        for n in batch:
            new.field_index[n] = (stage, n, "batch")
        for n in non_tensor:
            new.field_index[n] = (stage, n, "non_tensor_batch")
        new.meta_info.update(meta)
        if sizes:
            new.batch_size = sizes.pop()
        for s in old_stages:  # the new stage is written: the replaced one goes
            self.remove_structured_object(ref.stage_refs[s])
        return new

    def get_dataproto(self, ref, fields: Optional[Sequence[str]] = None, batch_fields: Optional[Sequence[str]] = None,
                      non_tensor_fields: Optional[Sequence[str]] = None, meta_info_keys: Optional[Sequence[str]] = None,
                      data_cls=None, destinations: Optional[Dict[str, Any]] = None, rows=None):
        """Selected fields (all by default) as {"batch", "non_tensor_batch", "meta_info"} (or
        ``data_cls``); ``rows`` (a slice, StructuredMemberSlice or index list) picks batch rows."""
        ref = self._dp_ref(ref)
        want: List[str] = []
        if fields is None and batch_fields is None and non_tensor_fields is None:
            want = list(ref.field_index)
        for group, section in ((fields, None), (batch_fields, "batch"), (non_tensor_fields, "non_tensor_batch")):
            for f in group or []:
                if f not in ref.field_index:
                    raise KeyError(f"get_dataproto: no field {f!r} (fields: {sorted(ref.field_index)})")
                if section is not None and ref.field_index[f][2] != section:
                    raise ValueError(f"get_dataproto: {f!r} is a {ref.field_index[f][2]} field, not {section}")
                if f not in want:
                    want.append(f)
        sel, index = _rows(rows)
        out = {"batch": {}, "non_tensor_batch": {}, "meta_info": {}}
        by_stage: Dict[str, List[str]] = {}
        for f in want:
            by_stage.setdefault(ref.field_index[f][0], []).append(f)
        for stage, fs in by_stage.items():
            spec = StructuredReadSpec(ref.stage_refs[stage]).select_members([ref.field_index[f][1] for f in fs])
            leaves = spec._leaves()
            if sel is not None:
                for f in fs:
                    m = ref.field_index[f][1]
                    if m in leaves and leaves[m]["codec"] in ("ndarray", "tensor"):
                        spec = spec.slice_member(m, 0, sel.start, sel.end)
            dests = {ref.field_index[f][1]: d for f, d in (destinations or {}).items() if f in fs}
            res = self.materialize_into(spec, dests) if dests else self.materialize(spec)
            for f in fs:
                m, section = ref.field_index[f][1], ref.field_index[f][2]
                v = res.objects[m]
                if sel is not None and not (m in leaves and leaves[m]["codec"] in ("ndarray", "tensor")):
                    v = v[sel.start:sel.end]
                if index is not None:
                    v = _take(v, index)
                out[section][f] = v
        keys = list(ref.meta_info) if meta_info_keys is None else list(meta_info_keys)
        for k in keys:
            if k not in ref.meta_info:
                raise KeyError(f"get_dataproto: no meta_info key {k!r}")
            out["meta_info"][k] = ref.meta_info[k]
        if data_cls is None:
            return out
        if hasattr(data_cls, "from_dict"):
            try:
                return data_cls.from_dict(out["batch"], out["non_tensor_batch"], meta_info=out["meta_info"])
            except TypeError:
                pass
        return data_cls(batch=out["batch"], non_tensor_batch=out["non_tensor_batch"], meta_info=out["meta_info"])

    def dataproto_manifest_view(self, ref) -> Dict[str, Any]:
        """Per field: stage, section, codec, dtype, shape (from the stage manifests)."""
        ref = self._dp_ref(ref)
        view = {}
        for f, (stage, member, section) in ref.field_index.items():
            leaves = ref.stage_refs[stage].manifest["leaves"]
            e = leaves.get(member, {})
            view[f] = {"stage": stage, "section": section, "codec": e.get("codec", "nested"),
                       "dtype": e.get("dtype"), "shape": e.get("shape")}
        return view

    def cleanup_dataproto(self, ref) -> int:
        """Removes every stage object of the ref; returns how many keys were removed."""
        ref = self._dp_ref(ref)
        return sum(self.remove_structured_object(s) for s in ref.stage_refs.values())

    def _dp_ref(self, ref) -> "MooncakeDataProtoRef":
        if isinstance(ref, MooncakeDataProtoRef):
            for s, r in ref.stage_refs.items():
                if not r.manifest:
                    got = self.get_structured_ref(r.manifest_key)
                    if got is None:
                        raise KeyError(f"stage {s!r} ({r.manifest_key!r}) is missing from the store")
                    r.manifest = got.manifest
            return ref
        if isinstance(ref, dict):
            return import_dataproto_ref(ref, self)
        raise TypeError(f"want a MooncakeDataProtoRef or an exported handle, got {type(ref).__name__}")


# ---- DataProto helpers ------------------------------------------------------------------------

@dataclass
class MooncakeDataProtoRef:
    """DataProto routing: stage -> structured object, field -> (stage, member, section)."""
    stage_refs: Dict[str, StructuredObjectRef]
    field_index: Dict[str, Tuple[str, str, str]]
    batch_size: Optional[int] = None
    namespace: str = "default"
    partition: str = "0"
    meta_info: Dict[str, Any] = field(default_factory=dict)
    global_indexes: Optional[List[int]] = None


def export_dataproto_ref(ref: MooncakeDataProtoRef) -> Dict[str, Any]:
    """A JSON-safe handle (manifest keys, not manifests) to pass between processes."""
    return {"format": _FORMAT, "stage_refs": {s: r.manifest_key for s, r in ref.stage_refs.items()},
            "field_index": {f: list(v) for f, v in ref.field_index.items()}, "batch_size": ref.batch_size,
            "namespace": ref.namespace, "partition": ref.partition, "meta_info": ref.meta_info,
            "global_indexes": ref.global_indexes}


def import_dataproto_ref(handle: Dict[str, Any], transfer: Optional[MooncakeBundleTransfer] = None
                         ) -> MooncakeDataProtoRef:
    """The ref of an exported handle; manifests are fetched now when ``transfer`` is given, else
    by the first MooncakeBundleTransfer call that uses the ref."""
    if not isinstance(handle, dict) or "stage_refs" not in handle:
        raise ValueError("import_dataproto_ref: not an exported DataProto handle")
    stage_refs = {}
    for s, mkey in handle["stage_refs"].items():
        if transfer is not None:
            r = transfer.get_structured_ref(mkey)
            if r is None:
                raise KeyError(f"import_dataproto_ref: stage {s!r} ({mkey!r}) is missing from the store")
            stage_refs[s] = r
        else:
            stage_refs[s] = StructuredObjectRef(mkey, {})  # fetched when a transfer call uses it
    return MooncakeDataProtoRef(stage_refs, {f: tuple(v) for f, v in handle["field_index"].items()},
                                handle.get("batch_size"), handle.get("namespace", "default"),
                                handle.get("partition", "0"), dict(handle.get("meta_info") or {}),
                                handle.get("global_indexes"))


def _dataproto_parts(data):
    if isinstance(data, dict):
        if data and set(data) <= {"batch", "non_tensor_batch", "meta_info"}:
            return dict(data.get("batch") or {}), dict(data.get("non_tensor_batch") or {}), dict(data.get("meta_info") or {})
        return dict(data), {}, {}
    if hasattr(data, "batch"):
        batch = data.batch
        if batch is not None and not isinstance(batch, dict) and hasattr(batch, "keys"):
            batch = {k: batch[k] for k in batch.keys()}
        return (dict(batch or {}), dict(getattr(data, "non_tensor_batch", None) or {}),
                dict(getattr(data, "meta_info", None) or {}))
    raise TypeError(f"want a DataProto-like object (batch / non_tensor_batch / meta_info) or a dict, "
                    f"got {type(data).__name__}")


def _rows(rows):
    """(StructuredMemberSlice for a contiguous range, or None; index list, or None)."""
    if rows is None:
        return None, None
    if isinstance(rows, slice):
        if rows.step not in (None, 1):
            return None, rows  # a strided selection: read whole, then index
        return StructuredMemberSlice(0, rows.start, rows.stop), None
    if isinstance(rows, StructuredMemberSlice):
        if rows.axis != 0:
            raise ValueError("get_dataproto: rows select along axis 0 only")
        return rows, None
    idx = list(rows)
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in idx):
        raise TypeError("get_dataproto: rows must be a slice, a StructuredMemberSlice or a list of ints")
    return None, idx


def _take(v, index):
    if isinstance(index, slice):
        return v[index]
    if _is_numpy(v) or _is_torch(v):
        return v[index]
    return [v[i] for i in index]
