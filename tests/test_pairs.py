"""Pair sample, pair ratios and NN / PN / PP composition (wneurons.core.pairs) against independent references."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import torch

from wneurons.core.pairs import (
    composition,
    draw_pair_positions,
    input_distances,
    pair_ratios,
    pair_signs,
    sign_classes,
    top_pairs,
)
from wneurons.core.stats import mapping_difficulty
from wneurons.lm.activations import collect_projection_rows
from wneurons.lm.registry import preactivation_modules


def _sample(seed=0, pairs=40, d_in=6, k=5):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2 * pairs, d_in))
    y = rng.normal(size=(2 * pairs, k)) - 0.3
    return x, y


def test_pair_ratio_is_the_md_definition_pair_by_pair():
    x, y = _sample()
    x[7] = x[6]  # pair 3 has identical inputs: undefined ratio, left out of the median and of MD
    r = pair_ratios(input_distances(x), y)
    keep = [p for p in range(40) if p != 3]
    d_x = {p: np.sqrt(((x[2 * p] - x[2 * p + 1]) ** 2).sum()) for p in keep}
    for n in range(y.shape[1]):
        d_y = {p: abs(y[2 * p, n] - y[2 * p + 1, n]) for p in keep}
        median = np.median([d_y[p] for p in keep])
        for p in keep:
            assert r[p, n] == pytest.approx((d_y[p] / median) / (d_x[p] / max(d_x.values())), rel=1e-12)
        assert np.isnan(r[3, n])
    np.testing.assert_allclose(np.nanmean(r, axis=0), mapping_difficulty(x, y).numpy(), rtol=1e-12)


def test_sign_classes_on_known_signs():
    # pairs (rows 0-1, 2-3, 4-5, 6-7): NN, PN, PP, PP (zero counts as positive) for neuron 0; flipped for 1
    y0 = np.array([-1.0, -2.0, -0.5, 3.0, 1.0, 2.0, 0.0, 0.5])
    y = np.stack([y0, -y0 - (y0 == 0)], axis=1)  # neuron 1: PP, PN, NN, NN
    np.testing.assert_array_equal(sign_classes(y), [[0, 2], [1, 1], [2, 0], [2, 0]])


def test_top_pairs_orders_by_ratio_ties_by_index_nan_last():
    r = np.array([[1.0], [np.nan], [3.0], [3.0], [2.0]])
    assert top_pairs(r, 4)[:, 0].tolist() == [2, 3, 4, 0]
    with pytest.raises(ValueError, match="top_k"):
        top_pairs(r, 6)


def test_pair_signs_counts_match_a_brute_force_ranking():
    x, y = _sample(seed=1, pairs=60, k=7)
    table = pair_signs(x, y, layer=3, top_k=[5, 20], chunk=3)  # chunks smaller than the layer
    d_x = np.linalg.norm(x[0::2] - x[1::2], axis=1)
    for n in range(y.shape[1]):
        d_y = np.abs(y[0::2, n] - y[1::2, n])
        r = d_y / np.median(d_y) * d_x.max() / d_x
        ranked = sorted(range(60), key=lambda p: -r[p])
        row = table.row(n, named=True)
        assert row["layer"] == 3 and row["neuron"] == n
        assert row["md_pairs"] == pytest.approx(r.mean())
        for k in (5, 20):
            labels = [
                "nn"
                if y[2 * p, n] < 0 and y[2 * p + 1, n] < 0
                else "pp"
                if y[2 * p, n] >= 0 and y[2 * p + 1, n] >= 0
                else "pn"
                for p in ranked[:k]
            ]
            for name in ("nn", "pn", "pp"):
                assert row[f"n_{name}_at_{k}"] == labels.count(name)
        both_neg = ((y[0::2, n] < 0) & (y[1::2, n] < 0)).mean()
        assert row["share_all_nn"] == pytest.approx(both_neg)
        assert row["frac_negative"] == pytest.approx((y[:, n] < 0).mean())


def test_pooled_composition_is_the_mean_of_per_neuron_shares():
    rng = np.random.default_rng(2)
    k = 10
    nn = rng.integers(0, k + 1, 12)
    pn = rng.integers(0, k + 1 - nn)
    signs = pl.DataFrame(
        {
            "layer": np.repeat([0, 1], 6),
            "neuron": np.tile(np.arange(6), 2),
            "n_nn_at_10": nn,
            "n_pn_at_10": pn,
            "n_pp_at_10": k - nn - pn,
            "share_all_nn": rng.random(12),
            "share_all_pn": rng.random(12),
            "share_all_pp": rng.random(12),
            "frac_negative": rng.random(12),
        }
    )
    selected = pl.DataFrame({"layer": [0, 0, 0, 1, 1], "neuron": [0, 2, 5, 1, 4]})
    out = composition(signs, selected, top_k=k, percent=5)
    for layer, neurons in ((0, [0, 2, 5]), (1, [1, 4])):
        idx = [6 * layer + n for n in neurons]
        row = out.filter(pl.col("layer") == layer).row(0, named=True)
        assert row["n_neurons"] == len(idx)
        shares = nn[idx] / k
        assert row["share_nn"] == pytest.approx(shares.mean())
        assert row["sem_nn"] == pytest.approx(shares.std(ddof=1) / np.sqrt(len(idx)))
        assert row["share_nn"] + row["share_pn"] + row["share_pp"] == pytest.approx(1.0)
        assert row["base_rate_nn"] == pytest.approx((signs["frac_negative"].to_numpy()[idx] ** 2).mean())


def test_pair_positions_are_distinct_seeded_and_checked():
    a, b = draw_pair_positions(1000, 200, seed=4), draw_pair_positions(1000, 200, seed=4)
    np.testing.assert_array_equal(a, b)
    assert len(set(a.tolist())) == 200 and a.min() >= 0 and a.max() < 1000
    with pytest.raises(ValueError, match="even number"):
        draw_pair_positions(1000, 201, seed=0)


@pytest.mark.parametrize(("family", "bos"), [("gpt_neox", None), ("llama", None), ("llama", 1)])
def test_projection_rows_equal_the_full_forward_at_those_positions(tiny_model, family, bos):
    model = tiny_model(family)
    modules = preactivation_modules(model)
    windows = torch.randint(3, 200, (5, 16), generator=torch.Generator().manual_seed(0))
    positions = np.array([70, 3, 33, 79, 16, 40])  # unsorted, several windows, window 3 skipped
    rows = collect_projection_rows(model, windows, positions, bos=bos)
    fed = windows if bos is None else torch.cat([torch.full((5, 1), bos), windows], dim=1)
    rows_of_fed = positions + (0 if bos is None else positions // 16 + 1)  # past each window's BOS
    full = {}
    hooks = [
        m.register_forward_hook(lambda mod, args, out, i=i: full.__setitem__(i, (args[0].clone(), out.clone())))
        for i, m in enumerate(modules)
    ]
    with torch.no_grad():
        model(input_ids=fed)
    for h in hooks:
        h.remove()
    for layer, (x, y) in enumerate(rows):
        fx, fy = (t.reshape(-1, t.shape[-1]).numpy() for t in full[layer])
        np.testing.assert_allclose(x, fx[rows_of_fed], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y, fy[rows_of_fed], rtol=1e-5, atol=1e-6)
    assert all(not m._forward_hooks for m in modules)  # hooks detached


def test_projection_rows_with_a_nan_name_the_layer_and_detach_every_hook(tiny_model):
    model = tiny_model("llama")
    modules = preactivation_modules(model)
    windows = torch.randint(3, 200, (2, 16), generator=torch.Generator().manual_seed(0))
    poison = modules[1].register_forward_pre_hook(lambda mod, args: (args[0] * float("nan"),))
    try:
        with pytest.raises(FloatingPointError, match="layer 1 projection rows contain NaN"):
            collect_projection_rows(model, windows, np.array([3, 20]))
    finally:
        poison.remove()
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in modules)
