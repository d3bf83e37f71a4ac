"""The activation shard store: the format of a shard directory, its reader (:class:`ShardIndex`), its writer's
files (:class:`ShardFiles`), and the one place that decides how the bytes move (O_DIRECT or the page cache).

A shard directory holds, for each layer L (0-based):

- ``layer{L:03d}.y.npy``: the projection OUTPUTS y (the pre-activations) of all N tokens, stored
  **neuron-major per window**, shape [n_windows, K, window]: each window's block is written with one contiguous
  write while the model runs (a [K, N] layout would scatter every batch over K places of the file), and a chunk
  of neurons is still read as n_windows contiguous pieces (:meth:`ShardIndex.y_neuron_windows`).
- ``layer{L:03d}.x.npy``: the projection INPUTS x for ``md_tokens`` token positions drawn once without
  replacement (float32, [md_tokens, d_in], rows in drawing order), so that mapping difficulty can be recomputed
  for any pair count <= md_tokens / 2 without running the model again.
- ``index.json``: N, K and d_in per layer, window, token counts, the MD token positions, seed, dtype, model name,
  the text's sha256, how the y files were written (``io``: "direct" or "buffered"), whether each window started
  with a BOS (``window_bos``) and provenance (written by :mod:`wneurons.lm.activations`).

Both .npy files have their header padded to 4096 bytes, so that the y data can be written and read with
``O_DIRECT`` (:mod:`wneurons.store.shard_io`, the aligned-transfer primitives this module builds on; they know
nothing of the format); ``numpy.load`` reads them as usual. The configured mode (``neurons.shard_io``: "auto",
"direct", "buffered") comes in once, at :class:`ShardFiles`; from then on the directory's ``index.json`` says how
it was written, and the reader follows it (:meth:`ShardIndex.reader_threads`, :meth:`ShardIndex.y_neuron_windows`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wneurons.store.io import load_npy, read_json
from wneurons.store.shard_io import (
    SHARD_IO_MODES,
    aligned,
    aligned_empty,
    create_npy,
    open_direct,
    pread_into,
    pwrite_all,
)

__all__ = [
    "FORMAT_VERSION",
    "INDEX_FILE",
    "SHARD_DTYPES",
    "SHARD_IO_MODES",
    "ShardFiles",
    "ShardIndex",
    "neuron_major",
    "write_block",
    "x_file",
    "y_file",
]

SHARD_DTYPES: dict[str, np.dtype] = {"float16": np.dtype(np.float16), "float32": np.dtype(np.float32)}
INDEX_FILE = "index.json"
FORMAT_VERSION = 2  # 2: y as [n_windows, K, window] blocks (1 was [K, N])
# Reads of O_DIRECT shards wait for the device, not the page cache: this many threads more than cores keep the
# cores busy meanwhile (measured on 2 cores: 1.9 s with 2 threads, 1.7 s with 4).
DIRECT_EXTRA_READERS = 2


def y_file(layer: int) -> str:
    """File name of a layer's pre-activations."""
    return f"layer{layer:03d}.y.npy"


def x_file(layer: int) -> str:
    """File name of a layer's projection inputs at the MD positions."""
    return f"layer{layer:03d}.x.npy"


