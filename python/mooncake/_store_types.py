"""``mooncake._store_types``: how a put is placed — ``ReplicateConfig`` and its enums
(``SoftPinAction``, ``ObjectDataType``), with upstream's names, defaults and checks. Re-exported
by ``mooncake.store``."""

from __future__ import annotations

import enum
from typing import List, Optional, Sequence

from ._store_abi import _ReplicateConfigC


class SoftPinAction(enum.IntEnum):
    """What a put does to the key's soft pin (upstream's values). ``PRESERVE``: a new key is not
    pinned, an upserted key keeps the pin it had; ``ENABLE``: pin it (for ``soft_pin_ttl_ms``, or
    the master's ``--default_kv_soft_pin_ttl``); ``DISABLE``: an upserted key loses its pin."""
    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ObjectDataType(enum.IntEnum):
    """What an object holds (upstream's values), set with ``ReplicateConfig.data_type``."""
    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


def _check_count(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"ReplicateConfig.{name} must be an int, not {type(v).__name__}")
    if v < 0:
        raise ValueError(f"ReplicateConfig.{name} must be >= 0, got {v}")
    return v


def _check_enum(cls, name: str, v, what: str):
    """v as a member of the IntEnum cls, for ReplicateConfig.<name> (TypeError for a non-int,
    ValueError, naming what is allowed, for an int that is no member)."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"ReplicateConfig.{name} must be a {cls.__name__}, not {type(v).__name__}")
    try:
        return cls(v)
    except ValueError:
        raise ValueError(f"ReplicateConfig.{name} {v!r} is not {what}") from None


class ReplicateConfig:
    """How a put is placed (upstream's properties; defaults as upstream's).

    Wired to the master: ``replica_num`` (copies on distinct segments), ``with_soft_pin`` /
    ``soft_pin_action`` / ``soft_pin_ttl_ms`` (soft pins, their TTL), ``with_hard_pin`` (never
    evicted), ``preferred_segment`` / ``preferred_segments`` (``"host:port"`` segments tried
    first), ``prefer_alloc_in_same_node`` (this client's own segment first).
    Accepted and ignored (see docs/store.md): ``nof_replica_num`` (NVMe-oF replicas: no NVMe-oF
    tier in this build), ``dfs_replica_num`` (objects reach the shared file tier by eviction
    instead), ``group_ids`` (routing groups; checked for length, then unused: there is one
    master), ``data_type`` (an ``ObjectDataType``; checked, then unused: placement here does not
    depend on what an object holds)."""

    __slots__ = ("_replica_num", "_nof_replica_num", "_dfs_replica_num", "_soft_pin_action",
                 "_soft_pin_ttl_ms", "with_hard_pin", "preferred_segment", "_preferred_segments",
                 "_prefer_alloc_in_same_node", "_group_ids", "_data_type")

    def __init__(self, replica_num: int = 1, with_soft_pin: bool = False,
                 with_hard_pin: bool = False, preferred_segment: str = "",
                 preferred_segments: Optional[Sequence[str]] = None, *,
                 nof_replica_num: int = 0, dfs_replica_num: int = 0,
                 soft_pin_action: Optional[SoftPinAction] = None,
                 soft_pin_ttl_ms: Optional[int] = None, prefer_alloc_in_same_node: bool = False,
                 group_ids: Optional[Sequence[str]] = None,
                 data_type: "ObjectDataType" = ObjectDataType.UNKNOWN):
        self.replica_num = replica_num
        self.nof_replica_num = nof_replica_num
        self.dfs_replica_num = dfs_replica_num
        self._soft_pin_action = SoftPinAction.PRESERVE
        self.with_soft_pin = with_soft_pin
        if soft_pin_action is not None:
            self.soft_pin_action = soft_pin_action
        self._soft_pin_ttl_ms = None
        self.soft_pin_ttl_ms = soft_pin_ttl_ms
        self.with_hard_pin = with_hard_pin
        self.preferred_segment = preferred_segment
        self.preferred_segments = preferred_segments or []
        self.prefer_alloc_in_same_node = prefer_alloc_in_same_node
        self.group_ids = group_ids
        self.data_type = data_type

    @property
    def replica_num(self) -> int:
        return self._replica_num

    @replica_num.setter
    def replica_num(self, v: int):
        self._replica_num = _check_count("replica_num", v)

    @property
    def nof_replica_num(self) -> int:
        return self._nof_replica_num

    @nof_replica_num.setter
    def nof_replica_num(self, v: int):
        self._nof_replica_num = _check_count("nof_replica_num", v)

    @property
    def dfs_replica_num(self) -> int:
        return self._dfs_replica_num

    @dfs_replica_num.setter
    def dfs_replica_num(self, v: int):
        self._dfs_replica_num = _check_count("dfs_replica_num", v)

    @property
    def soft_pin_action(self) -> SoftPinAction:
        return self._soft_pin_action

    @soft_pin_action.setter
    def soft_pin_action(self, v):
        self._soft_pin_action = _check_enum(SoftPinAction, "soft_pin_action", v, "PRESERVE (0), ENABLE (1) or DISABLE (2)")

    @property
    def with_soft_pin(self) -> bool:
        """True when the soft pin is enabled (``soft_pin_action == ENABLE``)."""
        return self._soft_pin_action == SoftPinAction.ENABLE

    @with_soft_pin.setter
    def with_soft_pin(self, v: bool):
        if v:
            self._soft_pin_action = SoftPinAction.ENABLE
        elif self._soft_pin_action == SoftPinAction.ENABLE:
            self._soft_pin_action = SoftPinAction.PRESERVE

    @property
    def soft_pin_ttl_ms(self) -> Optional[int]:
        """The soft pin's TTL in ms, or None for the master's default. Needs ``soft_pin_action``
        ENABLE (a put with a TTL and no pin fails with INVALID_PARAMS)."""
        return self._soft_pin_ttl_ms

    @soft_pin_ttl_ms.setter
    def soft_pin_ttl_ms(self, v: Optional[int]):
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"ReplicateConfig.soft_pin_ttl_ms must be an int or None, not {type(v).__name__}")
            if v < 0 or v >= 1 << 64:
                raise TypeError(f"ReplicateConfig.soft_pin_ttl_ms must be in [0, 2**64), got {v}")
        self._soft_pin_ttl_ms = v

    @property
    def preferred_segments(self) -> List[str]:
        return self._preferred_segments

    @preferred_segments.setter
    def preferred_segments(self, v: Sequence[str]):
        if isinstance(v, str):
            raise TypeError("ReplicateConfig.preferred_segments must be a list of str, not a str")
        v = list(v)
        for seg in v:
            if not isinstance(seg, str) or "," in seg:
                raise ValueError(f"ReplicateConfig.preferred_segments: bad segment name {seg!r}")
        self._preferred_segments = v

    @property
    def prefer_alloc_in_same_node(self) -> bool:
        return self._prefer_alloc_in_same_node

    @prefer_alloc_in_same_node.setter
    def prefer_alloc_in_same_node(self, v):
        # upstream's reference shows a string ("True"); accept bools and the usual spellings
        if isinstance(v, str):
            low = v.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no", "on", "off", ""):
                raise ValueError(f"ReplicateConfig.prefer_alloc_in_same_node: {v!r} is not a boolean")
            v = low in ("true", "1", "yes", "on")
        self._prefer_alloc_in_same_node = bool(v)

    @property
    def group_ids(self) -> Optional[List[str]]:
        return self._group_ids

    @group_ids.setter
    def group_ids(self, v: Optional[Sequence[str]]):
        if v is not None:
            if isinstance(v, str):
                raise TypeError("ReplicateConfig.group_ids must be a list of str or None, not a str")
            v = list(v)
            for g in v:
                if not isinstance(g, str):
                    raise TypeError(f"ReplicateConfig.group_ids: {g!r} is not a str")
        self._group_ids = v

    @property
    def data_type(self) -> ObjectDataType:
        return self._data_type

    @data_type.setter
    def data_type(self, v):
        self._data_type = _check_enum(ObjectDataType, "data_type", v, "an ObjectDataType (0..9)")

    def __repr__(self) -> str:
        return (f"ReplicateConfig(replica_num={self.replica_num}, soft_pin_action={self.soft_pin_action.name}, "
                f"soft_pin_ttl_ms={self.soft_pin_ttl_ms}, with_hard_pin={self.with_hard_pin}, "
                f"preferred_segment={self.preferred_segment!r}, preferred_segments={self.preferred_segments!r}, "
                f"prefer_alloc_in_same_node={self.prefer_alloc_in_same_node}, nof_replica_num={self.nof_replica_num}, "
                f"dfs_replica_num={self.dfs_replica_num}, group_ids={self.group_ids!r}, "
                f"data_type={self.data_type.name})")

    __str__ = __repr__

    def _c(self) -> _ReplicateConfigC:
        segs = [s for s in ([self.preferred_segment] + list(self.preferred_segments)) if s]
        ttl = self._soft_pin_ttl_ms
        return _ReplicateConfigC(int(self.replica_num), int(self.with_soft_pin),
                                 int(bool(self.with_hard_pin)),
                                 ",".join(segs).encode() if segs else None,
                                 int(self._soft_pin_action), int(ttl is not None), ttl or 0,
                                 int(self._prefer_alloc_in_same_node))

    def _groups_ok(self, n: int) -> bool:
        return self._group_ids is None or len(self._group_ids) == n
