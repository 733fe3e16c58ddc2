"""torch.distributed backends over Mooncake's process group.

Importing this module (or the top-level ``mooncake_pg``) registers two c10d backends:

* ``"mooncake-cpu"`` for CPU tensors, and
* ``"mooncake"`` for CUDA tensors (staged through pinned host memory),

so ``dist.init_process_group(backend="mooncake-cpu")`` (or
``backend="cpu:mooncake-cpu,cuda:mooncake"``) works under torchrun. Every spawned child process
must import this module before creating a group. Registration is idempotent.

Group options: pass ``pg_options=MooncakeBackendOptions(max_group_size, is_extension,
auto_deactivate_on_failure, auto_sync_on_failure)`` to ``init_process_group``/``new_group``.
Without it the defaults come from ``MOONCAKE_PG_AUTO_DEACTIVATE_ON_FAILURE`` and
``MOONCAKE_PG_AUTO_SYNC_ON_FAILURE`` (``0``/``false``/``no``/``off`` disable; default on).

Elastic membership (docs/elastic.md): the functions take the group objects torch returns
(``dist.group.WORLD``, ``new_group(...)``, ``None`` for the default group): queries
(:func:`get_active_ranks`, :func:`get_current_epoch`, :func:`get_num_synced_ranks`,
:func:`get_peer_state`), membership calls made by every active rank (:func:`activate_ranks` /
:func:`recover_ranks`, :func:`deactivate_ranks`, :func:`extend_group_size_to`,
:func:`sync_after_failure`), :func:`join_group` for a replacement or new process, and, for the
``Work`` of an ``async_op=True`` call, :func:`get_failed_ranks_hint` and :func:`get_local_success`.
A peer that dies never fails an op: the op completes over the survivors and says so in the hint.
"""

from __future__ import annotations

import ctypes
import enum
import json
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, List, Optional

import torch
import torch.distributed as dist

from mooncake import _native

# The library first: the shim's DT_NEEDED "libmooncake.so" (the library's soname) is then met by
# the copy this process loaded, MOONCAKE_LIB's when it is set, not by a second Go runtime.
_native.lib()

try:
    from mooncake import _pg_ext  # type: ignore[attr-defined]
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError(
        "mooncake: the torch shim (mooncake._pg_ext) could not be loaded: "
        f"{e}. It must be built against the installed torch ({torch.__version__}); "
        "reinstall with `pip install --no-build-isolation .` (or run torchext/build_inplace.sh)."
    ) from e

if _pg_ext.TORCH_VERSION != torch.__version__:  # pragma: no cover
    raise ImportError(
        f"mooncake._pg_ext was built against torch {_pg_ext.TORCH_VERSION}, but torch "
        f"{torch.__version__} is installed; reinstall mooncake with "
        "`pip install --no-build-isolation .` so the shim is rebuilt against this torch."
    )

__all__ = [
    "MooncakeBackendOptions",
    "ProposalResponse",
    "ProposeViewUpdateResponse",
    "SyncAfterFailureResponse",
    "get_peer_state",
    "get_num_synced_ranks",
    "activate_ranks",
    "recover_ranks",
    "deactivate_ranks",
    "join_group",
    "sync_after_failure",
    "extend_group_size_to",
    "set_collective_timeout_us",
    "set_p2p_timeout_us",
    "set_fault_reconciliation_window_us",
    "set_transfer_engine",
    "get_coordinator_address",
    "COORDINATOR_STORE_KEY",
    "set_device_filter",
    "set_host_ip",
    "ProposalStatus",
    "ViewUpdateStatus",
    "SyncAfterFailureStatus",
    "get_active_ranks",
    "get_current_epoch",
    "get_max_group_size",
    "get_failed_ranks_hint",
    "get_local_success",
    "get_backend",
    "get_preferred_hca",
    "BACKEND_CPU",
    "BACKEND_CUDA",
]

BACKEND_CPU = "mooncake-cpu"
BACKEND_CUDA = "mooncake"

_FALSE = {"0", "false", "no", "off", ""}


