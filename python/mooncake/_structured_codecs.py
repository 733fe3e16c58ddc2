"""``mooncake._structured_codecs``: column codecs for DataProto ``non_tensor_batch`` fields (numpy
object arrays, one Python value per row). A codec turns the column into a few named payloads
(numpy arrays or byte buffers, each stored as one structured member) plus JSON metadata, and
back. ``None`` rows are kept as nulls by every codec.

==================  ============================================================================
codec               rows
==================  ============================================================================
typed_ragged        numeric arrays / sequences of any shape: one flat ``data`` array, ``offsets``,
                    per-row ``shapes`` / ``ndims``, ``nulls``
ragged_tensor       torch tensors of one dtype (typed_ragged underneath)
ndarray             numeric scalars: one ``data`` array and ``nulls``
bytes_ragged        bytes-like values: joined ``data``, ``offsets``, ``nulls``
utf8_ragged         str (as UTF-8 bytes_ragged)
json_ragged         JSON values (bytes_ragged of their JSON text)
msgpack_ragged      dicts / lists of plain values (bytes_ragged of MessagePack)
media_bytes         PIL images (raw pixels) or bytes
media_list_ragged   lists of images / bytes
==================  ============================================================================
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _structured_msgpack as msgpack
from ._structured_bundle import _bytes_view, _DirectCopyPayload, _MultiBufferPayload
from ._structured_infer import _CodecDecision, _choose_leaf_codec, is_pil_image
from ._structured_refs import FieldSchema
from ._structured_tensors import _torch, parse_torch_dtype, torch_dtype_to_numpy

TYPED_RAGGED_DEFAULT_DTYPE = "int64"
RAGGED_TENSOR_DEFAULT_DTYPE = "torch.float32"
ENCODING_ERRORS = (TypeError, ValueError, OverflowError, RuntimeError, RecursionError)


class _EncodedStructuredLeaf:
    """One encoded column: its codec, row count, named payloads and metadata."""

    def __init__(self, codec: str, rows: int, payload: Dict[str, Any], metadata: Dict[str, Any]) -> None:
        self.codec, self.rows, self.payload, self.metadata = codec, rows, payload, metadata


class _OwnerBackedList(list):
    """A list of rows that are views of pool memory; holds the pool lease's owner."""

    def __init__(self, values: Sequence[Any], owner: Any) -> None:
        super().__init__(values)
        self._mooncake_pool_owner = owner


class _OwnerBackedObjectArray(np.ndarray):
    def __array_finalize__(self, obj: Any) -> None:
        if obj is not None:
            self._mooncake_pool_owner = getattr(obj, "_mooncake_pool_owner", None)

    def tolist(self) -> List[Any]:
        rows = super().tolist()
        owner = getattr(self, "_mooncake_pool_owner", None)
        return rows if owner is None else _OwnerBackedList(rows, owner)


def _object_array_from_decoded_values(values: List[Any]) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    owner = getattr(values, "_mooncake_pool_owner", None)
    if owner is None:
        owner = next((getattr(v, "_mooncake_pool_owner", None) for v in values
                      if getattr(v, "_mooncake_pool_owner", None) is not None), None)
    if owner is None:
        return arr
    out = arr.view(_OwnerBackedObjectArray)
    out._mooncake_pool_owner = owner
    return out


def _concat_fn() -> Any:
    from . import structured_object_store as facade
    return facade._concat_arrays_into


def _flat_data(flats: List[np.ndarray], dtype: np.dtype, total: int) -> Any:
    """The ``data`` payload of typed_ragged: the rows' flat arrays, joined when stored."""
    if not flats or total == 0:
        empty = np.empty(0, dtype=dtype)
        return _MultiBufferPayload(buffers=(memoryview(empty).cast("B"),), owners=(empty,), dtype=dtype.str,
                                   shape=(0,))
    if len(flats) > 1 and _concat_fn() is not None:
        return _DirectCopyPayload.from_flat_arrays(flats, dtype, total)
    return _MultiBufferPayload(buffers=tuple(memoryview(f).cast("B") for f in flats), owners=tuple(flats),
                               dtype=dtype.str, shape=(total,))


