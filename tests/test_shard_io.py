"""Shard file I/O: padded .npy headers, aligned buffers, direct and buffered transfers of the same bytes."""

from __future__ import annotations

import os

import numpy as np
import pytest

from wneurons.store import shard_io


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_create_npy_is_a_npy_file_with_aligned_data(tmp_path, dtype):
    path = tmp_path / "a.npy"
    assert shard_io.create_npy(path, dtype, (3, 5, 7)) == shard_io.ALIGNMENT
    assert path.stat().st_size == shard_io.ALIGNMENT + 3 * 5 * 7 * np.dtype(dtype).itemsize
    values = np.arange(105, dtype=dtype).reshape(3, 5, 7)
    with open(path, "r+b") as f:
        f.seek(shard_io.ALIGNMENT)
        f.write(values.tobytes())
    loaded = np.load(path, mmap_mode="r")
    assert loaded.offset == shard_io.ALIGNMENT and loaded.dtype == values.dtype
    np.testing.assert_array_equal(loaded, values)


def test_aligned_empty():
    for shape in [(1,), (3, 4097), (2, 3, 5)]:
        arr = shard_io.aligned_empty(shape, np.float16)
        assert arr.shape == shape and arr.flags.c_contiguous and arr.ctypes.data % shard_io.ALIGNMENT == 0
    assert shard_io.aligned(0, 4096, 8192) and not shard_io.aligned(4096, 2048)


def test_direct_write_and_read_round_trip(tmp_path):
    path = tmp_path / "d.bin"
    path.touch()
    fd = shard_io.open_direct(path, os.O_WRONLY)
    assert fd is not None, f"no O_DIRECT on {tmp_path}"
    data = shard_io.aligned_empty((3, 4096), np.uint8)
    data[...] = np.random.default_rng(0).integers(0, 256, data.shape)
    shard_io.pwrite_all(fd, data, 4096)
    os.close(fd)
    assert path.read_bytes()[4096:] == data.tobytes()
    back = shard_io.aligned_empty((2, 4096), np.uint8)
    fd = shard_io.open_direct(path, os.O_RDONLY)
    shard_io.pread_into(fd, back, 8192, path)
    np.testing.assert_array_equal(back, data[1:])
    with pytest.raises(OSError, match="file ends at byte"):
        shard_io.pread_into(fd, back, 12288, path)
    os.close(fd)


def test_the_shard_store_sizes_the_reader_pool_from_how_the_shards_were_written(tmp_path):
    from wneurons.store.shards import DIRECT_EXTRA_READERS, ShardIndex

    for io, extra in (("direct", DIRECT_EXTRA_READERS), ("buffered", 0)):
        index = ShardIndex(tmp_path, {"io": io})
        assert index.direct == (io == "direct")
        assert index.reader_threads(2) == 2 + extra and index.reader_threads(0) == 1 + extra