def _env_flag(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    if v is None:
        return default
    return v.strip().lower() not in _FALSE


class ProposalStatus(enum.IntEnum):
    """Outcome of a membership proposal (activate/recover/deactivate ranks, extend, join);
    upstream's current name for it is ``ViewUpdateStatus``."""

    Rejected = 0
    Applied = 1
    AppliedWithDroppedRanks = 2


ViewUpdateStatus = ProposalStatus


class SyncAfterFailureStatus(enum.IntEnum):
    """Outcome of ``sync_after_failure``."""

    Reconciled = 0
    NoPending = 1
    Rejected = 2


class MooncakeBackendOptions:
    """Options of a Mooncake group, passed as ``pg_options=``.

    ``max_group_size``: number of rank slots (<= 0: the group size); ranks may later join up to
    it. ``is_extension``: this process joins an existing group beyond its initial size.
    ``auto_deactivate_on_failure``: a rank that fails during an op is marked inactive.
    ``auto_sync_on_failure``: the survivors then agree on a new epoch before the op completes
    (requires auto_deactivate_on_failure).
    """

    def __init__(
        self,
        max_group_size: int = 0,
        is_extension: bool = False,
        auto_deactivate_on_failure: Optional[bool] = None,
        auto_sync_on_failure: Optional[bool] = None,
    ) -> None:
        if isinstance(max_group_size, bool) or not isinstance(max_group_size, int):
            raise TypeError(
                f"MooncakeBackendOptions: max_group_size must be an int, got {max_group_size!r}"
            )
        if auto_deactivate_on_failure is None:
            auto_deactivate_on_failure = _env_flag("MOONCAKE_PG_AUTO_DEACTIVATE_ON_FAILURE", True)
        if auto_sync_on_failure is None:
            auto_sync_on_failure = _env_flag(
                "MOONCAKE_PG_AUTO_SYNC_ON_FAILURE", bool(auto_deactivate_on_failure)
            )
        if auto_sync_on_failure and not auto_deactivate_on_failure:
            raise ValueError(
                "MooncakeBackendOptions: auto_sync_on_failure requires auto_deactivate_on_failure"
            )
        self.max_group_size = int(max_group_size)
        self.is_extension = bool(is_extension)
        self.auto_deactivate_on_failure = bool(auto_deactivate_on_failure)
        self.auto_sync_on_failure = bool(auto_sync_on_failure)

    def __repr__(self) -> str:
        return (
            f"MooncakeBackendOptions(max_group_size={self.max_group_size}, "
            f"is_extension={self.is_extension}, "
            f"auto_deactivate_on_failure={self.auto_deactivate_on_failure}, "
            f"auto_sync_on_failure={self.auto_sync_on_failure})"
        )


# set_collective_timeout_us; 0: the library reads MOONCAKE_PG_COLLECTIVE_TIMEOUT_US when a group
# is created (so a value set in os.environ after this import counts).
_collective_timeout_us = 0
# set_p2p_timeout_us and set_fault_reconciliation_window_us (0: unset), given to every group
# created afterwards and to the default group.
_p2p_timeout_us = 0
_fault_window_us = 0

# The store key under which rank 0 publishes the address of the group's control plane (upstream:
# its coordinator's RPC address; here: the rendezvous store holding the decision log).
COORDINATOR_STORE_KEY = "coordinator_addr"


def _control_plane_address(store: Any) -> str:
    """host:port of the TCPStore under a group's (prefixed) rendezvous store; "" for a store
    without a network address (a FileStore, a HashStore)."""
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    if isinstance(store, dist.TCPStore):
        return f"{store.host}:{store.port}"
    return ""


def _configure(backend: Any) -> None:
    if _collective_timeout_us > 0:
        _call(backend, "configure", collective_timeout_us=_collective_timeout_us)
    if _p2p_timeout_us > 0:
        _call(backend, "configure_p2p_timeout", p2p_timeout_us=_p2p_timeout_us)
    if _fault_window_us > 0:
        _call(backend, "configure_fault_window", fault_reconciliation_window_us=_fault_window_us)


def _make_creator(cuda: bool):
    device = "cuda" if cuda else "cpu"

    def create(dist_backend_opts: Any, pg_options: Any):
        if pg_options is None:
            opts = MooncakeBackendOptions()
        elif isinstance(pg_options, MooncakeBackendOptions):
            opts = pg_options
        else:
            raise TypeError(
                f"backend '{BACKEND_CUDA if cuda else BACKEND_CPU}': pg_options must be a "
                f"mooncake.pg.MooncakeBackendOptions, got {type(pg_options).__name__}"
            )
        size = int(dist_backend_opts.group_size)
        rank = int(dist_backend_opts.group_rank)
        if opts.max_group_size > 0 and opts.max_group_size < size:
            raise ValueError(
                f"MooncakeBackendOptions: max_group_size ({opts.max_group_size}) must be at "
                f"least the group size ({size})"
            )
        timeout = dist_backend_opts.timeout
        timeout_ms = int(timeout.total_seconds() * 1000) if timeout is not None else 0
        group_name = f"{dist_backend_opts.group_id}/{device}"
        backend = _pg_ext.create_backend(
            dist_backend_opts.store,
            rank,
            size,
            timeout_ms,
            group_name,
            opts.max_group_size,
            opts.is_extension,
            opts.auto_deactivate_on_failure,
            opts.auto_sync_on_failure,
            cuda,
        )
        _configure(backend)
        if rank == 0:
            # As upstream's rank 0 publishes its coordinator (pg.CoordinatorKey, docs/elastic.md).
            dist_backend_opts.store.set(COORDINATOR_STORE_KEY, _control_plane_address(dist_backend_opts.store))
        return backend

    create.__name__ = f"create_mooncake_{device}_backend"
    return create


def _register() -> None:
    plugins = getattr(dist.Backend, "_plugins", {})
    for name, cuda in ((BACKEND_CPU, False), (BACKEND_CUDA, True)):
        if name.upper() in plugins:
            continue
        dist.Backend.register_backend(
            name, _make_creator(cuda), extended_api=True, devices=["cuda" if cuda else "cpu"]
        )


_register()


def get_backend(pg: Any = None):
    """The Mooncake backend object behind a torch process group (or None: the default group)."""
    if pg is None:
        pg = dist.group.WORLD
        if pg is None:
            raise RuntimeError("mooncake: the default process group is not initialized")
    if isinstance(pg, torch._C._distributed_c10d.Backend):
        if _pg_ext.is_mooncake_backend(pg):
            return pg
        raise ValueError(f"mooncake: {type(pg).__name__} is not a mooncake backend")
    if pg is dist.GroupMember.NON_GROUP_MEMBER:
        raise ValueError("mooncake: this rank is not a member of the given group")
    errors = []
    for dev in ("cpu", "cuda"):
        try:
            b = pg._get_backend(torch.device(dev))
        except Exception as e:  # no backend for this device
            errors.append(f"{dev}: {e}")
            continue
        if _pg_ext.is_mooncake_backend(b):
            return b
        errors.append(f"{dev}: backend {b.name() if hasattr(b, 'name') else type(b).__name__}")
    raise ValueError(
        "mooncake: the group has no mooncake backend (" + "; ".join(errors) + ")"
    )


def get_active_ranks(pg: Any = None) -> torch.Tensor:
    """int32 tensor of length max_group_size: 1 where the rank slot is active (on the group's
    device: CUDA for a ``"mooncake"`` group).

    int32 as upstream Mooncake returns it (its ``activeRanksTensor``), though its usage page
    calls it a ``torch.BoolTensor``: ``.bool()`` gives the mask, and it works as one in
    ``torch.where``/indexing after that (docs/elastic.md)."""
    b = get_backend(pg)
    t = _pg_ext.get_active_ranks(b)  # applies membership decisions this rank has not seen
    _pg_ext.refresh_size(b)  # dist.get_world_size(): the highest active rank + 1
    if b.name() == BACKEND_CUDA and torch.cuda.is_available():
        t = t.cuda()  # on the group's device
    return t


def get_preferred_hca(pg: Any, location: str) -> str:
    """The RDMA HCA (NIC) upstream's topology prefers for memory at ``location`` ("cpu:N" or
    "cuda:N"). This build's engine moves the group's data over tcp and shared memory and uses
    no HCA, so the answer is "" (what upstream answers when its topology lists no preferred
    HCA for the location)."""
    get_backend(pg)
    if not isinstance(location, str) or not re.fullmatch(r"(cpu|cuda):\d+", location):
        raise ValueError(f"mooncake: get_preferred_hca: location must be 'cpu:N' or 'cuda:N', got {location!r}")
    return ""


def get_current_epoch(pg: Any = None) -> int:
    """The group's membership epoch (bumped by every agreed membership change)."""
    return int(_pg_ext.get_current_epoch(get_backend(pg)))


def get_max_group_size(pg: Any = None) -> int:
    """Number of rank slots of the group."""
    return int(_pg_ext.get_max_group_size(get_backend(pg)))


def get_failed_ranks_hint(work: Any) -> torch.Tensor:
    """The failed-ranks hint of a completed ``Work``, as upstream returns it: an int32 mask over
    the group's rank slots (max_group_size), 1 where that rank failed during the op, all zeros
    when none did. ``.tolist()`` gives the mask, ``.nonzero().flatten().tolist()`` the ranks."""
    if not work.is_completed():
        raise RuntimeError("mooncake: get_failed_ranks_hint: the work has not completed (call wait() first)")
    return _pg_ext.get_failed_ranks_mask(work)


def get_local_success(work: Any) -> bool:
    """Whether the op of a completed ``Work`` succeeded on this rank with every peer."""
    return bool(_pg_ext.get_local_success(work))


# ---------------------------------------------------------------- elastic membership


@dataclass
class ProposalResponse:
    """Answer of activate_ranks / recover_ranks / deactivate_ranks / join_group /
    extend_group_size_to."""

    status: ProposalStatus
    new_epoch: int
    dropped_ranks: List[int] = field(default_factory=list)
    reject_reason: str = ""


# Upstream's class name for these answers (its bindings' type of ProposalResponse).
ProposeViewUpdateResponse = ProposalResponse


@dataclass
class SyncAfterFailureResponse:
    """Answer of sync_after_failure."""

    status: SyncAfterFailureStatus
    reject_reason: str = ""


def _call(backend: Any, op: str, **kw: Any) -> dict:
    from mooncake import _native

    lib = _native.lib()
    fn = lib.mc_pg_membership
    fn.argtypes = [ctypes.c_uint64, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int32]
    fn.restype = ctypes.c_int
    req = json.dumps(dict(op=op, **kw)).encode()
    buf = ctypes.create_string_buffer(1 << 16)
    n = fn(ctypes.c_uint64(backend.handle), req, buf, len(buf))
    if n < 0:
        raise RuntimeError(f"mooncake: {op}: {_native.last_error()}")
    _pg_ext.refresh_size(backend)  # dist.get_world_size(): the highest active rank + 1
    return json.loads(buf.value.decode())


def _ranks(ranks: Any) -> List[int]:
    if isinstance(ranks, torch.Tensor):
        ranks = ranks.tolist()
    if isinstance(ranks, int):
        ranks = [ranks]
    out = []
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, int):
            raise TypeError(f"mooncake: ranks must be ints, got {r!r}")
        out.append(int(r))
    return out


