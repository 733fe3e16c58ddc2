"""``mooncake._structured_tensors``: how a torch tensor member is kept when it is not written with
``put_tensor``: the store's tensor object (what ``put_tensor`` stores: a header, then the data,
so a row range is a byte range after the header; ``metadata_bytes`` in the payload spec is the
header's size), ``torch.save`` bytes (0-d tensors, or when tensor objects are turned off), or
the parts of a jagged nested tensor."""

from __future__ import annotations

import io
import json
import struct
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

try:
    import torch as _torch
except Exception:  # torch is optional
    _torch = None


def _has_tensor_codec_helpers() -> bool:
    """Whether tensors may be kept as raw bytes (tests turn it off to exercise torch_save)."""
    return _torch is not None


def parse_torch_dtype(name: str) -> Any:
    if _torch is None:
        raise RuntimeError("this member needs PyTorch: pip install torch")
    dtype = getattr(_torch, str(name).replace("torch.", "", 1), None)
    if not isinstance(dtype, _torch.dtype):
        raise ValueError(f"unknown torch dtype: {name}")
    return dtype


def torch_dtype_to_numpy(name: str) -> np.dtype:
    """The numpy dtype holding the same values (there is none for bfloat16)."""
    dtype = parse_torch_dtype(name)
    if dtype == _torch.bfloat16:
        raise ValueError("torch.bfloat16 has no value-preserving numpy dtype")
    return _torch.empty(0, dtype=dtype).numpy().dtype


def _encoded(tensor: Any) -> Any:
    from ._tensor_codec import _encode

    return _encode(tensor, "structured tensor member")


def tensor_object_header_size(tensor: Any) -> int:
    """Bytes before the data in the stored tensor object of ``tensor``."""
    return len(_encoded(tensor).parts[0])


def tensor_object_parts(tensor: Any) -> Tuple[bytes, int, int, Any]:
    """(header bytes, data address, data bytes, owner) of the stored tensor object: header and
    data back to back are what ``put_tensor`` stores."""
    enc = _encoded(tensor)
    header = enc.parts[0]
    if len(enc.parts) == 1:
        return header, 0, 0, enc.keep
    addr, n, _t = enc.parts[1]
    return header, int(addr), int(n), enc.keep


def tensor_object_bytes(tensor: Any) -> Tuple[bytes, int]:
    """(the stored tensor object, its header size)."""
    enc = _encoded(tensor)
    return enc.tobytes(), len(enc.parts[0])


def resized_header(header: bytes, shape: Sequence[int], nbytes: int) -> bytes:
    """The header of a one-tensor object for the same dtype with ``shape`` (``nbytes`` of data):
    used to build the object of a row range."""
    from ._tensor_codec import _ALIGN, _MAGIC

    (n,) = struct.unpack("<I", bytes(header[4:8]))
    tree = json.loads(bytes(header[8:8 + n]))
    if "t" not in tree:
        raise ValueError("structured tensor payload is not a single tensor object")
    tree["t"][1] = [int(d) for d in shape]
    tree["t"][3] = int(nbytes)
    body = json.dumps(tree, separators=(",", ":")).encode()
    pad = (-(8 + len(body))) % _ALIGN
    return _MAGIC + struct.pack("<I", len(body)) + body + b"\0" * pad


def encode_nested_parts(value: Any) -> Tuple[Dict[str, Any], List[bytes]]:
    """A jagged nested tensor as its values / offsets (/ lengths) tensor objects."""
    lengths = value.lengths()
    parts = [tensor_object_bytes(t)[0] for t in (value.values(), value.offsets()) + (() if lengths is None else (lengths,))]
    return {"format": "tensor_parts", "part_bytes": [len(p) for p in parts], "has_lengths": lengths is not None,
            "ragged_idx": int(getattr(value, "_ragged_idx", 1))}, parts


def decode_nested_parts(data: bytes, field: Mapping[str, Any]) -> Any:
    if field.get("format", "torch_save") == "torch_save":
        return torch_load_bytes(data)
    sizes = field.get("part_bytes")
    want = 3 if field.get("has_lengths") else 2
    if not isinstance(sizes, list) or len(sizes) != want or sum(sizes) != len(data):
        raise ValueError("nested tensor payload has invalid part metadata")
    tensors, pos = [], 0
    for n in sizes:
        tensors.append(decode_tensor_object(data[pos:pos + n]))
        pos += n
    return _torch.nested.nested_tensor_from_jagged(tensors[0], offsets=tensors[1],
                                                   lengths=tensors[2] if want == 3 else None,
                                                   jagged_dim=int(field.get("ragged_idx", 1)))


def torch_save_bytes(value: Any) -> bytes:
    buf = io.BytesIO()
    _torch.save(value, buf)
    return buf.getvalue()


def torch_load_bytes(data: bytes) -> Any:
    return _torch.load(io.BytesIO(bytes(data)), weights_only=True)


def decode_tensor_object(data: bytes) -> Any:
    from ._tensor_codec import decode_tensor

    return decode_tensor(bytes(data))


def decode_tensor_payload(data: bytes, field_spec: Mapping[str, Any], payload_spec: Mapping[str, Any]) -> Any:
    """A tensor member's value from its stored bytes."""
    if payload_spec.get("format") == "torch_save" or field_spec.get("format") == "torch_save":
        return torch_load_bytes(data)
    return decode_tensor_object(data)


def select_nested_rows(value: Any, indices: Sequence[int]) -> Any:
    rows = value.unbind()
    chosen = [rows[int(i)] for i in indices]
    if chosen:
        return _torch.nested.as_nested_tensor(chosen, layout=value.layout)
    offsets = _torch.zeros(1, dtype=value.offsets().dtype)
    return _torch.nested.nested_tensor_from_jagged(value.values()[:0], offsets=offsets)
