"""The one owner of forward hooks on the pre-nonlinearity projections (:mod:`wneurons.lm.registry`).

Everything that reads or rewrites pre-activations while a model runs goes through :func:`preactivation_hooks`: the
sign-specific clamp (:mod:`wneurons.lm.ablation`), both collectors (:mod:`wneurons.lm.activations`) and the
benchmarks in ``perf/``. It attaches the hooks and always detaches them, also when attaching or the block
raises, so that no hook outlives its use and changes a later forward of a shared (pooled) model.

A collector that needs nothing after the last projection raises :class:`StopForward` from its hook and runs the
model through :func:`forward_until_stopped`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from wneurons.lm import registry

__all__ = ["Hook", "StopForward", "forward_until_stopped", "preactivation_hooks"]

# A forward hook: (module, positional inputs, output) -> a replacement output, or None to keep it.
Hook = Callable[[torch.nn.Module, tuple[Any, ...], torch.Tensor], torch.Tensor | None]


class StopForward(Exception):
    """Raised by a hook once it has what it needs: the rest of the forward pass is skipped."""


@contextlib.contextmanager
def preactivation_hooks(
    model: torch.nn.Module | None,
    hooks: Mapping[int, Hook | Sequence[Hook]],
    *,
    modules: Sequence[torch.nn.Module] | None = None,
) -> Iterator[Sequence[torch.nn.Module]]:
    """Within the block, run ``hooks[i]`` (one hook or several, in order) after the forward of projection ``i``.

    ``i`` indexes ``modules``, by default the pre-nonlinearity projections of ``model`` in layer order
    (:func:`wneurons.lm.registry.preactivation_modules`); a collector restricted to some layers passes those
    modules. Indices absent from ``hooks`` get no hook. Every hook is removed on exit, also when registering one
    of them or the block raises. Yields the modules.
    """
    modules = registry.preactivation_modules(model) if modules is None else modules
    handles = []
    try:
        for index, layer_hooks in hooks.items():
            for hook in [layer_hooks] if callable(layer_hooks) else layer_hooks:
                handles.append(modules[index].register_forward_hook(hook))
        yield modules
    finally:
        for handle in handles:
            handle.remove()


def forward_until_stopped(module: torch.nn.Module, **inputs: Any) -> None:
    """``module(**inputs)``, ending quietly where a hook raises :class:`StopForward`."""
    with contextlib.suppress(StopForward):
        module(**inputs)
