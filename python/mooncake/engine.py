"""``mooncake.engine.TransferEngine``: one-sided READ/WRITE of registered memory between
processes, with Mooncake's Python API and return conventions (0/-1 for sync calls, a batch id or
0 for async ones, 1/0/-1/-2 from ``transfer_check_status``).

The calls go to the Go engine in libmooncake.so through ctypes, which releases the GIL for the
whole transfer. Errors are reported by return code, as upstream does; ``last_error()`` gives the
message of the most recent failure on the calling thread.
"""

from __future__ import annotations

import ctypes
import enum
import json
import sys
import threading
from typing import Iterable, List, Sequence

from . import _native
from ._native import MooncakeError

__all__ = ["TransferEngine", "TransferOpcode", "TransferStatus", "TransferNotify",
           "InnerTransferEngine", "MooncakeError", "last_error", "SUPPORT_CUDA", "SUPPORT_EFA",
           "SUPPORT_HIP", "SUPPORT_MNNVL", "SUPPORT_MUSA", "SUPPORT_INTRA_NVLINK"]

# Upstream's compile-time feature flags. This build moves host memory over tcp and shared
# memory; it registers no device memory and has none of these transports (asking for one gives
# an error naming what the host lacks), so all are False.
SUPPORT_CUDA = False
SUPPORT_EFA = False
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_MUSA = False
SUPPORT_INTRA_NVLINK = False

_u64 = ctypes.c_uint64
_i32 = ctypes.c_int32


class TransferOpcode(enum.IntEnum):
    Read = 0
    Write = 1
    READ = 0
    WRITE = 1


class TransferStatus(enum.IntEnum):
    WAITING = 0
    PENDING = 1
    INVALID = 2
    CANCELED = 3
    COMPLETED = 4
    TIMEOUT = 5
    FAILED = 6


class TransferNotify(tuple):
    """A notification: ``name`` and ``msg`` (upstream's class). ``get_notifies()`` returns
    these; being a ``(name, msg)`` tuple too, they unpack, compare and serialise like one."""

    __slots__ = ()

    def __new__(cls, name: str = "", msg: str = ""):
        if not isinstance(name, str) or not isinstance(msg, str):
            raise TypeError(f"TransferNotify(name, msg) takes two str, got "
                            f"{type(name).__name__} and {type(msg).__name__}")
        return super().__new__(cls, (name, msg))

    @property
    def name(self) -> str:
        return self[0]

    @property
    def msg(self) -> str:
        return self[1]

    def __repr__(self) -> str:
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"


class InnerTransferEngine:
    """What ``TransferEngine.get_engine()`` returns: the Go engine behind a TransferEngine
    (``handle`` in libmooncake, ``segment_name``). In one process, the store and the process
    groups use the first engine the process created, so create the TransferEngine first when
    they should share it (upstream passes get_engine() to them for the same purpose)."""

    __slots__ = ("handle", "segment_name", "_owner")

    def __init__(self, owner: "TransferEngine") -> None:
        self._owner = owner
        self.handle = owner._need()
        self.segment_name = owner.get_segment_name()

    def get_rpc_port(self) -> int:
        return self._owner.get_rpc_port()

    def get_engine_ptr(self) -> int:
        """The engine's handle in libmooncake (TransferEngine.get_engine_ptr)."""
        return self.handle

    def get_segment_name(self) -> str:
        return self.segment_name

    def __repr__(self) -> str:
        return f"InnerTransferEngine(segment_name={self.segment_name!r}, handle={self.handle})"


def _notify_pair(notify) -> "tuple[str, str] | None":
    if notify is None:
        return None
    if isinstance(notify, TransferNotify):
        return (notify.name, notify.msg)
    if isinstance(notify, (tuple, list)) and len(notify) == 2 and all(isinstance(x, str) for x in notify):
        return (notify[0], notify[1])
    raise TypeError(f"notify must be a TransferNotify(name, msg) or None, got {type(notify).__name__}")


