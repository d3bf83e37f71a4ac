"""Sign-specific clamping of selected neurons' pre-activations (paper Section 3).

For every neuron k in the selected set S of a layer, the projection output a_k is replaced before the
nonlinearity by a'_k = max(a_k, 0) (``mode="negative"``, the paper's intervention: negative pre-activations are
removed), min(a_k, 0) (``"positive"``: positive ones removed) or 0 (``"both"``); the variants are those of the
authors' code. All other neurons are untouched.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterator, Mapping, Sequence

import torch

from wneurons.lm.hooks import preactivation_hooks
from wneurons.lm.registry import preactivation_modules, projection_weight

__all__ = ["MODES", "clamp_negative_preactivations"]

MODES = ("negative", "positive", "both")


def _layer_index(key: object, n_layers: int) -> int:
    try:
        layer = operator.index(key)
    except TypeError:
        raise TypeError(
            f"neuron set: layer key {key!r} is not an integer (JSON keys must be converted with int())"
        ) from None
    if not 0 <= layer < n_layers:
        raise IndexError(f"neuron set: layer {layer} out of range; the model has layers 0..{n_layers - 1}")
    return layer


def _neuron_index(layer: int, ids: torch.Tensor | Sequence[int], width: int, device: torch.device) -> torch.Tensor:
    index = torch.as_tensor(ids)
    if index.numel() == 0:
        return index.new_empty(0, dtype=torch.long)
    if index.ndim != 1 or index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
        raise TypeError(
            f"neuron set: layer {layer} must be a 1-D list/tensor of integer neuron indices, "
            f"got dtype {index.dtype} shape {tuple(index.shape)}"
        )
    lo, hi = int(index.min()), int(index.max())
    if lo < 0 or hi >= width:
        bad = lo if lo < 0 else hi
        raise IndexError(f"neuron set: layer {layer} neuron {bad} out of range; the layer has neurons 0..{width - 1}")
    # Sorted unique indices: duplicates would write the same column twice (harmless but wasted).
    return torch.unique(index.to(torch.long)).to(device)


def _clamp_hook(index: torch.Tensor, mode: str):
    def hook(_module: torch.nn.Module, _inputs: tuple, output: torch.Tensor) -> torch.Tensor | None:
        # Only the selected columns are read and written; everything else in the [.., d_ff] output is untouched.
        # In place when autograd does not need the original output; else out of place (a full copy).
        in_place = not (output.requires_grad and torch.is_grad_enabled())
        if mode == "both":
            if in_place:
                output.index_fill_(-1, index, 0)
                return None
            return output.index_fill(-1, index, 0)
        selected = output.index_select(-1, index)
        clamped = selected.clamp_(min=0) if mode == "negative" else selected.clamp_(max=0)
        if in_place:
            output.index_copy_(-1, index, clamped)
            return None
        return output.index_copy(-1, index, clamped)

    return hook


@contextlib.contextmanager
def clamp_negative_preactivations(
    model: torch.nn.Module,
    neurons: Mapping[int, torch.Tensor | Sequence[int]],
    mode: str = "negative",
) -> Iterator[None]:
    """Within the block, clamp the pre-activations of ``neurons`` (layer -> neuron indices) in every forward.

    ``mode`` is ``"negative"`` (a' = max(a, 0), the paper's ablation), ``"positive"`` (a' = min(a, 0)) or
    ``"both"`` (a' = 0). Layers absent from ``neurons`` or with an empty set get no hook, so an empty set leaves
    the model's outputs bit-identical. All inputs are validated before any hook is registered; hooks are removed
    on exit, also when the block raises. Yields nothing.
    """
    if mode not in MODES:
        raise ValueError(f"clamp mode {mode!r} is not one of {', '.join(MODES)}")
    modules = preactivation_modules(model)
    indices: dict[int, torch.Tensor] = {}
    for key, ids in neurons.items():
        layer = _layer_index(key, len(modules))
        weight = projection_weight(modules[layer])
        index = _neuron_index(layer, ids, weight.shape[0], weight.device)
        if index.numel():
            indices[layer] = index
    hooks = {layer: _clamp_hook(index, mode) for layer, index in indices.items()}
    with preactivation_hooks(model, hooks, modules=modules):
        yield
