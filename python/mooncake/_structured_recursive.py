"""``mooncake._structured_recursive``: non-tensor columns whose rows are nested dicts / short
lists (``structured_recursive``: every leaf column gets its own codec, every interior node its
masks), and ``ragged_tensor_dict`` (rows that are dicts of tensors, one ragged_tensor column per
key). Also the entry points the DataProto code uses to encode and decode a non-tensor column."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ._structured_codecs import (ENCODING_ERRORS, _decode_ragged_tensor_values, _decode_structured_leaf,
                                 _encode_ragged_tensor_values, _encode_structured_leaf, _EncodedStructuredLeaf,
                                 _normalize_values_for_fallback_codec)
from ._structured_infer import (MISSING, _choose_leaf_codec, _CodecDecision, _escape_key, _InferredLeaf,
                                _InferredNode, _Missing, infer_structure, present)
from ._structured_refs import FieldSchema

_RECURSIVE_LEAF_CODECS = ("ragged_tensor", "bytes_ragged", "media_bytes", "media_list_ragged")
_RAGGED_TENSOR_PAYLOAD_NAMES = frozenset({"data", "offsets", "shapes", "ndims", "nulls"})


def _should_encode_non_tensor_field(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype == object


def _leaf_needs_recursion(leaf: _InferredLeaf) -> bool:
    codec = leaf.decision.codec
    if codec in _RECURSIVE_LEAF_CODECS:
        return True
    return codec == "typed_ragged" and any(isinstance(v, np.ndarray) for v in present(leaf.values))


def _structured_path_tokens(path: str) -> List[Any]:
    """``a.b[2].c`` -> ["a", "b", 2, "c"] (backslash escapes a character)."""
    tokens: List[Any] = []
    cur: List[str] = []
    i = 0
    while i < len(path):
        ch = path[i]
        if ch == "\\" and i + 1 < len(path):
            cur.append(path[i + 1])
            i += 2
            continue
        if ch in ".[":
            if cur:
                tokens.append("".join(cur))
                cur = []
            if ch == "[":
                end = path.index("]", i)
                tokens.append(int(path[i + 1:end]))
                i = end + 1
                continue
            i += 1
            continue
        cur.append(ch)
        i += 1
    if cur:
        tokens.append("".join(cur))
    return tokens


def _lookup_structured_path(value: Any, root: str, target: str) -> Any:
    rest = target[len(root):].lstrip(".") if target.startswith(root) else target
    cur = value
    for tok in (_structured_path_tokens(rest) if rest else []):
        if isinstance(tok, str):
            if not isinstance(cur, dict) or tok not in cur:
                return MISSING
        elif not isinstance(cur, (list, tuple)) or tok >= len(cur):
            return MISSING
        cur = cur[tok]
    return cur


def _encode_recursive(path: str, values: List[Any], leaves: Sequence[_InferredLeaf],
                      nodes: Sequence[_InferredNode], strict: bool) -> _EncodedStructuredLeaf:
    """``strict``: a leaf whose inferred codec is refused raises (the caller then falls back);
    otherwise the leaf goes through the schema path with its decision."""
    from ._structured_codecs import _encode_with_schema

    payload: Dict[str, Any] = {}
    node_specs: List[Dict[str, Any]] = []
    for i, node in enumerate(nodes):
        spec: Dict[str, Any] = {"id": i, "path": node.path, "node_type": node.node_type,
                                "children": list(node.children)}
        payload[f"node.{i}.missing"] = np.asarray(
            [_lookup_structured_path(v, path, node.path) is MISSING for v in values], dtype=np.bool_)
        spec["missing_payload"] = f"node.{i}.missing"
        if node.row_mask is not None:
            payload[f"node.{i}.row_mask"] = np.asarray(node.row_mask, dtype=np.bool_)
            spec["row_mask_payload"] = f"node.{i}.row_mask"
        if node.lengths is not None:
            payload[f"node.{i}.lengths"] = np.asarray(node.lengths, dtype=np.int64)
            spec["lengths_payload"] = f"node.{i}.lengths"
        node_specs.append(spec)
    leaf_specs: List[Dict[str, Any]] = []
    for i, leaf in enumerate(leaves):
        missing = np.asarray([isinstance(v, _Missing) for v in leaf.values], dtype=np.bool_)
        column = [None if m else v for m, v in zip(missing, leaf.values)]
        decision = leaf.decision
        if not decision.accepted and all(v is None or isinstance(v, _Missing) for v in leaf.values):
            decision = _CodecDecision(True, "json_ragged", "every row is null or missing", "json")
        if strict:
            encoded = _encode_structured_leaf(column, decision, leaf.path)
        else:
            arr = np.empty(len(column), dtype=object)
            arr[:] = _normalize_values_for_fallback_codec(column, decision.codec)
            encoded = _encode_with_schema(leaf.path, arr, FieldSchema(codec=decision.codec,
                                                                      metadata=decision.metadata))
        members: Dict[str, str] = {}
        for name, part in encoded.payload.items():
            payload[f"leaf.{i}.{name}"] = part
            members[name] = f"leaf.{i}.{name}"
        payload[f"leaf.{i}.missing"] = missing
        members["missing"] = f"leaf.{i}.missing"
        leaf_specs.append({"id": i, "path": leaf.path, "codec": encoded.codec, "rows": encoded.rows,
                           "metadata": encoded.metadata, "payload_members": members})
    return _EncodedStructuredLeaf("structured_recursive", len(values), payload, {
        "schema_source": "inferred_from_runtime_values", "structure_version": 1, "root_path": path,
        "nodes": node_specs, "leaves": leaf_specs})


def _encode_structured_non_tensor_field(path: str, value: np.ndarray) -> _EncodedStructuredLeaf:
    """An object column with no schema: nested when a leaf needs its own payload, else one
    inferred codec."""
    values = list(value)
    leaves: List[_InferredLeaf] = []
    nodes: List[_InferredNode] = []
    infer_structure(path, values, leaves, nodes)
    if nodes and any(_leaf_needs_recursion(leaf) for leaf in leaves):
        return _encode_recursive(path, values, leaves, nodes, strict=True)
    return _encode_structured_leaf(values, _choose_leaf_codec(values), path)


def _encode_recursive_if_structured(path: str, values: List[Any]) -> Optional[_EncodedStructuredLeaf]:
    leaves: List[_InferredLeaf] = []
    nodes: List[_InferredNode] = []
    infer_structure(path, values, leaves, nodes)
    if not nodes or not any(
            leaf.decision.codec in _RECURSIVE_LEAF_CODECS
            or (leaf.decision.codec == "typed_ragged" and leaf.decision.metadata.get("recursive_source") == "ndarray")
            for leaf in leaves):
        return None
    return _encode_recursive(path, values, leaves, nodes, strict=False)


def _child_path(node: Mapping[str, Any], child: Any) -> str:
    if node["node_type"] == "dict":
        return f"{node['path']}.{_escape_key(str(child))}"
    return f"{node['path']}[{int(child)}]"


def _depth(path: str) -> int:
    return len(_structured_path_tokens(path))


def _decode_structured_recursive_field(encoded: Mapping[str, Any], payload: Mapping[str, Any],
                                       rows: int) -> List[Any]:
    meta = encoded.get("metadata") or {}
    columns: Dict[str, List[Any]] = {}
    for leaf in meta.get("leaves", []):
        members = leaf["payload_members"]
        part = {n: payload[m] for n, m in members.items() if n != "missing"}
        vals = _decode_structured_leaf(leaf["codec"], part, rows, leaf.get("metadata"))
        missing = payload[members["missing"]]
        columns[leaf["path"]] = [MISSING if bool(missing[r]) else vals[r] for r in range(rows)]
    for node in sorted(meta.get("nodes", []), key=lambda n: _depth(n["path"]), reverse=True):
        missing = payload[node["missing_payload"]] if node.get("missing_payload") else None
        mask = payload[node["row_mask_payload"]] if node.get("row_mask_payload") else None
        lengths = payload[node["lengths_payload"]] if node.get("lengths_payload") else None
        kids = [(c, columns[_child_path(node, c)]) for c in node["children"]]
        out: List[Any] = []
        for r in range(rows):
            if missing is not None and bool(missing[r]):
                out.append(MISSING)
            elif mask is not None and not bool(mask[r]):
                out.append(None)
            elif node["node_type"] == "dict":
                out.append({c: col[r] for c, col in kids if not isinstance(col[r], _Missing)})
            else:
                n = int(lengths[r]) if lengths is not None else len(kids)
                item: List[Any] = [None] * n
                for c, col in kids:
                    if int(c) < n and not isinstance(col[r], _Missing):
                        item[int(c)] = col[r]
                out.append(item)
        columns[node["path"]] = out
    return columns[meta["root_path"]]


def _normalize_ragged_tensor_dict_keys(keys: Any) -> List[str]:
    out: List[str] = []
    for key in (keys.keys() if isinstance(keys, Mapping) else keys):
        if not isinstance(key, str):
            raise TypeError("ragged_tensor_dict keys must be strings")
        if not key:
            raise ValueError("ragged_tensor_dict keys must not be empty")
        if any(sep in key for sep in "./\\"):
            raise ValueError("ragged_tensor_dict keys must not contain '.', '/' or '\\'")
        if key in out:
            raise ValueError(f"ragged_tensor_dict keys contain duplicate key {key!r}")
        out.append(key)
    return out


def _encode_ragged_tensor_dict_values(values: List[Any], schema: FieldSchema) -> _EncodedStructuredLeaf:
    declared = schema.metadata.get("keys")
    keys = None if declared is None else _normalize_ragged_tensor_dict_keys(declared)
    seen: set = set()
    for r, item in enumerate(values):
        if item is None:
            continue
        if not isinstance(item, Mapping):
            raise TypeError(f"ragged_tensor_dict rows must be mappings or None; row {r} is {type(item).__name__}")
        nulls = sorted(k for k, v in item.items() if v is None)
        if nulls:
            raise TypeError(f"ragged_tensor_dict rows cannot contain explicit None tensor values; row {r} has "
                            f"explicit None for {nulls}")
        row_keys = _normalize_ragged_tensor_dict_keys(item.keys())
        if keys is None:
            seen.update(row_keys)
        else:
            extra = sorted(set(row_keys) - set(keys))
            if extra:
                raise ValueError(f"ragged_tensor_dict rows contain keys not declared in FieldSchema "
                                 f"metadata['keys']; row {r} has keys not declared: {extra}")
    if keys is None:
        keys = _normalize_ragged_tensor_dict_keys(sorted(seen))
    payload: Dict[str, Any] = {"null_mask": np.asarray([v is None for v in values], dtype=np.bool_)}
    codecs: Dict[str, Any] = {}
    for key in keys:
        try:
            part, meta = _encode_ragged_tensor_values([None if v is None else v.get(key) for v in values])
        except ENCODING_ERRORS as err:
            raise ValueError(f"failed to encode ragged_tensor_dict key {key!r}: {err}") from err
        for name, buf in part.items():
            payload[f"{key}.{name}"] = buf
        codecs[key] = meta
    return _EncodedStructuredLeaf("ragged_tensor_dict", len(values), payload, {"keys": keys, "key_codecs": codecs})


def _decode_ragged_tensor_dict_values(payload: Mapping[str, Any], rows: int,
                                      metadata: Mapping[str, Any]) -> List[Any]:
    null_mask = payload["null_mask"]
    if isinstance(null_mask, (bytes, bytearray)):
        null_mask = np.frombuffer(null_mask, dtype=np.bool_)
    keys = metadata.get("keys", [])
    columns = {}
    for key in keys:
        part = {n[len(key) + 1:]: v for n, v in payload.items() if n.startswith(f"{key}.")}
        columns[key] = _decode_ragged_tensor_values(part, rows, metadata.get("key_codecs", {}).get(key))
    return [None if bool(null_mask[r]) else {k: columns[k][r] for k in keys if columns[k][r] is not None}
            for r in range(rows)]


def _decode_structured_non_tensor_encoded(encoded: Mapping[str, Any], payload: Mapping[str, Any], rows: int,
                                          metadata: Optional[Mapping[str, Any]] = None) -> List[Any]:
    codec = encoded.get("codec")
    if codec == "ragged_tensor_dict":
        return _decode_ragged_tensor_dict_values(payload, rows, metadata or encoded.get("metadata", {}))
    if codec == "structured_recursive":
        if metadata is not None:
            encoded = {**encoded, "metadata": metadata}
        return _decode_structured_recursive_field(encoded, payload, rows)
    return _decode_structured_leaf(codec, payload, rows, metadata if metadata is not None
                                   else encoded.get("metadata"))
