"""``mooncake._structured_refs``: the value types of ``mooncake.structured_object_store``
(policies, field schemas, refs, read specs, results) and the JSON-safe DataProto handle
(``export_dataproto_ref`` / ``import_dataproto_ref``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

DEFAULT_BUNDLE_CHUNK_BYTES = 64 * 1024 * 1024
AUTO_PARALLEL_MIN_BYTES = DEFAULT_BUNDLE_CHUNK_BYTES
AUTO_PARALLEL_MIN_CHUNKS = 8
MISSING_OBJECT_ERROR = -704  # remove() of a key that is already gone
STRUCTURED_FIELD_SPECS_KEY = "__mooncake_structured_fields__"
WRAPPED_OBJECT_KEY = "__mooncake_wrapped_object__"

DATAPROTO_REF_HANDLE_TYPE = "mooncake_dataproto_ref"
DATAPROTO_REF_HANDLE_VERSION = 1
STORAGE_GROUP_ID = "storage_group_id"  # optional field of a version-1 handle

_PUT_MODES = ("auto", "batch", "parallel")
_COPY_MODES = ("auto", "zero_copy", "copy")


@dataclass(frozen=True)
class BundleTransferPolicy:
    """How a bundle's chunks are written: ``max_inflight_put`` writers at once, ``put_mode``
    (auto / batch / parallel) and ``copy_mode`` (auto / zero_copy / copy)."""

    max_inflight_put: int = 1
    put_mode: str = "auto"
    copy_mode: str = "auto"


@dataclass(frozen=True)
class FieldSchema:
    """A codec hint for one DataProto / dict field; ``metadata["section"]`` pins the field to
    ``batch``, ``non_tensor_batch`` or ``meta_info``."""

    codec: str
    nullable: bool = True
    metadata: Dict[str, Any] = field(default_factory=dict)


@dataclass
class RemoteBundleRef:
    """A stored bundle: its manifest key and (when known) its manifest."""

    manifest_key: str
    manifest: Dict[str, Any]


@dataclass(frozen=True, init=False)
class StructuredObjectPayload:
    """An object to store: JSON ``metadata`` plus named member ``buffers``."""

    metadata: Mapping[str, Any]
    buffers: Mapping[str, Any]

    def __init__(self, metadata: Optional[Mapping[str, Any]] = None,
                 buffers: Optional[Mapping[str, Any]] = None) -> None:
        if buffers is None:
            raise TypeError("StructuredObjectPayload needs buffers")
        object.__setattr__(self, "metadata", {} if metadata is None else metadata)
        object.__setattr__(self, "buffers", buffers)


@dataclass
class StructuredObjectResult:
    """What a read returns: the object's metadata and its materialized members."""

    metadata: Dict[str, Any]
    objects: Dict[str, Any]


@dataclass(frozen=True)
class StructuredFieldLocation:
    """Where a DataProto field lives: the stage's object and the member inside it."""

    stage: str
    member: str
    section: str


@dataclass
class MooncakeDataProtoRef:
    """A DataProto kept in the store as one structured object per stage."""

    batch_size: int
    stage_refs: Dict[str, RemoteBundleRef]
    field_index: Dict[str, StructuredFieldLocation]
    meta_info: Dict[str, Any]
    namespace: str = "default"
    partition: str = "default"
    global_indexes: Optional[List[int]] = None
    encoded_non_tensor: Dict[str, Any] = field(default_factory=dict)
    _storage_group_id: Optional[str] = field(default=None, repr=False)


@dataclass(frozen=True)
class StructuredMemberSlice:
    """``[start:end:step]`` along ``axis`` of one member."""

    axis: int
    start: int
    end: int
    step: int = 1


@dataclass(frozen=True)
class StructuredObjectReadSpec:
    """A lazy read: which members of ``ref`` and which slices of them."""

    ref: Any
    member_names: Optional[Tuple[str, ...]] = None
    member_slices: Tuple[Tuple[str, StructuredMemberSlice], ...] = ()

    def select_members(self, names: Optional[Sequence[str]]) -> "StructuredObjectReadSpec":
        chosen = None if names is None else tuple(names)
        return StructuredObjectReadSpec(self.ref, chosen, self.member_slices)

    def slice_member(self, name: str, axis: int, start: int, end: int,
                     step: int = 1) -> "StructuredObjectReadSpec":
        slices = dict(self.member_slices)
        slices[name] = StructuredMemberSlice(axis, start, end, step)
        return StructuredObjectReadSpec(self.ref, self.member_names, tuple(slices.items()))

    def member_slice(self, name: str) -> Optional[StructuredMemberSlice]:
        return dict(self.member_slices).get(name)


# ---- DataProto handles ------------------------------------------------------------------------

