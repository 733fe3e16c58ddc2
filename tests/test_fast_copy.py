"""mooncake._fast_copy.concat_arrays_into (upstream's helper of the same name): lists of
C-contiguous buffers copied back to back into one address, on one or more threads."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from mooncake._fast_copy import concat_arrays_into

A = ctypes.addressof


def test_copies_the_selected_arrays_back_to_back():
    arrays = [np.arange(3, dtype=np.uint8), np.arange(4, dtype=np.uint8) + 10, np.arange(2, dtype=np.uint8) + 20]
    dst = ctypes.create_string_buffer(b"\xee" * 9)
    assert concat_arrays_into(arrays, A(dst), 9) == 9
    assert dst.raw[:9] == np.concatenate(arrays).tobytes()
    dst = ctypes.create_string_buffer(b"\xee" * 9)
    assert concat_arrays_into(arrays, A(dst), 9, 1, 2) == 6
    assert dst.raw[:9] == bytes([10, 11, 12, 13, 20, 21]) + b"\xee" * 3  # nothing past the copy
    # start is clamped to the list, a count past the end (or negative) means "to the end"
    assert concat_arrays_into(arrays, A(dst), 9, 2, 100) == 2 and dst.raw[:2] == bytes([20, 21])
    assert concat_arrays_into(arrays, A(dst), 9, -5, -1) == 9
    assert concat_arrays_into(arrays, A(dst), 9, 3) == 0
    assert concat_arrays_into(arrays, A(dst), 0, 0, 0) == 0


def test_any_dtype_shape_and_buffer_type():
    f = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    i = np.array([[1, -2], [3, -4]], dtype=np.int64)
    empty = np.zeros((0, 5), dtype=np.float64)
    objs = [f, empty, i, b"bytes", bytearray(b"ba"), memoryview(b"mv")]
    want = f.tobytes() + i.tobytes() + b"bytesbamv"
    dst = ctypes.create_string_buffer(len(want))
    assert concat_arrays_into(objs, A(dst), len(want)) == len(want)
    assert dst.raw == want
    # a transposed array made contiguous is accepted; the transpose itself is not
    assert concat_arrays_into([np.ascontiguousarray(f.T)], A(dst), len(want)) == f.nbytes


@pytest.mark.parametrize("nthreads", [1, 2, 3, 8, 1000])
def test_threads_split_the_bytes_and_copy_everything(nthreads):
    rng = np.random.default_rng(nthreads)
    sizes = [3 << 20, 1, 0, 5 << 20, 17, 2 << 20, 999]
    arrays = [rng.integers(0, 256, size=n, dtype=np.uint8) for n in sizes]
    want = np.concatenate(arrays).tobytes()
    dst = ctypes.create_string_buffer(len(want) + 16)
    assert concat_arrays_into(arrays, A(dst), len(want) + 16, nthreads=nthreads) == len(want)
    assert dst.raw[:len(want)] == want and dst.raw[len(want):] == b"\0" * 16
    part = b"".join(a.tobytes() for a in arrays[3:6])
    assert concat_arrays_into(arrays, A(dst), len(want), 3, 3, nthreads) == len(part)
    assert dst.raw[:len(part)] == part


def test_refusals_write_nothing():
    dst = ctypes.create_string_buffer(8)
    dst.raw = b"\xee" * 8
    arrays = [np.arange(4, dtype=np.uint8), np.arange(4, dtype=np.uint8)]
    with pytest.raises(ValueError, match="destination buffer too small: need 8 bytes, got 7"):
        concat_arrays_into(arrays, A(dst), 7)
    with pytest.raises(ValueError, match=r"arrays\[1\] is not C-contiguous"):
        concat_arrays_into([arrays[0], np.arange(8, dtype=np.uint8)[::2]], A(dst), 8)
    with pytest.raises(TypeError, match=r"arrays\[0\] \(int\) does not expose a buffer"):
        concat_arrays_into([5], A(dst), 8)
    with pytest.raises(TypeError):
        concat_arrays_into(tuple(arrays), A(dst), 8)  # a list, as upstream's
    with pytest.raises(OverflowError):
        concat_arrays_into(arrays, -1, 8)
    with pytest.raises(OverflowError):
        concat_arrays_into(arrays, A(dst), -8)
    with pytest.raises(ValueError, match="dest_ptr is NULL"):
        concat_arrays_into(arrays, 0, 8)
    assert dst.raw == b"\xee" * 8
