"""Stream the pre-activations of every layer into per-layer shards on disk, once per model and text.

A shard directory holds, for each layer L (0-based):

- ``layer{L:03d}.y.npy``: the projection OUTPUTS y (the pre-activations) of all N tokens, stored
  **neuron-major per window**, shape [n_windows, K, window]: each window's block is written with one contiguous
  write while the model runs (a [K, N] layout would scatter every batch over K places of the file), and a chunk
  of neurons is still read as n_windows contiguous pieces (:meth:`ShardIndex.y_neurons`).
- ``layer{L:03d}.x.npy``: the projection INPUTS x for ``md_tokens`` token positions drawn once without
  replacement (float32, [md_tokens, d_in], rows in drawing order), so that mapping difficulty can be recomputed
  for any pair count <= md_tokens / 2 without running the model again.
- ``index.json``: N, K and d_in per layer, window, token counts, the MD token positions, seed, dtype, model name,
  the text's sha256, how the y files were written (``io``: "direct" or "buffered"), whether each window started
  with a BOS (``window_bos``) and provenance.

With ``window_bos`` every window of ``window`` text tokens is fed after a BOS: the model sees ``window + 1``
positions, the BOS position's outputs are not stored, so N and the layout are those of a run without it.

Both .npy files have their header padded to 4096 bytes, so that the y data can be written and read with
``O_DIRECT`` (:mod:`wneurons.store.shard_io`); ``numpy.load`` reads them as usual.

The directory appears only when complete: everything is written into a hidden temporary sibling that is
renamed at the end, so a killed job leaves nothing that looks finished.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import math
import os
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wneurons.lm import registry
from wneurons.lm.scoring import window_bos_token
from wneurons.store.io import atomic_directory, provenance, read_json, write_json
from wneurons.store.shard_io import (
    SHARD_IO_MODES,
    aligned,
    aligned_empty,
    create_npy,
    open_direct,
    pread_into,
    pwrite_all,
)

log = logging.getLogger(__name__)

__all__ = ["SHARD_DTYPES", "ShardIndex", "collect_activation_shards", "load_layer"]

SHARD_DTYPES: dict[str, tuple[np.dtype, torch.dtype]] = {
    "float16": (np.dtype(np.float16), torch.float16),
    "float32": (np.dtype(np.float32), torch.float32),
}
INDEX_FILE = "index.json"
FORMAT_VERSION = 2  # 2: y as [n_windows, K, window] blocks (1 was [K, N])


def _y_file(layer: int) -> str:
    return f"layer{layer:03d}.y.npy"


def _x_file(layer: int) -> str:
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

    def _check_layer(self, layer: int) -> dict[str, Any]:
        for entry in self.meta["layers"]:
            if entry["layer"] == layer:
                return entry
        raise IndexError(f"{self.path}: no shards for layer {layer} (collected layers: {self.layers})")

    def _open(self, name: str, shape: tuple[int, ...]) -> np.memmap:
        arr = np.load(self.path / name, mmap_mode="r")
        if arr.shape != shape:
            raise ValueError(f"{self.path / name}: shape {arr.shape}, index.json says {shape}")
        return arr

    def y_blocks(self, layer: int) -> np.memmap:
        """Pre-activations of ``layer`` as stored: [n_windows, K, window] in the shard dtype (raw units)."""
        entry = self._check_layer(layer)
        return self._open(_y_file(layer), (int(self.meta["n_windows"]), entry["n_neurons"], int(self.meta["window"])))

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
        path, row = self.path / _y_file(layer), window * blocks.dtype.itemsize
        # Shards written with O_DIRECT are not in the page cache: read them the same way, into aligned memory,
        # which costs no CPU for the copy and leaves the page cache alone (see wneurons.store.shard_io).
        fd = None
        if self.meta.get("io") == "direct" and aligned(blocks.offset, start * row, n_neurons * row, k * row):
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
        return self._open(_x_file(layer), (len(self.meta["md_positions"]), entry["d_in"]))


def load_layer(shard_dir: str | os.PathLike, layer: int) -> tuple[np.ndarray, np.memmap]:
    """``(y, x_md)`` of one layer: y [N, K] pre-activations (in memory) and x_md [md_tokens, d_in] inputs (memmap)."""
    index = ShardIndex.load(shard_dir)
    return index.y(layer), index.x_md(layer)


def _neuron_major(tokens: np.ndarray, rows: int = 64, out: np.ndarray | None = None) -> np.ndarray:
    """[windows, window, K] -> contiguous [windows, K, window] (into ``out`` if given), copied 64 token rows at a
    time: cache-sized tiles, measured 4-6x faster than one strided numpy copy and than torch's single-threaded
    transpose."""
    if out is None:
        out = np.empty((tokens.shape[0], tokens.shape[2], tokens.shape[1]), dtype=tokens.dtype)
    for w in range(tokens.shape[0]):
        for start in range(0, tokens.shape[1], rows):
            out[w, :, start : start + rows] = tokens[w, start : start + rows].T
    return out


def _host_block(y: torch.Tensor, window: int, dtype: torch.dtype, *, on_device: bool) -> tuple[np.ndarray, bool]:
    """One batch of one layer's outputs [tokens, K] as a host array in the shard dtype, and whether it is already
    neuron-major ([windows, K, window]) or still token-major ([windows, window, K], for the writer to transpose).

    On an accelerator the transpose costs nothing, so the host gets the finished block. On the CPU the hook only
    converts, into an array of its own (copy=True: a float32 shard must not alias the model's output, which later
    in-place ops could change), and the writer thread transposes.
    """
    k = y.shape[-1]
    if on_device:
        return y.reshape(-1, window, k).to(dtype).transpose(1, 2).contiguous().cpu().numpy(), True
    return y.to(dtype, copy=True).cpu().numpy().reshape(-1, window, k), False


def _write_block(
    fd: int, block: np.ndarray, transposed: bool, position: int, staging: np.ndarray | None = None
) -> None:
    """One batch of one layer's y: [windows, K, window] as is, or [windows, window, K] transposed first. With
    ``staging`` (aligned bytes, at least ``block.nbytes``; needed for O_DIRECT) the block is assembled there."""
    shape = block.shape if transposed else (block.shape[0], block.shape[2], block.shape[1])
    out = None if staging is None else staging[: block.nbytes].view(block.dtype).reshape(shape)
    if not transposed:
        out = _neuron_major(block, out=out)
    elif out is None:
        out = np.ascontiguousarray(block)
    else:
        out[...] = block
    pwrite_all(fd, out, position)


def _write_rows(fd: int, rows: np.ndarray, positions: np.ndarray) -> None:
    """MD inputs: row i of ``rows`` at byte ``positions[i]`` (a few hundred rows per batch, scattered)."""
    for row, position in zip(rows, positions.tolist(), strict=True):
        pwrite_all(fd, np.ascontiguousarray(row), position)


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


class _StopForward(Exception):
    """Raised by the hook of the last projection: nothing the model computes after it is collected."""


class _ShardWriter:
    """Forward hooks that stream each layer's projection output into its shard as the batches go by."""

    def __init__(
        self,
        directory: Path,
        modules: list[torch.nn.Module],
        n_tokens: int,
        window: int,
        md_positions: np.ndarray,
        dtype: str,
        model_name: str,
        io: str = "auto",
        skip_first: bool = False,
        layer_ids: list[int] | None = None,
    ):
        self.directory = directory
        # Hooks, files and counters are indexed by position in ``modules``; files are named by model layer.
        self.layer_ids = list(range(len(modules))) if layer_ids is None else list(layer_ids)
        self.model_name = model_name
        self.window = window
        self.skip_first = skip_first  # each fed window starts with a BOS whose outputs are not stored
        self.np_dtype, self.torch_dtype = SHARD_DTYPES[dtype]
        self.limit = float(np.finfo(self.np_dtype).max)
        self.shapes = [tuple(registry.projection_weight(m).shape) for m in modules]  # (K, d_in) per layer
        # md_row[p] = row of token position p in the x shards, or -1: one lookup per batch, no search.
        self.md_row = np.full(n_tokens, -1, dtype=np.int64)
        self.md_row[md_positions] = np.arange(len(md_positions))
        # Per layer and file (y, x): where the data start, and a write descriptor. The y files are written with
        # O_DIRECT where possible (wneurons.store.shard_io); the MD inputs are a few scattered rows, through the cache.
        self.direct, self.buffered_reason = _direct_io(
            directory, io, [k * window * self.np_dtype.itemsize for k, _ in self.shapes]
        )
        self.data_offsets: list[tuple[int, int]] = []
        self.fds: list[tuple[int, int]] = []
        try:
            for layer, (k, d_in) in zip(self.layer_ids, self.shapes, strict=True):
                y_path, x_path = directory / _y_file(layer), directory / _x_file(layer)
                offsets = create_npy(y_path, self.np_dtype, (n_tokens // window, k, window))
                self.data_offsets.append((offsets, create_npy(x_path, np.float32, (len(md_positions), d_in))))
                y_fd = open_direct(y_path, os.O_WRONLY) if self.direct else os.open(y_path, os.O_WRONLY)
                self.fds.append((y_fd, os.open(x_path, os.O_WRONLY)))
        except BaseException:  # e.g. a full disk at layer 17: the descriptors of layers 0..16 must not leak
            self._close_files()
            raise
        self._staging = np.empty(0, dtype=np.uint8)  # the writer thread's aligned output block, reused
        self.offset = 0
        self.write_seconds = 0.0  # time spent in the hooks, reported in index.json
        # Blocks are transposed and written by a writer thread: the forward pass leaves a core partly idle
        # (measured: 1.8 of 2 cores busy), and a write waits for the device (O_DIRECT) or for the kernel's
        # page-cache work (buffered). At most one batch waits in the queue: a y block and the MD input rows of
        # each layer.
        self.pwrite_seconds = 0.0
        self._queue: queue.Queue = queue.Queue(maxsize=2 * len(modules))
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="shard-writer", daemon=True)
        self._thread.start()
        self.calls = np.zeros(len(modules), dtype=np.int64)
        self.handles = [m.register_forward_hook(self._hook(layer)) for layer, m in enumerate(modules)]

    def _hook(self, layer: int):
        last = layer == len(self.shapes) - 1

        def hook(module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
            self.write(layer, args[0], output)
            if last:  # skip the rest of the last layer and the final norm (~1.5% of SmolLM2's trunk)
                raise _StopForward

        return hook

    def write(self, layer: int, x: torch.Tensor, y: torch.Tensor) -> None:
        start = time.perf_counter()
        k, d_in = self.shapes[layer]
        y = y.detach()
        if self.skip_first:
            y = y.reshape(-1, self.window + 1, k)[:, 1:]
        y = y.reshape(-1, k)
        n = y.shape[0]
        # One pass finds both ends: NaN propagates into them and an inf is one of them.
        low, high = (float(v) for v in torch.aminmax(y))
        if not (math.isfinite(low) and math.isfinite(high)):
            raise FloatingPointError(
                f"{self.model_name}: layer {self.layer_ids[layer]} pre-activations contain NaN or inf "
                f"(tokens {self.offset}..{self.offset + n - 1})"
            )
        if max(-low, high) > self.limit:
            raise OverflowError(
                f"{self.model_name}: layer {self.layer_ids[layer]} pre-activation |y| = {max(-low, high):.4g} "
                f"exceeds the {self.np_dtype} range ({self.limit:.4g}); collect with dtype='float32'"
            )
        block, transposed = _host_block(y, self.window, self.torch_dtype, on_device=y.device.type != "cpu")
        self._raise_write_error()
        position = self.data_offsets[layer][0] + (self.offset // self.window) * block[0].nbytes
        self._queue.put(functools.partial(self._write_y, self.fds[layer][0], block, transposed, position))
        rows = self.md_row[self.offset : self.offset + n]
        picked = np.flatnonzero(rows >= 0)
        if picked.size:
            fed = picked + (picked // self.window + 1) if self.skip_first else picked  # past each window's BOS
            x = x.detach().reshape(-1, d_in)[torch.from_numpy(fed).to(x.device)].float().cpu().numpy()
            if not np.isfinite(x).all():
                raise FloatingPointError(
                    f"{self.model_name}: layer {self.layer_ids[layer]} projection inputs contain NaN or inf"
                )
            positions = self.data_offsets[layer][1] + rows[picked] * (d_in * x.itemsize)
            self._queue.put(functools.partial(_write_rows, self.fds[layer][1], x, positions))
        self.write_seconds += time.perf_counter() - start
        self.calls[layer] += 1

    def _write_y(self, fd: int, block: np.ndarray, transposed: bool, position: int) -> None:
        """:func:`_write_block` on the writer thread; for O_DIRECT through one aligned block that is reused (it
        stays resident, where a fresh buffer per batch would take its page faults again)."""
        staging = None
        if self.direct:
            if self._staging.nbytes < block.nbytes:
                self._staging = aligned_empty((block.nbytes,), np.uint8)
            staging = self._staging
        _write_block(fd, block, transposed, position, staging)

    def _drain(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is not None:
                continue  # keep taking blocks so that the producer never blocks on a dead writer
            start = time.perf_counter()
            try:
                item()
            except BaseException as error:  # handed to the main thread by _raise_write_error
                self._error = error
            self.pwrite_seconds += time.perf_counter() - start

    def _raise_write_error(self) -> None:
        if self._error is not None:
            raise OSError(f"{self.model_name}: writing activation shards in {self.directory} failed") from self._error

    def _stop_writer(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def flush(self) -> None:
        """Wait until every queued block is in its file; raise if a write failed."""
        self._stop_writer()
        self._raise_write_error()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self._stop_writer()
        self._close_files()

    def _close_files(self) -> None:
        for fds in self.fds:
            for fd in fds:
                os.close(fd)
        self.fds = []


def collect_activation_shards(
    model: torch.nn.Module,
    tokenizer: Any,
    text: str,
    out_dir: str | os.PathLike,
    *,
    window: int = 2048,
    max_tokens: int | None = None,
    batch_size: int = 1,
    md_tokens: int = 2000,
    seed: int = 0,
    dtype: str = "float16",
    io: str = "auto",
    model_name: str = "?",
    progress_every: float = 30.0,
    modules: list[torch.nn.Module] | None = None,
    window_bos: bool = False,
    record: dict[str, Any] | None = None,
    layers: list[int] | None = None,
) -> dict[str, Any]:
    """Run ``model`` over ``text`` and write the activation shards of every layer into ``out_dir``.

    ``text`` is tokenized once without special tokens and cut into non-overlapping windows of ``window`` tokens
    (tail dropped), at most ``max_tokens`` tokens (whole windows), ``batch_size`` windows per forward pass.
    With ``window_bos`` each window is fed after the tokenizer's BOS, whose outputs are not stored (module
    docstring). ``record``: extra fields for ``index.json`` (e.g. the family and why ``window_bos`` was chosen).
    ``modules`` defaults to :func:`wneurons.lm.registry.preactivation_modules`; ``layers`` (0-based, None = all)
    restricts collection to those layers, and the forward pass stops after the last of them. Pre-activations are
    stored in ``dtype`` ("float16": overflow is an error; or "float32"); the inputs of ``md_tokens`` positions drawn
    with ``numpy.random.default_rng(seed).choice(N, md_tokens, replace=False)`` in float32. Progress (tokens/s, ETA)
    is logged at most every ``progress_every`` seconds. ``io`` ("auto", "direct", "buffered"): how the y shards
    are written and later read, see :mod:`wneurons.store.shard_io`; "auto" uses O_DIRECT where the filesystem has it.

    Only the causal LM's trunk (``model.base_model``) is run: the LM head plays no part in the pre-activations.
    Peak memory: the model, the forward pass's own activations for one batch, and one layer's batch output
    (``batch_size * window * K`` values); the shards live on disk (``N * K`` values per layer), written with
    one ``pwrite`` per layer and batch. NaN / inf in any activation raises ``FloatingPointError`` naming
    the model and layer. Returns the contents of ``index.json``.
    """
    if dtype not in SHARD_DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(SHARD_DTYPES)}")
    if io not in SHARD_IO_MODES:
        raise ValueError(f"shard io {io!r} is not one of {', '.join(SHARD_IO_MODES)}")
    if window < 1 or batch_size < 1:
        raise ValueError(f"window and batch_size must be >= 1, got {window} and {batch_size}")
    out_dir = Path(out_dir)
    modules = registry.preactivation_modules(model) if modules is None else modules
    layer_ids = list(range(len(modules))) if layers is None else sorted(set(layers))
    if not layer_ids or not 0 <= layer_ids[0] <= layer_ids[-1] < len(modules):
        raise ValueError(f"{model_name}: layers {layers} are not a non-empty subset of 0..{len(modules) - 1}")
    modules = [modules[layer] for layer in layer_ids]

    ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    n_windows = len(ids) // window
    if max_tokens is not None:
        n_windows = min(n_windows, max_tokens // window)
    if n_windows < 1:
        raise ValueError(
            f"{model_name}: need at least one window of {window} tokens; the text has {len(ids)} tokens"
            + (f" and max_tokens={max_tokens}" if max_tokens is not None else "")
        )
    n_tokens = n_windows * window
    if not 2 <= md_tokens <= n_tokens:
        raise ValueError(f"md_tokens={md_tokens} must lie in [2, N={n_tokens}]")
    windows = torch.tensor(ids[:n_tokens], dtype=torch.long).reshape(n_windows, window)
    bos = window_bos_token(tokenizer, window_bos)
    if bos is not None:
        if window + 1 > registry.context_length(model):
            raise ValueError(
                f"{model_name}: window {window} + its BOS exceeds the context of {registry.context_length(model)}"
            )
        windows = torch.cat([torch.full((n_windows, 1), bos, dtype=windows.dtype), windows], dim=1)
    md_positions = np.random.default_rng(seed).choice(n_tokens, md_tokens, replace=False)

    trunk = getattr(model, "base_model", model)
    device = next(model.parameters()).device
    meta: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "layout": "layerLLL.y.npy: [n_windows, K, window]; layerLLL.x.npy: [md_tokens, d_in] float32",
        "model_name": model_name,
        "n_tokens": n_tokens,
        "text_tokens": len(ids),
        "window": window,
        "n_windows": n_windows,
        "dtype": dtype,
        "seed": seed,
        "md_tokens": md_tokens,
        "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "window_bos": bool(window_bos),
        "window_bos_token": bos,
        **(record or {}),
    }
    log.info(
        "collect %s: %d layers, %d tokens in %d windows of %d", model_name, len(modules), n_tokens, n_windows, window
    )
    with atomic_directory(out_dir) as tmp:
        writer = _ShardWriter(
            tmp, modules, n_tokens, window, md_positions, dtype, model_name, io, bos is not None, layer_ids
        )
        meta["io"] = "direct" if writer.direct else "buffered"
        if not writer.direct:
            meta["io_reason"] = writer.buffered_reason
            if io == "auto":
                log.info("collect %s: shards go through the page cache: %s", model_name, writer.buffered_reason)
        start = last_log = time.perf_counter()
        try:
            with torch.inference_mode():
                for first in range(0, n_windows, batch_size):
                    batch = windows[first : first + batch_size].to(device)
                    try:
                        trunk(input_ids=batch, use_cache=False)
                    except _StopForward:
                        pass
                    writer.offset += batch.numel() - (batch.shape[0] if bos is not None else 0)
                    if not (writer.calls == first // batch_size + 1).all():
                        missing = np.flatnonzero(writer.calls != first // batch_size + 1).tolist()
                        missing = [layer_ids[i] for i in missing]
                        raise RuntimeError(f"{model_name}: projection hooks of layers {missing} did not fire once")
                    now = time.perf_counter()
                    if now - last_log >= progress_every or writer.offset == n_tokens:
                        rate = writer.offset / (now - start)
                        log.info(
                            "collect %s: %d/%d tokens, %.0f tokens/s, ETA %.0f s",
                            model_name,
                            writer.offset,
                            n_tokens,
                            rate,
                            (n_tokens - writer.offset) / rate,
                        )
                        last_log = now
            writer.flush()
        finally:
            writer.remove()
        meta["layers"] = [
            {"layer": i, "n_neurons": k, "d_in": d} for i, (k, d) in zip(layer_ids, writer.shapes, strict=True)
        ]
        meta["md_positions"] = md_positions.tolist()
        meta["seconds"] = round(time.perf_counter() - start, 3)
        meta["seconds_in_hooks"] = round(writer.write_seconds, 3)
        meta["seconds_writing"] = round(writer.pwrite_seconds, 3)  # on the writer thread, overlapping the forward
        meta["provenance"] = provenance(model=model_name)
        write_json(tmp / INDEX_FILE, meta)
    return meta


# ---------------------------------------------------------------------------------------------------------------
# Projection rows at chosen token positions (the pair sample of wneurons.core.pairs): inputs x and outputs y of every
# layer at a few thousand positions, not the whole stream.
# ---------------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def projection_hooks(modules: list[torch.nn.Module], make_hook) -> Iterator[None]:
    """Attach ``make_hook(layer)`` as a forward hook to each projection module; always detach them on exit."""
    handles = [m.register_forward_hook(make_hook(layer)) for layer, m in enumerate(modules)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def collect_projection_rows(
    model: torch.nn.Module,
    windows: torch.Tensor,
    positions: np.ndarray,
    *,
    batch_size: int = 1,
    model_name: str = "?",
    modules: list[torch.nn.Module] | None = None,
    bos: int | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per layer ``(x, y)``: the projection inputs [len(positions), d_in] and raw outputs [len(positions), K]
    (float32, rows in the order of ``positions``) at ``positions`` of the token stream ``windows`` [n_windows,
    window] (position p = window p // window, offset p % window). One forward pass of the trunk over the windows
    that hold a position, stopped after the last projection; only the chosen rows are kept. With ``bos`` (a token
    id) each window is fed after that BOS, as :func:`collect_activation_shards` does under ``window_bos``."""
    modules = registry.preactivation_modules(model) if modules is None else modules
    n_windows, window = windows.shape
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size and not 0 <= positions.min() <= positions.max() < n_windows * window:
        raise ValueError(f"{model_name}: positions must lie in [0, {n_windows * window})")
    shapes = [tuple(registry.projection_weight(m).shape) for m in modules]
    xs = [np.zeros((positions.size, d_in), np.float32) for _, d_in in shapes]
    ys = [np.zeros((positions.size, k), np.float32) for k, _ in shapes]
    state = {"rows": np.zeros(0, np.int64), "flat": torch.zeros(0, dtype=torch.long)}

    def make_hook(layer: int):
        def hook(module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
            k, d_in = shapes[layer]
            flat = state["flat"].to(output.device)
            y = output.detach().reshape(-1, k)[flat].float().cpu().numpy()
            x = args[0].detach().reshape(-1, d_in)[flat].float().cpu().numpy()
            if not (np.isfinite(y).all() and np.isfinite(x).all()):
                raise FloatingPointError(f"{model_name}: layer {layer} projection rows contain NaN or inf")
            ys[layer][state["rows"]], xs[layer][state["rows"]] = y, x
            if layer == len(modules) - 1:
                raise _StopForward

        return hook

    needed = np.unique(positions // window)
    trunk = getattr(model, "base_model", model)
    device = next(model.parameters()).device
    with projection_hooks(modules, make_hook), torch.inference_mode():
        for lo in range(0, needed.size, batch_size):
            batch_windows = needed[lo : lo + batch_size]
            # rows of the output that hold a position: (index of the window in the batch) * window + offset
            slot = np.searchsorted(batch_windows, positions // window)
            inside = (slot < batch_windows.size) & (
                batch_windows[np.minimum(slot, batch_windows.size - 1)] == positions // window
            )
            state["rows"] = np.flatnonzero(inside)
            fed = window + (bos is not None)
            state["flat"] = torch.from_numpy(slot[inside] * fed + positions[inside] % window + (bos is not None))
            batch = windows[torch.from_numpy(batch_windows)]
            if bos is not None:
                batch = torch.cat([torch.full((batch.shape[0], 1), bos, dtype=batch.dtype), batch], dim=1)
            try:
                trunk(input_ids=batch.to(device), use_cache=False)
            except _StopForward:
                pass
    return list(zip(xs, ys, strict=True))
