"""``mooncake._structured_infer``: choosing a codec for a column of per-row values, and splitting
nested per-row dicts / lists into leaf columns (``infer_structure``).

A column is a list with one value per row. ``None`` is a null row; ``MISSING`` marks a dict key
absent from that row (not the same as a ``None`` value)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import _structured_msgpack as msgpack

try:
    import torch as _torch
except Exception:  # torch is optional
    _torch = None

MAX_DICT_KEYS = 64       # a dict column with more distinct keys stays one leaf
MAX_LIST_ITEMS = 8       # a list column longer than this stays one leaf
MAX_SAMPLE_ROWS = 128    # rows whose encoded size is summed when judging a codec
MAX_SAMPLE_BYTES = 1 << 20
MAX_DEPTH = 32


@dataclass
class _CodecDecision:
    accepted: bool
    codec: str
    reason: str
    normalized_type: str
    metadata: Dict[str, Any] = field(default_factory=dict)


@dataclass
class _InferredLeaf:
    path: str
    values: List[Any]
    decision: _CodecDecision


@dataclass
class _InferredNode:
    path: str
    node_type: str  # "dict" or "list"
    children: List[Any]
    lengths: Optional[List[int]] = None
    row_mask: Optional[List[bool]] = None


class _Missing:
    """The value of a dict key that a row does not have."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<MISSING>"


MISSING = _Missing()


def present(values: List[Any]) -> List[Any]:
    """The values that are neither null nor missing."""
    return [v for v in values if v is not None and not isinstance(v, _Missing)]


def is_pil_image(value: Any) -> bool:
    return (getattr(type(value), "__module__", "") or "").startswith("PIL.") and hasattr(value, "save")


def is_bytes_like(value: Any) -> bool:
    return isinstance(value, (bytes, bytearray, memoryview))


def is_media_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(is_pil_image(v) or is_bytes_like(v) for v in value)


def is_tensor(value: Any) -> bool:
    return _torch is not None and isinstance(value, _torch.Tensor)


def _numeric_kind(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.number)


def _sequence_dtype(rows: List[Any]) -> Optional[np.dtype]:
    try:
        dt = np.result_type(*[np.asarray(r).dtype for r in rows])
    except (TypeError, ValueError, OverflowError):
        return None
    return dt if _numeric_kind(dt) else None


def _choose_leaf_codec(values: List[Any]) -> _CodecDecision:
    """The codec for one column: the first kind that every non-null row is."""
    rows = present(values)
    if not rows:
        return _CodecDecision(False, "msgpack_ragged", "every row is null", "msgpack")
    if all(is_tensor(v) for v in rows):
        dtypes = sorted({str(v.dtype) for v in rows})
        if len(dtypes) > 1:
            return _CodecDecision(False, "ragged_tensor", f"mixed tensor dtype: {dtypes}", "torch.Tensor")
        return _CodecDecision(True, "ragged_tensor", "tensor rows", "torch.Tensor", {"dtype": dtypes[0]})
    if all(is_media_list(v) for v in rows):
        return _CodecDecision(True, "media_list_ragged", "media list rows", "media list")
    if all(isinstance(v, np.ndarray) for v in rows):
        if all(_numeric_kind(v.dtype) for v in rows):
            return _CodecDecision(True, "typed_ragged", "numeric ndarray rows", "numeric sequence",
                                  {"recursive_source": "ndarray"})
        return _CodecDecision(False, "msgpack_ragged", "object ndarray rows", "python object")
    if all(isinstance(v, (list, tuple)) for v in rows):
        dt = _sequence_dtype(rows)
        if dt is not None:
            return _CodecDecision(True, "typed_ragged", "numeric sequence rows", "numeric sequence",
                                  {"dtype": str(dt)})
    if all(isinstance(v, (bool, int, float, np.number)) for v in rows):
        return _CodecDecision(True, "ndarray", "numeric scalar rows", "numeric scalar",
                              {"dtype": str(np.result_type(*rows))})
    if all(is_bytes_like(v) for v in rows):
        return _CodecDecision(True, "bytes_ragged", "bytes-like rows", "bytes-like")
    if all(is_pil_image(v) for v in rows):
        return _CodecDecision(True, "media_bytes", "image rows", "media")
    if all(isinstance(v, str) for v in rows):
        return _CodecDecision(True, "utf8_ragged", "str rows", "str")
    if all(isinstance(v, (dict, list, tuple)) for v in rows):
        return _codec_msgpack(rows)
    return _CodecDecision(False, "msgpack_ragged", "no codec fits", "python object")