@dataclass(frozen=True)
class ShardIndex:
    """A complete shard directory, read back through its ``index.json``; arrays come as read-only memmaps."""

    path: Path
    meta: dict[str, Any]

    @classmethod
    def load(cls, shard_dir: str | os.PathLike) -> ShardIndex:
        path = Path(shard_dir)
        index_path = path / INDEX_FILE
        if not index_path.is_file():
            raise FileNotFoundError(f"{path} is not an activation shard directory (no {INDEX_FILE})")
        meta = read_json(index_path)
        if meta.get("format") != FORMAT_VERSION:
            raise ValueError(
                f"{index_path}: shard format {meta.get('format')!r}, this package reads {FORMAT_VERSION}; "
                f"remove {path} and collect again"
            )
        return cls(path, meta)

    @property
    def n_layers(self) -> int:
        """Layers stored (all of the model's, or those ``layers=`` restricted collection to)."""
        return len(self.meta["layers"])

    @property
    def layers(self) -> list[int]:
        """0-based indices of the layers stored, ascending."""
        return [entry["layer"] for entry in self.meta["layers"]]

    @property
    def n_tokens(self) -> int:
        """N: tokens per neuron (whole windows)."""
        return int(self.meta["n_tokens"])

    @property
    def md_positions(self) -> np.ndarray:
        """Token positions (0..N-1, drawing order) whose inputs are stored; MD pairs are consecutive entries."""
        return np.asarray(self.meta["md_positions"], dtype=np.int64)

    @property
    def direct(self) -> bool:
        """Whether the y files were written with O_DIRECT (and so are read that way: they are not in the cache)."""
        return self.meta.get("io") == "direct"

    def reader_threads(self, cores: int) -> int:
        """How many threads read this directory's neuron chunks well on ``cores`` cores: one per core, and
        :data:`DIRECT_EXTRA_READERS` more for O_DIRECT shards, whose reads wait on the device."""
        return max(1, cores) + (DIRECT_EXTRA_READERS if self.direct else 0)

    def _check_layer(self, layer: int) -> dict[str, Any]:
        for entry in self.meta["layers"]:
            if entry["layer"] == layer:
                return entry
        raise IndexError(f"{self.path}: no shards for layer {layer} (collected layers: {self.layers})")

    def _open(self, name: str, shape: tuple[int, ...]) -> np.memmap:
        arr = load_npy(self.path / name, mmap_mode="r")
        if arr.shape != shape:
            raise ValueError(f"{self.path / name}: shape {arr.shape}, index.json says {shape}")
        return arr

    def y_blocks(self, layer: int) -> np.memmap:
        """Pre-activations of ``layer`` as stored: [n_windows, K, window] in the shard dtype (raw units)."""
        entry = self._check_layer(layer)
        return self._open(y_file(layer), (int(self.meta["n_windows"]), entry["n_neurons"], int(self.meta["window"])))

    def y_neuron_windows(self, layer: int, start: int, stop: int) -> np.ndarray:
        """Neurons ``start..stop-1`` of ``layer`` as a [stop - start, n_windows, window] view of a fresh buffer
        (in memory; each neuron's window rows contiguous), read with one ``pread`` per window.

        ``pread`` rather than a memmap copy: that takes its page faults while holding the GIL, which kept two
        statistics threads from running side by side. The statistics pass consumes this view directly (its key
        transform does the transposition); :meth:`y_neurons` gives the plain [k, N] array.
        """
        blocks = self.y_blocks(layer)
        n_windows, n_neurons, window = blocks.shape
        start, stop = max(0, start), min(stop, n_neurons)
        k = max(0, stop - start)
        path, row = self.path / y_file(layer), window * blocks.dtype.itemsize
        # Shards written with O_DIRECT are not in the page cache: read them the same way, into aligned memory,
        # which costs no CPU for the copy and leaves the page cache alone (see wneurons.store.shard_io).
        fd = None
        if self.direct and aligned(blocks.offset, start * row, n_neurons * row, k * row):
            fd = open_direct(path, os.O_RDONLY)
        buffer = (aligned_empty if fd is not None else np.empty)((n_windows, k, window), blocks.dtype)
        fd = os.open(path, os.O_RDONLY) if fd is None else fd
        try:
            for w in range(n_windows):
                pread_into(fd, buffer[w], blocks.offset + (w * n_neurons + start) * row, path)
        finally:
            os.close(fd)
        return buffer.transpose(1, 0, 2)

    def y_neurons(self, layer: int, start: int, stop: int) -> np.ndarray:
        """Neurons ``start..stop-1`` of ``layer`` over all N tokens: a contiguous [stop - start, N] copy."""
        windows = self.y_neuron_windows(layer, start, stop)
        return np.ascontiguousarray(windows).reshape(windows.shape[0], self.n_tokens)

    def y(self, layer: int) -> np.ndarray:
        """Pre-activations of ``layer`` as [N tokens, K neurons]: a copy of the whole layer in memory."""
        blocks = self.y_blocks(layer)
        return np.ascontiguousarray(blocks.transpose(0, 2, 1)).reshape(self.n_tokens, blocks.shape[1])

    def x_md(self, layer: int) -> np.memmap:
        """Projection inputs at :attr:`md_positions`: float32 [md_tokens, d_in]."""
        entry = self._check_layer(layer)
        return self._open(x_file(layer), (len(self.meta["md_positions"]), entry["d_in"]))


# ---------------------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------------------
def neuron_major(tokens: np.ndarray, rows: int = 64, out: np.ndarray | None = None) -> np.ndarray:
    """[windows, window, K] -> contiguous [windows, K, window] (into ``out`` if given), copied 64 token rows at a
    time: cache-sized tiles, measured 4-6x faster than one strided numpy copy and than torch's single-threaded
    transpose."""
    if out is None:
        out = np.empty((tokens.shape[0], tokens.shape[2], tokens.shape[1]), dtype=tokens.dtype)
    for w in range(tokens.shape[0]):
        for start in range(0, tokens.shape[1], rows):
            out[w, :, start : start + rows] = tokens[w, start : start + rows].T
    return out


def write_block(fd: int, block: np.ndarray, transposed: bool, position: int, staging: np.ndarray | None = None) -> None:
    """One batch of one layer's y: [windows, K, window] as is, or [windows, window, K] transposed first. With
    ``staging`` (aligned bytes, at least ``block.nbytes``; needed for O_DIRECT) the block is assembled there."""
    shape = block.shape if transposed else (block.shape[0], block.shape[2], block.shape[1])
    out = None if staging is None else staging[: block.nbytes].view(block.dtype).reshape(shape)
    if not transposed:
        out = neuron_major(block, out=out)
    elif out is None:
        out = np.ascontiguousarray(block)
    else:
        out[...] = block
    pwrite_all(fd, out, position)