def _device_location(addr: int, length: int, location: str) -> str:
    """The location to register [addr, addr+length) with: a block of allocate_gpu_memory is
    device memory whatever tag the caller gave (the engine then refuses it by name)."""
    gpu = sys.modules.get("mooncake._gpu")  # only when allocate_gpu_memory was used
    if gpu is not None:
        block = gpu.gpu_block(addr, length)
        if block is not None:
            prefix = gpu.runtime().tag
            return f"{prefix}:{block[1]}"
    return location


def _cuda_stream_sync(api: str, stream_ptr: int) -> None:
    """Waits for the work queued on a CUDA stream so far; raises RuntimeError naming what this
    host lacks when there is no CUDA."""
    from . import _gpu
    _gpu.stream_synchronize(api, stream_ptr)


def last_error() -> str:
    """The message of the last failed call on this thread."""
    return _native.last_error()


_P = ctypes.POINTER
_c = ctypes.c_char_p
# Every engine entry returns an int status.
_SIGNATURES = {name: (ctypes.c_int, args) for name, args in {
    "mc_engine_create": [_c, _c, _c, _c, _P(_u64)],
    "mc_engine_destroy": [_u64],
    "mc_engine_rpc_port": [_u64],
    "mc_engine_segment_name": [_u64, _c, _i32],
    "mc_engine_register": [_u64, _u64, _u64, _c],
    "mc_engine_unregister": [_u64, _u64],
    "mc_engine_register_batch": [_u64, _P(_u64), _P(_u64), _i32, _c],
    "mc_engine_unregister_batch": [_u64, _P(_u64), _i32],
    "mc_engine_allocate_shared": [_u64, _u64, _P(_u64)],
    "mc_engine_free_shared": [_u64, _u64],
    "mc_engine_open_segment": [_u64, _c, _P(_u64)],
    "mc_engine_first_buffer": [_u64, _u64, _P(_u64)],
    "mc_engine_allocate_batch": [_u64, _i32, _P(_u64)],
    "mc_engine_submit": [_u64, _u64, _i32, _P(_i32), _P(_u64), _P(_u64), _P(_u64),
                         _P(_u64), _c, _c],
    "mc_engine_task_status": [_u64, _u64, _i32, _P(_i32), _P(_u64)],
    "mc_engine_batch_status": [_u64, _u64, _P(_i32)],
    "mc_engine_wait_batch": [_u64, _u64, ctypes.c_int64, _P(_i32)],
    "mc_engine_free_batch": [_u64, _u64],
    "mc_engine_send_notify": [_u64, _u64, _c, _c],
    "mc_engine_get_notifies": [_u64, _c, _i32],
    "mc_engine_probe": [_u64, _c],
    "mc_engine_topology": [_u64, _c, _i32],
    "mc_engine_transport_bytes": [_u64, _c, _i32],
}.items()}


def _lib():
    """The library, with every engine entry's signature set (on the first call)."""
    return _native.declare("engine", _SIGNATURES)


def _arr(ctype, values: Sequence[int]):
    return (ctype * len(values))(*values)


