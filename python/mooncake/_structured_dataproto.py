"""``mooncake._structured_dataproto``: DataProto objects (``batch`` tensors / arrays,
``non_tensor_batch`` object columns, ``meta_info``) and flat dicts kept as one structured object
per stage. A stage's members are ``batch.<name>`` and ``non_tensor_batch.<name>`` (object
columns: ``non_tensor_batch.<name>.<payload>`` for each payload of their codec). The ref (or its
JSON handle) says which stage and member holds each field; appending to a stage writes a new
manifest over the old payloads and the new ones (the old manifest is removed with it later).

Every write of one DataProto uses one storage group (``config.group_ids``): the caller's, or a
fresh ``structured-<hex>`` one kept in the ref, so all its keys live and die together."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ._structured_codecs import _encode_with_schema, _object_array_from_decoded_values, _validate_schema_nullable
from ._structured_config import _config_with_group_id, new_storage_group_id
from ._structured_dpsupport import (_build_dataproto_like_result, _coerce_dataproto_row_selection,
                                    _coerce_schema_non_tensor_value, _dataproto_batch_size, _envelope_to_flat_dict,
                                    _flat_dict_to_envelope, _merge_structured_stage_metadata,
                                    _resolve_dataproto_field_selection, _schema_for_section, _select_mapping,
                                    _split_dataproto_like, _validate_dataproto_schema_sections)
from ._structured_layer import (_decode_structured_metadata, _encode_structured_metadata, _rangeable,
                                _resolve_ndarray_destination, _structured_field_specs)
from ._structured_bundle import _RawDestinationBuffer, _TensorObjectBufferPayload
from ._structured_recursive import (_decode_structured_non_tensor_encoded, _encode_structured_non_tensor_field,
                                    _should_encode_non_tensor_field)
from ._structured_refs import (MooncakeDataProtoRef, RemoteBundleRef, StructuredFieldLocation,
                               StructuredObjectPayload, resolve_dataproto_ref)
from ._structured_rowread import read_encoded_rows
from ._structured_tensors import select_nested_rows


def _copy_ref(ref: MooncakeDataProtoRef, **changes: Any) -> MooncakeDataProtoRef:
    fields = dict(batch_size=ref.batch_size, stage_refs=dict(ref.stage_refs), field_index=dict(ref.field_index),
                  meta_info=dict(ref.meta_info), namespace=ref.namespace, partition=ref.partition,
                  global_indexes=ref.global_indexes, encoded_non_tensor=dict(ref.encoded_non_tensor),
                  _storage_group_id=ref._storage_group_id)
    fields.update(changes)
    return MooncakeDataProtoRef(**fields)


class DataProtoMixin:
    """The DataProto half of ``MooncakeBundleTransfer``."""

    # ---- public calls ------------------------------------------------------------------------

    def put(self, data: Any, *, type: str = "dataproto", namespace: str = "default", partition: str = "default",
            stage: str = "default", chunk_bytes: Optional[int] = None, policy: Any = None, config: Any = None,
            field_schemas: Optional[Mapping[str, Any]] = None) -> MooncakeDataProtoRef:
        """Store a DataProto-like object (``type="dataproto"``) or a flat dict (``"dict"``)."""
        if type == "dict":
            data = _flat_dict_to_envelope(data, field_schemas)
        elif type != "dataproto":
            raise ValueError(f"unsupported Mooncake payload type: {type!r}")
        return self._put_dataproto_stage(None, data, namespace=namespace, partition=partition, stage=stage,
                                         chunk_bytes=chunk_bytes, policy=policy, overwrite=False, config=config,
                                         field_schemas=field_schemas)

    def get(self, ref: Any, *, type: str = "dataproto", fields: Optional[Sequence[str]] = None,
            batch_fields: Optional[Sequence[str]] = None, non_tensor_fields: Optional[Sequence[str]] = None,
            meta_info_keys: Optional[Sequence[str]] = None, data_cls: Any = None,
            destinations: Optional[Mapping[str, Any]] = None, rows: Any = None) -> Any:
        if type not in ("dataproto", "dict"):
            raise ValueError(f"unsupported Mooncake payload type: {type!r}")
        flat = type == "dict"
        out = self._get_dataproto(ref, fields=fields, batch_fields=batch_fields,
                                  non_tensor_fields=non_tensor_fields, meta_info_keys=meta_info_keys,
                                  data_cls=dict if flat else data_cls, destinations=destinations, rows=rows,
                                  _flat_dict_output=flat)
        return _envelope_to_flat_dict(out) if flat else out

    def put_dataproto(self, data: Any, *, namespace: str = "default", partition: str = "default",
                      stage: str = "default", chunk_bytes: Optional[int] = None, policy: Any = None,
                      field_schemas: Optional[Mapping[str, Any]] = None, config: Any = None) -> MooncakeDataProtoRef:
        return self.put(data, type="dataproto", namespace=namespace, partition=partition, stage=stage,
                        chunk_bytes=chunk_bytes, policy=policy, field_schemas=field_schemas, config=config)

    def append_dataproto_fields(self, ref: Any, data: Any, *, stage: str, overwrite: bool = False,
                                chunk_bytes: Optional[int] = None, policy: Any = None,
                                field_schemas: Optional[Mapping[str, Any]] = None,
                                config: Any = None) -> MooncakeDataProtoRef:
        """Add fields (a new stage, or more members of an existing one; ``overwrite``: replace a
        stage, which must then name every field it had)."""
        ref = resolve_dataproto_ref(ref)
        return self._put_dataproto_stage(ref, data, namespace=ref.namespace, partition=ref.partition, stage=stage,
                                         chunk_bytes=chunk_bytes, policy=policy, overwrite=overwrite,
                                         field_schemas=field_schemas, config=config)

    def get_dataproto(self, ref: Any, *, fields: Optional[Sequence[str]] = None,
                      batch_fields: Optional[Sequence[str]] = None, non_tensor_fields: Optional[Sequence[str]] = None,
                      meta_info_keys: Optional[Sequence[str]] = None, data_cls: Any = None,
                      destinations: Optional[Mapping[str, Any]] = None, rows: Any = None) -> Any:
        return self._get_dataproto(ref, fields=fields, batch_fields=batch_fields, non_tensor_fields=non_tensor_fields,
                                   meta_info_keys=meta_info_keys, data_cls=data_cls, destinations=destinations,
                                   rows=rows)

    def cleanup_dataproto(self, ref: Any) -> None:
        """Remove every stage object of the DataProto."""
        seen = set()
        for stage_ref in resolve_dataproto_ref(ref).stage_refs.values():
            if stage_ref.manifest_key not in seen:
                seen.add(stage_ref.manifest_key)
                self.remove_bundle(stage_ref)

    def dataproto_manifest_view(self, ref: Any) -> Dict[str, Any]:
        """Each field's section, stage, member and stored spec, read from the stage manifests."""
        ref = resolve_dataproto_ref(ref)
        metas = {}
        for stage, stage_ref in ref.stage_refs.items():
            manifest = self._bundle_store.resolve_manifest(stage_ref)
            metas[stage] = _decode_structured_metadata(self._bundle_store.read_payload(manifest["meta"]))
        fields: Dict[str, Dict[str, Any]] = {}
        for name, loc in ref.field_index.items():
            specs = _structured_field_specs(metas[loc.stage])
            spec = dict(specs.get(loc.member, {"encoding": "bytes"}))
            enc = ref.encoded_non_tensor.get(name)
            if enc is not None:
                members = dict(enc["payload_members"])
                spec = {"encoding": "structured_non_tensor", "codec": enc["codec"], "metadata": enc.get("metadata"),
                        "payload_members": members,
                        "payload_specs": {p: dict(specs.get(m, {"encoding": "bytes"})) for p, m in members.items()}}
            fields[name] = {"section": loc.section, "stage": loc.stage, "member": loc.member, "spec": spec}
        return {"namespace": ref.namespace, "partition": ref.partition, "batch_size": ref.batch_size,
                "batch_fields": {n: f for n, f in fields.items() if f["section"] == "batch"},
                "non_tensor_fields": {n: f for n, f in fields.items() if f["section"] == "non_tensor_batch"},
                "meta_info_keys": list(ref.meta_info),
                "stages": {s: {"manifest_key": r.manifest_key, "dataproto": metas[s].get("dataproto", {})}
                           for s, r in ref.stage_refs.items()}}

    # ---- writing ------------------------------------------------------------------------------

    def _encode_non_tensor(self, name: str, value: Any, schemas: Any) -> Any:
        schema = _schema_for_section(schemas, name, "non_tensor_batch")
        path = f"non_tensor_batch.{name}"
        if schema is not None:
            try:
                column = _coerce_schema_non_tensor_value(name, value)
                if schema.codec == "auto":
                    _validate_schema_nullable(path, column, schema)
                else:
                    return _encode_with_schema(path, column, schema)
            except (TypeError, ValueError, RuntimeError, AttributeError) as err:
                raise type(err)(f"failed to encode non_tensor_batch field {name!r} with FieldSchema codec "
                                f"{schema.codec!r}: {err}") from err
        if _should_encode_non_tensor_field(value):
            return _encode_structured_non_tensor_field(path, value)
        return None

    def _put_dataproto_stage(self, ref: Optional[MooncakeDataProtoRef], data: Any, *, namespace: str,
                             partition: str, stage: str, chunk_bytes: Optional[int], policy: Any, overwrite: bool,
                             field_schemas: Optional[Mapping[str, Any]] = None,
                             config: Any = None) -> MooncakeDataProtoRef:
        batch, non_tensor, meta = _split_dataproto_like(data)
        _validate_dataproto_schema_sections(batch, non_tensor, meta, field_schemas)
        rows = _dataproto_batch_size(batch, non_tensor)
        if ref is not None and rows != ref.batch_size:
            raise ValueError(f"DataProto append batch size {rows} does not match the ref's batch size "
                             f"{ref.batch_size}")
        overlap = sorted(set(batch) & set(non_tensor))
        if overlap:
            raise ValueError(f"DataProto batch and non_tensor_batch fields overlap: {overlap}")
        buffers: Dict[str, Any] = {}
        updates: Dict[str, StructuredFieldLocation] = {}
        encoded: Dict[str, Any] = {}
        for name, value in batch.items():
            buffers[f"batch.{name}"] = value
            updates[name] = StructuredFieldLocation(stage, f"batch.{name}", "batch")
        for name, value in non_tensor.items():
            member = f"non_tensor_batch.{name}"
            updates[name] = StructuredFieldLocation(stage, member, "non_tensor_batch")
            leaf = self._encode_non_tensor(name, value, field_schemas)
            if leaf is None:
                buffers[member] = value
                continue
            members = {}
            for part, buf in leaf.payload.items():
                buffers[f"{member}.{part}"] = buf
                members[part] = f"{member}.{part}"
            encoded[name] = {"codec": leaf.codec, "rows": leaf.rows, "metadata": leaf.metadata,
                             "payload_members": members}
        if not buffers:
            if ref is not None:
                merged = dict(ref.meta_info)
                merged.update(meta)
                return _copy_ref(ref, meta_info=merged)
            return MooncakeDataProtoRef(batch_size=rows, stage_refs={}, field_index={}, meta_info=dict(meta),
                                        namespace=namespace, partition=partition, encoded_non_tensor={},
                                        _storage_group_id=new_storage_group_id(config))
        if ref is not None:
            dup = sorted(set(ref.field_index) & set(updates))
            if dup and not overwrite:
                raise ValueError(f"DataProto fields already exist: {dup}")
            if overwrite:
                left = sorted(n for n, loc in ref.field_index.items() if loc.stage == stage and n not in updates)
                if left:
                    raise ValueError(f"DataProto overwrite of stage {stage!r} must include existing fields: {left}")
        group = new_storage_group_id(config) if ref is None else ref._storage_group_id
        write_config = config if group is None else _config_with_group_id(config, group)
        payload = StructuredObjectPayload(metadata={"layout": "dataproto_stage", "dataproto": {
            "version": 1, "namespace": namespace, "partition": partition, "stage": stage, "batch_size": rows}},
            buffers=buffers)
        old_stage = ref.stage_refs.get(stage) if ref is not None else None
        if old_stage is not None and not overwrite:
            stage_ref = self._append_dataproto_stage_manifest(old_stage, payload, partition=partition,
                                                              chunk_bytes=chunk_bytes, policy=policy,
                                                              config=write_config)
        else:
            stage_ref = self.put_structured_object(payload, partition=partition, chunk_bytes=chunk_bytes,
                                                   policy=policy, config=write_config)
            if old_stage is not None and old_stage.manifest_key != stage_ref.manifest_key:
                self.remove_bundle(old_stage)
        if ref is None:
            return MooncakeDataProtoRef(batch_size=rows, stage_refs={stage: stage_ref}, field_index=updates,
                                        meta_info=dict(meta), namespace=namespace, partition=partition,
                                        encoded_non_tensor=encoded, _storage_group_id=group)
        out = _copy_ref(ref, batch_size=rows)
        out.stage_refs[stage] = stage_ref
        out.field_index.update(updates)
        out.meta_info.update(meta)
        for name in updates:
            out.encoded_non_tensor.pop(name, None)
        out.encoded_non_tensor.update(encoded)
        return out

    def _append_dataproto_stage_manifest(self, old_ref: RemoteBundleRef, payload: StructuredObjectPayload, *,
                                         partition: str, chunk_bytes: Optional[int], policy: Any,
                                         config: Any = None) -> RemoteBundleRef:
        """Write the new members, then one manifest over old and new members; the old manifest
        and both metas are removed together with the new stage object."""
        bs = self._bundle_store
        new_ref = self.put_structured_object(payload, partition=partition, chunk_bytes=chunk_bytes, policy=policy,
                                             config=config)
        try:
            old = bs.resolve_manifest(old_ref)
            new = bs.resolve_manifest(new_ref)
            merged_meta = _merge_structured_stage_metadata(_decode_structured_metadata(bs.read_payload(old["meta"])),
                                                           _decode_structured_metadata(bs.read_payload(new["meta"])))
            clash = sorted(set(old["buffers"]) & set(new["buffers"]))
            if clash:
                raise ValueError(f"structured members already exist: {clash}")
            buffers = dict(old["buffers"])
            buffers.update(new["buffers"])
            cleanup = [*old.get("cleanup_keys", []), bs.manifest_key(old_ref), *bs.payload_keys(old["meta"]),
                       bs.manifest_key(new_ref), *bs.payload_keys(new["meta"])]
            merged = bs.put_bundle_manifest(_encode_structured_metadata(merged_meta), buffers, partition=partition,
                                            chunk_bytes=chunk_bytes, policy=policy, cleanup_keys=cleanup,
                                            config=config)
        except Exception:
            self.remove_bundle(new_ref)
            raise
        bs.remove_keys([bs.manifest_key(new_ref), *bs.payload_keys(new["meta"])], strict=False)
        return merged

    # ---- reading ------------------------------------------------------------------------------

    def _get_dataproto(self, ref: Any, *, fields: Optional[Sequence[str]] = None,
                       batch_fields: Optional[Sequence[str]] = None,
                       non_tensor_fields: Optional[Sequence[str]] = None,
                       meta_info_keys: Optional[Sequence[str]] = None, data_cls: Any = None,
                       destinations: Optional[Mapping[str, Any]] = None, rows: Any = None,
                       _flat_dict_output: bool = False) -> Any:
        ref = resolve_dataproto_ref(ref)
        sel = _coerce_dataproto_row_selection(rows, ref.batch_size)
        b_names, nt_names = _resolve_dataproto_field_selection(ref, fields, batch_fields, non_tensor_fields)
        dests = destinations or {}
        out: Dict[str, Dict[str, Any]] = {"batch": {}, "non_tensor_batch": {}}
        plain: Dict[str, List[Tuple[str, StructuredFieldLocation]]] = {}
        coded: Dict[str, List[str]] = {}
        for name in b_names + nt_names:
            loc = ref.field_index[name]
            if loc.section == "non_tensor_batch" and name in ref.encoded_non_tensor:
                coded.setdefault(loc.stage, []).append(name)
            else:
                plain.setdefault(loc.stage, []).append((name, loc))
        for stage, entries in plain.items():
            stage_ref = ref.stage_refs[stage]
            if sel is not None and sel.indices is not None:
                for name, loc in entries:
                    out[loc.section][name] = self._read_member_rows(stage_ref, loc.member, sel.indices,
                                                                    dests.get(name))
                continue
            members = [loc.member for _, loc in entries]
            spec = self.read_spec(stage_ref).select_members(members)
            if sel is not None:
                s = sel.member_slice
                for m in members:
                    spec = spec.slice_member(m, axis=0, start=s.start, end=s.end, step=s.step)
            got = self.materialize_into(spec, {loc.member: dests[n] for n, loc in entries if n in dests})
            for name, loc in entries:
                out[loc.section][name] = got.objects[loc.member]
        picked = None
        if sel is not None:
            picked = list(sel.indices) if sel.indices is not None else list(range(*slice(
                sel.member_slice.start, sel.member_slice.end, sel.member_slice.step).indices(ref.batch_size)))
        for stage, names in coded.items():
            stage_ref = ref.stage_refs[stage]
            whole = []
            for name in names:
                enc = ref.encoded_non_tensor[name]
                part = None if picked is None else read_encoded_rows(self, stage_ref, enc, picked)
                if part is None:
                    whole.append(name)
                    continue
                values = _decode_structured_non_tensor_encoded(enc, part["payload"], len(picked), part["metadata"])
                out["non_tensor_batch"][name] = values if _flat_dict_output else _object_array_from_decoded_values(values)
            if not whole:
                continue
            members = [m for n in whole for m in ref.encoded_non_tensor[n]["payload_members"].values()]
            got = self.materialize(self.read_spec(stage_ref).select_members(members))
            for name in whole:
                enc = ref.encoded_non_tensor[name]
                parts = {p: got.objects[m] for p, m in enc["payload_members"].items()}
                values = _decode_structured_non_tensor_encoded(enc, parts, ref.batch_size, enc.get("metadata"))
                if picked is not None:
                    values = [values[i] for i in picked]
                out["non_tensor_batch"][name] = values if _flat_dict_output else _object_array_from_decoded_values(values)
        return _build_dataproto_like_result(out["batch"], out["non_tensor_batch"],
                                            _select_mapping(ref.meta_info, meta_info_keys), data_cls)

    def _read_member_rows(self, stage_ref: RemoteBundleRef, member: str, indices: Sequence[int], dest: Any) -> Any:
        bs = self._bundle_store
        manifest = bs.resolve_manifest(stage_ref)
        field = _structured_field_specs(_decode_structured_metadata(bs.read_payload(manifest["meta"]))).get(
            member, {"encoding": "bytes"})
        payload = manifest["buffers"][member]
        encoding = field.get("encoding", "bytes")
        if encoding == "ndarray":
            return self._read_ndarray_rows(member, payload, field, indices, dest)
        if encoding == "torch_tensor":
            return self._read_tensor_rows_at(stage_ref, member, payload, field, indices, dest)
        raise ValueError(f"structured member {member} does not support indexed rows")

    def _row_ranges(self, full_shape: Tuple[int, ...], itemsize: int, indices: Sequence[int],
                    base: int = 0) -> Tuple[int, List[Tuple[int, int, int]]]:
        width = itemsize * int(np.prod(full_shape[1:], dtype=np.int64))
        return width, [(base + r * width, i * width, width) for i, r in enumerate(indices)]

    def _read_ndarray_rows(self, member: str, payload: Mapping[str, Any], field: Mapping[str, Any],
                           indices: Sequence[int], dest: Any) -> np.ndarray:
        dtype = np.dtype(field["dtype"])
        full = tuple(int(d) for d in field["shape"])
        if not full:
            raise ValueError("an indexed read needs an array with at least one dimension")
        shape = (len(indices), *full[1:])
        target = _resolve_ndarray_destination(member, dest, dtype, shape)
        _, ranges = self._row_ranges(full, dtype.itemsize, indices)
        pre = isinstance(dest, _RawDestinationBuffer) and dest.pre_registered
        if isinstance(dest, _RawDestinationBuffer) and not pre:
            scratch = np.empty(shape, dtype=dtype)
            self._transport.read_ranges_into(payload, scratch.reshape(-1).view(np.uint8), ranges)
            target[...] = scratch
            return target
        self._transport.read_ranges_into(payload, target.reshape(-1).view(np.uint8), ranges, pre_registered=pre)
        return target

    def _read_tensor_rows_at(self, stage_ref: RemoteBundleRef, member: str, payload: Mapping[str, Any],
                             field: Mapping[str, Any], indices: Sequence[int], dest: Any) -> Any:
        if field.get("nested"):
            value = self.materialize(self.read_spec(stage_ref).select_members([member])).objects[member]
            return select_nested_rows(value, indices)
        layer = self._structured_store
        if not _rangeable(payload, field):
            return layer.read_tensor_rows(member, payload, field, None, dest, indices=list(indices))
        if dest is not None and not isinstance(dest, (_TensorObjectBufferPayload, _RawDestinationBuffer)):
            raise ValueError(f"structured tensor member {member} only supports tensor_object_buffer or "
                             f"raw_destination destinations")
        return layer.read_tensor_rows(member, payload, field, [(int(i), 1) for i in indices], dest)
