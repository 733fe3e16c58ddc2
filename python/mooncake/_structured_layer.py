"""``mooncake._structured_layer``: structured objects over bundles. Each member is one bundle
buffer with a field spec in the object's metadata (under ``__mooncake_structured_fields__``):
``bytes`` (raw), ``ndarray`` (dtype and shape; C-order bytes, so an axis-0 slice is one byte
range) or ``torch_tensor`` (see ``_structured_tensors``)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ._structured_bundle import (_decode_json_dict, _DirectCopyPayload, _encode_json_dict,
                                 _MultiBufferPayload, _RawDestinationBuffer, _TensorObjectBufferPayload,
                                 _TensorPayload, _validate_key_segment)
from ._structured_refs import (STRUCTURED_FIELD_SPECS_KEY, RemoteBundleRef, StructuredMemberSlice,
                               StructuredObjectPayload, StructuredObjectReadSpec, StructuredObjectResult)
from ._structured_tensors import (_torch, decode_nested_parts, decode_tensor_object, decode_tensor_payload,
                                  encode_nested_parts, resized_header, select_nested_rows)


@dataclass(frozen=True)
class _NdarrayReadPlan:
    dtype: np.dtype
    full_shape: Tuple[int, ...]
    output_shape: Tuple[int, ...]
    byte_offset: int
    byte_length: int
    step: int
    cover_row_count: int


def _normalize_structured_metadata(metadata: Any) -> Dict[str, Any]:
    if not isinstance(metadata, Mapping):
        raise TypeError("structured metadata must be a mapping")
    out = dict(metadata)
    if STRUCTURED_FIELD_SPECS_KEY in out:
        raise ValueError(f"structured metadata key {STRUCTURED_FIELD_SPECS_KEY!r} is reserved")
    if not isinstance(out.get("layout", "structured"), str):
        raise ValueError("structured metadata layout must be a string")
    out.setdefault("layout", "structured")
    return out


def _encode_torch_tensor_field(value: Any) -> Tuple[Dict[str, Any], Any]:
    if value.is_nested:
        if value.layout != _torch.jagged:
            raise ValueError("structured nested tensor fields need the torch.jagged layout")
        spec, parts = encode_nested_parts(value)
        return ({"encoding": "torch_tensor", "dtype": str(value.dtype), "nested": True, **spec},
                _MultiBufferPayload(buffers=tuple(memoryview(p) for p in parts), owners=tuple(parts)))
    return ({"encoding": "torch_tensor", "dtype": str(value.dtype), "shape": list(value.shape),
             "element_size": int(value.element_size())}, _TensorPayload(tensor=value))


def _encode_structured_field(value: Any) -> Tuple[Dict[str, Any], Any]:
    """(field spec, what to store) for one member."""
    if isinstance(value, _TensorObjectBufferPayload):
        return {"encoding": "torch_tensor"}, value
    if isinstance(value, _TensorPayload):
        return _encode_torch_tensor_field(value.tensor)
    if isinstance(value, (_DirectCopyPayload, _MultiBufferPayload)):
        if value.dtype is not None and value.shape is not None:
            return {"encoding": "ndarray", "dtype": value.dtype, "shape": list(value.shape)}, value
        return {"encoding": "bytes"}, value
    if _torch is not None and isinstance(value, _torch.Tensor):
        return _encode_torch_tensor_field(value)
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise ValueError("structured ndarray members cannot hold Python objects (dtype=object)")
        arr = np.ascontiguousarray(value)
        return ({"encoding": "ndarray", "dtype": arr.dtype.str, "shape": list(arr.shape)},
                arr.reshape(-1).view(np.uint8))
    return {"encoding": "bytes"}, value


def _encode_structured_fields(metadata: Any, fields: Mapping[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    meta = _normalize_structured_metadata(metadata)
    specs: Dict[str, Any] = {}
    encoded: Dict[str, Any] = {}
    for name, value in fields.items():
        _validate_key_segment(name, "buffer name")
        specs[name], encoded[name] = _encode_structured_field(value)
    if specs:
        meta[STRUCTURED_FIELD_SPECS_KEY] = specs
    return meta, encoded


def _encode_structured_metadata(metadata: Mapping[str, Any]) -> bytes:
    return _encode_json_dict(metadata, "structured metadata")


def _decode_structured_metadata(data: bytes) -> Dict[str, Any]:
    return _decode_json_dict(data, "structured metadata")


def _structured_field_specs(metadata: Mapping[str, Any]) -> Dict[str, Any]:
    specs = metadata.get(STRUCTURED_FIELD_SPECS_KEY, {})
    if not isinstance(specs, dict):
        raise ValueError("structured field specs must be a mapping")
    return specs


def _normalized_member_slice(sl: StructuredMemberSlice, rows: int) -> Tuple[int, int, int]:
    if sl.step <= 0:
        raise ValueError("structured slicing step must be positive")
    return slice(sl.start, sl.end, sl.step).indices(rows)


def _resolve_ndarray_read_plan(shape: Tuple[int, ...], dtype: np.dtype,
                               sl: Optional[StructuredMemberSlice]) -> _NdarrayReadPlan:
    if sl is None:
        n = (int(np.prod(shape, dtype=np.int64)) if shape else 1) * dtype.itemsize
        return _NdarrayReadPlan(dtype, shape, shape, 0, n, 1, shape[0] if shape else 1)
    if sl.axis != 0:
        raise ValueError("structured ndarray slicing supports axis=0 only")
    if not shape:
        raise ValueError("structured ndarray slicing needs at least one dimension")
    start, end, step = _normalized_member_slice(sl, shape[0])
    row = dtype.itemsize * int(np.prod(shape[1:], dtype=np.int64))
    if start >= end:
        return _NdarrayReadPlan(dtype, shape, (0, *shape[1:]), start * row, 0, step, 0)
    count = 1 + (end - 1 - start) // step
    cover = (count - 1) * step + 1
    return _NdarrayReadPlan(dtype, shape, (count, *shape[1:]), start * row, cover * row, step, cover)


def _resolve_ndarray_destination(name: str, dest: Any, dtype: np.dtype, shape: Tuple[int, ...]) -> np.ndarray:
    if dest is None:
        return np.empty(shape, dtype=dtype)
    if isinstance(dest, _RawDestinationBuffer):
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if dest.size < n:
            raise ValueError(f"raw destination has {dest.size} bytes, expected at least {n}")
        raw = (ctypes.c_uint8 * n).from_address(dest.ptr)
        return np.frombuffer(raw, dtype=np.uint8).view(dtype).reshape(shape)
    if not isinstance(dest, np.ndarray):
        raise TypeError(f"structured ndarray field {name}: the destination must be a numpy.ndarray or "
                        f"raw_destination")
    if dest.dtype != dtype:
        raise ValueError(f"structured ndarray field {name} destination dtype mismatch: expected {dtype.str}, "
                         f"got {dest.dtype.str}")
    if tuple(dest.shape) != tuple(shape):
        raise ValueError(f"structured ndarray field {name} destination shape mismatch: expected {tuple(shape)}, "
                         f"got {tuple(dest.shape)}")
    if not dest.flags["C_CONTIGUOUS"]:
        raise ValueError(f"structured ndarray field {name}: the destination must be C-contiguous")
    if not dest.flags["WRITEABLE"]:
        raise ValueError(f"structured ndarray field {name}: the destination must be writeable")
    return dest


class _StructuredObjectLayer:
    def __init__(self, bundle_store: Any) -> None:
        self._bundle_store = bundle_store
        self._transport = bundle_store._transport

    def put_structured_object(self, payload: StructuredObjectPayload, partition: str, chunk_bytes: Optional[int],
                              policy: Any, max_inflight_put: Optional[int], config: Any = None) -> RemoteBundleRef:
        if not isinstance(payload, StructuredObjectPayload):
            raise TypeError(f"expected a StructuredObjectPayload, got {type(payload).__name__}")
        metadata, buffers = _encode_structured_fields(payload.metadata, payload.buffers)
        p = self._bundle_store._policy(policy, max_inflight_put)
        return self._bundle_store.put_bundle(_encode_structured_metadata(metadata), buffers, partition,
                                             chunk_bytes, p, None, config)

    def read_spec(self, ref: Any) -> StructuredObjectReadSpec:
        return StructuredObjectReadSpec(ref=ref)

    def materialize(self, spec: StructuredObjectReadSpec) -> StructuredObjectResult:
        return self.materialize_into(spec, None)

    def materialize_into(self, spec: StructuredObjectReadSpec,
                         destinations: Optional[Mapping[str, Any]]) -> StructuredObjectResult:
        metadata, buffers, names = self._resolve(spec)
        specs = _structured_field_specs(metadata)
        dests = destinations or {}
        slices = dict(spec.member_slices)
        objects = {n: self.read_member(n, buffers[n], specs.get(n, {"encoding": "bytes"}), slices.get(n),
                                       dests.get(n)) for n in names}
        return StructuredObjectResult(metadata=dict(metadata), objects=objects)

    def _resolve(self, spec: StructuredObjectReadSpec) -> Tuple[Dict[str, Any], Mapping[str, Any], List[str]]:
        if spec.member_names is not None and not spec.member_names:
            raise ValueError("structured read spec selected no members")
        manifest = self._bundle_store.resolve_manifest(spec.ref)
        metadata = _decode_structured_metadata(self._bundle_store.read_payload(manifest["meta"]))
        buffers = manifest["buffers"]
        names = list(buffers) if spec.member_names is None else list(spec.member_names)
        unknown = [n for n in names if n not in buffers]
        if unknown:
            raise KeyError(f"unknown bundle buffers: {unknown}")
        return metadata, buffers, names

    def read_member(self, name: str, payload: Mapping[str, Any], field: Mapping[str, Any],
                    sl: Optional[StructuredMemberSlice], dest: Any) -> Any:
        encoding = field.get("encoding", "bytes")
        if encoding == "bytes":
            return self._read_bytes(name, payload, sl, dest)
        if encoding == "ndarray":
            return self._read_ndarray(name, payload, field, sl, dest)
        if encoding == "torch_tensor":
            return self._read_tensor(name, payload, field, sl, dest)
        raise ValueError(f"unsupported structured field encoding: {encoding}")

    def _read_bytes(self, name: str, payload: Mapping[str, Any], sl: Any, dest: Any) -> Any:
        if sl is not None:
            raise ValueError(f"structured bytes member {name} does not support slicing")
        if dest is not None:
            raise ValueError(f"structured bytes member {name} does not support materialize_into")
        n = int(payload.get("bytes", 0))
        if n > 0:
            arr = self._transport.read_payload_range_into_pool_array(payload, np.dtype(np.uint8), (n,), 0)
            if arr is not None:
                return arr
        return self._bundle_store.read_payload(payload)

    def _read_ndarray(self, name: str, payload: Mapping[str, Any], field: Mapping[str, Any],
                      sl: Optional[StructuredMemberSlice], dest: Any) -> np.ndarray:
        dtype, shape = field.get("dtype"), field.get("shape")
        if not isinstance(dtype, str) or not isinstance(shape, list):
            raise ValueError(f"structured ndarray field {name} is missing dtype or shape")
        plan = _resolve_ndarray_read_plan(tuple(int(d) for d in shape), np.dtype(dtype), sl)
        if dest is None and plan.byte_length > 0 and plan.step == 1:
            arr = self._transport.read_payload_range_into_pool_array(payload, plan.dtype, plan.output_shape,
                                                                     plan.byte_offset)
            if arr is not None:
                return arr
        target = _resolve_ndarray_destination(name, dest, plan.dtype, plan.output_shape)
        if plan.byte_length == 0:
            return target
        pre = isinstance(dest, _RawDestinationBuffer) and dest.pre_registered
        if plan.step == 1:
            self._transport.read_ranges_into(payload, target.reshape(-1).view(np.uint8),
                                             [(plan.byte_offset, 0, plan.byte_length)], pre_registered=pre,
                                             allow_get_into=True)
            return target
        cover = np.empty((plan.cover_row_count, *plan.full_shape[1:]), dtype=plan.dtype)
        self._transport.read_ranges_into(payload, cover.reshape(-1).view(np.uint8),
                                         [(plan.byte_offset, 0, plan.byte_length)], allow_get_into=True)
        target[...] = cover[::plan.step]
        return target

    def _read_tensor(self, name: str, payload: Mapping[str, Any], field: Mapping[str, Any],
                     sl: Optional[StructuredMemberSlice], dest: Any) -> Any:
        if field.get("nested"):
            if dest is not None:
                raise ValueError(f"structured nested tensor member {name} does not support destinations")
            value = decode_nested_parts(self._bundle_store.read_payload(payload), field)
            if sl is None:
                return value
            if sl.axis != 0:
                raise ValueError("structured nested tensor slicing supports axis=0 only")
            return select_nested_rows(value, range(*_normalized_member_slice(sl, value.size(0))))
        if dest is not None and not isinstance(dest, (_TensorObjectBufferPayload, _RawDestinationBuffer)):
            raise ValueError(f"structured tensor member {name} only supports tensor_object_buffer or "
                             f"raw_destination destinations")
        if sl is not None:
            if sl.axis != 0:
                raise ValueError("structured tensor slicing supports axis=0 only")
            if not _rangeable(payload, field):
                return self.read_tensor_rows(name, payload, field, None, dest, sl)
            start, end, step = _normalized_member_slice(sl, int(field["shape"][0]))
            if step != 1:
                raise ValueError("structured tensor slicing requires step=1")
            count = max(0, end - start)
            return self.read_tensor_rows(name, payload, field, [(start, count)], dest)
        if dest is not None:
            return self._read_tensor_into(payload, dest)
        if payload.get("kind") == "tensor":
            return self._transport.read_tensor_payload(payload)
        return decode_tensor_payload(self._bundle_store.read_payload(payload), field, payload)

    def _read_tensor_into(self, payload: Mapping[str, Any], dest: Any) -> Any:
        if payload.get("kind") == "tensor":
            fn = getattr(self._transport._store, "get_tensor_into", None)
            if not callable(fn):
                raise RuntimeError("structured tensor payload: the store does not support get_tensor_into")
            got = fn(payload["key"], dest.ptr, dest.size)
            return dest if got is None else got
        n = int(payload["bytes"])
        if dest.size < n:
            raise ValueError(f"tensor destination has {dest.size} bytes, expected at least {n}")
        self._transport.read_range_into_ptr(payload, dest.ptr, 0, 0, n,
                                            pre_registered=getattr(dest, "pre_registered", False))
        return dest

    def read_tensor_rows(self, name: str, payload: Mapping[str, Any], field: Mapping[str, Any],
                         segments: Optional[List[Tuple[int, int]]], dest: Any,
                         sl: Optional[StructuredMemberSlice] = None, indices: Optional[List[int]] = None) -> Any:
        """Rows of a tensor member: ``segments`` ((first row, row count) each, in output order)
        read as byte ranges after the header; payloads without a header (torch.save, objects
        written by the caller) are read whole and indexed (``sl`` or ``indices``)."""
        if segments is None:
            if dest is not None:
                raise ValueError(f"structured tensor member {name} ({payload.get('format', 'object')}) "
                                 f"does not support destinations with row selection")
            if payload.get("kind") == "tensor":
                value = self._transport.read_tensor_payload(payload)
            else:
                value = decode_tensor_payload(self._bundle_store.read_payload(payload), field, payload)
            if indices is not None:
                return value[list(indices)]
            start, end, step = _normalized_member_slice(sl, len(value))
            return value[start:end:step]
        shape = [int(d) for d in field["shape"]]
        if not shape:
            raise ValueError("structured tensor row reads need at least one dimension")
        head = int(payload["metadata_bytes"])
        width = int(field["element_size"]) * int(np.prod(shape[1:], dtype=np.int64))
        rows = sum(c for _, c in segments)
        nbytes = rows * width
        header = resized_header(self._bundle_store.read_payload_range(payload, 0, head), [rows, *shape[1:]], nbytes)
        ranges, pos = [], 0
        for first, count in segments:
            ranges.append((head + first * width, pos * width, count * width))
            pos += count
        if dest is not None:
            need = len(header) + nbytes
            if dest.size < need:
                raise ValueError(f"tensor destination has {dest.size} bytes, expected at least {need}")
            ctypes.memmove(dest.ptr, header, len(header))
            data = bytearray(nbytes)
            self._transport.read_ranges_into(payload, data, ranges)
            if nbytes:
                ctypes.memmove(dest.ptr + len(header), bytes(data), nbytes)
            return dest
        data = bytearray(nbytes)
        self._transport.read_ranges_into(payload, data, ranges)
        return decode_tensor_object(header + bytes(data))


def _rangeable(payload: Mapping[str, Any], field: Mapping[str, Any]) -> bool:
    """Whether a tensor member's rows are byte ranges (a tensor object with a known header)."""
    return ("metadata_bytes" in payload and "format" not in payload and isinstance(field.get("shape"), list)
            and int(field.get("element_size", 0)) > 0)

