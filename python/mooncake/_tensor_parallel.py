"""``mooncake._tensor_parallel``: how a tensor shard is named and read — ``ParallelAxis``,
``TensorParallelism``, ``ReadTarget`` — and the argument checks of the tensor calls."""

from __future__ import annotations

from typing import Optional, Sequence

from ._tensor_codec import _torch

# ---- parallelism types ------------------------------------------------------------------------

_KINDS = ("tp", "dp", "ep", "pp")


class ParallelAxis:
    """One axis of a shard's identity: ``kind`` ("tp", "dp", "ep", "pp"), ``rank`` of ``size``,
    ``split_dim`` (the tensor dimension a TP axis splits; 0 when None), and optional
    ``expert_id`` (EP) / ``stage_id`` (PP)."""

    def __init__(self, kind: str = "tp", rank: int = 0, size: int = 1, split_dim: Optional[int] = None,
                 expert_id: Optional[int] = None, stage_id: Optional[int] = None):
        self.kind, self.rank, self.size = kind, rank, size
        self.split_dim, self.expert_id, self.stage_id = split_dim, expert_id, stage_id

    def __repr__(self) -> str:
        extra = "".join(f", {n}={getattr(self, n)}" for n in ("split_dim", "expert_id", "stage_id")
                        if getattr(self, n) is not None)
        return f"ParallelAxis(kind={self.kind!r}, rank={self.rank}, size={self.size}{extra})"

    def __eq__(self, other) -> bool:
        return isinstance(other, ParallelAxis) and self._json() == other._json()

    def _check(self, what: str) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"{what}: ParallelAxis.kind must be one of {list(_KINDS)}, got {self.kind!r}")
        for n in ("rank", "size"):
            v = getattr(self, n)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{what}: ParallelAxis.{n} must be an int, got {type(v).__name__}")
        if self.size < 1:
            raise ValueError(f"{what}: ParallelAxis.size must be >= 1, got {self.size}")
        if not 0 <= self.rank < self.size:
            raise ValueError(f"{what}: ParallelAxis.rank {self.rank} is outside [0, {self.size})")
        for n in ("split_dim", "expert_id", "stage_id"):
            v = getattr(self, n)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise TypeError(f"{what}: ParallelAxis.{n} must be an int or None, got {type(v).__name__}")

    def _json(self) -> dict:
        d = {"kind": self.kind, "rank": self.rank, "size": self.size}
        for n in ("split_dim", "expert_id", "stage_id"):
            if getattr(self, n) is not None:
                d[n] = getattr(self, n)
        return d

    @classmethod
    def _from_json(cls, d: dict) -> "ParallelAxis":
        return cls(d["kind"], d["rank"], d["size"], d.get("split_dim"), d.get("expert_id"), d.get("stage_id"))


class TensorParallelism:
    """An ordered list of ``ParallelAxis`` naming one stored or requested shard."""

    def __init__(self, axes: Optional[Sequence[ParallelAxis]] = None):
        self.axes = list(axes or [])

    def __repr__(self) -> str:
        return f"TensorParallelism(axes={self.axes!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, TensorParallelism) and self.axes == other.axes

    def _check(self, what: str) -> None:
        if not isinstance(self.axes, (list, tuple)) or not self.axes:
            raise ValueError(f"{what}: TensorParallelism.axes must be a non-empty list of ParallelAxis")
        seen = set()
        for a in self.axes:
            if not isinstance(a, ParallelAxis):
                raise TypeError(f"{what}: TensorParallelism.axes holds a {type(a).__name__}, want ParallelAxis")
            a._check(what)
            if a.kind in seen:
                raise ValueError(f"{what}: axis kind {a.kind!r} appears twice in {self!r}")
            seen.add(a.kind)

    def _tp(self) -> Optional[ParallelAxis]:
        return next((a for a in self.axes if a.kind == "tp"), None)

    def _suffix(self) -> str:
        s = ""
        for a in self.axes:
            s += f"_{a.kind}_{a.rank}"
            if a.expert_id is not None:
                s += f"_e{a.expert_id}"
            if a.stage_id is not None:
                s += f"_s{a.stage_id}"
        return s

    def _json(self) -> dict:
        return {"axes": [a._json() for a in self.axes]}

    @classmethod
    def _from_json(cls, d: dict) -> "TensorParallelism":
        return cls([ParallelAxis._from_json(a) for a in d.get("axes", [])])

    def _with_tp_rank(self, rank: int) -> "TensorParallelism":
        axes = []
        for a in self.axes:
            b = ParallelAxis(a.kind, a.rank, a.size, a.split_dim, a.expert_id, a.stage_id)
            if b.kind == "tp":
                b.rank = rank
            axes.append(b)
        return TensorParallelism(axes)