def _direct_io(directory: Path, io: str, block_bytes: list[int]) -> tuple[bool, str]:
    """Whether the y shards in ``directory`` are written with O_DIRECT under ``io`` ("auto", "direct",
    "buffered"), and why not when "auto" decides against it. ``block_bytes``: one window's y block per layer,
    the unit of every write, which must be aligned. "direct" where it is impossible is an error."""
    if io == "buffered":
        return False, "shard io 'buffered' configured"
    reason = ""
    probe = directory / ".direct-io-probe"
    probe.touch()
    fd = open_direct(probe, os.O_WRONLY)
    probe.unlink()
    if fd is None:
        reason = f"the filesystem of {directory} does not support O_DIRECT"
    else:
        os.close(fd)
        unaligned = [size for size in block_bytes if not aligned(size)]
        if unaligned:
            reason = f"a window's block of pre-activations ({unaligned[0]} bytes) is not a multiple of 4096"
    if reason and io == "direct":
        raise ValueError(f"shard io 'direct': {reason}; use 'auto' or 'buffered'")
    return not reason, reason


class ShardFiles:
    """The .npy files of a shard directory being written: per layer slot (position in ``layer_ids``) a y file
    [n_windows, K, window] in ``dtype`` and an x file [md_tokens, d_in] float32, created sized (sparse) with
    padded headers, and a write descriptor each.

    ``io`` ("auto", "direct", "buffered") is decided here: the y files are written with O_DIRECT where it is
    asked for or allowed and possible (:attr:`direct`; :meth:`record` gives the ``index.json`` fields); the MD
    inputs are a few scattered rows, always through the page cache. The write methods are meant for one writer
    thread (they share one aligned staging block).
    """

    def __init__(
        self,
        directory: Path,
        layer_ids: list[int],
        shapes: list[tuple[int, int]],
        n_windows: int,
        window: int,
        md_tokens: int,
        dtype: str,
        io: str,
    ):
        if io not in SHARD_IO_MODES:
            raise ValueError(f"shard io {io!r} is not one of {', '.join(SHARD_IO_MODES)}")
        self.np_dtype = SHARD_DTYPES[dtype]
        self.shapes = shapes  # (K, d_in) per slot
        self.direct, self.buffered_reason = _direct_io(
            directory, io, [k * window * self.np_dtype.itemsize for k, _ in shapes]
        )
        self.data_offsets: list[tuple[int, int]] = []
        self.fds: list[tuple[int, int]] = []
        try:
            for layer, (k, d_in) in zip(layer_ids, shapes, strict=True):
                y_path, x_path = directory / y_file(layer), directory / x_file(layer)
                offset = create_npy(y_path, self.np_dtype, (n_windows, k, window))
                self.data_offsets.append((offset, create_npy(x_path, np.float32, (md_tokens, d_in))))
                y_fd = open_direct(y_path, os.O_WRONLY) if self.direct else os.open(y_path, os.O_WRONLY)
                self.fds.append((y_fd, os.open(x_path, os.O_WRONLY)))
        except BaseException:  # e.g. a full disk at layer 17: the descriptors of layers 0..16 must not leak
            self.close()
            raise
        # The aligned output block, reused: it stays resident, where a fresh buffer per batch would take its
        # page faults again.
        self._staging = np.empty(0, dtype=np.uint8)

    def record(self) -> dict[str, str]:
        """The ``index.json`` fields that say how the y files were written (and so how to read them)."""
        return {"io": "direct"} if self.direct else {"io": "buffered", "io_reason": self.buffered_reason}

    def write_y(self, slot: int, first_window: int, block: np.ndarray, transposed: bool) -> None:
        """A batch's y block of layer slot ``slot``, from window ``first_window`` on: [windows, K, window] as is,
        or [windows, window, K] (``transposed`` False) laid out neuron-major first."""
        staging = None
        if self.direct:
            if self._staging.nbytes < block.nbytes:
                self._staging = aligned_empty((block.nbytes,), np.uint8)
            staging = self._staging
        position = self.data_offsets[slot][0] + first_window * block[0].nbytes
        write_block(self.fds[slot][0], block, transposed, position, staging)

    def write_x_rows(self, slot: int, rows: np.ndarray, row_ids: np.ndarray) -> None:
        """MD inputs: ``rows`` (float32 [n, d_in]) at rows ``row_ids`` of layer slot ``slot``'s x file."""
        positions = self.data_offsets[slot][1] + row_ids * (rows.shape[1] * rows.itemsize)
        for row, position in zip(rows, positions.tolist(), strict=True):
            pwrite_all(self.fds[slot][1], np.ascontiguousarray(row), position)

    def close(self) -> None:
        for fds in self.fds:
            for fd in fds:
                os.close(fd)
        self.fds = []
