"""Stream the pre-activations of every layer into per-layer shards on disk, once per model and text; and collect
the projection rows at a few chosen positions (the pair sample).

The shard directory's format, its reader and its I/O mode live in :mod:`wneurons.store.shards`; this module runs the
model and feeds the files from forward hooks (:mod:`wneurons.lm.hooks`). With ``window_bos`` every window of
``window`` text tokens is fed after a BOS: the model sees ``window + 1`` positions, the BOS position's outputs are
not stored, so N and the layout are those of a run without it.

The directory appears only when complete: everything is written into a hidden temporary sibling that is
renamed at the end, so a killed job leaves nothing that looks finished.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wneurons.lm import registry
from wneurons.lm.hooks import StopForward, forward_until_stopped, preactivation_hooks
from wneurons.lm.perplexity import window_bos_token
from wneurons.lm.scoring import run_in_batches
from wneurons.store.io import atomic_directory, provenance, write_json
from wneurons.store.shards import FORMAT_VERSION, INDEX_FILE, SHARD_DTYPES, SHARD_IO_MODES, ShardFiles

log = logging.getLogger(__name__)

__all__ = ["collect_activation_shards", "collect_projection_rows"]

_TORCH_DTYPES = {"float16": torch.float16, "float32": torch.float32}  # the torch side of store.shards.SHARD_DTYPES


def _transposes_on_device(device: torch.device) -> bool:
    """Whether a batch's blocks are made neuron-major where the model runs and checked once per batch (an
    accelerator: the transpose costs nothing there, and a check read back per layer would stall it), or converted
    by the hook, checked at once and transposed by the writer thread (the CPU, where nothing waits for a check)."""
    return device.type != "cpu"


class _Transfer:
    """Copies of a batch's blocks from the model's device into host buffers, and the one wait for them.

    On a CUDA device the copies run on a side stream (after the forward's work so far, so they overlap the next
    layers' compute) into pinned memory with ``non_blocking=True``; :meth:`wait` is the batch's only host sync.
    Elsewhere (the CPU, or another device) a copy is a plain ``copy_`` and :meth:`wait` has nothing to wait for."""

    def __init__(self, device: torch.device):
        self.pinned = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if self.pinned else None

    def empty(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(numel, dtype=dtype, pin_memory=self.pinned)

    def to_device(self, host: torch.Tensor, device: torch.device) -> torch.Tensor:
        """``host`` on ``device``; from pinned memory and without a host sync on a CUDA device."""
        return host.pin_memory().to(device, non_blocking=True) if self.pinned else host.to(device)

    def copy(self, host: torch.Tensor, source: torch.Tensor) -> None:
        """``host[...] = source`` (cast to ``host``'s dtype), asynchronously on a CUDA device."""
        if self.stream is None:
            host.copy_(source)
            return
        source = source.contiguous()
        self.stream.wait_stream(torch.cuda.current_stream(source.device))
        with torch.cuda.stream(self.stream):
            host.copy_(source, non_blocking=True)
        source.record_stream(self.stream)  # the allocator must not hand its memory out before the copy is done

    def wait(self) -> None:
        if self.stream is not None:
            self.stream.synchronize()


class _ShardWriter:
    """Forward hooks (:meth:`hooks`) that stream each layer's projection output into its shard as the batches go
    by; the files are :class:`wneurons.store.shards.ShardFiles`, written on a writer thread.

    A batch is :meth:`begin_batch`, the hooks (:meth:`stage`, one per layer), :meth:`finish_batch`. Each layer's
    block is cast to the shard dtype where the model runs and copied into a host buffer of its own. There are two
    sets of these buffers, each one batch of every layer, reused batch after batch: the writer thread writes one
    set while the next batch fills the other, and hands a set back once all of it is in the files, so host memory
    is two batches of every layer whatever N. On an accelerator (:func:`_transposes_on_device`) the blocks are made
    neuron-major there, copied asynchronously (:class:`_Transfer`), and every layer's NaN / range check comes back
    with them: one host sync per batch. On the CPU each layer is checked and queued as soon as its hook has run
    (there is nothing to wait for), and the writer thread transposes.
    """

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
        device: torch.device | None = None,
    ):
        self.directory = directory
        # Hooks, files and counters are indexed by position in ``modules``; files are named by model layer.
        self.layer_ids = list(range(len(modules))) if layer_ids is None else list(layer_ids)
        self.model_name = model_name
        self.window = window
        self.skip_first = skip_first  # each fed window starts with a BOS whose outputs are not stored
        self.np_dtype, self.torch_dtype = SHARD_DTYPES[dtype], _TORCH_DTYPES[dtype]
        self.limit = float(np.finfo(self.np_dtype).max)
        self.shapes = [tuple(registry.projection_weight(m).shape) for m in modules]  # (K, d_in) per layer
        # md_row[p] = row of token position p in the x shards, or -1: one lookup per batch, no search.
        self.md_row = np.full(n_tokens, -1, dtype=np.int64)
        self.md_row[md_positions] = np.arange(len(md_positions))
        self.files = ShardFiles(
            directory, self.layer_ids, self.shapes, n_tokens // window, window, len(md_positions), dtype, io
        )
        self.device = torch.device("cpu") if device is None else device
        self.on_device = _transposes_on_device(self.device)
        self.transfer = _Transfer(self.device)
        self.offset = 0
        self.write_seconds = 0.0  # time spent in the hooks and at the ends of batches, reported in index.json
        # Blocks are transposed and written by a writer thread: the forward pass leaves a core partly idle
        # (measured: 1.8 of 2 cores busy), and a write waits for the device (O_DIRECT) or for the kernel's
        # page-cache work (buffered). The queue needs no bound: what it holds lives in the two buffer sets.
        self.pwrite_seconds = 0.0
        self._queue: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._buffers: list[list[torch.Tensor | None]] = [[None] * len(modules) for _ in range(2)]
        self._free = [threading.Semaphore(), threading.Semaphore()]  # a set is free once the writer is past it
        self._set: int | None = None  # the set the batch in progress fills
        self._batches = 0
        self._stop = 0
        self._staged: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None] = []
        self._md_rows = np.zeros(0, dtype=np.int64)
        self._md_index: torch.Tensor | None = None
        self._thread = threading.Thread(target=self._drain, name="shard-writer", daemon=True)
        self._thread.start()
        self.calls = np.zeros(len(modules), dtype=np.int64)

    @property
    def host_buffer_bytes(self) -> int:
        """Bytes of the host buffers the blocks go through (both sets)."""
        return sum(b.numel() * b.element_size() for buffers in self._buffers for b in buffers if b is not None)

    def hooks(self) -> dict[int, Any]:
        """The forward hook of each module position, for :func:`wneurons.lm.hooks.preactivation_hooks`."""
        return {layer: self._hook(layer) for layer in range(len(self.shapes))}

    def _hook(self, layer: int):
        last = layer == len(self.shapes) - 1

        def hook(module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
            self.stage(layer, args[0], output)
            if last:  # skip the rest of the last layer and the final norm (~1.5% of SmolLM2's trunk)
                raise StopForward

        return hook

    def begin_batch(self, first: int, stop: int) -> None:
        """Windows ``first..stop-1`` come next: take a free buffer set (waiting for the writer to be past it) and
        send the batch's MD positions to the device once."""
        self._raise_write_error()
        if self._set is None:  # a range retried after a CUDA OOM keeps the set its failed attempt took
            self._set = self._batches % 2
            self._free[self._set].acquire()
        self.offset, self._stop = first * self.window, stop
        rows = self.md_row[self.offset : stop * self.window]
        picked = np.flatnonzero(rows >= 0)
        self._md_rows = rows[picked]
        fed = picked + (picked // self.window + 1) if self.skip_first else picked  # past each window's BOS
        self._md_index = self.transfer.to_device(torch.from_numpy(fed), self.device) if picked.size else None
        self._staged = [None] * len(self.shapes)

    def stage(self, layer: int, x: torch.Tensor, y: torch.Tensor) -> None:
        """A layer's hook: its block, its range and its MD inputs into the batch's buffers (checked and queued
        now on the CPU, at :meth:`finish_batch` on an accelerator)."""
        start = time.perf_counter()
        k, d_in = self.shapes[layer]
        y = y.detach()
        if self.skip_first:
            y = y.reshape(-1, self.window + 1, k)[:, 1:]
        y = y.reshape(-1, self.window, k)
        # One pass finds both ends: NaN propagates into them and an inf is one of them.
        bounds = torch.stack(torch.aminmax(y))
        host = self._host(layer, y.numel())
        if self.on_device:
            block = host.view(-1, k, self.window)
            self.transfer.copy(block, y.to(self.torch_dtype).transpose(1, 2))
        else:  # cast into the buffer: a float32 shard must not alias the model's output (later in-place ops)
            block = host.view(-1, self.window, k)
            block.copy_(y)
        x_rows = None
        if self._md_index is not None:
            x_rows = x.detach().reshape(-1, d_in)[self._md_index].float()
            if self.on_device:
                x_rows, source = self.transfer.empty(x_rows.numel(), torch.float32).view_as(x_rows), x_rows
                self.transfer.copy(x_rows, source)
        self._staged[layer] = (bounds, block, x_rows)
        if not self.on_device:
            self._queue_layer(layer, *bounds.tolist())
        self.write_seconds += time.perf_counter() - start
        self.calls[layer] += 1

    def finish_batch(self) -> None:
        """After the batch's forward: on an accelerator wait once for its copies and queue every layer; then the
        buffer set goes back to the writer thread, which frees it once its blocks are written."""
        start = time.perf_counter()
        if self.on_device:
            bounds = self.transfer.empty(2 * len(self.shapes), torch.float32).view(-1, 2)
            self.transfer.copy(bounds, torch.stack([staged[0] for staged in self._staged]).float())
            self.transfer.wait()  # the batch's one host sync: its blocks, MD inputs and ranges are on the host
            for layer, (low, high) in enumerate(bounds.tolist()):
                self._queue_layer(layer, low, high)
        self._queue.put(self._free[self._set])
        self._set, self._staged = None, []
        self._batches += 1
        self.offset = self._stop * self.window
        self.write_seconds += time.perf_counter() - start

    def _host(self, layer: int, numel: int) -> torch.Tensor:
        """The first ``numel`` values of ``layer``'s buffer in the current set, allocated at the first batch (a
        later batch is never larger: the last one, or one halved after a CUDA OOM, is smaller)."""
        buffers = self._buffers[self._set]
        if buffers[layer] is None or buffers[layer].numel() < numel:
            buffers[layer] = self.transfer.empty(numel, self.torch_dtype)
        return buffers[layer][:numel]

    def _queue_layer(self, layer: int, low: float, high: float) -> None:
        """Check a staged layer (NaN / inf / the shard dtype's range, its MD inputs) and queue its writes."""
        _, block, x_rows = self._staged[layer]
        n = block.numel() // self.shapes[layer][0]
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
        self._raise_write_error()
        first_window = self.offset // self.window
        self._queue.put(functools.partial(self.files.write_y, layer, first_window, block.numpy(), self.on_device))
        if x_rows is not None:
            x = x_rows.numpy()
            if not np.isfinite(x).all():
                raise FloatingPointError(
                    f"{self.model_name}: layer {self.layer_ids[layer]} projection inputs contain NaN or inf"
                )
            self._queue.put(functools.partial(self.files.write_x_rows, layer, x, self._md_rows))

    def _drain(self) -> None:
        while (item := self._queue.get()) is not None:
            if isinstance(item, threading.Semaphore):  # a buffer set's blocks are all written: it may be refilled
                item.release()
                continue
            if self._error is not None:
                continue  # keep taking blocks (and freeing sets) so that the producer never waits on a dead writer
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

    def close(self) -> None:
        """Stop the writer thread and close the files (the hooks are already detached)."""
        self._stop_writer()
        self.files.close()


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
    are written and later read, decided by :class:`wneurons.store.shards.ShardFiles`; "auto": O_DIRECT where possible.

    Only the causal LM's trunk (``model.base_model``) is run: the LM head plays no part in the pre-activations.
    Peak memory: the model, the forward pass's own activations for one batch, and on the host two sets of buffers
    of one batch of every layer (``2 * batch_size * window * sum(K)`` values in the shard dtype, pinned on a CUDA
    device; ``index.json``'s ``host_buffer_bytes``), reused batch after batch; the shards live on disk (``N * K``
    values per layer), written with one ``pwrite`` per layer and batch. On an accelerator the host waits for the
    device once per batch. NaN / inf in any activation raises ``FloatingPointError`` naming the model and layer.
    Returns the contents of ``index.json``.
    """
    if dtype not in SHARD_DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(SHARD_DTYPES)}")
    if io not in SHARD_IO_MODES:  # checked again by ShardFiles; here before the model runs
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
            tmp, modules, n_tokens, window, md_positions, dtype, model_name, io, bos is not None, layer_ids, device
        )
        meta |= writer.files.record()
        if not writer.files.direct and io == "auto":
            log.info("collect %s: shards go through the page cache: %s", model_name, writer.files.buffered_reason)
        start = last_log = time.perf_counter()
        forwards = 0  # whole forward passes done: every hook has fired this many times

        def collect_windows(first: int, stop: int) -> None:
            nonlocal forwards, last_log
            # A range retried after a CUDA OOM (run_in_batches) starts from the last whole forward: on an
            # accelerator its failed pass queued nothing (a batch is queued after its forward), and blocks queued
            # anyway are written again at the same places, with the values of the smaller batches.
            writer.calls[:] = forwards
            writer.begin_batch(first, stop)
            forward_until_stopped(
                trunk, input_ids=writer.transfer.to_device(windows[first:stop], device), use_cache=False
            )
            if not (writer.calls == forwards + 1).all():
                missing = [layer_ids[i] for i in np.flatnonzero(writer.calls != forwards + 1).tolist()]
                raise RuntimeError(f"{model_name}: projection hooks of layers {missing} did not fire once")
            writer.finish_batch()
            forwards += 1
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

        try:
            with preactivation_hooks(model, writer.hooks(), modules=modules), torch.inference_mode():
                run_in_batches(n_windows, batch_size, collect_windows)  # a CUDA OOM halves the batch and retries
            writer.flush()
        finally:
            writer.close()
        meta["layers"] = [
            {"layer": i, "n_neurons": k, "d_in": d} for i, (k, d) in zip(layer_ids, writer.shapes, strict=True)
        ]
        meta["md_positions"] = md_positions.tolist()
        meta["seconds"] = round(time.perf_counter() - start, 3)
        meta["seconds_in_hooks"] = round(writer.write_seconds, 3)
        meta["seconds_writing"] = round(writer.pwrite_seconds, 3)  # on the writer thread, overlapping the forward
        meta["host_buffer_bytes"] = writer.host_buffer_bytes
        meta["provenance"] = provenance(model=model_name)
        write_json(tmp / INDEX_FILE, meta)
    return meta


# ---------------------------------------------------------------------------------------------------------------
# Projection rows at chosen token positions (the pair sample of wneurons.core.pairs): inputs x and outputs y of every
# layer at a few thousand positions, not the whole stream.
# ---------------------------------------------------------------------------------------------------------------
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
                raise StopForward

        return hook

    needed = np.unique(positions // window)
    trunk = getattr(model, "base_model", model)
    device = next(model.parameters()).device
    hooks = {layer: make_hook(layer) for layer in range(len(modules))}
    with preactivation_hooks(model, hooks, modules=modules), torch.inference_mode():
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
            forward_until_stopped(trunk, input_ids=batch.to(device), use_cache=False)
    return list(zip(xs, ys, strict=True))