def _proposal(d: dict) -> ProposalResponse:
    return ProposalResponse(ProposalStatus(d["status"]), int(d["new_epoch"]),
                            list(d.get("dropped_ranks") or []), d.get("reject_reason", ""))


def get_peer_state(pg: Any, ranks: Any) -> List[bool]:
    """For each rank: alive and reachable, with a published endpoint."""
    return [bool(x) for x in _call(get_backend(pg), "peer_state", ranks=_ranks(ranks))["peer_state"]]


def get_num_synced_ranks(pg: Any = None) -> int:
    """Number of ranks that take part in the group's ops (active, not failed)."""
    return int(_call(get_backend(pg), "num_synced")["num_synced"])


def _is_world(pg: Any) -> bool:
    return pg is None or pg is dist.group.WORLD


def _group_count_key(epoch: int) -> str:
    return f"mooncake/torch_group_count/{epoch}"


def _publish_group_count(pg: Any, r: ProposalResponse) -> ProposalResponse:
    # torch names groups made by new_group after a per-process counter (also the salt of
    # hashed names); a process that joins later has counted fewer. The members publish theirs
    # with the admission, and join_group adopts it, so groups created afterwards (by every rank,
    # in the same order) get the same names everywhere.
    if _is_world(pg) and r.status != ProposalStatus.Rejected:
        store = dist.distributed_c10d._get_default_store()
        store.set(_group_count_key(r.new_epoch), str(dist.distributed_c10d._world.group_count))
    return r


