"""clamp_negative_preactivations: selected neurons clamped by sign, nothing else touched, hooks always removed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import INTERMEDIATE, N_LAYERS, TINY_FAMILIES, VOCAB, build_tiny_model
from test_registry import activation_modules

from wneurons.lm.ablation import MODES, clamp_negative_preactivations
from wneurons.lm.registry import family_spec, preactivation_modules


def _input_ids(seed: int = 0) -> torch.Tensor:
    return torch.randint(3, VOCAB, (2, 11), generator=torch.Generator().manual_seed(seed))


def _random_neurons(seed: int, per_layer: int = 7) -> dict[int, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {layer: torch.randperm(INTERMEDIATE, generator=generator)[:per_layer] for layer in range(N_LAYERS)}


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(input_ids=ids).logits


def _hook_count(model: torch.nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _ablated_run(model: torch.nn.Module, neurons: dict, mode: str) -> tuple[list, list]:
    """Per layer, during one ablated forward: the projection's unhooked output for the input it actually got
    (``module.forward`` bypasses hooks) and what the nonlinearity received."""
    projections, activations = preactivation_modules(model), activation_modules(model)
    raw: list = [None] * N_LAYERS
    received: list = [None] * N_LAYERS
    handles = []
    for layer, (proj, act) in enumerate(zip(projections, activations, strict=True)):
        handles.append(proj.register_forward_pre_hook(lambda m, i, k=layer: raw.__setitem__(k, m.forward(*i))))
        handles.append(act.register_forward_pre_hook(lambda m, i, k=layer: received.__setitem__(k, i[0].clone())))
    try:
        with clamp_negative_preactivations(model, neurons, mode=mode):
            _logits(model, _input_ids())
    finally:
        for handle in handles:
            handle.remove()
    return raw, received


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_only_selected_neurons_are_clamped_by_sign(family, mode):
    model = build_tiny_model(family)
    neurons = _random_neurons(seed=3)
    neurons[1] = neurons[1][:0]  # one layer with an empty set: untouched
    raw, received = _ablated_run(model, neurons, mode)
    for layer in range(N_LAYERS):
        selected = torch.zeros(INTERMEDIATE, dtype=torch.bool)
        selected[neurons[layer]] = True
        before, after = raw[layer][..., selected], received[layer][..., selected]
        expected = {"negative": before.clamp(min=0), "positive": before.clamp(max=0), "both": torch.zeros_like(before)}
        torch.testing.assert_close(after, expected[mode], rtol=0, atol=0, msg=f"layer {layer}")
        torch.testing.assert_close(received[layer][..., ~selected], raw[layer][..., ~selected], rtol=0, atol=0)
        if layer != 1:
            # The test is not vacuous: the clamped sign occurs among the selected pre-activations.
            assert bool((before < 0).any()) and bool((before > 0).any())


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_negative_mode_leaves_no_negative_selected_preactivation_and_changes_logits(family):
    model = build_tiny_model(family)
    neurons = _random_neurons(seed=5)
    clean = _logits(model, _input_ids())
    _, received = _ablated_run(model, neurons, "negative")
    for layer in range(N_LAYERS):
        assert received[layer][..., neurons[layer]].min() >= 0
    with clamp_negative_preactivations(model, neurons):
        ablated = _logits(model, _input_ids())
    # ReLU discards negative pre-activations anyway (OPT, the paper's contrast case): clamping them is a no-op.
    # Every other nonlinearity passes some negative signal, which the clamp removes.
    assert torch.equal(ablated, clean) == (family_spec(model).nonlinearity == "relu")
    # After the block the model is clean again.
    assert torch.equal(_logits(model, _input_ids()), clean)


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_empty_selection_changes_nothing(family):
    model = build_tiny_model(family)
    clean = _logits(model, _input_ids())
    empty_sets = [{}, dict.fromkeys(range(N_LAYERS), []), {0: torch.empty(0, dtype=torch.long)}]
    for neurons in empty_sets:
        for mode in MODES:
            with clamp_negative_preactivations(model, neurons, mode=mode):
                assert torch.equal(_logits(model, _input_ids()), clean)


def test_list_numpy_and_duplicate_indices_act_like_the_tensor():
    model = build_tiny_model("llama")
    neurons = _random_neurons(seed=7)
    with clamp_negative_preactivations(model, neurons):
        reference = _logits(model, _input_ids())
    variants = [
        {layer: ids.tolist() for layer, ids in neurons.items()},
        {np.int64(layer): ids.numpy() for layer, ids in neurons.items()},
        {layer: torch.cat([ids, ids.flip(0)]) for layer, ids in neurons.items()},
    ]
    for variant in variants:
        with clamp_negative_preactivations(model, variant):
            assert torch.equal(_logits(model, _input_ids()), reference)


def test_negative_and_positive_clamps_add_up_to_the_clean_preactivation():
    # Property: with every neuron of layer 0 selected, max(a, 0) + min(a, 0) = a for the whole projection output.
    model = build_tiny_model("gpt_neox")
    everything = {0: torch.arange(INTERMEDIATE)}
    _, negative = _ablated_run(model, everything, "negative")
    _, positive = _ablated_run(model, everything, "positive")
    raw, _ = _ablated_run(model, {}, "negative")
    torch.testing.assert_close(negative[0] + positive[0], raw[0], rtol=0, atol=0)


def test_with_autograd_the_result_is_the_same_and_differentiable():
    model = build_tiny_model("gpt2")
    neurons = _random_neurons(seed=11)
    with clamp_negative_preactivations(model, neurons):
        reference = _logits(model, _input_ids())
        model.requires_grad_(True)
        logits = model(input_ids=_input_ids()).logits
        logits.sum().backward()
    torch.testing.assert_close(logits.detach(), reference)
    assert all(p.grad is not None for p in preactivation_modules(model)[0].parameters())


def test_hooks_are_removed_when_the_block_raises():
    model = build_tiny_model("opt")
    clean = _logits(model, _input_ids())
    baseline = _hook_count(model)
    with pytest.raises(RuntimeError, match="boom"):
        with clamp_negative_preactivations(model, _random_neurons(seed=1)):
            assert _hook_count(model) == baseline + N_LAYERS
            raise RuntimeError("boom")
    assert _hook_count(model) == baseline
    assert torch.equal(_logits(model, _input_ids()), clean)


@pytest.mark.parametrize(
    ("neurons", "mode", "error", "pattern"),
    [
        ({0: [1]}, "negatives", ValueError, "'negatives'.*negative, positive, both"),
        ({N_LAYERS: [1]}, "negative", IndexError, f"layer {N_LAYERS} out of range"),
        ({-1: [1]}, "negative", IndexError, "layer -1 out of range"),
        ({1: [0, INTERMEDIATE]}, "negative", IndexError, f"layer 1 neuron {INTERMEDIATE} out of range"),
        ({2: [-1, 3]}, "negative", IndexError, "layer 2 neuron -1 out of range"),
        ({0: torch.tensor([1.0, 2.0])}, "negative", TypeError, "layer 0 .*integer"),
        ({0: torch.tensor([[1, 2]])}, "negative", TypeError, "layer 0 .*1-D"),
        ({"0": [1]}, "negative", TypeError, "layer key '0'"),
    ],
)
def test_bad_input_is_rejected_before_any_hook(neurons, mode, error, pattern):
    model = build_tiny_model("qwen3")
    baseline = _hook_count(model)
    with pytest.raises(error, match=pattern):
        with clamp_negative_preactivations(model, {0: [2], **neurons}, mode=mode):
            pass
    assert _hook_count(model) == baseline


def test_the_one_hook_owner_detaches_on_exceptions_and_stops_forwards():
    from wneurons.lm.hooks import StopForward, forward_until_stopped, preactivation_hooks

    model = build_tiny_model("llama")
    baseline, seen = _hook_count(model), []

    def record(layer):
        def hook(_module, _inputs, output):
            seen.append(layer)
            if layer == 1:
                raise StopForward

        return hook

    with preactivation_hooks(model, {0: record(0), 1: [record(1)], 2: record(2)}) as modules:
        assert list(modules) == preactivation_modules(model) and _hook_count(model) == baseline + N_LAYERS
        forward_until_stopped(model, input_ids=_input_ids())
    assert seen == [0, 1] and _hook_count(model) == baseline  # layer 2 never ran
    with pytest.raises(RuntimeError, match="boom"), preactivation_hooks(model, {0: record(0)}):
        raise RuntimeError("boom")
    assert _hook_count(model) == baseline
    # a failure while attaching (here: no module 7) detaches the hooks already attached
    with pytest.raises(IndexError), preactivation_hooks(model, {0: record(0), 7: record(7)}):
        pass
    assert _hook_count(model) == baseline
