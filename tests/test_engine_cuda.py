"""GPU checks (skipped without a GPU): mooncake.allocate_gpu_memory on a real device, bytes in
and out of it exact; registering device memory refused with what the host has (this build's
transports copy with the CPU), under a "cuda:N" tag and under a wrong "cpu:0" tag alike; the
*_on_cuda calls ordered after the stream's work; the GPU protocols naming this host's GPUs.

Runs under pytest, or as a script (``python tests/test_engine_cuda.py``) on a machine without
pytest: it then runs every test and prints "N passed"."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

try:
    import pytest
except ImportError:  # script mode
    pytest = None

import mooncake
from mooncake import _gpu
from mooncake.engine import TransferEngine, TransferOpcode, last_error


def _gpus() -> int:
    try:
        return _gpu.runtime().device_count()[0]
    except RuntimeError:
        return 0


GPUS = _gpus()
if pytest is not None:
    pytestmark = pytest.mark.skipif(GPUS == 0, reason="no GPU on this host")


def pattern(n: int, seed: int) -> bytes:
    return bytes((i * 31 + seed) % 256 for i in range(n))


def _raises(exc, fn, *args, **kw) -> str:
    try:
        fn(*args, **kw)
    except exc as e:
        return str(e)
    raise AssertionError(f"{fn.__name__} did not raise {exc.__name__}")


def test_allocate_and_copy_exact():
    n = 256 * 1024 * 1024  # the HIP page's size
    buf = mooncake.allocate_gpu_memory(n, device=0)
    try:
        assert buf != 0 and _gpu.gpu_block(buf, 1) == (buf, 0, n)
        data = pattern(1 << 20, 3)
        for off in (0, n - len(data), 12345):
            _gpu.copy_to_gpu(buf + off, data)
            assert _gpu.copy_from_gpu(buf + off, len(data)) == data
        msg = _raises(ValueError, _gpu.copy_to_gpu, buf + n - 4, b"12345678")
        assert "is not inside memory from allocate_gpu_memory" in msg
    finally:
        mooncake.free_gpu_memory(buf)
    assert "was not returned by allocate_gpu_memory" in _raises(ValueError, mooncake.free_gpu_memory, buf)
    msg = _raises(ValueError, mooncake.allocate_gpu_memory, 4096, device=GPUS)
    assert msg == (f"allocate_gpu_memory: device {GPUS} does not exist: this host has {GPUS} "
                   f"{_gpu.runtime().kind} device(s), 0..{GPUS - 1}")


def test_registering_device_memory_is_refused_with_the_hosts_gpus():
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    buf = mooncake.allocate_gpu_memory(1 << 20, device=0)
    try:
        gpus = ", ".join(f"cuda:{i}" for i in range(GPUS))
        want = (f'location "cuda:0": not supported on this host: registering device memory: '
                f"this host has an NVIDIA GPU ({gpus}), but this build's transports copy with the "
                f'CPU and cannot reach device memory; register host memory (location "cpu:N") and '
                f"copy device data through it")
        assert te.register_memory(buf, 1 << 20, "cuda:0") == -1
        assert last_error() == want
        assert te.register_memory(buf, 1 << 20) == -1  # tagged cpu:0, still device memory
        assert last_error() == want
        assert te.batch_register_memory([buf], [1 << 20]) == -1
        # host memory goes in; device data reaches a peer through it
        host = te.allocate_managed_buffer(1 << 20)
        data = pattern(1 << 20, 7)
        _gpu.copy_to_gpu(buf, data)
        te.write_bytes_to_buffer(host, _gpu.copy_from_gpu(buf, 1 << 20))
        peer = TransferEngine()
        assert peer.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
        dst = peer.allocate_managed_buffer(1 << 20)
        assert te.transfer_sync(peer.get_segment_name(), host, dst, 1 << 20, TransferOpcode.WRITE) == 0
        assert peer.read_bytes_from_buffer(dst, 1 << 20) == data
        peer.close()
    finally:
        mooncake.free_gpu_memory(buf)
        te.close()


def test_gpu_protocols_name_the_hosts_gpus():
    gpus = ", ".join(f"cuda:{i}" for i in range(GPUS))
    te = TransferEngine()
    for proto, what in (("nvlink_intra", "NVIDIA GPUs joined by NVLink"),
                        ("nvlink", "NVIDIA GPUs on a multi-node NVLink fabric (MNNVL)")):
        assert te.initialize("127.0.0.1", "P2PHANDSHAKE", proto, "cuda:0") == -1
        assert last_error() == (f'protocol "{proto}": not supported on this host: this host has '
                                f"{what} ({gpus}), but this build has no {proto} transport yet; "
                                'use protocol "tcp" (TCP across hosts, shared memory within one)')


def test_on_cuda_calls_run_after_the_streams_work():
    a, b = TransferEngine(), TransferEngine()
    assert a.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    assert b.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        src, dst = a.allocate_managed_buffer(1 << 20), b.allocate_managed_buffer(1 << 20)
        data = pattern(1 << 20, 11)
        a.write_bytes_to_buffer(src, data)
        stream = 0
        try:
            import torch
            if torch.cuda.is_available():
                x = torch.ones(1 << 22, device="cuda")
                for _ in range(20):
                    x = x * 1.0001  # queue some work on the current stream
                stream = torch.cuda.current_stream().cuda_stream
        except ImportError:
            pass
        name = b.get_segment_name()
        assert a.transfer_write_on_cuda(name, src, dst, 4096, stream) is None
        assert b.read_bytes_from_buffer(dst, 4096) == data[:4096]
        assert a.batch_transfer_write_on_cuda(name, [src + 4096, src + 8192], [dst + 4096, dst + 8192],
                                              [4096, 4096], stream_ptr=stream) is None
        assert b.read_bytes_from_buffer(dst, 12288) == data[:12288]
        a.write_bytes_to_buffer(src, bytes(12288))
        assert a.transfer_read_on_cuda(name, src, dst, 4096, stream) is None
        assert a.batch_transfer_read_on_cuda(name, [src + 4096], [dst + 4096], [8192], stream) is None
        assert a.read_bytes_from_buffer(src, 12288) == data[:12288]
        msg = _raises(RuntimeError, a.transfer_write_on_cuda, name, src, dst + (1 << 20), 8, stream)
        assert msg.startswith("transfer_write_on_cuda: ")
    finally:
        a.close()
        b.close()


if __name__ == "__main__":
    if GPUS == 0:
        print("no GPU on this host: skipped")
        sys.exit(0)
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_") and callable(v)]
    for t in tests:
        t()
        print("PASS", t.__name__, flush=True)
    print(f"{len(tests)} passed")
