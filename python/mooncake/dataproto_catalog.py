"""``mooncake.dataproto_catalog``: an in-memory index from logical rows (partition + key) and
field names to the DataProto fragments (single-stage handles) that hold them.

The catalog keeps metadata only: moving data is ``MooncakeBundleTransfer``'s job and object
lifetime the store's. One catalog is not thread-safe; its host serializes calls. A fragment is
identified by its stage's manifest key and dropped when no row refers to it any more."""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

Location = Tuple[str, int]  # (fragment id, row inside the fragment)


class DataProtoCatalog:
    def __init__(self) -> None:
        # partition -> key -> {"tag": dict, "fields": {field: Location}}
        self._partitions: Dict[str, Dict[str, Dict[str, Any]]] = {}
        self._handles: Dict[str, Dict[str, Any]] = {}
        self._refs: Dict[str, int] = {}

    def update(self, partition: str, keys: Sequence[str], *,
               tags: Optional[Sequence[Mapping[str, Any]]] = None,
               handle: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        """Merge ``tags`` (one mapping per key) into the rows' tags and point every field of the
        single-stage ``handle`` (one row per key) at it. Checks everything before changing
        anything."""
        partition = _name(partition, "partition")
        keys = _names(keys, "keys")
        new_tags = _check_tags(tags, len(keys))
        fragment = _fragment(handle, len(keys)) if handle is not None else None
        if new_tags is None and fragment is None:
            raise ValueError("a catalog update needs tags or a DataProto handle")
        if fragment is not None:
            fid, stored, _ = fragment
            if fid in self._handles and self._handles[fid] != stored:
                raise ValueError(f"DataProto fragment id collision: {fid!r}")

        rows = self._partitions.setdefault(partition, {})
        out_tags = []
        for i, key in enumerate(keys):
            entry = rows.setdefault(key, {"tag": {}, "fields": {}})
            if new_tags is not None:
                entry["tag"].update(copy.deepcopy(new_tags[i]))
            out_tags.append(copy.deepcopy(entry["tag"]))
        if fragment is not None:
            fid, stored, fields = fragment
            self._handles.setdefault(fid, stored)
            self._refs.setdefault(fid, 0)
            for i, key in enumerate(keys):
                held = rows[key]["fields"]
                for name in fields:
                    old = held.get(name)
                    held[name] = (fid, i)
                    if old is not None and old[0] == fid:
                        continue
                    if old is not None:
                        self._unref(old[0])
                    self._refs[fid] += 1
        return {"keys": list(keys), "tags": out_tags, "fields": _fields_of(rows, keys)}

    def resolve(self, partition: str, keys: Sequence[str],
                fields: Optional[Sequence[str]] = None) -> Dict[str, Any]:
        """Where to read ``fields`` (default: every field of the keys) of ``keys``, in order:
        fields that share the same fragment rows come as one group."""
        partition = _name(partition, "partition")
        keys = _names(keys, "keys")
        rows = self._partitions.get(partition, {})
        absent = [k for k in keys if k not in rows]
        if absent:
            raise ValueError(f"keys were not found in partition {partition!r}: {absent}")
        wanted = list(_names(fields, "field names")) if fields is not None else _fields_of(rows, keys)
        if not wanted:
            raise ValueError("the requested keys do not contain any fields")
        for key in keys:
            lacking = [f for f in wanted if f not in rows[key]["fields"]]
            if lacking:
                raise ValueError(f"fields are not ready for key {key!r}: {lacking}")
        groups: Dict[Tuple[Location, ...], List[str]] = {}
        used = set()
        for name in wanted:
            locations = tuple(rows[k]["fields"][name] for k in keys)
            groups.setdefault(locations, []).append(name)
            used.update(fid for fid, _ in locations)
        return {
            "keys": list(keys),
            "tags": [copy.deepcopy(rows[k]["tag"]) for k in keys],
            "fields": wanted,
            "field_groups": [{"fields": names, "locations": list(locs)} for locs, names in groups.items()],
            "handles": {fid: copy.deepcopy(self._handles[fid]) for fid in used},
        }

    def list(self, partition: Optional[str] = None) -> Dict[str, Dict[str, Any]]:
        """Tags by partition and key (one partition, or all)."""
        if partition is not None:
            partition = _name(partition, "partition")
            names = [partition] if partition in self._partitions else []
        else:
            names = list(self._partitions)
        return {p: {k: copy.deepcopy(e["tag"]) for k, e in self._partitions[p].items()} for p in names}

    def remove(self, partition: str, keys: Sequence[str]) -> None:
        """Forget ``keys`` (the store's objects are untouched)."""
        partition = _name(partition, "partition")
        keys = _names(keys, "keys")
        rows = self._partitions.get(partition)
        if rows is None:
            return
        for key in keys:
            entry = rows.pop(key, None)
            if entry is not None:
                for fid, _ in entry["fields"].values():
                    self._unref(fid)
        if not rows:
            del self._partitions[partition]

    def _unref(self, fid: str) -> None:
        self._refs[fid] -= 1
        if self._refs[fid] == 0:
            del self._refs[fid]
            del self._handles[fid]


def _fragment(handle: Mapping[str, Any], rows: int) -> Tuple[str, Dict[str, Any], Tuple[str, ...]]:
    from ._structured_refs import export_dataproto_ref, import_dataproto_ref

    ref = import_dataproto_ref(handle)
    if ref.batch_size != rows:
        raise ValueError(f"DataProto batch size {ref.batch_size!r} does not match {rows} logical keys")
    if len(ref.stage_refs) != 1:
        raise ValueError("a catalog fragment must have exactly one DataProto stage")
    fid = _name(next(iter(ref.stage_refs.values())).manifest_key, "manifest_key")
    fields = _names(ref.field_index, "field names")
    return fid, export_dataproto_ref(ref), fields


def _fields_of(rows: Mapping[str, Mapping[str, Any]], keys: Sequence[str]) -> List[str]:
    return list(dict.fromkeys(f for k in keys for f in rows[k]["fields"]))


def _names(values: Any, what: str) -> Tuple[str, ...]:
    if isinstance(values, str):
        raise ValueError(f"{what} must be a sequence of non-empty strings")
    out = tuple(values)
    if not out or not all(isinstance(v, str) and v for v in out):
        raise ValueError(f"{what} must be non-empty strings")
    if len(set(out)) != len(out):
        raise ValueError(f"{what} must be unique")
    return out


def _check_tags(tags: Optional[Sequence[Mapping[str, Any]]], count: int) -> Optional[List[Dict[str, Any]]]:
    if tags is None:
        return None
    if len(tags) != count:
        raise ValueError("tags must have the same length as keys")
    if not all(isinstance(t, Mapping) for t in tags):
        raise TypeError("tags must be mappings")
    return [copy.deepcopy(dict(t)) for t in tags]


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string")
    return value
