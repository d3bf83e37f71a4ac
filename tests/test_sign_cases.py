"""The gate x up sign cases (core.sign_cases, lm.gate_up): the batched reduction against a direct computation on
random arrays, and on tiny random models of the gated families against the full gate and up outputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import TINY_FAMILIES, build_tiny_model

from wneurons.core.sign_cases import CASES, SignCaseAccumulator
from wneurons.experiment.targets import GATED_FAMILIES
from wneurons.lm import registry
from wneurons.lm.gate_up import collect_sign_cases


def direct(gate: np.ndarray, up: np.ndarray, product: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counts, sums of |product| [neurons, 4] and each case's position of the largest |product| (-1: none),
    one neuron and one case at a time."""
    n = gate.shape[1]
    counts, abs_sums, best = np.zeros((n, 4), int), np.zeros((n, 4)), np.full((n, 4), -1)
    for j in range(n):
        for c, (g_neg, u_neg) in enumerate([(False, False), (False, True), (True, False), (True, True)]):
            mask = ((gate[:, j] < 0) == g_neg) & ((up[:, j] < 0) == u_neg)
            counts[j, c] = mask.sum()
            abs_sums[j, c] = np.abs(product[mask, j]).sum()
            if mask.any():
                best[j, c] = np.flatnonzero(mask)[np.argmax(np.abs(product[mask, j]))]
    return counts, abs_sums, best


def test_batched_counts_sums_and_top_positions_are_the_direct_ones():
    rng = np.random.default_rng(0)
    gate, up = rng.normal(size=(300, 5)), rng.normal(size=(300, 5))
    gate[:, 4] = np.abs(gate[:, 4])  # a neuron whose gate is never negative: its gate- cases are empty
    product = gate / (1 + np.exp(-gate)) * up
    acc = SignCaseAccumulator(5, k=3)
    for lo, hi in ((0, 7), (7, 200), (200, 300)):  # uneven batches: the top-k merge across them
        acc.update(*(torch.from_numpy(a[lo:hi]).float() for a in (gate, up, product)), torch.arange(lo, hi))
    table = acc.table(2, [10, 11, 12, 13, 14]).sort("neuron", "case")
    counts, abs_sums, best = direct(gate, up, product)
    assert table["case"].to_list()[:4] == list(CASES)
    assert table["count"].to_numpy().reshape(5, 4).tolist() == counts.tolist()
    assert table["count"].sum() == 300 * 5 and table["fraction"].sum() == pytest.approx(5)
    got_abs = table["mean_abs_product"].fill_null(0).to_numpy().reshape(5, 4) * counts
    np.testing.assert_allclose(got_abs, abs_sums, rtol=1e-5)
    assert table["abs_share"].to_numpy().reshape(5, 4).sum(axis=1) == pytest.approx(np.ones(5))
    tops = table["top_positions"].to_list()
    assert [t[0] if t else -1 for t in tops] == best.reshape(-1).tolist()
    assert [len(t) for t in tops[-4:]] == [3, 3, 0, 0]  # no token, no top position
    assert table.filter(neuron=14, gate_sign="-")["mean_abs_product"].null_count() == 2


def test_gated_families_are_the_registrys():
    assert {f for f in registry.FAMILIES if registry.is_gated(f)} == GATED_FAMILIES


@pytest.mark.parametrize("family", [f for f in TINY_FAMILIES if registry.is_gated(f)])
def test_model_sign_cases_are_those_of_the_full_gate_and_up_outputs(family):
    model = build_tiny_model(family)
    windows = torch.randint(3, 200, (3, 16), generator=torch.Generator().manual_seed(1))
    chosen = {0: np.array([4, 17, 90]), 2: np.array([0, 55])}
    table = collect_sign_cases(model, windows, chosen, k=2, bos=1, batch_size=2)
    # The direct computation: every neuron's gate and up, from hooks on the whole projections, BOS dropped.
    outputs = {}
    gates, ups = registry.preactivation_modules(model), registry.up_projection_modules(model)
    handles = [m.register_forward_hook(lambda m, a, o, key=(i, k): outputs.__setitem__(key, o.detach()))
               for k, mods in (("gate", gates), ("up", ups)) for i, m in enumerate(mods)]  # fmt: skip
    with torch.inference_mode():
        model(input_ids=torch.cat([torch.ones(3, 1, dtype=torch.long), windows], dim=1))
    for h in handles:
        h.remove()
    act = registry.nonlinearity(registry.family_spec(model).nonlinearity)
    for layer, neurons in chosen.items():
        gate = outputs[layer, "gate"][:, 1:].reshape(48, -1)[:, neurons]
        up = outputs[layer, "up"][:, 1:].reshape(48, -1)[:, neurons]
        counts, abs_sums, best = direct(gate.numpy(), up.numpy(), (act(gate) * up).numpy())
        got = table.filter(layer=layer).sort("neuron", "case")
        assert got["neuron"].unique().sort().to_list() == sorted(neurons.tolist())
        assert got["count"].to_numpy().reshape(-1, 4).tolist() == counts.tolist()
        mean_abs = got["mean_abs_product"].fill_null(0).to_numpy().reshape(-1, 4)
        np.testing.assert_allclose(mean_abs * counts, abs_sums, rtol=1e-4, atol=1e-6)
        assert [t[0] if t else -1 for t in got["top_positions"].to_list()] == best.reshape(-1).tolist()


def test_a_family_without_a_gate_is_refused():
    model = build_tiny_model("gpt_neox")
    with pytest.raises(ValueError, match="not a gated MLP"):
        collect_sign_cases(model, torch.ones(1, 4, dtype=torch.long), {0: np.array([1])})


def test_the_explorers_gated_checkpoint_computes_its_sign_cases_in_its_allocation():
    import yaml
    from test_slurm_executor import config_of

    from wneurons.experiment.allocations import Planner, Site, checkpoint_jobs
    from wneurons.experiment.targets import sign_cases_at

    config = config_of("demo.yaml")  # an explorer of SmolLM2 (llama); neox-mini (gpt_neox) has no gate
    rules = [rule for rule, _ in checkpoint_jobs(config, "smollm2-135m", "main")]
    assert rules[:3] == ["collect_activations", "neuron_stats", "sign_cases"]
    assert "sign_cases" not in [rule for rule, _ in checkpoint_jobs(config, "neox-mini", "step320")]
    wildcards = {"model": "smollm2-135m", "revision": "main"}
    planner = Planner(config, Site())
    assert planner.group("sign_cases", wildcards) == planner.group("collect_activations", wildcards)
    unnamed = yaml.safe_load(yaml.safe_dump(config))
    unnamed["models"]["neox-mini"]["family"] = None  # unknown until its job reads the neuron table
    unnamed["report"]["explorer"]["models"] = ["smollm2-135m", "neox-mini"]
    assert sign_cases_at(unnamed, "neox-mini", "step320") and not sign_cases_at(config, "neox-mini", "step320")
