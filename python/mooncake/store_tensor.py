"""``mooncake.store_tensor``: the tensor methods of ``MooncakeDistributedStore``.

``TensorMixin`` holds every tensor call of upstream Mooncake's Python API; the store class
inherits it and provides the byte-level calls it builds on (``put_parts``, ``upsert_parts``,
``get``, ``get_into``, ``put_from``, ...). torch is imported only when a tensor call runs.

Stored format (one object per key, also the layout that ``get_tensor_into`` leaves in a buffer
and ``put_tensor_from`` expects)::

    b"MCT1" | u32 little-endian header length | header JSON | zero padding to 64 bytes |
    tensor bytes, each starting at a 64-byte-aligned offset from the data start

The header is a tree: ``{"t": [dtype, shape, offset, nbytes]}`` for a tensor, ``{"l": [...]}``
a list, ``{"u": [...]}`` a tuple, ``{"d": [[key, node], ...]}`` a dict with string keys. A shard
written through the tensor-parallel calls carries ``"p"`` (its ``TensorParallelism``) beside
``"t"`` in the root node; readers that do not know ``"p"`` ignore it.

Tensor parallelism: a tensor split ``tp_size`` ways along ``split_dim`` is stored as keys
``<key>_tp_<rank>`` (upstream's names); shards follow ``torch.tensor_split``: every rank gets
``n // tp_size`` rows of that dimension and the first ``n % tp_size`` ranks one more, so the
shards concatenated in rank order are the tensor again, byte for byte. Multi-axis shards
(``TensorParallelism`` with dp/ep/pp axes) are stored under ``<key>`` followed by
``_<kind>_<rank>`` for each axis in order (``_e<expert_id>`` / ``_s<stage_id>`` when set).

CUDA: tensors on a CUDA device are staged through host memory (copied to the CPU before a put);
reads return CPU tensors, and ``get_tensor_into_cuda`` copies a stored tensor into a
caller-owned (CPU or CUDA) tensor. Without a CUDA-enabled torch, the CUDA calls raise a
RuntimeError that says so.
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple  # noqa: F401  (Any, Dict, Tuple: as before)

# The format (encoding, decoding, safetensors) and the parallelism types live in their own
# modules; every name stays importable from here.
from ._tensor_codec import (_ALIGN, _BUFFER_OVERFLOW, _INVALID_PARAMS, _MAGIC, _OBJECT_NOT_FOUND, _OK,  # noqa: F401
                            _ST_BACK, _ST_DTYPES, _build, _decode_at, _decode_bytes, _encode, _Encoded, _flatten,
                            _parallel_of, _parse_header, _read_safetensors, _require_cuda, _torch,
                            _write_safetensors, decode_tensor, encode_tensor, serialize_tensor_into,
                            tensor_object_size)
from ._tensor_parallel import (_KINDS, _check_cfg, _check_int, _check_key, _check_tensor, _check_tp,  # noqa: F401
                               _same_len, _split, _tp_key, ParallelAxis, ReadTarget, TensorParallelism)

__all__ = ["TensorMixin", "ParallelAxis", "TensorParallelism", "ReadTarget",
           "tensor_object_size", "serialize_tensor_into", "encode_tensor", "decode_tensor"]

log = logging.getLogger("mooncake.store")

# Public names defined in the _tensor_* modules keep this module as theirs (repr, pickling, help()), as
# before they moved.
for _name in [n for n in globals() if not n.startswith("_")]:
    if getattr(globals()[_name], "__module__", "").startswith("mooncake._tensor_"):
        globals()[_name].__module__ = __name__
del _name


# ---- the mixin --------------------------------------------------------------------------------

class TensorMixin:
    """Tensor calls of ``MooncakeDistributedStore`` (see the module docstring for formats)."""

    # -- plumbing --
    def _t_put(self, key: str, enc: _Encoded, config, upsert: bool) -> int:
        bufs = enc.buffers()
        if upsert:
            return self.upsert_parts(key, *bufs, config=config)
        return self.put_parts(key, *bufs, config=config)

    def _t_put_many(self, keys: List[str], encs: List[_Encoded], config, upsert: bool, atomic: bool) -> List[int]:
        """Writes each value; with ``atomic`` a failure removes what this call wrote (puts only;
        keys that existed before the call are left alone: puts are write-once)."""
        existed = self.batch_is_exist(keys) if atomic and not upsert else [0] * len(keys)
        codes = []
        for k, e in zip(keys, encs):
            codes.append(self._t_put(k, e, config, upsert))
            if codes[-1] != 0 and atomic:
                break
        if atomic and not upsert and any(c != 0 for c in codes):
            for k, c, ex in zip(keys, codes, existed):
                if c == 0 and ex != 1:
                    self.remove(k, True)
            codes += [codes[-1]] * (len(keys) - len(codes))
        return codes

    def _t_get_object(self, key: str):
        data = self.get(key)
        if not data:
            return None, None
        return data, _parallel_of(data, len(data), "get_tensor")

    # -- plain --
    def put_tensor(self, key: str, tensor, config=None) -> int:
        """Stores a tensor (or a list/tuple/dict of tensors). 0 or a negative code."""
        key = _check_key(key, "put_tensor")
        return self._t_put(key, _encode(tensor, "put_tensor"), _check_cfg(config, "put_tensor"), False)

    def pub_tensor(self, key: str, tensor, config=None) -> int:
        """put_tensor with a ReplicateConfig (upstream's "publish")."""
        key = _check_key(key, "pub_tensor")
        return self._t_put(key, _encode(tensor, "pub_tensor"), _check_cfg(config, "pub_tensor"), False)

    def upsert_tensor(self, key: str, tensor, config=None) -> int:
        """Stores the tensor, replacing a value already under key."""
        key = _check_key(key, "upsert_tensor")
        return self._t_put(key, _encode(tensor, "upsert_tensor"), _check_cfg(config, "upsert_tensor"), True)

    def upsert_pub_tensor(self, key: str, tensor, config=None) -> int:
        key = _check_key(key, "upsert_pub_tensor")
        return self._t_put(key, _encode(tensor, "upsert_pub_tensor"), _check_cfg(config, "upsert_pub_tensor"), True)

    def get_tensor(self, key: str):
        """The tensor (or list/tuple/dict) stored under key, on the CPU; None on a miss."""
        data = self.get(_check_key(key, "get_tensor"))
        if not data:
            return None
        return _decode_bytes(data)

    def _t_batch_put(self, keys, tensors, config, upsert: bool, what: str) -> List[int]:
        n = _same_len(what, keys=keys, tensors=tensors)
        keys = [_check_key(k, what) for k in keys]
        _check_cfg(config, what)
        encs = [_encode(t, what) for t in tensors]  # every argument checked before any write
        if upsert:
            return [self._t_put(k, e, config, True) for k, e in zip(keys, encs)]
        if n == 0:
            return []
        blobs = [e.tobytes() for e in encs]
        ptrs = [ctypes.cast(ctypes.c_char_p(b), ctypes.c_void_p).value for b in blobs]
        return self.batch_put_from(keys, ptrs, [len(b) for b in blobs], config)

    def batch_put_tensor(self, keys: Sequence[str], tensors_list: Sequence, config=None) -> List[int]:
        return self._t_batch_put(keys, tensors_list, config, False, "batch_put_tensor")

    def batch_pub_tensor(self, keys: Sequence[str], tensors_list: Sequence, config=None) -> List[int]:
        return self._t_batch_put(keys, tensors_list, config, False, "batch_pub_tensor")

    def batch_upsert_tensor(self, keys: Sequence[str], tensors: Sequence, config=None) -> List[int]:
        return self._t_batch_put(keys, tensors, config, True, "batch_upsert_tensor")

    def batch_upsert_pub_tensor(self, keys: Sequence[str], tensors: Sequence, config=None) -> List[int]:
        return self._t_batch_put(keys, tensors, config, True, "batch_upsert_pub_tensor")

    def batch_get_tensor(self, keys: Sequence[str]) -> list:
        keys = [_check_key(k, "batch_get_tensor") for k in keys]
        return [(_decode_bytes(v, "batch_get_tensor") if v else None) for v in self.get_batch(keys)]

    # -- zero copy --
    def put_tensor_from(self, key: str, buffer_ptr: int, size: int, config=None) -> int:
        """Stores the tensor object (the layout get_tensor_into leaves) of ``size`` bytes at
        ``buffer_ptr``. Raises ValueError when the bytes are not a tensor object."""
        key = _check_key(key, "put_tensor_from")
        _decode_at(int(buffer_ptr), int(size), "put_tensor_from")
        return self.put_from(key, int(buffer_ptr), int(size), _check_cfg(config, "put_tensor_from"))

    def upsert_tensor_from(self, key: str, buffer_ptr: int, size: int, config=None) -> int:
        key = _check_key(key, "upsert_tensor_from")
        _decode_at(int(buffer_ptr), int(size), "upsert_tensor_from")
        return self.upsert_from(key, int(buffer_ptr), int(size), _check_cfg(config, "upsert_tensor_from"))

    def _t_batch_from(self, keys, buffer_ptrs, sizes, config, upsert: bool, what: str) -> List[int]:
        _same_len(what, keys=keys, buffer_ptrs=buffer_ptrs, sizes=sizes)
        keys = [_check_key(k, what) for k in keys]
        for p, s in zip(buffer_ptrs, sizes):
            _decode_at(int(p), int(s), what)
        _check_cfg(config, what)
        if not keys:
            return []
        if upsert:
            return self.batch_upsert_from(keys, [int(p) for p in buffer_ptrs], [int(s) for s in sizes], config)
        return self.batch_put_from(keys, [int(p) for p in buffer_ptrs], [int(s) for s in sizes], config)

    def batch_put_tensor_from(self, keys, buffer_ptrs, sizes, config=None) -> List[int]:
        return self._t_batch_from(keys, buffer_ptrs, sizes, config, False, "batch_put_tensor_from")

    def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes, config=None) -> List[int]:
        return self._t_batch_from(keys, buffer_ptrs, sizes, config, True, "batch_upsert_tensor_from")

    def _t_into(self, key: str, buffer_ptr: int, size: int, what: str):
        n = self.get_into(key, int(buffer_ptr), int(size))
        if n == _BUFFER_OVERFLOW:
            need = self.get_size(key)
            raise ValueError(f"{what}: the buffer of {size} bytes is smaller than {key!r}'s {need} bytes")
        if n < 0:
            return None
        return _decode_at(int(buffer_ptr), n, what)

    def get_tensor_into(self, key: str, buffer_ptr: int, size: int):
        """Reads key's tensor object into the buffer and returns a tensor that views it (no copy;
        valid while the buffer is). None on a miss; ValueError when the buffer is too small."""
        return self._t_into(_check_key(key, "get_tensor_into"), buffer_ptr, size, "get_tensor_into")

    def batch_get_tensor_into(self, keys, buffer_ptrs, sizes) -> list:
        """Reads each key's tensor object into its buffer: per key a tensor viewing the buffer, or
        None on a miss. Lists of different lengths: INVALID_PARAMS for every key, as upstream's."""
        if not (len(keys) == len(buffer_ptrs) == len(sizes)):
            log.error("batch_get_tensor_into: lengths differ: keys=%d, buffer_ptrs=%d, sizes=%d",
                      len(keys), len(buffer_ptrs), len(sizes))
            return [_INVALID_PARAMS] * len(keys)
        n = len(keys)
        keys = [_check_key(k, "batch_get_tensor_into") for k in keys]
        if n == 0:
            return []
        res = self.batch_get_into(keys, [int(p) for p in buffer_ptrs], [int(s) for s in sizes])
        out = []
        for k, p, s, r in zip(keys, buffer_ptrs, sizes, res):
            if r == _BUFFER_OVERFLOW:
                raise ValueError(f"batch_get_tensor_into: the buffer of {s} bytes is smaller than "
                                 f"{k!r}'s {self.get_size(k)} bytes")
            out.append(_decode_at(int(p), r, "batch_get_tensor_into") if r >= 0 else None)
        return out

    # -- CUDA --
    def _t_into_tensor(self, key: str, dst, what: str) -> int:
        torch = _torch()
        if not isinstance(dst, torch.Tensor) and not hasattr(dst, "data_ptr"):
            raise TypeError(f"{what}: the destination must be a torch.Tensor, got {type(dst).__name__}")
        if dst.device.type == "cuda":
            _require_cuda(what)
        elif dst.device.type != "cpu":
            raise ValueError(f"{what}: destination on device {dst.device} (only cpu and cuda are supported)")
        if not dst.is_contiguous():
            raise ValueError(f"{what}: the destination tensor must be contiguous")
        size = self.get_size(key)
        if size < 0:
            return size
        stage = torch.empty(size, dtype=torch.uint8, pin_memory=dst.device.type == "cuda")
        n = self.get_into(key, stage.data_ptr(), size)
        if n < 0:
            return n
        src = _decode_at(stage.data_ptr(), n, what, keep=stage)
        if not isinstance(src, torch.Tensor):
            raise ValueError(f"{what}: {key!r} holds a {type(src).__name__} of tensors, not one tensor")
        if src.dtype != dst.dtype:
            raise ValueError(f"{what}: {key!r} holds {src.dtype}, the destination is {dst.dtype}")
        if src.numel() > dst.numel():
            raise ValueError(f"{what}: {key!r} holds {src.numel()} elements, the destination has room for {dst.numel()}")
        flat = dst.view(-1)[:src.numel()]
        flat.copy_(src.reshape(-1), non_blocking=False)
        return src.numel() * src.element_size()

    def get_tensor_into_cuda(self, key: str, dst) -> int:
        """Copies key's tensor into ``dst`` (a contiguous CPU or CUDA tensor of the same dtype, at
        least as many elements), staged through pinned host memory. Returns the bytes copied or a
        negative code (OBJECT_NOT_FOUND, ...)."""
        return self._t_into_tensor(_check_key(key, "get_tensor_into_cuda"), dst, "get_tensor_into_cuda")

    def batch_get_tensor_into_cuda(self, keys: Sequence[str], dsts: Sequence) -> List[int]:
        _same_len("batch_get_tensor_into_cuda", keys=keys, dsts=dsts)
        return [self._t_into_tensor(_check_key(k, "batch_get_tensor_into_cuda"), d, "batch_get_tensor_into_cuda")
                for k, d in zip(keys, dsts)]

    # -- tensor parallelism (legacy TP wrappers) --
    def _t_tp_encs(self, key: str, tensor, tp_size: int, split_dim: int, what: str):
        full_shape = list(tensor.shape)
        keys, encs = [], []
        for r, shard in enumerate(_split(tensor, tp_size, split_dim)):
            p = {"axes": [{"kind": "tp", "rank": r, "size": tp_size, "split_dim": split_dim}],
                 "full_shape": full_shape}
            keys.append(_tp_key(key, r))
            encs.append(_encode(shard, what, p))
        return keys, encs

    def _t_put_tp(self, key, tensor, config, tp_rank, tp_size, split_dim, upsert, what) -> int:
        key = _check_key(key, what)
        _check_tensor(tensor, what)
        split_dim = _check_tp(tensor, tp_rank, tp_size, split_dim, what)
        _check_cfg(config, what)
        if tp_size == 1:
            return self._t_put(key, _encode(tensor, what), config, upsert)
        keys, encs = self._t_tp_encs(key, tensor, tp_size, split_dim, what)
        codes = self._t_put_many(keys, encs, config, upsert, atomic=True)
        return next((c for c in codes if c != 0), 0)

    def put_tensor_with_tp(self, key: str, tensor, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0,
                           config=None) -> int:
        """Splits the full tensor into ``tp_size`` shards along ``split_dim`` and stores every
        shard as ``<key>_tp_<rank>`` (tp_rank is accepted as upstream does and does not choose
        what is written). All shards or none: a failure removes the shards this call wrote."""
        return self._t_put_tp(key, tensor, config, tp_rank, tp_size, split_dim, False, "put_tensor_with_tp")

    def pub_tensor_with_tp(self, key: str, tensor, config=None, tp_rank: int = 0, tp_size: int = 1,
                           split_dim: int = 0) -> int:
        return self._t_put_tp(key, tensor, config, tp_rank, tp_size, split_dim, False, "pub_tensor_with_tp")

    def upsert_tensor_with_tp(self, key: str, tensor, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0,
                              config=None) -> int:
        return self._t_put_tp(key, tensor, config, tp_rank, tp_size, split_dim, True, "upsert_tensor_with_tp")

    def upsert_pub_tensor_with_tp(self, key: str, tensor, config=None, tp_rank: int = 0, tp_size: int = 1,
                                  split_dim: int = 0) -> int:
        return self._t_put_tp(key, tensor, config, tp_rank, tp_size, split_dim, True, "upsert_pub_tensor_with_tp")

    def _t_batch_put_tp(self, base_keys, tensors, config, tp_rank, tp_size, split_dim, upsert, what) -> List[int]:
        _same_len(what, base_keys=base_keys, tensors_list=tensors)
        base_keys = [_check_key(k, what) for k in base_keys]
        for t in tensors:
            _check_tensor(t, what)
            _check_tp(t, tp_rank, tp_size, split_dim, what)
        return [self._t_put_tp(k, t, config, tp_rank, tp_size, split_dim, upsert, what)
                for k, t in zip(base_keys, tensors)]

    def batch_put_tensor_with_tp(self, base_keys, tensors_list, tp_rank: int = 0, tp_size: int = 1,
                                 split_dim: int = 0, config=None) -> List[int]:
        return self._t_batch_put_tp(base_keys, tensors_list, config, tp_rank, tp_size, split_dim, False,
                                    "batch_put_tensor_with_tp")

    def batch_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank: int = 0, tp_size: int = 1,
                                 split_dim: int = 0) -> List[int]:
        return self._t_batch_put_tp(base_keys, tensors_list, config, tp_rank, tp_size, split_dim, False,
                                    "batch_pub_tensor_with_tp")

    def batch_upsert_tensor_with_tp(self, base_keys, tensors_list, tp_rank: int = 0, tp_size: int = 1,
                                    split_dim: int = 0, config=None) -> List[int]:
        return self._t_batch_put_tp(base_keys, tensors_list, config, tp_rank, tp_size, split_dim, True,
                                    "batch_upsert_tensor_with_tp")

    def batch_upsert_pub_tensor_with_tp(self, base_keys, tensors_list, config=None, tp_rank: int = 0,
                                        tp_size: int = 1, split_dim: int = 0) -> List[int]:
        return self._t_batch_put_tp(base_keys, tensors_list, config, tp_rank, tp_size, split_dim, True,
                                    "batch_upsert_pub_tensor_with_tp")

    def _t_tp_from(self, key, buffer_ptr, size, tp_rank, tp_size, split_dim, config, upsert, what) -> int:
        key = _check_key(key, what)
        _check_tp(None, tp_rank, tp_size, split_dim, what)
        t = _decode_at(int(buffer_ptr), int(size), what)
        if tp_size == 1:
            fn = self.upsert_from if upsert else self.put_from
            return fn(key, int(buffer_ptr), int(size), _check_cfg(config, what))
        return self._t_put_tp(key, _check_tensor(t, what), config, tp_rank, tp_size, split_dim, upsert, what)

    def put_tensor_with_tp_from(self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0, tp_size: int = 1,
                                split_dim: int = 0, config=None) -> int:
        """put_tensor_with_tp of the full tensor object at buffer_ptr (the get_tensor_into layout)."""
        return self._t_tp_from(key, buffer_ptr, size, tp_rank, tp_size, split_dim, config, False,
                               "put_tensor_with_tp_from")

    def upsert_tensor_with_tp_from(self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0,
                                   tp_size: int = 1, split_dim: int = 0, config=None) -> int:
        return self._t_tp_from(key, buffer_ptr, size, tp_rank, tp_size, split_dim, config, True,
                               "upsert_tensor_with_tp_from")

    def _t_batch_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank, tp_size, split_dim, config, upsert, what):
        _same_len(what, base_keys=base_keys, buffer_ptrs=buffer_ptrs, sizes=sizes)
        _check_tp(None, tp_rank, tp_size, split_dim, what)
        for p, s in zip(buffer_ptrs, sizes):
            _check_tensor(_decode_at(int(p), int(s), what), what)
        return [self._t_tp_from(k, p, s, tp_rank, tp_size, split_dim, config, upsert, what)
                for k, p, s in zip(base_keys, buffer_ptrs, sizes)]

    def batch_put_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank: int = 0, tp_size: int = 1,
                                      split_dim: int = 0, config=None) -> List[int]:
        return self._t_batch_tp_from(base_keys, buffer_ptrs, sizes, tp_rank, tp_size, split_dim, config, False,
                                     "batch_put_tensor_with_tp_from")

    def batch_upsert_tensor_with_tp_from(self, base_keys, buffer_ptrs, sizes, tp_rank: int = 0, tp_size: int = 1,
                                         split_dim: int = 0, config=None) -> List[int]:
        return self._t_batch_tp_from(base_keys, buffer_ptrs, sizes, tp_rank, tp_size, split_dim, config, True,
                                     "batch_upsert_tensor_with_tp_from")

    def get_tensor_with_tp(self, key: str, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0):
        """The shard ``<key>_tp_<tp_rank>`` (``key`` itself when tp_size is 1); None on a miss."""
        key = _check_key(key, "get_tensor_with_tp")
        _check_tp(None, tp_rank, tp_size, split_dim, "get_tensor_with_tp")
        return self.get_tensor(key if tp_size == 1 else _tp_key(key, tp_rank))

    def batch_get_tensor_with_tp(self, base_keys, tp_rank: int = 0, tp_size: int = 1) -> list:
        _check_tp(None, tp_rank, tp_size, 0, "batch_get_tensor_with_tp")
        keys = [_check_key(k, "batch_get_tensor_with_tp") for k in base_keys]
        return self.batch_get_tensor(keys if tp_size == 1 else [_tp_key(k, tp_rank) for k in keys])

    def get_tensor_with_tp_into(self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0, tp_size: int = 1,
                                split_dim: int = 0):
        key = _check_key(key, "get_tensor_with_tp_into")
        _check_tp(None, tp_rank, tp_size, split_dim, "get_tensor_with_tp_into")
        return self._t_into(key if tp_size == 1 else _tp_key(key, tp_rank), buffer_ptr, size,
                            "get_tensor_with_tp_into")

    def batch_get_tensor_with_tp_into(self, base_keys, buffer_ptrs, sizes, tp_rank: int = 0,
                                      tp_size: int = 1) -> list:
        _check_tp(None, tp_rank, tp_size, 0, "batch_get_tensor_with_tp_into")
        keys = [_check_key(k, "batch_get_tensor_with_tp_into") for k in base_keys]
        return self.batch_get_tensor_into(keys if tp_size == 1 else [_tp_key(k, tp_rank) for k in keys],
                                          buffer_ptrs, sizes)

    # -- unified parallelism --
    def _t_par_plan(self, key, tensor, parallelism, writer_partition, what):
        """(store key, tensor to store, header "p") for a parallel write; checks every argument."""
        key = _check_key(key, what)
        _check_tensor(tensor, what)
        if parallelism is not None and writer_partition is not None:
            raise ValueError(f"{what}: give parallelism or writer_partition, not both")
        if writer_partition is not None:
            try:
                rank, size, split_dim = writer_partition
            except (TypeError, ValueError):
                raise ValueError(f"{what}: writer_partition must be (rank, size, split_dim), "
                                 f"got {writer_partition!r}") from None
            split_dim = _check_tp(tensor, rank, size, split_dim, what)
            parallelism = TensorParallelism([ParallelAxis("tp", rank, size, split_dim)])
            shard = _split(tensor, size, split_dim)[rank]
            p = parallelism._json()
            p["full_shape"] = list(tensor.shape)
            return key + parallelism._suffix(), shard, p
        if parallelism is None:
            return key, tensor, None
        if not isinstance(parallelism, TensorParallelism):
            raise TypeError(f"{what}: parallelism must be a TensorParallelism or None, got {type(parallelism).__name__}")
        parallelism._check(what)
        tp = parallelism._tp()
        p = parallelism._json()
        if tp is not None and len(parallelism.axes) > 1:
            # TP inside a multi-axis layout: the caller passes the full tensor; store its TP shard
            sd = _check_tp(tensor, tp.rank, tp.size, 0 if tp.split_dim is None else tp.split_dim, what)
            p["full_shape"] = list(tensor.shape)
            for a in p["axes"]:
                if a["kind"] == "tp":
                    a["split_dim"] = sd
            return key + parallelism._suffix(), _split(tensor, tp.size, sd)[tp.rank], p
        if tp is not None:
            # single-axis TP: the tensor is the shard already (upstream's compatibility rule)
            sd = 0 if tp.split_dim is None else tp.split_dim
            if tensor.dim() == 0 and tp.size > 1:
                raise ValueError(f"{what}: a 0-d tensor cannot be a TP shard")
            if tensor.dim() and not -tensor.dim() <= sd < tensor.dim():
                raise ValueError(f"{what}: split_dim {sd} is out of range for a {tensor.dim()}-d shard")
            p["axes"][0]["split_dim"] = sd % tensor.dim() if tensor.dim() else 0
        return key + parallelism._suffix(), tensor, p

    def _t_put_par(self, key, tensor, parallelism, config, writer_partition, upsert, what) -> int:
        skey, t, p = self._t_par_plan(key, tensor, parallelism, writer_partition, what)
        return self._t_put(skey, _encode(t, what, p), _check_cfg(config, what), upsert)

    def put_tensor_with_parallelism(self, key: str, tensor, parallelism: Optional[TensorParallelism] = None,
                                    config=None, writer_partition=None) -> int:
        """Stores a full tensor (parallelism None), the shard a ``TensorParallelism`` names, or
        the shard ``writer_partition=(rank, size, split_dim)`` cuts from a full tensor."""
        return self._t_put_par(key, tensor, parallelism, config, writer_partition, False,
                               "put_tensor_with_parallelism")

    def upsert_tensor_with_parallelism(self, key: str, tensor, parallelism: Optional[TensorParallelism] = None,
                                       config=None, writer_partition=None) -> int:
        return self._t_put_par(key, tensor, parallelism, config, writer_partition, True,
                               "upsert_tensor_with_parallelism")

    def _t_batch_par(self, keys, tensors, parallelisms, config, writer_partitions, upsert, what) -> List[int]:
        n = _same_len(what, keys=keys, tensors=tensors)
        if parallelisms is not None:
            _same_len(what, keys=keys, parallelisms=parallelisms)
        if writer_partitions is not None:
            _same_len(what, keys=keys, writer_partitions=writer_partitions)
        plans = [self._t_par_plan(keys[i], tensors[i], parallelisms[i] if parallelisms is not None else None,
                                  writer_partitions[i] if writer_partitions is not None else None, what)
                 for i in range(n)]
        _check_cfg(config, what)
        return [self._t_put(k, _encode(t, what, p), config, upsert) for k, t, p in plans]

    def batch_put_tensor_with_parallelism(self, keys, tensors, parallelisms=None, config=None,
                                          writer_partitions=None) -> List[int]:
        return self._t_batch_par(keys, tensors, parallelisms, config, writer_partitions, False,
                                 "batch_put_tensor_with_parallelism")

    def batch_upsert_tensor_with_parallelism(self, keys, tensors, parallelisms=None, config=None,
                                             writer_partitions=None) -> List[int]:
        return self._t_batch_par(keys, tensors, parallelisms, config, writer_partitions, True,
                                 "batch_upsert_tensor_with_parallelism")

    def _t_par_from(self, key, buffer_ptr, size, parallelism, config, writer_partition, upsert, what) -> int:
        t = _decode_at(int(buffer_ptr), int(size), what)
        if parallelism is None and writer_partition is None:
            key = _check_key(key, what)
            fn = self.upsert_from if upsert else self.put_from
            return fn(key, int(buffer_ptr), int(size), _check_cfg(config, what))
        return self._t_put_par(key, t, parallelism, config, writer_partition, upsert, what)

    def put_tensor_with_parallelism_from(self, key: str, buffer_ptr: int, size: int, parallelism=None,
                                         config=None, writer_partition=None) -> int:
        return self._t_par_from(key, buffer_ptr, size, parallelism, config, writer_partition, False,
                                "put_tensor_with_parallelism_from")

    def upsert_tensor_with_parallelism_from(self, key: str, buffer_ptr: int, size: int, parallelism=None,
                                            config=None, writer_partition=None) -> int:
        return self._t_par_from(key, buffer_ptr, size, parallelism, config, writer_partition, True,
                                "upsert_tensor_with_parallelism_from")

    def _t_batch_par_from(self, keys, buffer_ptrs, sizes, parallelisms, config, writer_partitions, upsert, what):
        n = _same_len(what, keys=keys, buffer_ptrs=buffer_ptrs, sizes=sizes)
        for p, s in zip(buffer_ptrs, sizes):
            _decode_at(int(p), int(s), what)
        return [self._t_par_from(keys[i], buffer_ptrs[i], sizes[i],
                                 parallelisms[i] if parallelisms is not None else None, config,
                                 writer_partitions[i] if writer_partitions is not None else None, upsert, what)
                for i in range(n)]

    def batch_put_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms=None, config=None,
                                               writer_partitions=None) -> List[int]:
        return self._t_batch_par_from(keys, buffer_ptrs, sizes, parallelisms, config, writer_partitions, False,
                                      "batch_put_tensor_with_parallelism_from")

    def batch_upsert_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms=None, config=None,
                                                  writer_partitions=None) -> List[int]:
        return self._t_batch_par_from(keys, buffer_ptrs, sizes, parallelisms, config, writer_partitions, True,
                                      "batch_upsert_tensor_with_parallelism_from")

    def _t_read(self, key: str, target: Optional[ReadTarget], what: str):
        key = _check_key(key, what)
        if target is None:
            target = ReadTarget()
        if not isinstance(target, ReadTarget):
            raise TypeError(f"{what}: target must be a ReadTarget or None, got {type(target).__name__}")
        target._check(what)
        par = target.parallelism
        if target.mode == "as_stored":
            return self.get_tensor(key + par._suffix() if par is not None else key)
        if target.mode == "shard":
            got = self.get_tensor(key + par._suffix())
            if got is not None:
                return got
            full = self.get_tensor(key)
            if full is None:
                return None
            torch = _torch()
            if not isinstance(full, torch.Tensor):
                raise ValueError(f"{what}: {key!r} holds a {type(full).__name__} of tensors, not one tensor")
            tp = par._tp()
            if tp is None:
                return full
            sd = _check_tp(full, tp.rank, tp.size, 0 if tp.split_dim is None else tp.split_dim, what)
            return _split(full, tp.size, sd)[tp.rank].clone()
        # full
        full = self.get_tensor(key)
        if full is not None:
            return full
        template = par if par is not None else TensorParallelism([ParallelAxis("tp", 0, 1)])
        if template._tp() is None:
            return self.get_tensor(key + template._suffix())
        first_key = key + template._with_tp_rank(0)._suffix()
        data, p = self._t_get_object(first_key)
        if data is None:
            return None
        tp0 = next((a for a in (p or {}).get("axes", []) if a.get("kind") == "tp"), None)
        if tp0 is None:
            raise ValueError(f"{what}: {first_key!r} carries no TP layout; it was not written as a TP shard")
        size, sd = int(tp0["size"]), int(tp0.get("split_dim") or 0)
        keys = [key + template._with_tp_rank(r)._suffix() for r in range(size)]
        shards = [_decode_bytes(data, what)] + self.batch_get_tensor(keys[1:])
        missing = [k for k, s in zip(keys, shards) if s is None]
        if missing:
            log.error("%s: %r cannot be rebuilt: shard(s) %s are missing", what, key, missing)
            return None
        torch = _torch()
        out = torch.cat(shards, dim=sd)
        if p.get("full_shape") is not None and list(out.shape) != list(p["full_shape"]):
            raise ValueError(f"{what}: {key!r}'s shards join to {list(out.shape)}, the layout says {p['full_shape']}")
        return out

    def get_tensor_with_parallelism(self, key: str, target: Optional[ReadTarget] = None):
        """Reads per ``target`` (see ReadTarget); None when the object(s) are missing."""
        return self._t_read(key, target, "get_tensor_with_parallelism")

    def batch_get_tensor_with_parallelism(self, keys, targets=None) -> list:
        if targets is not None:
            _same_len("batch_get_tensor_with_parallelism", keys=keys, targets=targets)
        return [self._t_read(k, targets[i] if targets is not None else None, "batch_get_tensor_with_parallelism")
                for i, k in enumerate(keys)]

    def _t_read_into(self, key, buffer_ptr, size, target, what):
        key = _check_key(key, what)
        if target is None or (target.mode == "as_stored"):
            if target is not None:
                target._check(what)
            par = target.parallelism if target is not None else None
            return self._t_into(key + par._suffix() if par is not None else key, buffer_ptr, size, what)
        t = self._t_read(key, target, what)
        if t is None:
            return None
        n = serialize_tensor_into(t, int(buffer_ptr), int(size))
        return _decode_at(int(buffer_ptr), n, what)

    def get_tensor_with_parallelism_into(self, key: str, buffer_ptr: int, size: int, target=None):
        """get_tensor_with_parallelism leaving the tensor object in the caller's buffer; the
        returned tensor views it."""
        return self._t_read_into(key, buffer_ptr, size, target, "get_tensor_with_parallelism_into")

    def batch_get_tensor_with_parallelism_into(self, keys, buffer_ptrs, sizes, targets=None) -> list:
        what = "batch_get_tensor_with_parallelism_into"
        _same_len(what, keys=keys, buffer_ptrs=buffer_ptrs, sizes=sizes)
        if targets is not None:
            _same_len(what, keys=keys, targets=targets)
        return [self._t_read_into(k, p, s, targets[i] if targets is not None else None, what)
                for i, (k, p, s) in enumerate(zip(keys, buffer_ptrs, sizes))]

    # -- safetensors --
    def save_tensor_to_safetensor(self, key: str, file_name: Optional[str] = None,
                                  tensor_name: Optional[str] = None) -> int:
        """Writes key's tensor (or dict of tensors) to a safetensors file (default: a file named
        ``<key>``, in the working directory, as upstream's); 0, or OBJECT_NOT_FOUND when the key
        is missing. The file appears whole or not at all."""
        key = _check_key(key, "save_tensor_to_safetensor")
        t = self.get_tensor(key)
        if t is None:
            return _OBJECT_NOT_FOUND
        torch = _torch()
        if isinstance(t, torch.Tensor):
            tensors = {tensor_name or key: t}
        elif isinstance(t, dict) and all(isinstance(v, torch.Tensor) for v in t.values()):
            tensors = t
        else:
            raise ValueError(f"save_tensor_to_safetensor: {key!r} holds a {type(t).__name__}; safetensors "
                             "stores one tensor or a flat dict of tensors")
        _write_safetensors(os.fspath(key if file_name is None else file_name), tensors, {"format": "pt"})
        return _OK

    def load_tensor_from_safetensor(self, key: Optional[str] = None, file_name: Optional[str] = None,
                                    tensor_name: Optional[str] = None, config=None):
        """Reads a safetensors file (default: the file named ``<key>``, what
        save_tensor_to_safetensor writes by default) and stores it under ``key`` (default: the
        file's only tensor name); returns what was stored (a tensor, or a dict for several
        tensors), or None when the file is missing or the put fails.
        ``load_tensor_from_safetensor(path)`` works as well."""
        if file_name is None and key is not None and os.path.exists(os.fspath(key)):
            key, file_name = None, key
        if file_name is None:
            if key is None:
                raise ValueError("load_tensor_from_safetensor: give a key or a file_name")
            file_name = key
        try:
            tensors, _meta = _read_safetensors(os.fspath(file_name))
        except FileNotFoundError:
            log.error("load_tensor_from_safetensor: %s was not found", file_name)
            return None
        if tensor_name is not None:
            if tensor_name not in tensors:
                raise KeyError(f"load_tensor_from_safetensor: {file_name} has no tensor {tensor_name!r} "
                               f"(it has {sorted(tensors)})")
            value = tensors[tensor_name]
        elif len(tensors) == 1:
            (tensor_name, value), = tensors.items()
        elif key is not None and key in tensors:
            value = tensors[key]
        else:
            value = tensors
        if key is None:
            if not isinstance(tensor_name, str):
                raise ValueError(f"load_tensor_from_safetensor: {file_name} holds {len(tensors)} tensors; give a key")
            key = tensor_name
        rc = self.put_tensor(key, value, config)
        if rc != 0:
            log.error("load_tensor_from_safetensor: storing %r failed with %d", key, rc)
            return None
        return value