class ReadTarget:
    """What a parallel read returns: ``mode`` "as_stored" (the stored object, at the shard key
    when ``parallelism`` is given), "shard" (the shard ``parallelism`` names, cut from the full
    tensor when only that is stored), or "full" (the full tensor, rebuilt from TP shards when it
    was stored split)."""

    MODES = ("as_stored", "shard", "full")

    def __init__(self, mode: str = "as_stored", parallelism: Optional[TensorParallelism] = None):
        self.mode, self.parallelism = mode, parallelism

    def __repr__(self) -> str:
        return f"ReadTarget(mode={self.mode!r}, parallelism={self.parallelism!r})"

    def _check(self, what: str) -> None:
        if self.mode not in self.MODES:
            raise ValueError(f"{what}: ReadTarget.mode must be one of {list(self.MODES)}, got {self.mode!r}")
        if self.parallelism is not None:
            if not isinstance(self.parallelism, TensorParallelism):
                raise TypeError(f"{what}: ReadTarget.parallelism must be a TensorParallelism or None")
            self.parallelism._check(what)
        elif self.mode == "shard":
            raise ValueError(f"{what}: ReadTarget(mode='shard') needs parallelism naming the shard")


def _tp_key(key: str, rank: int) -> str:
    return f"{key}_tp_{rank}"


def _check_key(key, what: str) -> str:
    if isinstance(key, bytes):
        key = key.decode("utf-8")
    if not isinstance(key, str):
        raise TypeError(f"{what}: key must be str, not {type(key).__name__}")
    if not key:
        raise ValueError(f"{what}: key is empty")
    return key


def _check_tensor(t, what: str):
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(t).__name__}")
    return t


def _check_int(v, name: str, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{what}: {name} must be an int, got {type(v).__name__}")
    return v


def _check_tp(tensor, tp_rank, tp_size, split_dim, what: str) -> int:
    """Validates TP arguments; returns split_dim normalised to >= 0 (tensor may be None)."""
    _check_int(tp_rank, "tp_rank", what)
    _check_int(tp_size, "tp_size", what)
    _check_int(split_dim, "split_dim", what)
    if tp_size < 1:
        raise ValueError(f"{what}: tp_size must be >= 1, got {tp_size}")
    if not 0 <= tp_rank < tp_size:
        raise ValueError(f"{what}: tp_rank {tp_rank} is outside [0, {tp_size})")
    if tensor is None:
        return split_dim
    nd = tensor.dim()
    if tp_size > 1 and nd == 0:
        raise ValueError(f"{what}: a 0-d tensor cannot be split into {tp_size} TP shards")
    if nd and not -nd <= split_dim < nd:
        raise ValueError(f"{what}: split_dim {split_dim} is out of range for a {nd}-d tensor of shape {list(tensor.shape)}")
    return split_dim % nd if nd else 0


def _split(tensor, tp_size: int, split_dim: int) -> list:
    torch = _torch()
    return list(torch.tensor_split(tensor.detach(), tp_size, dim=split_dim))


def _same_len(what: str, **seqs) -> int:
    lens = {k: len(v) for k, v in seqs.items()}
    if len(set(lens.values())) > 1:
        raise ValueError(f"{what}: lengths differ: " + ", ".join(f"{k}={n}" for k, n in lens.items()))
    return next(iter(lens.values()), 0)


def _check_cfg(config, what: str):
    if config is not None and not hasattr(config, "_c"):
        raise TypeError(f"{what}: config must be a ReplicateConfig or None, got {type(config).__name__}")
    return config