def _check_slots(backend: Any, what: str, size: int) -> None:
    # A group's rank slots are fixed when it is created (upstream: max_group_size, default the
    # group size), so growing past them needs the option at creation: say so.
    slots = int(_pg_ext.get_max_group_size(backend))
    if size > slots:
        raise ValueError(
            f"mooncake: {what}: the group has {slots} rank slots (max_group_size), so it cannot "
            f"grow to {size} ranks; create it with room to grow: dist.init_process_group(..., "
            f"pg_options=mooncake_pg.MooncakeBackendOptions(max_group_size={size}))"
        )


def activate_ranks(pg: Any, ranks: Any) -> ProposalResponse:
    """Admits ranks (replacements or new ranks that called join_group) into the group.

    Every active rank calls it (like every c10d call); proposals are idempotent. Ranks without a
    live published endpoint are dropped from the proposal (AppliedWithDroppedRanks), or the
    proposal is Rejected when none is left."""
    b = get_backend(pg)
    rs = _ranks(ranks)
    if rs:
        _check_slots(b, "activate_ranks/recover_ranks", max(rs) + 1)
    return _publish_group_count(pg, _proposal(_call(b, "activate", ranks=rs)))


recover_ranks = activate_ranks


def deactivate_ranks(pg: Any, ranks: Any) -> ProposalResponse:
    """Removes ranks from the group (a new epoch); every active rank calls it."""
    return _proposal(_call(get_backend(pg), "deactivate", ranks=_ranks(ranks)))


