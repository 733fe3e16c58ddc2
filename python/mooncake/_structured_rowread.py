"""``mooncake._structured_rowread``: reading some rows of an encoded non-tensor column without its
whole data payload. For the ragged codecs (``typed_ragged``, ``ragged_tensor`` and the
bytes-like ones) the small index payloads (offsets, nulls, shapes) are read whole, then only the
selected rows' byte ranges of ``data``, gathered into one buffer that decodes like a column of
just those rows. Other codecs return None (the caller reads the column and picks rows)."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ._structured_layer import _decode_structured_metadata, _structured_field_specs

_TYPED = ("typed_ragged", "ragged_tensor")
_BYTES = ("bytes_ragged", "utf8_ragged", "json_ragged", "msgpack_ragged")


def read_encoded_rows(transfer: Any, stage_ref: Any, encoded: Mapping[str, Any],
                      rows: Sequence[int]) -> Optional[Dict[str, Any]]:
    """(payload, metadata) of the column restricted to ``rows`` (in that order), or None when
    the codec has no ranged form."""
    codec = encoded.get("codec")
    members = encoded["payload_members"]
    if codec not in _TYPED + _BYTES or "data" not in members or "offsets" not in members:
        return None
    index_members = [m for name, m in members.items() if name != "data"]
    index = transfer.materialize(transfer.read_spec(stage_ref).select_members(index_members)).objects
    part = {name: index[m] for name, m in members.items() if name != "data"}
    bs = transfer._bundle_store
    manifest = bs.resolve_manifest(stage_ref)
    spec = _structured_field_specs(_decode_structured_metadata(bs.read_payload(manifest["meta"])))
    data_member = members["data"]
    payload_spec = manifest["buffers"][data_member]
    meta = dict(encoded.get("metadata") or {})
    if codec in _TYPED:
        field = spec.get(data_member, {})
        if field.get("encoding") != "ndarray":
            return None
        dtype = np.dtype(field["dtype"])
        unit = dtype.itemsize
    else:
        dtype, unit = np.dtype(np.uint8), 1
    offsets = np.asarray(part["offsets"], dtype=np.int64)
    rows = [int(r) for r in rows]
    lengths = [int(offsets[r + 1] - offsets[r]) for r in rows]
    new_offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    data = np.empty(int(new_offsets[-1]), dtype=dtype)
    ranges = [(int(offsets[r]) * unit, int(new_offsets[i]) * unit, n * unit)
              for i, (r, n) in enumerate(zip(rows, lengths)) if n]
    transfer._transport.read_ranges_into(payload_spec, data.view(np.uint8), _merge(ranges))
    out: Dict[str, Any] = {"data": data if codec in _TYPED else data.tobytes(), "offsets": new_offsets}
    for name in ("nulls", "shapes", "ndims"):
        if name in part:
            out[name] = np.asarray(part[name])[rows]
    if meta.get("ndarray_rows"):
        meta["ndarray_rows"] = [meta["ndarray_rows"][r] for r in rows]
    if meta.get("media_encodings"):
        meta["media_encodings"] = [meta["media_encodings"][r] for r in rows]
    return {"payload": out, "metadata": meta}


def _merge(ranges: List[Any]) -> List[Any]:
    """Adjacent ranges (source and destination both contiguous) as one."""
    out: List[Any] = []
    for src, dst, n in ranges:
        if out and out[-1][0] + out[-1][2] == src and out[-1][1] + out[-1][2] == dst:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + n)
        else:
            out.append((src, dst, n))
    return out