def is_dataproto_ref_handle(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == DATAPROTO_REF_HANDLE_TYPE


def json_safe(value: Any) -> Any:
    """``value`` as plain JSON data (numpy scalars and arrays become Python values)."""
    import numpy as np

    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    raise TypeError(f"a DataProto handle holds only JSON-safe values, not {type(value).__name__}")


def export_dataproto_ref(ref: MooncakeDataProtoRef) -> Dict[str, Any]:
    """``ref`` as a JSON-safe handle (``import_dataproto_ref`` turns it back)."""
    if not isinstance(ref, MooncakeDataProtoRef):
        raise TypeError(f"export_dataproto_ref wants a MooncakeDataProtoRef, got {type(ref).__name__}")
    out: Dict[str, Any] = {
        "type": DATAPROTO_REF_HANDLE_TYPE,
        "version": DATAPROTO_REF_HANDLE_VERSION,
        "kind": "bundle_stages",
        "batch_size": int(ref.batch_size),
        "namespace": ref.namespace,
        "partition": ref.partition,
        "global_indexes": json_safe(ref.global_indexes),
        "stage_refs": {s: {"manifest_key": r.manifest_key} for s, r in ref.stage_refs.items()},
        "field_index": {n: {"stage": loc.stage, "member": loc.member, "section": loc.section}
                        for n, loc in ref.field_index.items()},
        "meta_info": json_safe(ref.meta_info),
        "encoded_non_tensor": json_safe(ref.encoded_non_tensor),
    }
    if ref._storage_group_id is not None:
        out[STORAGE_GROUP_ID] = ref._storage_group_id
    json.dumps(out, ensure_ascii=False)
    return out


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"DataProto ref handle: {what} must be a mapping")
    return value


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _indexes(value: Any) -> Optional[List[int]]:
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValueError("DataProto ref handle: global_indexes must be a list or null")
    if any(isinstance(i, bool) or not isinstance(i, int) for i in value):
        raise ValueError("DataProto ref handle: global_indexes must hold integers")
    return list(value)


def import_dataproto_ref(handle: Mapping[str, Any]) -> MooncakeDataProtoRef:
    """The ref a handle from ``export_dataproto_ref`` describes (checked field by field)."""
    if not is_dataproto_ref_handle(handle):
        raise ValueError("not a Mooncake DataProto ref handle")
    version = int(handle.get("version", -1))
    if version not in (DATAPROTO_REF_HANDLE_VERSION, 2):
        raise ValueError(f"unsupported DataProto ref handle version: {handle.get('version')!r}")
    if handle.get("kind") != "bundle_stages":
        raise ValueError(f"unsupported DataProto ref handle kind: {handle.get('kind')!r}")
    stages: Dict[str, RemoteBundleRef] = {}
    for stage, raw in _mapping(handle.get("stage_refs"), "stage_refs").items():
        key = _mapping(raw, f"stage_refs[{stage!r}]").get("manifest_key")
        if not _nonempty_str(stage) or not _nonempty_str(key):
            raise ValueError("DataProto ref handle: stage refs need non-empty string names and "
                             "manifest_key values")
        stages[stage] = RemoteBundleRef(manifest_key=key, manifest={})
    index: Dict[str, StructuredFieldLocation] = {}
    for name, raw in _mapping(handle.get("field_index"), "field_index").items():
        loc = _mapping(raw, f"field_index[{name!r}]")
        section = loc.get("section")
        if section not in ("batch", "non_tensor_batch"):
            raise ValueError(f"invalid DataProto field section: {section!r}")
        stage, member = loc.get("stage"), loc.get("member")
        if not (_nonempty_str(name) and _nonempty_str(stage) and _nonempty_str(member)):
            raise ValueError("DataProto ref handle: field locations must be non-empty strings")
        if stage not in stages:
            raise ValueError(f"DataProto ref handle: field {name!r} references unknown stage {stage!r}")
        index[name] = StructuredFieldLocation(stage=stage, member=member, section=section)
    group = handle.get(STORAGE_GROUP_ID)
    if (version == 2 and group is None) or (group is not None and not _nonempty_str(group)):
        raise ValueError("DataProto ref handle has invalid storage_group_id")
    return MooncakeDataProtoRef(
        batch_size=int(handle["batch_size"]),
        stage_refs=stages,
        field_index=index,
        meta_info=dict(_mapping(handle.get("meta_info", {}), "meta_info")),
        namespace=str(handle.get("namespace", "default")),
        partition=str(handle.get("partition", "default")),
        global_indexes=_indexes(handle.get("global_indexes")),
        encoded_non_tensor=dict(_mapping(handle.get("encoded_non_tensor", {}), "encoded_non_tensor")),
        _storage_group_id=group,
    )


export_ref = export_dataproto_ref
import_ref = import_dataproto_ref


def resolve_dataproto_ref(ref: Any) -> MooncakeDataProtoRef:
    if isinstance(ref, MooncakeDataProtoRef):
        return ref
    if is_dataproto_ref_handle(ref):
        return import_dataproto_ref(ref)
    raise TypeError(f"expected a MooncakeDataProtoRef or a DataProto handle, got {type(ref).__name__}")