def extend_group_size_to(pg: Any, new_size: Optional[int] = None, *, size: Optional[int] = None) -> ProposalResponse:
    """Activates every rank below ``new_size`` (up to max_group_size) that is not active yet.

    ``size=`` is accepted as an older spelling of ``new_size``."""
    if (new_size is None) == (size is None):
        raise TypeError("extend_group_size_to() takes the new size once: extend_group_size_to(pg, new_size)")
    n = new_size if new_size is not None else size
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"extend_group_size_to: new_size must be an int, got {n!r}")
    b = get_backend(pg)
    _check_slots(b, "extend_group_size_to", int(n))
    return _publish_group_count(pg, _proposal(_call(b, "extend", size=int(n))))


def join_group(pg: Any = None) -> ProposalResponse:
    """Called by a replacement or extension process: blocks until the group admitted it.

    For the default group it also takes the members' torch group counter, so that groups made
    with ``new_group`` afterwards (by every rank, in the same order) line up with theirs."""
    r = _proposal(_call(get_backend(pg), "join"))
    if _is_world(pg) and r.status != ProposalStatus.Rejected:
        # The members publish it under the epoch of the decision that admitted this rank:
        # new_epoch, or an earlier one when the group changed again right after (a fault).
        store = dist.distributed_c10d._get_default_store()
        keys = [_group_count_key(e) for e in range(r.new_epoch, max(-1, r.new_epoch - 8), -1)]
        start = time.monotonic()
        deadline = start + store.timeout.total_seconds()
        while True:
            # its own epoch's key first; an earlier one only once that one is long overdue
            found = [k for k in (keys if time.monotonic() - start > 10 else keys[:1]) if store.check([k])]
            if found:
                dist.distributed_c10d._world.group_count = int(store.get(found[0]))
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"join_group: the members did not publish their group counter ({keys[0]}) within the store's timeout")
            time.sleep(0.02)
    return r


def sync_after_failure(pg: Any = None) -> SyncAfterFailureResponse:
    """Commits pending failures (auto_deactivate_on_failure without auto_sync_on_failure):
    the failed ranks become inactive in a new epoch."""
    d = _call(get_backend(pg), "sync")
    return SyncAfterFailureResponse(SyncAfterFailureStatus(d["status"]), d.get("reject_reason", ""))


def _set(fn_name: str, arg: bytes) -> None:
    from mooncake import _native

    fn = getattr(_native.lib(), fn_name)
    fn.argtypes = [ctypes.c_char_p]
    fn.restype = ctypes.c_int
    if fn(arg) != 0:
        raise ValueError(f"mooncake: {_native.last_error()}")


def set_device_filter(filters: List[str]) -> None:
    """Network interfaces the process's transfer engine may use (upstream selects NICs by name).
    Over tcp the engine listens on, and advertises, the first IPv4 address of the first one.
    Call it before the process's first group (or store, or engine); an interface this host
    does not have raises ValueError naming the ones it has. An empty list clears the filter."""
    if isinstance(filters, str) or not all(isinstance(f, str) for f in filters):
        raise TypeError(f"set_device_filter: want a list of interface names, got {filters!r}")
    _set("mc_set_device_filter", json.dumps(list(filters)).encode())


