"""``mooncake._structured_config``: write configs (``ReplicateConfig``-like objects) for the
structured object store, and removing its keys.

A structured object is many store keys. A config's ``group_ids`` names one logical group; every
write of ``n`` keys gets a copy whose ``group_ids`` holds that id ``n`` times (the store wants
one per key). An empty ``group_ids`` means "ungrouped" (written as ``None``). The caller's config
is never changed."""

from __future__ import annotations

import copy
import logging
from types import SimpleNamespace
from typing import Any, List, Sequence

from ._structured_refs import MISSING_OBJECT_ERROR

log = logging.getLogger("mooncake.structured_object_store")

# The attributes copied when a config cannot be copied with copy.copy.
_CONFIG_FIELDS = ("data_type", "group_ids", "nof_replica_num", "prefer_alloc_in_same_node",
                  "preferred_nof_segments", "preferred_segment", "preferred_segments", "replica_num",
                  "with_hard_pin", "with_soft_pin")
DUPLICATE_REGISTRATION = -600  # register_buffer of memory that is already registered

_GROUP_ERROR = ("structured object store config.group_ids must contain exactly one logical group id "
                "(it is repeated for every internal key)")


def _copy_write_config(config: Any) -> Any:
    try:
        return copy.copy(config)
    except TypeError:
        pass
    try:
        out = type(config)()
    except Exception as err:
        raise TypeError("a structured object store config must be copyable or "
                        "default-constructible") from err
    for name in _CONFIG_FIELDS:
        if not hasattr(config, name):
            continue
        try:
            value = getattr(config, name)
        except Exception:
            continue
        if isinstance(value, (list, tuple)):
            value = type(value)(value)
        try:
            setattr(out, name, value)
        except Exception as err:
            raise TypeError(f"structured object store config field {name!r} is not writable") from err
    return out


def _config_for_grouped_keys(config: Any, key_count: int) -> Any:
    """``config`` for a write of ``key_count`` keys (see the module's docstring)."""
    if config is None or key_count <= 0:
        return config
    ids = getattr(config, "group_ids", None)
    if ids is None:
        return config
    was_str = isinstance(ids, str)
    ids = [ids] if was_str else list(ids)
    if not ids:
        out = _copy_write_config(config)
        out.group_ids = None
        return out
    if len(ids) != 1:
        raise ValueError(_GROUP_ERROR)
    if key_count == 1 and not was_str:
        return config
    out = _copy_write_config(config)
    out.group_ids = [ids[0]] * key_count
    return out


def new_storage_group_id(config: Any) -> Any:
    """The storage group of a new DataProto: the config's one group id, a fresh
    ``structured-<hex>`` when it names none, ``None`` for an explicit empty id."""
    import uuid

    raw = getattr(config, "group_ids", None)
    if raw is None:
        gid = None
    elif isinstance(raw, str):
        gid = raw
    else:
        try:
            ids = list(raw)
        except TypeError as err:
            raise ValueError("structured object store config.group_ids must contain strings") from err
        if len(ids) > 1:
            raise ValueError(_GROUP_ERROR)
        gid = ids[0] if ids else None
    if gid is None:
        return f"structured-{uuid.uuid4().hex}"
    if not isinstance(gid, str):
        raise ValueError("structured object store config.group_ids must contain strings")
    return gid or None


def _config_with_group_id(config: Any, group_id: str) -> Any:
    """A copy of ``config`` (a new ReplicateConfig when None) whose group is ``group_id``."""
    named = getattr(_config_for_grouped_keys(config, 1), "group_ids", None)
    if named and named[0] and named[0] != group_id:
        raise ValueError("config.group_ids conflicts with the DataProto storage group")
    if config is None:
        try:
            from .store import ReplicateConfig
            out = ReplicateConfig()
        except Exception:
            out = SimpleNamespace()
    else:
        out = _copy_write_config(config)
    out.group_ids = [group_id]
    return out


def call_write(fn: Any, *args: Any, config: Any = None) -> Any:
    return fn(*args) if config is None else fn(*args, config=config)


def put_with_config(store: Any, key: str, value: Any, config: Any = None) -> Any:
    return call_write(store.put, key, value, config=_config_for_grouped_keys(config, 1))


def batch_put_from_with_config(fn: Any, keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int],
                               config: Any = None) -> Any:
    return call_write(fn, list(keys), list(ptrs), list(sizes),
                      config=_config_for_grouped_keys(config, len(keys)))


def _check_status(status: Any, operation: str, key: str) -> None:
    if status not in (None, 0):
        log.warning("structured object store: %s of %s returned %s", operation, key, status)
        raise RuntimeError(f"{operation} failed for {key}: {status}")


def _gone(status: Any) -> bool:
    return status in (None, 0, MISSING_OBJECT_ERROR)


def _cleanup_keys(store: Any, keys: Sequence[str], strict: bool) -> None:
    """Remove ``keys`` (forced): one ``batch_remove`` when the store has it, then ``remove`` for
    each key it did not remove. ``strict``: raise on a failure; otherwise log it and go on (used
    while unwinding a failed write, whose error is the one to report)."""
    pending: List[str] = list(dict.fromkeys(keys))
    batch_remove = getattr(store, "batch_remove", None)
    if callable(batch_remove) and pending:
        try:
            try:
                results = batch_remove(pending, True)
            except TypeError:
                results = batch_remove(pending)
            if len(results) != len(pending):
                raise RuntimeError(f"batch_remove returned {len(results)} results for {len(pending)} keys")
            pending = [k for k, rc in zip(pending, results) if not _gone(rc)]
            if not pending:
                return
        except Exception as err:
            if strict:
                raise
            log.warning("structured object store: batch_remove failed: %s", err)
    failed = []
    for key in pending:
        try:
            rc = store.remove(key, True)
        except KeyError:
            continue
        except Exception as err:
            if strict:
                raise
            log.warning("structured object store: remove %s failed: %s", key, err)
            continue
        if not _gone(rc):
            failed.append((key, rc))
    if failed:
        log.warning("structured object store: %d keys were not removed: %s", len(failed), failed[:3])
        if strict:
            raise RuntimeError(f"failed to remove {len(failed)} Mooncake keys: {failed[:3]}")
