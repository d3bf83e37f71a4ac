"""Model family table: which module's output is the pre-activation of the MLP neurons.

A *neuron* is one row of the pre-nonlinearity projection W (paper Section 2): its pre-activation for a token with
MLP input x is y = w·x, the output of that projection before the nonlinearity. Adding a family is one entry in
:data:`FAMILIES` plus a tiny-model builder in ``tests/conftest.py``.

The hook point is the projection's output, never the activation module: in older transformers versions one
activation instance was shared by every layer, so a hook on it fires in all of them (docs/conventions.md).

Each family also says whether its models expect a BOS at the start of every window of text (``window_bos``), and
why; docs/conventions.md ("BOS") lists the defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

__all__ = [
    "FAMILIES",
    "FamilySpec",
    "UnsupportedFamilyError",
    "check_family",
    "context_length",
    "family_spec",
    "is_gated",
    "nonlinearity",
    "preactivation_modules",
    "projection_weight",
    "resolve_window_bos",
    "sliding_window",
    "up_projection_modules",
]


class UnsupportedFamilyError(ValueError):
    """The model's ``model_type`` has no entry in :data:`FAMILIES`."""


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    """Where the neurons of one model family live.

    ``layers_paths`` are dotted attribute paths from the loaded causal-LM object to its list of decoder blocks;
    the first that resolves is used (several only where one family has several wrappers). ``projection`` and
    ``activation`` are dotted paths inside one block: the pre-nonlinearity projection and the module applying the
    nonlinearity to its output. ``nonlinearity`` is the transformers ``ACT2FN`` name the family uses by default;
    :func:`family_spec` replaces it with the value in the model's config (``activation_config_key``) when given a
    model or config. ``conv1d`` marks GPT-2-style ``Conv1D`` projections whose weight is stored as [d_in, n].
    ``window_bos`` is the default for prepending a BOS to every activation / perplexity window: True, False, or
    None = "as the model's tokenizer does on its own" (families that hold models trained both ways);
    ``window_bos_reason`` says why, and is recorded with every result that used the default. ``up_projection``:
    in a gated MLP (down(act(gate(x)) * up(x))), the path of the up projection beside the gate (``projection``);
    None where the MLP has no gate.
    """

    model_type: str
    layers_paths: tuple[str, ...]
    projection: str
    activation: str
    nonlinearity: str
    activation_config_key: str
    window_bos: bool | None
    window_bos_reason: str
    conv1d: bool = False
    up_projection: str | None = None  # gated MLPs (act(gate) * up): the up projection's path; None: not gated


_AS_TOKENIZER = (
    "the family holds models trained with a BOS at the start of every sequence (Llama-3.1, Mistral, OPT: their "
    "tokenizers prepend one) and models trained without (SmolLM2: its tokenizer prepends none); the tokenizer's "
    "own default is the model author's statement of what the model expects"
)
_NO_BOS = (
    "trained on packed documents separated by an end-of-text token, with no BOS at sequence starts; the "
    "tokenizer prepends none"
)


def _llama_like(model_type: str, window_bos: bool | None, reason: str) -> FamilySpec:
    # Gated MLP down(act(gate(x)) * up(x)): the neurons are the rows of gate_proj.
    return dataclasses.replace(
        FamilySpec(
            model_type, ("model.layers",), "mlp.gate_proj", "mlp.act_fn", "silu", "hidden_act", window_bos, reason
        ),
        up_projection="mlp.up_proj",
    )


_GEMMA3 = FamilySpec(
    "gemma3",
    # Gemma3ForCausalLM (text-only, model_type gemma3_text) keeps its blocks at model.layers; the multimodal
    # Gemma3ForConditionalGeneration (model_type gemma3) at model.language_model.layers in transformers 5.
    ("model.layers", "model.language_model.layers"),
    "mlp.gate_proj",
    "mlp.act_fn",
    "gelu_pytorch_tanh",
    "hidden_activation",
    True,
    "Gemma is trained with <bos> at the start of every sequence and Google's Gemma docs ask for it to be "
    "added; its tokenizer prepends one",
    up_projection="mlp.up_proj",
)

FAMILIES: dict[str, FamilySpec] = {
    "gpt_neox": FamilySpec(
        "gpt_neox", ("gpt_neox.layers",), "mlp.dense_h_to_4h", "mlp.act", "gelu", "hidden_act", False, _NO_BOS
    ),
    **{name: _llama_like(name, None, _AS_TOKENIZER) for name in ("llama", "mistral")},
    **{name: _llama_like(name, False, _NO_BOS) for name in ("qwen2", "qwen3")},
    "gemma3": _GEMMA3,
    "gemma3_text": dataclasses.replace(_GEMMA3, model_type="gemma3_text"),
    "opt": FamilySpec(
        "opt", ("model.decoder.layers",), "fc1", "activation_fn", "relu", "activation_function", None, _AS_TOKENIZER
    ),
    "gpt2": FamilySpec(
        "gpt2", ("transformer.h",), "mlp.c_fc", "mlp.act", "gelu_new", "activation_function", False, _NO_BOS, True
    ),
}


def _config_of(model_or_config: Any) -> Any:
    return getattr(model_or_config, "config", model_or_config)


def _text_config(config: Any) -> Any:
    # Multimodal configs (gemma3) nest the language model's sizes and activation in text_config.
    getter = getattr(config, "get_text_config", None)
    return getter() if callable(getter) else config


