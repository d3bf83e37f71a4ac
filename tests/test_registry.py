"""The registry finds, for every family, the module whose output the nonlinearity receives."""

from __future__ import annotations

import operator
from pathlib import Path

import pytest
import torch
from conftest import INTERMEDIATE, N_LAYERS, TINY_FAMILIES, VOCAB, build_tiny_model

from wneurons.lm.registry import (
    FAMILIES,
    UnsupportedFamilyError,
    family_spec,
    nonlinearity,
    preactivation_modules,
    projection_weight,
)


def _input_ids(seed: int = 0, shape: tuple[int, int] = (2, 9)) -> torch.Tensor:
    return torch.randint(3, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def activation_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The module applying the nonlinearity in every layer (``FamilySpec.activation``), resolved here rather than
    by the package, which never hooks it: the tests' independent check that the hook point feeds it."""
    spec = family_spec(model)
    for path in spec.layers_paths:
        try:
            blocks = operator.attrgetter(path)(model)
        except AttributeError:
            continue
        return [operator.attrgetter(spec.activation)(block) for block in blocks]
    raise AttributeError(f"{type(model).__name__}: none of {spec.layers_paths}")


def _capture_projection_and_activation(model: torch.nn.Module) -> tuple[list, list, list]:
    """One forward; per layer: the projection's output, the activation module's input and its output."""
    projections, activations = preactivation_modules(model), activation_modules(model)
    # A shared activation instance would record every layer into one list: the hook point must be per layer.
    assert len({id(m) for m in activations}) == len(activations)
    proj_out: list = [None] * len(projections)
    act_in: list = [None] * len(projections)
    act_out: list = [None] * len(projections)
    handles = []
    for layer, (proj, act) in enumerate(zip(projections, activations, strict=True)):
        handles.append(proj.register_forward_hook(lambda m, i, o, k=layer: proj_out.__setitem__(k, o.clone())))
        handles.append(act.register_forward_pre_hook(lambda m, i, k=layer: act_in.__setitem__(k, i[0].clone())))
        handles.append(act.register_forward_hook(lambda m, i, o, k=layer: act_out.__setitem__(k, o.clone())))
    try:
        with torch.inference_mode():
            model(input_ids=_input_ids())
    finally:
        for handle in handles:
            handle.remove()
    return proj_out, act_in, act_out


def _build_gemma3_multimodal() -> torch.nn.Module:
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    text = {
        "hidden_size": 32,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": N_LAYERS,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "vocab_size": VOCAB,
    }
    vision = {
        "hidden_size": 16,
        "intermediate_size": 40,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "image_size": 28,
        "patch_size": 14,
    }
    config = Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, image_token_index=VOCAB - 1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Gemma3ForConditionalGeneration(config).eval()


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_one_projection_per_layer_with_intermediate_width(family):
    model = build_tiny_model(family)
    modules = preactivation_modules(model)
    assert len(modules) == N_LAYERS
    assert all(
        projection_weight(m).shape == (INTERMEDIATE, model.config.get_text_config().hidden_size) for m in modules
    )


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_projection_output_is_what_the_nonlinearity_receives(family):
    model = build_tiny_model(family)
    proj_out, act_in, act_out = _capture_projection_and_activation(model)
    spec = family_spec(model)
    for layer in range(N_LAYERS):
        assert proj_out[layer].shape[-1] == INTERMEDIATE
        torch.testing.assert_close(act_in[layer], proj_out[layer], rtol=0, atol=0, msg=f"layer {layer}")
        # nonlinearity(name) reproduces the model's own activation (Figure 1's post-nonlinearity values).
        act = nonlinearity(spec.nonlinearity)
        torch.testing.assert_close(act(proj_out[layer]), act_out[layer], msg=f"layer {layer}")


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_projection_weight_rows_are_neurons(family):
    # y_k = w_k . x + b_k for the row w_k that projection_weight returns (Conv1D is transposed back).
    module = preactivation_modules(build_tiny_model(family))[1]
    weight = projection_weight(module)
    x = torch.randn(5, weight.shape[1], generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        torch.testing.assert_close(module(x), torch.nn.functional.linear(x, weight, module.bias))


def test_gemma3_multimodal_wrapper_uses_the_language_model_layers():
    model = _build_gemma3_multimodal()
    assert family_spec(model).model_type == "gemma3"
    modules = preactivation_modules(model)
    text_blocks = model.model.language_model.layers
    assert [id(m) for m in modules] == [id(block.mlp.gate_proj) for block in text_blocks]
    assert family_spec(model).nonlinearity == model.config.text_config.hidden_activation


def test_nonlinearity_follows_the_config_not_the_family_default():
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(
        "llama",
        hidden_size=32,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=2,
        num_attention_heads=4,
        vocab_size=VOCAB,
        hidden_act="relu",
    )
    assert FAMILIES["llama"].nonlinearity == "silu"
    assert family_spec(config).nonlinearity == "relu"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config).eval()
    proj_out, _, act_out = _capture_projection_and_activation(model)
    torch.testing.assert_close(nonlinearity(family_spec(model).nonlinearity)(proj_out[0]), act_out[0])


def test_every_family_entry_is_keyed_by_its_model_type():
    assert all(spec.model_type == key for key, spec in FAMILIES.items())
    assert {"gpt_neox", "llama", "mistral", "qwen2", "qwen3", "gemma3", "opt", "gpt2"} <= set(FAMILIES)


def test_unsupported_family_error_lists_the_supported_ones():
    from transformers import AutoConfig

    for query in ("bert", AutoConfig.for_model("bert")):
        with pytest.raises(UnsupportedFamilyError) as info:
            family_spec(query)
        message = str(info.value)
        assert "'bert'" in message
        assert all(name in message for name in FAMILIES)


def test_object_without_config_is_rejected():
    with pytest.raises(UnsupportedFamilyError, match="supported families"):
        preactivation_modules(torch.nn.Linear(2, 2))


def test_projection_weight_rejects_other_modules():
    with pytest.raises(TypeError, match="Embedding"):
        projection_weight(torch.nn.Embedding(3, 2))


def test_configured_family_is_checked_against_the_model_type(tiny_model):
    from wneurons.lm.registry import check_family

    gemma = tiny_model("gemma3")  # text-only: model_type gemma3_text
    assert check_family(None, gemma) == "gemma3_text"
    assert check_family("gemma3", gemma) == check_family("gemma3_text", gemma) == "gemma3_text"
    with pytest.raises(ValueError, match="models.x.family is 'llama' but the loaded model's family .*'gemma3_text'"):
        check_family("llama", gemma, "models.x.family")
    with pytest.raises(ValueError, match="'mistral' but .* 'llama'"):
        check_family("mistral", tiny_model("llama"))


def test_window_bos_default_per_family_and_the_config_overrides_it():
    from wneurons.lm.registry import resolve_window_bos

    assert resolve_window_bos(None, FAMILIES["gemma3_text"], False)[0] is True
    assert resolve_window_bos(None, FAMILIES["gpt_neox"], True)[0] is False
    for family in ("llama", "mistral", "opt"):  # families with models trained both ways follow their tokenizer
        assert resolve_window_bos(None, FAMILIES[family], True)[0] is True
        assert resolve_window_bos(None, FAMILIES[family], False)[0] is False
    assert resolve_window_bos(False, FAMILIES["gemma3"], True) == (False, "set in the config")
    for spec in FAMILIES.values():
        assert spec.window_bos_reason, spec.model_type


def test_schema_family_enum_is_the_registry():
    import yaml

    schema = yaml.safe_load((Path(__file__).resolve().parents[1] / "workflow/schemas/config.schema.yaml").read_text())
    family = schema["properties"]["models"]["additionalProperties"]["properties"]["family"]
    assert set(family["enum"]) == {None, *FAMILIES}


def test_context_length_reads_the_text_config(tiny_model):
    from wneurons.lm.registry import context_length

    assert context_length(tiny_model("llama")) == 128 and context_length(tiny_model("gpt2")) == 128


def test_an_unknown_nonlinearity_is_named():
    with pytest.raises(ValueError, match="unknown nonlinearity 'wiggle'"):
        nonlinearity("wiggle")


def test_gemma3_270m_as_its_gguf_converts_resolves_to_gate_proj_gelu_tanh_and_a_bos():
    # The config transformers builds from gemma-3-270m-q4_k_m.gguf (config/replication-gemma3.yaml): the text-only
    # model_type, gelu_pytorch_tanh under `hidden_activation`, the 262k vocabulary. No weights: the config decides.
    from transformers import Gemma3TextConfig

    config = Gemma3TextConfig(
        vocab_size=262_144, hidden_size=640, intermediate_size=2048, num_hidden_layers=18, num_attention_heads=4,
        num_key_value_heads=1, head_dim=256, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=32_768,
    )  # fmt: skip
    spec = family_spec(config)
    assert (spec.model_type, spec.projection, spec.window_bos) == ("gemma3_text", "mlp.gate_proj", True)
    assert spec.nonlinearity == "gelu_pytorch_tanh"
    x = torch.linspace(-4, 4, 17)
    torch.testing.assert_close(nonlinearity(spec.nonlinearity)(x), torch.nn.functional.gelu(x, approximate="tanh"))
