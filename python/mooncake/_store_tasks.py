"""``mooncake._store_tasks``: replica copy and move tasks — ``TaskType``, ``TaskStatus``,
``QueryTaskResponse``, the per-store task runner (one thread) and the store calls
(``TaskMixin``: ``create_copy_task``, ``create_move_task``, ``query_task``)."""

from __future__ import annotations

import enum
import logging
import threading
import time
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from . import _native
from ._store_abi import ErrorCode, last_error
from ._store_types import ReplicateConfig

if TYPE_CHECKING:
    from .store import MooncakeDistributedStore

log = logging.getLogger("mooncake.store")


class TaskType(enum.IntEnum):
    REPLICA_COPY = 0
    REPLICA_MOVE = 1


class TaskStatus(enum.IntEnum):
    PENDING = 0
    PROCESSING = 1
    SUCCESS = 2
    FAILED = 3


class QueryTaskResponse:
    """A task's state, as upstream's (``id``, ``type``, ``status``, ``created_at_ms_epoch``,
    ``last_updated_at_ms_epoch``, ``assigned_client``, ``message``)."""

    def __init__(self, id, type, status, created, updated, client, message):
        self.id, self.type, self.status = id, type, status
        self.created_at_ms_epoch, self.last_updated_at_ms_epoch = created, updated
        self.assigned_client, self.message = client, message

    def __repr__(self) -> str:
        return (f"QueryTaskResponse(id={self.id}, type={self.type.name}, status={self.status.name}, "
                f"message={self.message!r})")


_TASK_NOT_FOUND = -1300  # upstream's TASK_NOT_FOUND


class _TaskRunner:
    """Runs this store's copy and move tasks, one at a time, on a thread of its own.

    A task reads the value and upserts it with the wanted placement (the current copies plus the
    targets for a copy; minus the source plus the target for a move), so readers see the old
    placement or the new one, never a missing or partial value; then it checks that the targets
    hold a copy."""

    def __init__(self, store: "MooncakeDistributedStore"):
        import queue
        import uuid
        self._store = store
        self._q: "queue.Queue" = queue.Queue()
        self._tasks: Dict[tuple, dict] = {}
        self._mu = threading.Lock()
        self._uuid = uuid
        self._thread = threading.Thread(target=self._run, name="mooncake-store-tasks", daemon=True)
        self._thread.start()

    def _segments(self, key: str) -> List[str]:
        return [d.get("segment_name") for d in self._store.get_replica_desc(key) if d.is_memory_replica()]

    def submit(self, typ: TaskType, key: str, targets: List[str], source: Optional[str]) -> tuple:
        if not targets or any(not isinstance(t, str) or not t for t in targets):
            log.error("%s: want non-empty target segment names", typ.name.lower())
            return (0, 0), ErrorCode.INVALID_PARAMS
        try:
            segs = self._segments(key)
        except _native.MooncakeError as e:
            return (0, 0), e.code
        if source is not None and source not in segs:
            log.error("create_move_task(%r): no copy on source segment %s (copies: %s)", key, source, segs)
            return (0, 0), ErrorCode.INVALID_PARAMS
        u = self._uuid.uuid4().int
        tid = (u >> 64, u & ((1 << 64) - 1))
        now = int(time.time() * 1000)
        with self._mu:
            self._tasks[tid] = {"type": typ, "status": TaskStatus.PENDING, "created": now, "updated": now, "message": ""}
        self._q.put((tid, typ, key, targets, source))
        return tid, 0

    def query(self, tid) -> tuple:
        tid = tuple(tid) if isinstance(tid, (list, tuple)) else tid
        with self._mu:
            t = self._tasks.get(tid)
            if t is None:
                return None, _TASK_NOT_FOUND
            return QueryTaskResponse(tid, t["type"], t["status"], t["created"], t["updated"],
                                     self._store.get_hostname(), t["message"]), 0

    def _set(self, tid, status: TaskStatus, message: str = ""):
        with self._mu:
            t = self._tasks[tid]
            t["status"], t["message"], t["updated"] = status, message, int(time.time() * 1000)

    def _run(self):
        while True:
            item = self._q.get()
            if item is None:
                return
            tid, typ, key, targets, source = item
            self._set(tid, TaskStatus.PROCESSING)
            try:
                self._set(tid, *self._do(key, targets, source))
            except Exception as e:  # report, never kill the runner
                self._set(tid, TaskStatus.FAILED, f"{type(e).__name__}: {e}")

    def _do(self, key: str, targets: List[str], source: Optional[str]):
        s = self._store
        segs = self._segments(key)
        if source is not None:
            if source not in segs:
                return TaskStatus.FAILED, f"no copy of {key!r} on source segment {source}"
            segs = [x for x in segs if x != source]
        want = list(dict.fromkeys(segs + targets))
        value = s.get(key)
        if not value:
            return TaskStatus.FAILED, f"{key!r} could not be read: {last_error()}"
        cfg = ReplicateConfig(replica_num=len(want), preferred_segments=want)
        rc = s.upsert(key, value, cfg)
        if rc != 0:
            return TaskStatus.FAILED, f"upsert of {key!r} failed with {rc}: {last_error()}"
        got = self._segments(key)
        missing = [t for t in targets if t not in got]
        if missing:
            return TaskStatus.FAILED, f"no copy landed on {missing} (copies now on {got})"
        return TaskStatus.SUCCESS, f"copies on {got}"

    def stop(self):
        self._q.put(None)
        self._thread.join(timeout=30)


def _tasks(store: "MooncakeDistributedStore") -> _TaskRunner:
    with store._lock:
        if store._task_runner is None:
            store._task_runner = _TaskRunner(store)
        return store._task_runner


class TaskMixin:
    """Replica-task calls of ``MooncakeDistributedStore``."""

    def create_copy_task(self, key: str, targets: Sequence[str]) -> tuple:
        """Starts copying key's value to the segments ``targets`` (``"host:port"``); returns
        (task id, 0) or (UUID(int=0), code). See docs/store.md for how tasks run here."""
        return _tasks(self).submit(TaskType.REPLICA_COPY, key, list(targets), None)

    def create_move_task(self, key: str, source: str, target: str) -> tuple:
        """Starts moving key's copy on segment ``source`` to segment ``target``; returns
        (task id, 0) or (UUID(int=0), code)."""
        return _tasks(self).submit(TaskType.REPLICA_MOVE, key, [target], source)

    def query_task(self, task_id) -> tuple:
        """(QueryTaskResponse, 0) for a task this store created, or (None, TASK_NOT_FOUND)."""
        return _tasks(self).query(task_id)
