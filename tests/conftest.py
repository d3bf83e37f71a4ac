"""Shared fixtures: tiny random causal LMs of every supported family, built from a config (no hub, < 1 s each).

Use the ``tiny_model`` fixture (a factory: ``tiny_model("llama")``) or, for parametrisation,
``from conftest import TINY_FAMILIES, build_tiny_model``. Each call builds a fresh model (no cache shared
between tests); weights come from a fixed seed, so two calls with the same arguments give identical models.
"""

from __future__ import annotations

import functools
import shutil
import subprocess

import pytest
import torch

# Sizes shared by every family: small, but with distinct widths so a wrong dimension cannot pass by accident.
N_LAYERS = 3
HIDDEN = 32
INTERMEDIATE = 96
VOCAB = 200
N_HEADS = 4

_ATTENTION = {"num_attention_heads": N_HEADS, "max_position_embeddings": 128}
_GQA = {**_ATTENTION, "num_key_value_heads": 2, "head_dim": HIDDEN // N_HEADS}
_COMMON = {"hidden_size": HIDDEN, "num_hidden_layers": N_LAYERS, "vocab_size": VOCAB}
# Special token ids inside the tiny vocabulary (the defaults of some configs, e.g. GPT-2's 50256, are not).
_TOKENS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}

# Family -> (transformers model_type, config keyword arguments).
_CONFIGS: dict[str, tuple[str, dict]] = {
    "gpt_neox": ("gpt_neox", {**_COMMON, **_ATTENTION, **_TOKENS, "intermediate_size": INTERMEDIATE}),
    "llama": ("llama", {**_COMMON, **_GQA, **_TOKENS, "intermediate_size": INTERMEDIATE}),
    "mistral": ("mistral", {**_COMMON, **_GQA, **_TOKENS, "intermediate_size": INTERMEDIATE}),
    "qwen2": ("qwen2", {**_COMMON, **_GQA, **_TOKENS, "intermediate_size": INTERMEDIATE}),
    "qwen3": ("qwen3", {**_COMMON, **_GQA, **_TOKENS, "intermediate_size": INTERMEDIATE}),
    # The text-only Gemma3ForCausalLM; the multimodal wrapper is built in tests/test_registry.py.
    "gemma3": ("gemma3_text", {**_COMMON, **_GQA, **_TOKENS, "intermediate_size": INTERMEDIATE}),
    "opt": (
        "opt",
        {**_COMMON, **_ATTENTION, **_TOKENS, "ffn_dim": INTERMEDIATE, "word_embed_proj_dim": HIDDEN},
    ),
    "gpt2": (
        "gpt2",
        {
            "n_embd": HIDDEN,
            "n_layer": N_LAYERS,
            "n_head": N_HEADS,
            "n_inner": INTERMEDIATE,
            "n_positions": 128,
            "vocab_size": VOCAB,
            **_TOKENS,
        },
    ),
}

TINY_FAMILIES: list[str] = list(_CONFIGS)


def build_tiny_model(family: str, seed: int = 0) -> torch.nn.Module:
    """A fresh tiny random causal LM of ``family`` in eval mode, float32, on CPU, weights from ``seed``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if family not in _CONFIGS:
        raise KeyError(f"no tiny model for family {family!r}; have {', '.join(TINY_FAMILIES)}")
    model_type, kwargs = _CONFIGS[family]
    config = AutoConfig.for_model(model_type, **kwargs)
    # fork_rng keeps the global generator untouched for the caller; the seed makes the weights reproducible.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.eval()


@pytest.fixture
def tiny_model():
    """Factory fixture: ``tiny_model(family, seed=0)`` -> a fresh tiny model (see :func:`build_tiny_model`)."""
    return build_tiny_model


@pytest.fixture(autouse=True, scope="session")
def stand_in_gpus_run_on_the_cpu():
    """The localhost SLURM cluster's GPUs are stand-ins (/dev/null: .ci/slurm/up.sh), so a workflow run through it
    gives its GPU jobs CUDA_VISIBLE_DEVICES without CUDA; they run on the CPU on purpose (sbatch --export=ALL carries
    this into the allocations). Outside SLURM no job is given a GPU and the setting changes nothing; the device tests
    (test_runtime.py) pass their own environments. Session-scoped, so that module-scoped runs (test_hub_workflow's)
    have it too. (Here and not in tests/workflow/conftest.py: a second conftest module would shadow this one for
    the tests that import helpers from it.)"""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WNEURONS_DEVICE", "cpu")
        yield


@functools.cache
def cluster_up() -> bool:
    """Whether a SLURM controller answers ``squeue`` here: the localhost cluster of `.ci/slurm/up.sh`."""
    if shutil.which("squeue") is None:
        return False
    try:
        return subprocess.run(["squeue", "-h"], capture_output=True, timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cluster`` need the localhost SLURM cluster; without one they are skipped, saying how to run
    them (`make test` runs everything else; `make test-cluster` runs only these)."""
    cluster_items = [item for item in items if item.get_closest_marker("cluster")]
    if cluster_items and not cluster_up():
        skip = pytest.mark.skip(reason="no SLURM cluster up: bash .ci/slurm/up.sh, then make test-cluster")
        for item in cluster_items:
            item.add_marker(skip)