def family_spec(model_or_model_type: Any) -> FamilySpec:
    """The :class:`FamilySpec` of a model, a transformers config, or a ``model_type`` string.

    Given a model or config, ``nonlinearity`` is the activation its config names (so a checkpoint that changes
    it is honoured). Raises :class:`UnsupportedFamilyError` listing the supported families otherwise.
    """
    if isinstance(model_or_model_type, str):
        model_type, config = model_or_model_type, None
    else:
        config = _config_of(model_or_model_type)
        model_type = getattr(config, "model_type", None)
        if model_type is None:
            raise UnsupportedFamilyError(
                f"{type(model_or_model_type).__name__} has no config.model_type; "
                f"supported families: {', '.join(sorted(FAMILIES))}"
            )
    spec = FAMILIES.get(model_type)
    if spec is None:
        raise UnsupportedFamilyError(
            f"model family {model_type!r} is not supported; supported families: {', '.join(sorted(FAMILIES))}"
        )
    if config is not None:
        configured = getattr(_text_config(config), spec.activation_config_key, None)
        if isinstance(configured, str) and configured != spec.nonlinearity:
            spec = dataclasses.replace(spec, nonlinearity=configured)
    return spec


def _same_family(a: str, b: str) -> bool:
    """Two model_types name one family when they differ only by the suffix of a text-only variant (gemma3 and
    gemma3_text: the same language model with or without its vision wrapper)."""
    return a.removesuffix("_text") == b.removesuffix("_text")


def check_family(configured: str | None, model_or_config: Any, key: str = "family") -> str:
    """The loaded model's ``model_type``; a ``ValueError`` naming both when ``configured`` (a config value, None =
    not given) names another family."""
    loaded = getattr(_config_of(model_or_config), "model_type", None)
    if configured is not None and not (loaded is not None and _same_family(configured, loaded)):
        raise ValueError(f"{key} is {configured!r} but the loaded model's family (model_type) is {loaded!r}")
    return loaded


def resolve_window_bos(configured: bool | None, spec: FamilySpec, tokenizer_adds_bos: bool) -> tuple[bool, str]:
    """Whether every window gets a BOS, and why: ``configured`` when not None, else the family's default
    (``spec.window_bos``; None there follows ``tokenizer_adds_bos``, whether the tokenizer prepends a BOS)."""
    if configured is not None:
        return bool(configured), "set in the config"
    if spec.window_bos is None:
        does = "prepends" if tokenizer_adds_bos else "does not prepend"
        return (
            tokenizer_adds_bos,
            f"family {spec.model_type}: as the tokenizer, which {does} a BOS; {spec.window_bos_reason}",
        )
    return spec.window_bos, f"family {spec.model_type}: {spec.window_bos_reason}"


def context_length(model_or_config: Any) -> int:
    """The longest sequence a model takes, from its (text) config."""
    config = _text_config(_config_of(model_or_config))
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if value:
            return int(value)
    raise ValueError(f"cannot tell the context length of model_type {config.model_type!r}; pass window=")


def sliding_window(model_or_config: Any) -> int | None:
    """The span of a model's sliding-window attention layers (Gemma-3's local layers, Mistral's window), or None
    where every layer attends to the whole sequence (Qwen2/3 configs name a window they do not use)."""
    config = _text_config(_config_of(model_or_config))
    window = getattr(config, "sliding_window", None)
    return None if window is None or getattr(config, "use_sliding_window", True) is False else int(window)


def _resolve(root: Any, dotted: str) -> Any:
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _layers(model: torch.nn.Module, spec: FamilySpec) -> torch.nn.ModuleList:
    for path in spec.layers_paths:
        try:
            return _resolve(model, path)
        except AttributeError:
            continue
    raise AttributeError(
        f"{type(model).__name__} (family {spec.model_type!r}) has none of the decoder-layer paths "
        f"{', '.join(spec.layers_paths)}"
    )


def preactivation_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The pre-nonlinearity projection of every layer, in layer order (index = 0-based layer)."""
    spec = family_spec(model)
    return [_resolve(block, spec.projection) for block in _layers(model, spec)]


def is_gated(family: str) -> bool:
    """Whether a family's MLP is gated (act(gate) * up), so that its neurons have four gate x up sign cases."""
    return family_spec(family).up_projection is not None


def up_projection_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The up projection of every layer of a gated MLP, in layer order (index = 0-based layer), beside the gates
    of :func:`preactivation_modules`; a ``ValueError`` for a family without a gate."""
    spec = family_spec(model)
    if spec.up_projection is None:
        raise ValueError(f"family {spec.model_type!r} is not a gated MLP: it has no up projection beside a gate")
    return [_resolve(block, spec.up_projection) for block in _layers(model, spec)]


def projection_weight(module: torch.nn.Module) -> torch.Tensor:
    """The projection's weight as [n_neurons, d_in]: row k is neuron k's w (a view, not a copy).

    ``nn.Linear`` stores [out, in] already; transformers' ``Conv1D`` (GPT-2) stores [in, out] and is transposed.
    """
    from transformers.pytorch_utils import Conv1D

    if isinstance(module, Conv1D):
        return module.weight.T
    if isinstance(module, torch.nn.Linear):
        return module.weight
    raise TypeError(f"projection_weight: expected nn.Linear or Conv1D, got {type(module).__name__}")


def nonlinearity(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The elementwise function mapping pre-activations to activations, from its transformers ``ACT2FN`` name
    (what :attr:`FamilySpec.nonlinearity` records)."""
    from transformers.activations import ACT2FN

    if name not in ACT2FN:
        raise ValueError(f"unknown nonlinearity {name!r}")
    return ACT2FN[name]
