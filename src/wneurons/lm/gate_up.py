"""Gate and up projections of chosen neurons of a gated MLP over a token stream, reduced to their four sign cases
(:mod:`wneurons.core.sign_cases`) as the batches go by.

The activation shards hold the gate's pre-activations only; this runs the model again over the same windows (with
the same BOS, if any) and hooks, through :func:`wneurons.lm.hooks.preactivation_hooks`, each needed layer's gate
and up projection, keeping only the chosen neurons' columns. The forward pass stops after the last needed layer.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import polars as pl
import torch

from wneurons.core.sign_cases import SignCaseAccumulator
from wneurons.lm import registry
from wneurons.lm.hooks import StopForward, forward_until_stopped, preactivation_hooks
from wneurons.lm.scoring import run_in_batches

log = logging.getLogger(__name__)

__all__ = ["collect_sign_cases"]


def collect_sign_cases(
    model: torch.nn.Module,
    windows: torch.Tensor,
    neurons: dict[int, np.ndarray],
    *,
    k: int = 8,
    bos: int | None = None,
    batch_size: int = 1,
    model_name: str = "?",
    progress_every: float = 30.0,
) -> pl.DataFrame:
    """The sign-case table (:meth:`wneurons.core.sign_cases.SignCaseAccumulator.table`) of ``neurons`` ({0-based
    layer: neuron ids}) over the token stream ``windows`` [n_windows, window] (position p = window p // window,
    offset p % window), ``k`` top positions per case. With ``bos`` (a token id) each window is fed after it and its
    outputs are left out, as :func:`wneurons.lm.activations.collect_activation_shards` does. The product is
    act(gate) * up with the family's nonlinearity as the model's config names it. A family without a gate is a
    ``ValueError``; NaN or inf in a captured value a ``FloatingPointError``."""
    spec = registry.family_spec(model)
    if spec.up_projection is None:
        raise ValueError(f"{model_name}: family {spec.model_type!r} is not a gated MLP (no up projection)")
    act = registry.nonlinearity(spec.nonlinearity)
    layers = sorted(int(layer) for layer in neurons)
    gates, ups = registry.preactivation_modules(model), registry.up_projection_modules(model)
    if not layers or not 0 <= layers[0] <= layers[-1] < len(gates):
        raise ValueError(f"{model_name}: layers {layers} are not a non-empty subset of 0..{len(gates) - 1}")
    n_windows, window = windows.shape
    fed = window + (bos is not None)
    device = next(model.parameters()).device
    columns = [torch.as_tensor(np.asarray(neurons[layer], dtype=np.int64), device=device) for layer in layers]
    accumulators = [SignCaseAccumulator(c.numel(), k, device) for c in columns]
    captured: dict[tuple[int, str], torch.Tensor] = {}

    def make_hook(slot: int, kind: str):
        def hook(module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
            y = output.detach().reshape(-1, fed, output.shape[-1])[:, 1 if bos is not None else 0 :]
            captured[slot, kind] = y.reshape(-1, output.shape[-1])[:, columns[slot]].float()
            if len(captured) == 2 * len(layers):
                raise StopForward

        return hook

    hooks = {slot: make_hook(slot, "gate") for slot in range(len(layers))}
    hooks |= {len(layers) + slot: make_hook(slot, "up") for slot in range(len(layers))}
    modules = [gates[layer] for layer in layers] + [ups[layer] for layer in layers]
    trunk = getattr(model, "base_model", model)
    start = last_log = time.perf_counter()

    def step(first: int, stop: int) -> None:
        nonlocal last_log
        captured.clear()
        batch = windows[first:stop]
        if bos is not None:
            batch = torch.cat([torch.full((batch.shape[0], 1), bos, dtype=batch.dtype), batch], dim=1)
        forward_until_stopped(trunk, input_ids=batch.to(device), use_cache=False)
        if len(captured) != 2 * len(layers):
            raise RuntimeError(f"{model_name}: the gate and up hooks of layers {layers} did not all fire")
        # Only a whole forward pass reaches the accumulators: a batch retried after a CUDA OOM counts once.
        positions = torch.arange(first * window, stop * window, device=device)
        for slot, layer in enumerate(layers):
            gate, up = captured[slot, "gate"], captured[slot, "up"]
            product = act(gate) * up
            if not (torch.isfinite(gate).all() and torch.isfinite(up).all()):
                raise FloatingPointError(f"{model_name}: layer {layer} gate or up projection holds NaN or inf")
            accumulators[slot].update(gate, up, product, positions)
        now = time.perf_counter()
        if now - last_log >= progress_every or stop == n_windows:
            done = stop * window
            rate = done / (now - start)
            log.info("sign cases %s: %d/%d tokens, %.0f tokens/s, ETA %.0f s", model_name, done, n_windows * window,
                     rate, (n_windows * window - done) / rate)  # fmt: skip
            last_log = now

    with preactivation_hooks(model, hooks, modules=modules), torch.inference_mode():
        run_in_batches(n_windows, batch_size, step)
    return pl.concat(
        [acc.table(layer, neurons[layer]) for acc, layer in zip(accumulators, layers, strict=True)], how="vertical"
    )
