"""``mooncake._structured_dpsupport``: the DataProto plumbing that does not touch the store:
splitting a DataProto-like value (or a flat dict) into ``batch`` / ``non_tensor_batch`` /
``meta_info``, field schemas' sections, row selections, and building results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ._structured_codecs import _schema_ndarray_dtype
from ._structured_layer import _normalized_member_slice
from ._structured_refs import FieldSchema, MooncakeDataProtoRef, StructuredMemberSlice
from ._structured_tensors import _torch

SECTIONS = ("batch", "non_tensor_batch", "meta_info")


@dataclass(frozen=True)
class _DataProtoRowSelection:
    count: int
    member_slice: Optional[StructuredMemberSlice] = None
    indices: Optional[Tuple[int, ...]] = None


def _mapping_to_dict(value: Any) -> Dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    items = getattr(value, "items", None)
    if callable(items):
        return dict(items())
    raise TypeError(f"expected a mapping-like value, got {type(value).__name__}")


def _is_envelope(data: Mapping[str, Any]) -> bool:
    return bool(data) and set(data) <= set(SECTIONS) and all(
        v is None or isinstance(v, Mapping) or callable(getattr(v, "items", None)) for v in data.values())


def _split_dataproto_like(data: Any) -> Tuple[Dict[str, Any], Dict[str, Any], Dict[str, Any]]:
    """(batch, non_tensor_batch, meta_info) of a DataProto, an envelope dict or a plain dict
    (all batch)."""
    if isinstance(data, Mapping):
        if _is_envelope(data):
            return tuple(_mapping_to_dict(data.get(s)) for s in SECTIONS)  # type: ignore[return-value]
        return dict(data), {}, {}
    return tuple(_mapping_to_dict(getattr(data, s, None)) for s in SECTIONS)  # type: ignore[return-value]


def _dataproto_batch_size(batch: Mapping[str, Any], non_tensor: Mapping[str, Any]) -> int:
    sizes = {len(v) for section in (batch, non_tensor) for v in section.values()}
    if len(sizes) > 1:
        raise ValueError(f"DataProto fields have inconsistent batch sizes: {sorted(sizes)}")
    return sizes.pop() if sizes else 0


def _schema_section(name: str, schema: FieldSchema) -> Optional[str]:
    section = schema.metadata.get("section")
    if section is not None and section not in SECTIONS:
        raise ValueError(f"FieldSchema for {name!r}: metadata['section'] must be one of {sorted(SECTIONS)}")
    return section


def _schema_for_section(schemas: Optional[Mapping[str, FieldSchema]], name: str,
                        section: str) -> Optional[FieldSchema]:
    schema = (schemas or {}).get(name)
    if schema is None:
        return None
    declared = _schema_section(name, schema)
    return schema if declared in (None, section) else None


def _validate_dataproto_schema_sections(batch: Mapping[str, Any], non_tensor: Mapping[str, Any],
                                        meta: Mapping[str, Any],
                                        schemas: Optional[Mapping[str, FieldSchema]]) -> None:
    if not schemas:
        return
    where: Dict[str, set] = {}
    for section, fields in zip(SECTIONS, (batch, non_tensor, meta)):
        for name in fields:
            where.setdefault(name, set()).add(section)
    for name, schema in schemas.items():
        declared = _schema_section(name, schema)
        actual = where.get(name)
        if declared is None or not actual or declared in actual:
            continue
        found = ", ".join(repr(s) for s in sorted(actual))
        raise ValueError(f"FieldSchema for {name!r} declares section {declared!r}, but data contains it in {found}")


def _coerce_schema_non_tensor_value(name: str, value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if _is_non_string_sequence(value):
        out = np.empty(len(value), dtype=object)
        out[:] = list(value)
        return out
    raise TypeError(f"non_tensor_batch field {name!r} with a FieldSchema must be an ndarray or a non-string sequence")


def _is_non_string_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _is_dense(value: Any) -> bool:
    if _torch is not None and isinstance(value, _torch.Tensor):
        return value.ndim > 0
    return isinstance(value, np.ndarray) and value.dtype != object and value.ndim > 0


def _field_len(name: str, value: Any) -> int:
    try:
        return len(value)
    except TypeError as err:
        raise ValueError(f"flat dict row-aligned field {name!r} must be sized") from err


def _flat_dict_row_count(data: Mapping[str, Any], schemas: Mapping[str, FieldSchema]) -> Tuple[int, int]:
    """(rows fixed by schemas or 0, rows to use)."""
    fixed = {_field_len(n, data[n]) for n, s in schemas.items()
             if n in data and _schema_section(n, s) in ("batch", "non_tensor_batch")}
    if len(fixed) > 1:
        raise ValueError(f"flat dict fields have inconsistent batch sizes: {sorted(fixed)}")
    if fixed:
        n = fixed.pop()
        return n, n
    skip = {n for n, s in schemas.items() if n in data and _schema_section(n, s) == "meta_info"}
    dense = {len(v) for k, v in data.items() if k not in skip and _is_dense(v)}
    if len(dense) > 1:
        raise ValueError(f"flat dict dense fields have ambiguous batch sizes: {sorted(dense)}")
    if dense:
        return 0, dense.pop()
    sized = {len(v) for k, v in data.items() if k not in skip and (
        (isinstance(v, np.ndarray) and v.ndim > 0) or _is_non_string_sequence(v))}
    if len(sized) > 1:
        raise ValueError(f"flat dict fields have ambiguous batch sizes: {sorted(sized)}; pass FieldSchema "
                         f"metadata['section'] for list-valued metadata fields")
    return 0, (sized.pop() if sized else 0)


def _coerce_flat_non_tensor(name: str, value: Any, rows: int, schema: Optional[FieldSchema]) -> Any:
    if isinstance(value, np.ndarray) or _is_non_string_sequence(value):
        if len(value) != rows:
            raise ValueError(f"flat dict non_tensor_batch field {name!r} has batch size {len(value)}, "
                             f"expected {rows}")
    if isinstance(value, np.ndarray):
        dtype = _schema_ndarray_dtype(schema) if schema is not None else None
        if (schema is not None and schema.codec == "ndarray" and dtype is not None
                and (value.dtype != object or all(v is not None for v in value))):
            return np.asarray(value, dtype=dtype)
        return value
    if _is_non_string_sequence(value):
        out = np.empty(rows, dtype=object)
        out[:] = list(value)
        return out
    raise TypeError(f"flat dict non_tensor_batch field {name!r} must be an ndarray or a non-string sequence")


def _flat_dict_to_envelope(data: Any, schemas: Optional[Mapping[str, FieldSchema]] = None) -> Dict[str, Any]:
    """A flat dict as an envelope: dense row-aligned arrays / tensors go to ``batch``, other
    row-aligned sequences to ``non_tensor_batch``, everything else to ``meta_info`` (a schema's
    ``section`` decides for its field)."""
    if not isinstance(data, Mapping):
        raise TypeError("a flat dict payload must be a mapping")
    schemas = schemas or {}
    fixed, rows = _flat_dict_row_count(data, schemas)
    out: Dict[str, Dict[str, Any]] = {s: {} for s in SECTIONS}
    for key, value in data.items():
        schema = schemas.get(key)
        section = None if schema is None else _schema_section(key, schema)
        if section is None:
            if rows and _is_dense(value) and tuple(value.shape[:1]) == (rows,):
                section = "batch"
            elif fixed == 0 and _is_non_string_sequence(value) and len(value) == rows:
                section = "non_tensor_batch"
            else:
                section = "meta_info"
        out[section][key] = (_coerce_flat_non_tensor(key, value, rows, schema)
                             if section == "non_tensor_batch" else value)
    return out


def _envelope_to_flat_dict(data: Mapping[str, Any]) -> Dict[str, Any]:
    meta, batch, nt = (_mapping_to_dict(data.get(s)) for s in ("meta_info", "batch", "non_tensor_batch"))
    overlap = (set(meta) & set(batch)) | (set(meta) & set(nt)) | (set(batch) & set(nt))
    if overlap:
        raise ValueError(f"Duplicate keys found across DataProto sections: {sorted(overlap)}")
    out = dict(meta)
    out.update(batch)
    for k, v in nt.items():
        out[k] = v.tolist() if isinstance(v, np.ndarray) and v.dtype == object else v
    return out


def _build_dataproto_like_result(batch: Dict[str, Any], non_tensor: Dict[str, Any], meta: Dict[str, Any],
                                 data_cls: Any) -> Any:
    if data_cls is None or data_cls is dict:
        return {"batch": batch, "non_tensor_batch": non_tensor, "meta_info": meta}
    try:
        from_dict = getattr(data_cls, "from_dict", None)
        if callable(from_dict):
            return from_dict(batch, non_tensor, meta_info=meta)
        return data_cls(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)
    except TypeError as err:
        raise TypeError(f"{getattr(data_cls, '__name__', data_cls)!r} cannot be constructed from batch, "
                        f"non_tensor_batch and meta_info") from err


def _resolve_dataproto_field_selection(ref: MooncakeDataProtoRef, fields: Optional[Sequence[str]],
                                       batch_fields: Optional[Sequence[str]],
                                       non_tensor_fields: Optional[Sequence[str]]) -> Tuple[List[str], List[str]]:
    if fields is not None and (batch_fields is not None or non_tensor_fields is not None):
        raise ValueError("fields cannot be combined with batch_fields or non_tensor_fields")
    if fields is not None:
        names = list(fields)
        _check_fields(ref, names)
        return ([n for n in names if ref.field_index[n].section == "batch"],
                [n for n in names if ref.field_index[n].section == "non_tensor_batch"])
    if batch_fields is None and non_tensor_fields is None:
        b = [n for n, loc in ref.field_index.items() if loc.section == "batch"]
        nt = [n for n, loc in ref.field_index.items() if loc.section == "non_tensor_batch"]
    else:
        b, nt = list(batch_fields or []), list(non_tensor_fields or [])
    _check_fields(ref, b + nt)
    return b, nt


def _check_fields(ref: MooncakeDataProtoRef, names: Sequence[str]) -> None:
    unknown = [n for n in names if n not in ref.field_index]
    if unknown:
        raise KeyError(f"unknown DataProto fields: {unknown}")


def _slice_length(sl: StructuredMemberSlice, rows: int) -> int:
    start, end, step = _normalized_member_slice(sl, rows)
    return 0 if start >= end else 1 + (end - 1 - start) // step


def _coerce_dataproto_row_selection(rows: Any, total: int) -> Optional[_DataProtoRowSelection]:
    if rows is None:
        return None
    if isinstance(rows, StructuredMemberSlice):
        if rows.axis != 0:
            raise ValueError("DataProto row slicing supports axis=0 only")
        return _DataProtoRowSelection(_slice_length(rows, total), member_slice=rows)
    if isinstance(rows, slice):
        start, end, step = rows.indices(total)
        if step <= 0:
            raise ValueError("DataProto row slicing step must be positive")
        sl = StructuredMemberSlice(axis=0, start=start, end=end, step=step)
        return _DataProtoRowSelection(_slice_length(sl, total), member_slice=sl)
    if isinstance(rows, (Sequence, np.ndarray)) and not isinstance(rows, (str, bytes, bytearray)):
        out = []
        for index in rows:
            if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
                raise TypeError("DataProto row indices must be integers")
            i = int(index) + (total if int(index) < 0 else 0)
            if not 0 <= i < total:
                raise IndexError(f"DataProto row index {index} out of range for {total} rows")
            out.append(i)
        return _DataProtoRowSelection(len(out), indices=tuple(out))
    raise TypeError("DataProto rows must be a slice, a StructuredMemberSlice or a sequence of row indices")


def _select_mapping(value: Mapping[str, Any], keys: Optional[Sequence[str]]) -> Dict[str, Any]:
    return dict(value) if keys is None else {k: value[k] for k in keys if k in value}


def _merge_structured_stage_metadata(old: Mapping[str, Any], new: Mapping[str, Any]) -> Dict[str, Any]:
    from ._structured_refs import STRUCTURED_FIELD_SPECS_KEY

    merged = dict(old)
    for k, v in new.items():
        if k != STRUCTURED_FIELD_SPECS_KEY:
            merged[k] = v
    specs = dict(old.get(STRUCTURED_FIELD_SPECS_KEY, {}))
    clash = sorted(set(specs) & set(new.get(STRUCTURED_FIELD_SPECS_KEY, {})))
    if clash:
        raise ValueError(f"structured members already exist: {clash}")
    specs.update(new.get(STRUCTURED_FIELD_SPECS_KEY, {}))
    if specs:
        merged[STRUCTURED_FIELD_SPECS_KEY] = specs
    return merged