def _as_contiguous(value: Any, dtype: np.dtype) -> np.ndarray:
    if isinstance(value, np.ndarray) and value.dtype == dtype and value.flags.c_contiguous:
        return value
    return np.ascontiguousarray(np.asarray(value, dtype=dtype))


def _encode_typed_ragged_regular_ndarray_rows(values: List[Any], dtype: np.dtype
                                              ) -> Optional[Tuple[Dict[str, Any], Dict[str, Any]]]:
    """The layout for two or more C-contiguous ndarray rows of one dtype and shape (no nulls):
    None otherwise."""
    dtype = np.dtype(dtype)
    if len(values) < 2 or not all(isinstance(v, np.ndarray) and v.dtype == dtype and v.flags.c_contiguous
                                  for v in values):
        return None
    shape = values[0].shape
    if any(v.shape != shape for v in values):
        return None
    return _typed_payload([v for v in values], dtype, "ndarray", None)


def _typed_payload(arrays: List[Optional[np.ndarray]], dtype: np.dtype, row_format: str,
                   ndarray_rows: Optional[List[bool]]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    n = len(arrays)
    real = [a for a in arrays if a is not None]
    max_ndim = max((a.ndim for a in real), default=0)
    offsets = np.zeros(n + 1, dtype=np.int64)
    ndims = np.zeros(n, dtype=np.int16)
    shapes = np.zeros((n, max(max_ndim, 1)), dtype=np.int64)
    nulls = np.asarray([a is None for a in arrays], dtype=np.bool_)
    for i, a in enumerate(arrays):
        size = 0 if a is None else a.size
        offsets[i + 1] = offsets[i] + size
        if a is not None:
            ndims[i] = a.ndim
            shapes[i, :a.ndim] = a.shape
    flats = [a.reshape(-1) for a in real]
    meta: Dict[str, Any] = {"dtype": str(dtype), "max_ndim": int(max_ndim), "shape_policy": "ragged",
                            "row_format": row_format, "ndarray_rows": ndarray_rows}
    if row_format == "ndarray":
        meta["physical_layout"] = "contiguous_flat"
    payload = {"data": _flat_data(flats, dtype, int(offsets[-1])), "offsets": offsets, "shapes": shapes,
               "ndims": ndims, "nulls": nulls}
    return payload, meta


def _encode_typed_ragged_values(values: List[Any], dtype_hint: Any = None
                                ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    if dtype_hint is None:
        rows = [np.asarray(v) for v in values if v is not None]
        dtype = np.result_type(*rows) if rows else np.dtype(TYPED_RAGGED_DEFAULT_DTYPE)
    else:
        dtype = np.dtype(dtype_hint)
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise ValueError("the typed_ragged codec needs a numeric dtype, not object")
    regular = _encode_typed_ragged_regular_ndarray_rows(values, dtype)
    if regular is not None:
        return regular
    is_arr = [isinstance(v, np.ndarray) for v in values]
    arrays = [None if v is None else _as_contiguous(v, dtype) for v in values]
    if all(v is None or a for v, a in zip(values, is_arr)) and any(is_arr):
        return _typed_payload(arrays, dtype, "ndarray", None)
    if any(is_arr):
        return _typed_payload(arrays, dtype, "mixed", [v is not None and a for v, a in zip(values, is_arr)])
    return _typed_payload(arrays, dtype, "list", None)


def _data_array(raw: Any, dtype: np.dtype) -> np.ndarray:
    if _torch is not None and isinstance(raw, _torch.Tensor):
        return raw.numpy()
    if isinstance(raw, np.ndarray):
        return raw if raw.dtype == dtype else raw.reshape(-1).view(np.uint8).view(dtype)
    if isinstance(raw, (bytes, bytearray, memoryview)):
        return np.frombuffer(raw, dtype=dtype)
    return np.asarray(raw, dtype=dtype)


def _decode_typed_ragged_values(payload: Mapping[str, Any], rows: int,
                                metadata: Optional[Mapping[str, Any]] = None) -> List[Any]:
    metadata = metadata or {}
    dtype = np.dtype(metadata.get("dtype", TYPED_RAGGED_DEFAULT_DTYPE))
    data = _data_array(payload["data"], dtype)
    owner = getattr(data, "_mooncake_pool_owner", None)
    source = data.view(np.ndarray)
    offsets, shapes, ndims, nulls = payload["offsets"], payload["shapes"], payload["ndims"], payload["nulls"]
    row_format = metadata.get("row_format")
    as_array = metadata.get("ndarray_rows") or []
    out: List[Any] = []
    for r in range(rows):
        if bool(nulls[r]):
            out.append(None)
            continue
        nd = int(ndims[r])
        view = source[int(offsets[r]):int(offsets[r + 1])].reshape(tuple(int(d) for d in shapes[r, :nd]))
        if row_format == "ndarray" or (row_format == "mixed" and bool(as_array[r])):
            out.append(view)
        else:
            out.append(view.tolist())
    return out if owner is None else _OwnerBackedList(out, owner)


def _encode_ragged_tensor_values(values: List[Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    if _torch is None:
        raise RuntimeError("ragged tensor fields need PyTorch")
    tdtype = None
    rows: List[Optional[np.ndarray]] = []
    for v in values:
        if v is None:
            rows.append(None)
            continue
        if isinstance(v, np.ndarray):
            if v.dtype == object:
                raise ValueError("the ragged tensor codec needs numeric ndarray rows")
            t = _torch.as_tensor(v.copy() if not v.flags.writeable else v)
        else:
            t = v.detach()
        t = t.cpu().contiguous()
        if t.dtype == _torch.bfloat16:
            raise ValueError("the ragged tensor codec does not support torch.bfloat16")
        if tdtype is None:
            tdtype = t.dtype
        elif t.dtype != tdtype:
            raise ValueError(f"mixed tensor dtype: {tdtype} vs {t.dtype}")
        rows.append(t.numpy())
    name = str(tdtype) if tdtype is not None else RAGGED_TENSOR_DEFAULT_DTYPE
    payload, meta = _encode_typed_ragged_values(rows, torch_dtype_to_numpy(name))
    meta["dtype"] = name
    return payload, meta


def _decode_ragged_tensor_values(payload: Mapping[str, Any], rows: int,
                                 metadata: Optional[Mapping[str, Any]] = None) -> List[Any]:
    name = (metadata or {}).get("dtype", RAGGED_TENSOR_DEFAULT_DTYPE)
    meta = dict(metadata or {})
    meta["dtype"] = str(torch_dtype_to_numpy(name))
    tdtype = parse_torch_dtype(name)
    out = []
    for v in _decode_typed_ragged_values(payload, rows, meta):
        if v is None:
            out.append(None)
        elif isinstance(v, np.ndarray):
            out.append(_torch.from_numpy(np.array(v)).to(tdtype))
        else:
            out.append(_torch.as_tensor(v, dtype=tdtype))
    return out


def _encode_numeric_scalar_values(values: List[Any], decision: _CodecDecision
                                  ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    dtype = np.dtype(decision.metadata["dtype"])
    fill = False if dtype == np.bool_ else 0
    data = np.asarray([fill if v is None else v for v in values], dtype=dtype)
    return ({"data": data, "nulls": np.asarray([v is None for v in values], dtype=np.bool_)},
            {"dtype": str(data.dtype), "shape": list(data.shape)})


def _decode_numeric_scalar_values(payload: Mapping[str, Any]) -> List[Any]:
    data, nulls = payload["data"], payload["nulls"]
    out = data.tolist()
    return [None if bool(n) else v for v, n in zip(out, nulls)] if bool(np.any(nulls)) else out


def _media_bytes(value: Any) -> Tuple[bytes, Optional[str], Dict[str, Any]]:
    if value is None:
        return b"", None, {"kind": "null"}
    if is_pil_image(value):
        image = value.convert(value.mode) if getattr(value, "readonly", False) else value
        return image.tobytes(), "image/raw", {"kind": "pil_raw", "mode": image.mode, "size": list(image.size),
                                              "format": getattr(value, "format", None)}
    return bytes(value), None, {"kind": "bytes"}


def _encode_bytes_like_values(values: List[Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    parts, kinds, types = [], [], set()
    offsets = [0]
    for v in values:
        data, mtype, enc = _media_bytes(v)
        parts.append(data)
        kinds.append(enc)
        if mtype:
            types.add(mtype)
        offsets.append(offsets[-1] + len(data))
    meta: Dict[str, Any] = {}
    if any(k["kind"] == "pil_raw" for k in kinds):
        meta["media_encodings"] = kinds
    if types:
        meta["media_types"] = sorted(types)
        meta["encode_source"] = "raw_pixels_from_object"
    data = _MultiBufferPayload(tuple(_bytes_view(p, "payload part") for p in parts if p), tuple(parts))
    return ({"data": data, "offsets": np.asarray(offsets, dtype=np.int64),
             "nulls": np.asarray([v is None for v in values], dtype=np.bool_)}, meta)


def _media_value(data: memoryview, enc: Optional[Mapping[str, Any]]) -> Any:
    if not enc or enc.get("kind") != "pil_raw":
        return bytes(data)
    try:
        from PIL import Image
    except ImportError:
        return bytes(data)
    image = Image.frombuffer(enc["mode"], tuple(enc["size"]), bytes(data), "raw", enc["mode"], 0, 1)
    image.format = enc.get("format")
    return image


def _decode_bytes_like_values(payload: Mapping[str, Any], rows: int,
                              metadata: Optional[Mapping[str, Any]] = None) -> List[Any]:
    data = memoryview(payload["data"]).cast("B") if not isinstance(payload["data"], np.ndarray) \
        else memoryview(payload["data"].reshape(-1).view(np.uint8))
    offsets, nulls = payload["offsets"], payload["nulls"]
    encs = (metadata or {}).get("media_encodings", [])
    return [None if bool(nulls[r]) else _media_value(data[int(offsets[r]):int(offsets[r + 1])],
                                                     encs[r] if r < len(encs) else None)
            for r in range(rows)]


def _encode_media_list_values(values: List[Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    row_offsets, byte_offsets, parts, encs, types = [0], [0], [], [], set()
    for v in values:
        items = [] if v is None else list(v)
        for item in items:
            data, mtype, enc = _media_bytes(item)
            parts.append(data)
            encs.append(enc)
            if mtype:
                types.add(mtype)
            byte_offsets.append(byte_offsets[-1] + len(data))
        row_offsets.append(row_offsets[-1] + len(items))
    meta: Dict[str, Any] = {"encode_source": "raw_pixels_from_object", "media_encodings": encs}
    if types:
        meta["media_types"] = sorted(types)
    return ({"data": b"".join(parts), "row_offsets": np.asarray(row_offsets, dtype=np.int64),
             "byte_offsets": np.asarray(byte_offsets, dtype=np.int64),
             "nulls": np.asarray([v is None for v in values], dtype=np.bool_)}, meta)


def _decode_media_list_values(payload: Mapping[str, Any], rows: int,
                              metadata: Optional[Mapping[str, Any]] = None) -> List[Any]:
    data = memoryview(bytes(payload["data"]) if isinstance(payload["data"], np.ndarray) else payload["data"])
    ro, bo, nulls = payload["row_offsets"], payload["byte_offsets"], payload["nulls"]
    encs = (metadata or {}).get("media_encodings", [])
    out: List[Any] = []
    for r in range(rows):
        if bool(nulls[r]):
            out.append(None)
            continue
        out.append([_media_value(data[int(bo[i]):int(bo[i + 1])], encs[i] if i < len(encs) else None)
                    for i in range(int(ro[r]), int(ro[r + 1]))])
    return out


def _encode_msgpack_ragged_values(path: str, values: List[Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    buf = bytearray()
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    nulls = np.zeros(len(values), dtype=np.bool_)
    for i, v in enumerate(values):
        if v is None:
            nulls[i] = True
        else:
            try:
                buf += msgpack.packb(v)
            except (TypeError, OverflowError) as err:
                raise ValueError(f"unsupported structured non-tensor field {path}: the msgpack codec cannot "
                                 f"encode a value ({err})") from err
        offsets[i + 1] = len(buf)
    return {"data": buf, "offsets": offsets, "nulls": nulls}, {}


def _decode_msgpack_ragged_values(payload: Mapping[str, Any], rows: int) -> List[Any]:
    offsets, nulls = payload["offsets"], payload["nulls"]
    if len(offsets) != rows + 1:
        raise ValueError(f"msgpack_ragged offsets length {len(offsets)} does not match rows {rows}")
    if len(nulls) != rows:
        raise ValueError(f"msgpack_ragged nulls length {len(nulls)} does not match rows {rows}")
    raw = payload["data"]
    data = bytes(raw.reshape(-1).view(np.uint8)) if isinstance(raw, np.ndarray) else bytes(raw)
    return [None if bool(nulls[r]) else msgpack.unpackb(data[int(offsets[r]):int(offsets[r + 1])])
            for r in range(rows)]


def _json_bytes(v: Any) -> bytes:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _schema_ndarray_dtype(schema: FieldSchema, *, required: bool = False) -> Optional[np.dtype]:
    name = schema.metadata.get("dtype")
    if name is None:
        if required:
            raise ValueError("FieldSchema metadata['dtype'] is required")
        return None
    try:
        dtype = np.dtype(name)
    except (TypeError, ValueError) as err:
        raise ValueError(f"invalid FieldSchema metadata['dtype']: {name!r}") from err
    if dtype.kind not in "biufc":
        raise ValueError(f"FieldSchema metadata['dtype'] must be numeric or bool, got {dtype}")
    return dtype


def _encode_codec(path: str, codec: str, values: List[Any], metadata: Mapping[str, Any],
                  dtype_hint: Any = None) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Payloads and metadata of ``values`` under one leaf codec."""
    if codec == "ragged_tensor":
        return _encode_ragged_tensor_values(values)
    if codec == "typed_ragged":
        return _encode_typed_ragged_values(values, dtype_hint)
    if codec == "ndarray":
        return _encode_numeric_scalar_values(values, _CodecDecision(True, "ndarray", "", "", dict(metadata)))
    if codec in ("bytes_ragged", "media_bytes"):
        return _encode_bytes_like_values(values)
    if codec == "media_list_ragged":
        return _encode_media_list_values(values)
    if codec == "utf8_ragged":
        return _encode_bytes_like_values([None if v is None else v.encode("utf-8") for v in values])
    if codec == "msgpack_ragged":
        return _encode_msgpack_ragged_values(path, values)
    if codec == "json_ragged":
        return _encode_bytes_like_values([None if v is None else _json_bytes(v) for v in values])
    raise ValueError(f"unsupported structured non-tensor codec: {codec}")


def _encode_structured_leaf(values: List[Any], decision: _CodecDecision, path: str = "") -> _EncodedStructuredLeaf:
    if not decision.accepted:
        where = f" {path}" if path else ""
        raise ValueError(f"unsupported structured non-tensor field{where}: {decision.reason}")
    payload, meta = _encode_codec(path, decision.codec, values, decision.metadata)
    meta.update({"schema_source": "inferred_from_runtime_values", "decision_reason": decision.reason,
                 "normalized_type": decision.normalized_type, **decision.metadata})
    return _EncodedStructuredLeaf(decision.codec, len(values), payload, meta)


def _decode_structured_leaf(codec: str, payload: Mapping[str, Any], rows: int,
                            metadata: Optional[Mapping[str, Any]] = None) -> List[Any]:
    if codec == "ragged_tensor":
        return _decode_ragged_tensor_values(payload, rows, metadata)
    if codec == "typed_ragged":
        return _decode_typed_ragged_values(payload, rows, metadata)
    if codec == "ndarray":
        return _decode_numeric_scalar_values(payload)
    if codec in ("bytes_ragged", "media_bytes"):
        return _decode_bytes_like_values(payload, rows, metadata if codec == "media_bytes" else None)
    if codec == "media_list_ragged":
        return _decode_media_list_values(payload, rows, metadata)
    if codec == "utf8_ragged":
        return [None if v is None else v.decode("utf-8") for v in _decode_bytes_like_values(payload, rows)]
    if codec == "msgpack_ragged":
        return _decode_msgpack_ragged_values(payload, rows)
    if codec == "json_ragged":
        return [None if v is None else json.loads(v) for v in _decode_bytes_like_values(payload, rows)]
    raise ValueError(f"unknown structured non-tensor codec: {codec}")


def _normalize_structured_scalar(value: Any) -> Any:
    """``value`` with numpy arrays and scalars turned into plain Python values."""
    if isinstance(value, np.ndarray):
        return _normalize_structured_scalar(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {k: _normalize_structured_scalar(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalize_structured_scalar(v) for v in value]
    return value


def _normalize_values_for_fallback_codec(values: List[Any], codec: str) -> List[Any]:
    if codec in ("msgpack_ragged", "json_ragged"):
        return [_normalize_structured_scalar(v) for v in values]
    return values


def _validate_schema_nullable(path: str, values: Any, schema: FieldSchema) -> None:
    if not schema.nullable and any(v is None for v in values):
        raise ValueError(f"FieldSchema for {path!r} is not nullable")


def _encode_with_schema(path: str, value: Any, schema: FieldSchema) -> _EncodedStructuredLeaf:
    """Encode a column with the codec ``schema`` names (``auto``: inferred, with fallbacks)."""
    values = list(value)
    _validate_schema_nullable(path, values, schema)
    codec = schema.codec
    if codec == "auto":
        return _encode_with_fallback(path, value)
    if codec == "ragged_tensor_dict":
        from ._structured_recursive import _encode_ragged_tensor_dict_values
        return _encode_ragged_tensor_dict_values(values, schema)
    hint = None
    if codec == "typed_ragged":
        hint = _schema_ndarray_dtype(schema)
    if codec == "ndarray":
        dtype = _schema_ndarray_dtype(schema)
        if dtype is None:
            return _encode_with_fallback(path, value)
        payload, meta = _encode_codec(path, codec, values, {"dtype": str(dtype)})
    else:
        payload, meta = _encode_codec(path, codec, values, schema.metadata, hint)
    return _EncodedStructuredLeaf(codec, len(values), payload, meta)


def _encode_with_fallback(path: str, value: Any) -> _EncodedStructuredLeaf:
    """The inferred codec, then msgpack, then JSON: the first that encodes every row."""
    from ._structured_recursive import _encode_recursive_if_structured

    values = list(value)
    errors: List[str] = []
    try:
        nested = _encode_recursive_if_structured(path, values)
        if nested is not None:
            return nested
    except ENCODING_ERRORS as err:
        errors.append(f"structured_recursive: {err}")
    decision = _choose_leaf_codec(values)
    for codec in dict.fromkeys([decision.codec, "msgpack_ragged", "json_ragged"]):
        meta = dict(decision.metadata) if codec == decision.codec else {}
        column = np.empty(len(values), dtype=object)
        column[:] = _normalize_values_for_fallback_codec(values, codec)
        try:
            return _encode_with_schema(path, column, FieldSchema(codec=codec, metadata=meta))
        except ENCODING_ERRORS as err:
            errors.append(f"{codec}: {err}")
    raise ValueError(f"unable to infer a safe codec for structured non-tensor field {path!r}; tried {errors}")

