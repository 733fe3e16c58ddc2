"""``mooncake._structured_msgpack``: the MessagePack subset the structured codecs need (nil, bool,
int, float, str, bin, array, map), so the package needs no msgpack dependency. Tuples pack as
arrays; anything else (sets, objects, numpy values) raises ``TypeError``."""

from __future__ import annotations

import struct
from typing import Any, List, Tuple


def packb(value: Any) -> bytes:
    out: List[bytes] = []
    _pack(value, out, 0)
    return b"".join(out)


def _head(out: List[bytes], n: int, fix: int, fix_max: int, c8: int, c16: int, c32: int) -> None:
    if n <= fix_max and fix >= 0:
        out.append(bytes([fix | n]))
    elif c8 >= 0 and n < 1 << 8:
        out.append(bytes([c8, n]))
    elif n < 1 << 16:
        out.append(bytes([c16]) + struct.pack(">H", n))
    else:
        out.append(bytes([c32]) + struct.pack(">I", n))


def _pack(v: Any, out: List[bytes], depth: int) -> None:
    if depth > 512:
        raise ValueError("msgpack: nesting too deep")
    t = type(v)
    if v is None:
        out.append(b"\xc0")
    elif t is bool:
        out.append(b"\xc3" if v else b"\xc2")
    elif t is int:
        if 0 <= v < 128:
            out.append(bytes([v]))
        elif -32 <= v < 0:
            out.append(struct.pack(">b", v))
        elif 0 <= v < 1 << 64:
            out.append(b"\xcf" + struct.pack(">Q", v))
        elif -(1 << 63) <= v < 0:
            out.append(b"\xd3" + struct.pack(">q", v))
        else:
            raise OverflowError("msgpack: integer out of range")
    elif t is float:
        out.append(b"\xcb" + struct.pack(">d", v))
    elif t is str:
        data = v.encode("utf-8")
        _head(out, len(data), 0xA0, 31, 0xD9, 0xDA, 0xDB)
        out.append(data)
    elif t in (bytes, bytearray, memoryview):
        data = bytes(v)
        _head(out, len(data), -1, -1, 0xC4, 0xC5, 0xC6)
        out.append(data)
    elif t in (list, tuple):
        _head(out, len(v), 0x90, 15, -1, 0xDC, 0xDD)
        for item in v:
            _pack(item, out, depth + 1)
    elif t is dict:
        _head(out, len(v), 0x80, 15, -1, 0xDE, 0xDF)
        for key, item in v.items():
            _pack(key, out, depth + 1)
            _pack(item, out, depth + 1)
    else:
        raise TypeError(f"msgpack: cannot serialize {t.__name__}")


def unpackb(data: bytes) -> Any:
    view = memoryview(data)
    value, pos = _unpack(view, 0)
    if pos != len(view):
        raise ValueError("msgpack: trailing bytes")
    return value


def _take(view: memoryview, pos: int, n: int) -> Tuple[memoryview, int]:
    if pos + n > len(view):
        raise ValueError("msgpack: truncated data")
    return view[pos:pos + n], pos + n


def _unpack(view: memoryview, pos: int) -> Tuple[Any, int]:
    raw, pos = _take(view, pos, 1)
    b = raw[0]
    if b <= 0x7F:
        return b, pos
    if b >= 0xE0:
        return b - 256, pos
    if 0xA0 <= b <= 0xBF:
        return _str(view, pos, b & 0x1F)
    if 0x90 <= b <= 0x9F:
        return _array(view, pos, b & 0x0F)
    if 0x80 <= b <= 0x8F:
        return _map(view, pos, b & 0x0F)
    if b == 0xC0:
        return None, pos
    if b in (0xC2, 0xC3):
        return b == 0xC3, pos
    sizes = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i",
             0xD3: ">q", 0xCA: ">f", 0xCB: ">d"}
    if b in sizes:
        fmt = sizes[b]
        chunk, pos = _take(view, pos, struct.calcsize(fmt))
        return struct.unpack(fmt, chunk)[0], pos
    lengths = {0xD9: ">B", 0xDA: ">H", 0xDB: ">I", 0xC4: ">B", 0xC5: ">H", 0xC6: ">I",
               0xDC: ">H", 0xDD: ">I", 0xDE: ">H", 0xDF: ">I"}
    if b not in lengths:
        raise ValueError(f"msgpack: unsupported type byte 0x{b:02x}")
    fmt = lengths[b]
    chunk, pos = _take(view, pos, struct.calcsize(fmt))
    n = struct.unpack(fmt, chunk)[0]
    if b in (0xD9, 0xDA, 0xDB):
        return _str(view, pos, n)
    if b in (0xC4, 0xC5, 0xC6):
        chunk, pos = _take(view, pos, n)
        return bytes(chunk), pos
    if b in (0xDC, 0xDD):
        return _array(view, pos, n)
    return _map(view, pos, n)


def _str(view: memoryview, pos: int, n: int) -> Tuple[str, int]:
    chunk, pos = _take(view, pos, n)
    return bytes(chunk).decode("utf-8"), pos


def _array(view: memoryview, pos: int, n: int) -> Tuple[list, int]:
    items = []
    for _ in range(n):
        item, pos = _unpack(view, pos)
        items.append(item)
    return items, pos


def _map(view: memoryview, pos: int, n: int) -> Tuple[dict, int]:
    out = {}
    for _ in range(n):
        key, pos = _unpack(view, pos)
        value, pos = _unpack(view, pos)
        out[key] = value
    return out, pos
