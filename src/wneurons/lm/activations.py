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


class _ShardWriter:
    """Forward hooks (:meth:`hooks`) that stream each layer's projection output into its shard as the batches go
    by; the files are :class:`wneurons.store.shards.ShardFiles`, written on a writer thread."""

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
        self.np_dtype, self.torch_dtype = SHARD_DTYPES[dtype], _TORCH_DTYPES[dtype]
        self.limit = float(np.finfo(self.np_dtype).max)
        self.shapes = [tuple(registry.projection_weight(m).shape) for m in modules]  # (K, d_in) per layer
        # md_row[p] = row of token position p in the x shards, or -1: one lookup per batch, no search.
        self.md_row = np.full(n_tokens, -1, dtype=np.int64)
        self.md_row[md_positions] = np.arange(len(md_positions))
        self.files = ShardFiles(
            directory, self.layer_ids, self.shapes, n_tokens // window, window, len(md_positions), dtype, io
        )
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

    def hooks(self) -> dict[int, Any]:
        """The forward hook of each module position, for :func:`wneurons.lm.hooks.preactivation_hooks`."""
        return {layer: self._hook(layer) for layer in range(len(self.shapes))}

    def _hook(self, layer: int):
        last = layer == len(self.shapes) - 1

        def hook(module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
            self.write(layer, args[0], output)
            if last:  # skip the rest of the last layer and the final norm (~1.5% of SmolLM2's trunk)
                raise StopForward

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
        first_window = self.offset // self.window
        self._queue.put(functools.partial(self.files.write_y, layer, first_window, block, transposed))
        rows = self.md_row[self.offset : self.offset + n]
        picked = np.flatnonzero(rows >= 0)
        if picked.size:
            fed = picked + (picked // self.window + 1) if self.skip_first else picked  # past each window's BOS
            x = x.detach().reshape(-1, d_in)[torch.from_numpy(fed).to(x.device)].float().cpu().numpy()
            if not np.isfinite(x).all():
                raise FloatingPointError(
                    f"{self.model_name}: layer {self.layer_ids[layer]} projection inputs contain NaN or inf"
                )
            self._queue.put(functools.partial(self.files.write_x_rows, layer, x, rows[picked]))
        self.write_seconds += time.perf_counter() - start
        self.calls[layer] += 1

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
    Peak memory: the model, the forward pass's own activations for one batch, and one layer's batch output
    (``batch_size * window * K`` values); the shards live on disk (``N * K`` values per layer), written with
    one ``pwrite`` per layer and batch. NaN / inf in any activation raises ``FloatingPointError`` naming
    the model and layer. Returns the contents of ``index.json``.
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
            tmp, modules, n_tokens, window, md_positions, dtype, model_name, io, bos is not None, layer_ids
        )
        meta |= writer.files.record()
        if not writer.files.direct and io == "auto":
            log.info("collect %s: shards go through the page cache: %s", model_name, writer.files.buffered_reason)
        start = last_log = time.perf_counter()
        forwards = 0  # whole forward passes done: every hook has fired this many times

        def collect_windows(first: int, stop: int) -> None:
            nonlocal forwards, last_log
            # A range retried after a CUDA OOM (run_in_batches) starts from the last whole forward: the blocks its
            # failed pass queued are written again at the same places, with the values of the smaller batches.
            writer.calls[:] = forwards
            writer.offset = first * window
            forward_until_stopped(trunk, input_ids=windows[first:stop].to(device), use_cache=False)
            writer.offset = stop * window
            if not (writer.calls == forwards + 1).all():
                missing = [layer_ids[i] for i in np.flatnonzero(writer.calls != forwards + 1).tolist()]
                raise RuntimeError(f"{model_name}: projection hooks of layers {missing} did not fire once")
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