def set_host_ip(host_ip: str) -> None:
    """The address the process's transfer engine listens on and advertises (upstream's
    ``set_host_ip``); call it before the process's first group. "" clears it."""
    _set("mc_set_host_ip", str(host_ip).encode())


def set_collective_timeout_us(timeout_us: int) -> None:
    """Deadline of every collective of mooncake groups created afterwards (and of the default
    group when it exists), in microseconds; 0 restores the group's own timeout
    (init_process_group's ``timeout``). A dead peer is found by liveness probes (every 200 ms
    of silence, ``MC_PG_PROBE_MS``) well before any deadline; this bounds waits on peers that
    are alive but stuck."""
    global _collective_timeout_us
    _collective_timeout_us = max(0, int(timeout_us))
    if dist.is_initialized():
        try:
            b = get_backend(None)
        except ValueError:
            return
        _call(b, "configure", collective_timeout_us=_collective_timeout_us)


def _default_backend() -> Any:
    if not dist.is_initialized():
        return None
    try:
        return get_backend(None)
    except ValueError:
        return None


def _us(name: str, us: Any) -> int:
    if isinstance(us, bool) or not isinstance(us, int):
        raise TypeError(f"{name}: want an int of microseconds, got {us!r}")
    if us < 0:
        raise ValueError(f"{name}: {us} is negative")
    return int(us)


def set_p2p_timeout_us(timeout_us: int) -> None:
    """Deadline of every send and receive of mooncake groups created afterwards (and of the
    default group when it exists), in microseconds; 0 restores the group's timeout. A receive
    whose message does not come in time fails naming the deadline; a dead peer is found by
    liveness probes well before it."""
    global _p2p_timeout_us
    _p2p_timeout_us = _us("set_p2p_timeout_us", timeout_us)
    b = _default_backend()
    if b is not None:
        _call(b, "configure_p2p_timeout", p2p_timeout_us=_p2p_timeout_us)


def set_fault_reconciliation_window_us(window_us: int) -> None:
    """How long a rank that found members dead waits before the group decides, so that members
    failing meanwhile are agreed on in the same decision (one epoch) instead of one after the
    other: upstream's coordinator waits so for every rank's report. 0 (the default here: a
    liveness probe has proved the ranks dead) decides at once; the wait delays the op that met
    the failure by the window. Applies to mooncake groups created afterwards and to the default
    group; negative values raise ValueError."""
    global _fault_window_us
    _fault_window_us = _us("set_fault_reconciliation_window_us", window_us)
    b = _default_backend()
    if b is not None:
        _call(b, "configure_fault_window", fault_reconciliation_window_us=_fault_window_us)


def set_transfer_engine(engine: Any) -> None:
    """Makes ``engine`` (a ``mooncake.engine.TransferEngine``, or its ``get_engine()``) the
    process's transfer engine: process groups created afterwards run on it (their endpoints are
    its segment), as does a store given it (``setup(..., engine=engine)``). ``None`` returns to
    the default (the first engine the process created, else one made from the environment).
    Call it before the process's first group; it raises ValueError while a group or a store
    runs on the current engine. The engine must outlive the groups (upstream's rule too)."""
    from mooncake import _native

    if engine is None:
        h = 0
    else:
        get = getattr(engine, "get_engine_ptr", None)
        if get is None:
            raise TypeError(f"set_transfer_engine: want a mooncake.engine.TransferEngine, got {type(engine).__name__}")
        h = int(get())
    fn = _native.lib().mc_set_process_engine
    fn.argtypes = [ctypes.c_uint64]
    fn.restype = ctypes.c_int
    if fn(ctypes.c_uint64(h)) != 0:
        raise ValueError(f"mooncake: {_native.last_error()}")


def get_coordinator_address(pg: Any = None) -> str:
    """The address rank 0 published under ``"coordinator_addr"`` in the group's rendezvous store,
    as upstream's rank 0 publishes its coordinator's: here the host:port of the TCPStore that
    holds the group's membership decisions (this build has no coordinator process). Raises
    RuntimeError for a group whose store has no network address (a FileStore)."""
    addr = _call(get_backend(pg), "coordinator_address").get("coordinator", "")
    if not addr:
        raise RuntimeError("mooncake: the group's rendezvous store has no network address (not a "
                           "TCPStore): its control plane is that store")
    return addr