class TransferEngine:
    """A transfer engine: one named segment of registered memory, and transfers to peers."""

    def __init__(self) -> None:
        self._h = 0
        self._segments: dict[str, int] = {}
        self._seg_lock = threading.Lock()

    # -- set-up ---------------------------------------------------------------------------
    def initialize(self, local_hostname: str, metadata_server: str = "P2PHANDSHAKE",
                   protocol: str = "tcp", device_name: str = "") -> int:
        """Starts the engine. metadata_server: "P2PHANDSHAKE", "http://h:p/metadata",
        "etcd://h:p" or "redis://h:p". Returns 0, or -1 with last_error() saying why."""
        if self._h:
            return -1
        out = _u64()
        rc = _lib().mc_engine_create(_native.cstr(local_hostname), _native.cstr(metadata_server),
                                     _native.cstr(protocol), _native.cstr(device_name or ""),
                                     ctypes.byref(out))
        if rc != 0:
            return -1
        self._h = out.value
        return 0

    def initialize_ext(self, local_hostname: str, metadata_server: str, protocol: str,
                       device_name: str, metadata_type: str = "") -> int:
        """Like initialize; metadata_type ("etcd", "redis", "http", "p2p") prefixes a bare
        metadata_server address."""
        conn = metadata_server
        if metadata_type and "://" not in conn and conn != "P2PHANDSHAKE":
            if metadata_type in ("http", "https"):
                conn = f"{metadata_type}://{conn}"
                if conn.count("/") < 3:
                    conn += "/metadata"
            elif metadata_type in ("etcd", "redis"):
                conn = f"{metadata_type}://{conn}"
            elif metadata_type in ("p2p", "P2PHANDSHAKE"):
                conn = "P2PHANDSHAKE"
        return self.initialize(local_hostname, conn, protocol, device_name)

    def _need(self) -> int:
        if not self._h:
            raise RuntimeError("TransferEngine is not initialized: call initialize() first")
        return self._h

    def get_rpc_port(self) -> int:
        return _lib().mc_engine_rpc_port(self._need())

    def get_engine_ptr(self) -> int:
        """The engine's handle in libmooncake (upstream: the address of its C++ engine), what
        ``mooncake.pg.set_transfer_engine`` and ``MooncakeDistributedStore.setup(engine=...)``
        take to run on this engine."""
        return self._need()

    def get_engine(self) -> InnerTransferEngine:
        """The engine behind this TransferEngine (see InnerTransferEngine)."""
        return InnerTransferEngine(self)

    def get_segment_name(self) -> str:
        """This engine's segment name (host:rpc_port under P2PHANDSHAKE)."""
        return _native.read_string(_lib().mc_engine_segment_name, self._need())

    def close(self) -> None:
        if self._h:
            _lib().mc_engine_destroy(self._h)
            self._h = 0

    # -- memory ---------------------------------------------------------------------------
    def register_memory(self, buffer_addr: int, capacity: int, location: str = "cpu:0") -> int:
        """Registers [buffer_addr, buffer_addr+capacity) of host memory ("cpu:N"). Device
        memory ("cuda:N", or a block of mooncake.allocate_gpu_memory under any tag) cannot be
        registered by this build: -1, and last_error() says what the host has and lacks."""
        location = _device_location(buffer_addr, capacity, location)
        return 0 if _lib().mc_engine_register(self._need(), buffer_addr, capacity,
                                              _native.cstr(location)) == 0 else -1

    def unregister_memory(self, buffer_addr: int) -> int:
        return 0 if _lib().mc_engine_unregister(self._need(), buffer_addr) == 0 else -1

    def batch_register_memory(self, buffer_addresses: Sequence[int],
                              capacities: Sequence[int]) -> int:
        if len(buffer_addresses) != len(capacities):
            return -1
        n = len(buffer_addresses)
        loc = "cpu:0"
        for a, c in zip(buffer_addresses, capacities):
            loc = _device_location(a, c, loc)
        return 0 if _lib().mc_engine_register_batch(
            self._need(), _arr(_u64, buffer_addresses), _arr(_u64, capacities), n,
            _native.cstr(loc)) == 0 else -1

    def batch_unregister_memory(self, buffer_addresses: Sequence[int]) -> int:
        return 0 if _lib().mc_engine_unregister_batch(
            self._need(), _arr(_u64, buffer_addresses), len(buffer_addresses)) == 0 else -1

    def allocate_managed_buffer(self, length: int) -> int:
        """A buffer from engine-owned shared memory, registered; its address, or 0 on failure."""
        out = _u64()
        if _lib().mc_engine_allocate_shared(self._need(), length, ctypes.byref(out)) != 0:
            return 0
        return out.value

    def free_managed_buffer(self, buffer_addr: int, length: int = 0) -> int:
        return 0 if _lib().mc_engine_free_shared(self._need(), buffer_addr) == 0 else -1

    def write_bytes_to_buffer(self, buffer_addr: int, src: bytes, length: int | None = None) -> int:
        if length is None:
            length = len(src)
        if not buffer_addr or length < 0 or length > len(src):
            return -1
        ctypes.memmove(buffer_addr, src, length)
        return 0

    def read_bytes_from_buffer(self, buffer_addr: int, length: int) -> bytes:
        if not buffer_addr or length < 0:
            return b""
        return ctypes.string_at(buffer_addr, length)

    # -- segments -------------------------------------------------------------------------
    def _segment(self, target_hostname: str) -> int:
        with self._seg_lock:
            seg = self._segments.get(target_hostname)
            if seg is None:
                out = _u64()
                _native.check(_lib().mc_engine_open_segment(
                    self._need(), _native.cstr(target_hostname), ctypes.byref(out)))
                seg = out.value
                self._segments[target_hostname] = seg
            return seg

    def get_first_buffer_address(self, segment_name: str) -> int:
        try:
            seg = self._segment(segment_name)
        except MooncakeError:
            return 0
        out = _u64()
        if _lib().mc_engine_first_buffer(self._need(), seg, ctypes.byref(out)) != 0:
            return 0
        return out.value

    # -- transfers ------------------------------------------------------------------------
    def _submit(self, target_hostname: str, opcode: int, buffers: Sequence[int],
                peers: Sequence[int], lengths: Sequence[int],
                notify: tuple[str, str] | None = None) -> int:
        """Allocates a batch and submits; returns the batch id (raises on failure)."""
        n = len(buffers)
        if n == 0 or len(peers) != n or len(lengths) != n:
            raise MooncakeError(-600, "buffers, peer addresses and lengths must be non-empty "
                                      "lists of the same length")
        h = self._need()
        seg = self._segment(target_hostname)
        l = _lib()
        batch = _u64()
        _native.check(l.mc_engine_allocate_batch(h, n, ctypes.byref(batch)))
        name, msg = (None, None) if notify is None else (_native.cstr(notify[0]),
                                                         _native.cstr(notify[1]))
        rc = l.mc_engine_submit(h, batch.value, n, _arr(_i32, [int(opcode)] * n),
                                _arr(_u64, buffers), _arr(_u64, [seg] * n), _arr(_u64, peers),
                                _arr(_u64, lengths), name, msg)
        if rc != 0:
            err = MooncakeError(rc, _native.last_error())
            l.mc_engine_free_batch(h, batch.value)
            raise err
        return batch.value

    def _wait_free(self, batch: int) -> int:
        l = _lib()
        st = _i32()
        rc = l.mc_engine_wait_batch(self._need(), batch, -1, ctypes.byref(st))
        l.mc_engine_free_batch(self._h, batch)
        return 0 if rc == 0 and st.value == TransferStatus.COMPLETED else -1

    def _sync(self, target_hostname, opcode, buffers, peers, lengths, notify=None) -> int:
        try:
            batch = self._submit(target_hostname, opcode, buffers, peers, lengths, notify)
        except (MooncakeError, RuntimeError):
            return -1
        return self._wait_free(batch)

    # transport_hint: upstream's TENT-only per-request transport pin, ignored by its classic
    # backend; accepted and ignored here likewise (this build has one data path per peer).
    def transfer_sync_write(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                            length: int, transport_hint: str = "") -> int:
        return self._sync(target_hostname, TransferOpcode.Write, [buffer], [peer_buffer_address],
                          [length])

    def transfer_sync_read(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                           length: int, transport_hint: str = "") -> int:
        return self._sync(target_hostname, TransferOpcode.Read, [buffer], [peer_buffer_address],
                          [length])

    def transfer_sync(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                      length: int, opcode: TransferOpcode, notify: TransferNotify | None = None,
                      transport_hint: str = "") -> int:
        """One READ or WRITE; ``notify`` (a TransferNotify) reaches the peer's get_notifies()
        once the transfer completed. 0 or -1."""
        return self._sync(target_hostname, int(opcode), [buffer], [peer_buffer_address], [length],
                          _notify_pair(notify))

    def transfer_sync_write_with_notify(self, target_hostname: str, buffer: int,
                                        peer_buffer_address: int, length: int,
                                        notify_name: str, notify_msg: str) -> int:
        return self._sync(target_hostname, TransferOpcode.Write, [buffer], [peer_buffer_address],
                          [length], (notify_name, notify_msg))

    def batch_transfer_sync_write(self, target_hostname: str, buffers: List[int],
                                  peer_buffer_addresses: List[int], lengths: List[int],
                                  transport_hint: str = "") -> int:
        return self._sync(target_hostname, TransferOpcode.Write, buffers, peer_buffer_addresses,
                          lengths)

    def batch_transfer_sync_read(self, target_hostname: str, buffers: List[int],
                                 peer_buffer_addresses: List[int], lengths: List[int],
                                 transport_hint: str = "") -> int:
        return self._sync(target_hostname, TransferOpcode.Read, buffers, peer_buffer_addresses,
                          lengths)

    def batch_transfer_sync(self, target_hostname: str, buffers: List[int],
                            peer_buffer_addresses: List[int], lengths: List[int],
                            opcode: TransferOpcode, notify: TransferNotify | None = None,
                            transport_hint: str = "") -> int:
        """A batch of READs or WRITEs, then ``notify`` (optional). 0 or -1."""
        return self._sync(target_hostname, int(opcode), buffers, peer_buffer_addresses, lengths,
                          _notify_pair(notify))

    def _async(self, target_hostname, opcode, buffers, peers, lengths) -> int:
        try:
            return self._submit(target_hostname, opcode, buffers, peers, lengths)
        except (MooncakeError, RuntimeError):
            return 0

    def batch_transfer_async_write(self, target_hostname: str, buffers: List[int],
                                   peer_buffer_addresses: List[int], lengths: List[int],
                                   transport_hint: str = "") -> int:
        return self._async(target_hostname, TransferOpcode.Write, buffers,
                           peer_buffer_addresses, lengths)

    def batch_transfer_async_read(self, target_hostname: str, buffers: List[int],
                                  peer_buffer_addresses: List[int], lengths: List[int],
                                  transport_hint: str = "") -> int:
        return self._async(target_hostname, TransferOpcode.Read, buffers,
                           peer_buffer_addresses, lengths)

    def batch_transfer_async(self, target_hostname: str, buffers: List[int],
                             peer_buffer_addresses: List[int], lengths: List[int],
                             opcode: TransferOpcode, transport_hint: str = "") -> int:
        """Submits a batch of READs or WRITEs and returns at once: the batch id (0 on failure).
        Poll it with transfer_check_status(id) (1 done, 0 running, -1 failed, -2 timed out) or
        wait with get_batch_transfer_status([id, ...]); either frees the batch when final."""
        try:
            op = TransferOpcode(int(opcode))
        except (TypeError, ValueError):
            return 0
        return self._async(target_hostname, int(op), buffers, peer_buffer_addresses, lengths)

    def transfer_submit_write(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                              length: int, transport_hint: str = "") -> int:
        return self._async(target_hostname, TransferOpcode.Write, [buffer],
                           [peer_buffer_address], [length])

    # -- on a CUDA stream -------------------------------------------------------------------
    # Upstream schedules these with cudaLaunchHostFunc. Here they wait for the work already
    # queued on the stream, run the transfer, and return when it is done (so later work on the
    # stream sees it); without CUDA they raise RuntimeError naming what the host lacks.
    def _on_cuda(self, api, target_hostname, opcode, buffers, peers, lengths, stream_ptr):
        _cuda_stream_sync(api, stream_ptr)
        try:
            batch = self._submit(target_hostname, opcode, buffers, peers, lengths)
        except MooncakeError as e:
            raise RuntimeError(f"{api}: {e}") from e
        if self._wait_free(batch) != 0:
            raise RuntimeError(f"{api}: the transfer to {target_hostname} failed: {last_error()}")

    def transfer_write_on_cuda(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                               length: int, stream_ptr: int = 0, transport_hint: str = "") -> None:
        self._on_cuda("transfer_write_on_cuda", target_hostname, TransferOpcode.Write, [buffer],
                      [peer_buffer_address], [length], stream_ptr)

    def transfer_read_on_cuda(self, target_hostname: str, buffer: int, peer_buffer_address: int,
                              length: int, stream_ptr: int = 0, transport_hint: str = "") -> None:
        self._on_cuda("transfer_read_on_cuda", target_hostname, TransferOpcode.Read, [buffer],
                      [peer_buffer_address], [length], stream_ptr)

    def batch_transfer_write_on_cuda(self, target_hostname: str, buffers: List[int],
                                     peer_buffer_addresses: List[int], lengths: List[int],
                                     stream_ptr: int = 0, transport_hint: str = "") -> None:
        self._on_cuda("batch_transfer_write_on_cuda", target_hostname, TransferOpcode.Write,
                      buffers, peer_buffer_addresses, lengths, stream_ptr)

    def batch_transfer_read_on_cuda(self, target_hostname: str, buffers: List[int],
                                    peer_buffer_addresses: List[int], lengths: List[int],
                                    stream_ptr: int = 0, transport_hint: str = "") -> None:
        self._on_cuda("batch_transfer_read_on_cuda", target_hostname, TransferOpcode.Read,
                      buffers, peer_buffer_addresses, lengths, stream_ptr)

    def get_batch_transfer_status(self, batch_ids: Iterable[int]) -> int:
        """Waits for every batch, frees them; 0 if all completed, -1 otherwise."""
        result = 0
        for b in list(batch_ids):
            if not b or self._wait_free(b) != 0:
                result = -1
        return result

    def transfer_check_status(self, batch_id: int) -> int:
        """1 completed, 0 still running, -1 failed, -2 timed out; frees the batch when final."""
        l = _lib()
        st = _i32()
        if not batch_id or l.mc_engine_batch_status(self._need(), batch_id, ctypes.byref(st)) != 0:
            return -1
        s = st.value
        if s in (TransferStatus.WAITING, TransferStatus.PENDING):
            return 0
        l.mc_engine_free_batch(self._h, batch_id)
        if s == TransferStatus.COMPLETED:
            return 1
        if s == TransferStatus.TIMEOUT:
            return -2
        return -1

    # -- notifications, probes, topology -------------------------------------------------
    def send_notify(self, target_hostname: str, name: str, msg: str) -> int:
        try:
            seg = self._segment(target_hostname)
        except MooncakeError:
            return -1
        return 0 if _lib().mc_engine_send_notify(self._need(), seg, _native.cstr(name),
                                                 _native.cstr(msg)) == 0 else -1

    def get_notifies(self) -> list[TransferNotify]:
        """Drains received notifications, oldest first (TransferNotify: .name, .msg; each also
        equals its (name, msg) tuple)."""
        raw = _native.read_string(_lib().mc_engine_get_notifies, self._need(), initial=65536)
        return [TransferNotify(n["name"], n["msg"]) for n in json.loads(raw or "[]")]

    def send_probe(self, target_hostname: str) -> int:
        """0 if the peer answers, -1 otherwise."""
        return 0 if _lib().mc_engine_probe(self._need(), _native.cstr(target_hostname)) == 0 else -1

    def get_local_topology(self, device_name: str | None = None) -> str:
        return _native.read_string(_lib().mc_engine_topology, self._need())

    def get_transport_bytes(self) -> dict[str, int]:
        """Bytes this engine has moved through each transport: {"local", "shm", "tcp"}.

        Same-host peers' shared buffers are reached over "shm" unless MC_FORCE_TCP=1 was set
        when the engine was created (then "tcp")."""
        return json.loads(_native.read_string(_lib().mc_engine_transport_bytes, self._need()))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