def _codec_msgpack(rows: List[Any]) -> _CodecDecision:
    total = 0
    for i, row in enumerate(rows):
        try:
            size = len(msgpack.packb(row))
        except (TypeError, ValueError, OverflowError):
            return _CodecDecision(False, "msgpack_ragged", "a row does not serialize", "msgpack")
        if i < MAX_SAMPLE_ROWS:
            total += size
    if total > MAX_SAMPLE_BYTES:
        return _CodecDecision(False, "msgpack_ragged", "sampled rows too large", "msgpack")
    return _CodecDecision(True, "msgpack_ragged", "msgpack-able rows", "msgpack")


def _can_json(values: List[Any]) -> _CodecDecision:
    rows = present(values)
    if not rows:
        return _CodecDecision(False, "json_ragged", "every row is null", "json")
    total = 0
    for i, row in enumerate(rows):
        try:
            size = len(json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode())
        except (TypeError, ValueError, OverflowError, RecursionError):
            return _CodecDecision(False, "json_ragged", "a row does not serialize", "json")
        if i < MAX_SAMPLE_ROWS:
            total += size
    if total > MAX_SAMPLE_BYTES:
        return _CodecDecision(False, "json_ragged", "sampled rows too large", "json")
    return _CodecDecision(True, "json_ragged", "JSON-able rows", "json")


def _dict_keys(values: List[Any]) -> Optional[List[str]]:
    rows = present(values)
    if not rows or not all(isinstance(v, dict) for v in rows):
        return None
    keys = {k for v in rows for k in v}
    if len(keys) > MAX_DICT_KEYS or not all(isinstance(k, str) for k in keys):
        return None
    return sorted(keys)


def _list_shape(values: List[Any]) -> Optional[Tuple[int, List[int]]]:
    rows = present(values)
    if not rows or not all(isinstance(v, (list, tuple)) for v in rows):
        return None
    longest = max(len(v) for v in rows)
    if longest > MAX_LIST_ITEMS:
        return None
    if any(item is not None and not isinstance(item, (dict, list, tuple)) for v in rows for item in v):
        return None
    return longest, [len(v) if isinstance(v, (list, tuple)) else 0 for v in values]


def _escape_key(key: str) -> str:
    """A dict key as a path segment: backslash, dot and ``[`` escaped with a backslash."""
    out = []
    for ch in key:
        out.append("\\" + ch if ch in "\\.[" else ch)
    return "".join(out)


def infer_structure(path: str, values: List[Any], leaves: List[_InferredLeaf],
                    nodes: List[_InferredNode], *, _depth: int = 0) -> None:
    """Split ``values`` (one per row) into interior ``nodes`` (dicts and short lists of
    containers) and ``leaves`` (columns with a codec decision), appending to both lists."""
    if _depth > MAX_DEPTH:
        raise ValueError(f"infer_structure: nesting deeper than {MAX_DEPTH} at {path!r}")
    keys = _dict_keys(values)
    if keys is not None:
        nodes.append(_InferredNode(path, "dict", keys, row_mask=[isinstance(v, dict) for v in values]))
        for key in keys:
            column = [v.get(key, MISSING) if isinstance(v, dict) else None for v in values]
            infer_structure(f"{path}.{_escape_key(key)}", column, leaves, nodes, _depth=_depth + 1)
        return
    shape = _list_shape(values)
    if shape is not None:
        longest, lengths = shape
        mask = [isinstance(v, (list, tuple)) for v in values]
        nodes.append(_InferredNode(path, "list", list(range(longest)), lengths, row_mask=mask))
        for i in range(longest):
            column = []
            for v, is_list in zip(values, mask):
                if not is_list:
                    column.append(None)
                else:
                    column.append(v[i] if i < len(v) else MISSING)
            infer_structure(f"{path}[{i}]", column, leaves, nodes, _depth=_depth + 1)
        return
    leaves.append(_InferredLeaf(path, values, _choose_leaf_codec(values)))
