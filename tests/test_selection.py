"""Neuron selectors and the perplexity-matched bisection."""

import math

import numpy as np
import polars as pl
import pytest

from wneurons.core.selection import (
    bottom_percent_indices,
    neurons_per_layer,
    perplexity_matched_fraction,
    select_neurons,
    top_percent_indices,
)


def stats_table(n_layers=3, n_neurons=200, seed=0):
    rng = np.random.default_rng(seed)
    return pl.DataFrame(
        {
            "layer": np.repeat(np.arange(n_layers), n_neurons),
            "neuron": np.tile(np.arange(n_neurons), n_layers),
            "wd": rng.gamma(2.0, 0.02, n_layers * n_neurons),
        }
    )


def test_counts():
    assert neurons_per_layer(1536, 1) == 15
    assert neurons_per_layer(8192, 0.5) == 41
    assert neurons_per_layer(10, 1) == 1  # at least one
    assert neurons_per_layer(10, 100) == 10
    for bad in (0, -1, 101):
        with pytest.raises(ValueError):
            neurons_per_layer(10, bad)


def test_authors_rule_on_hand_made_arrays():
    x = np.arange(10.0)
    # percentile(x, 75) = 6.75 (linear interpolation): 3 values above it; rounding 10 * 25% = 2.5 gives 2
    assert top_percent_indices(x, 25).tolist() == [7, 8, 9]
    assert top_percent_indices(x, 25, rule="round").tolist() == [8, 9]
    # percentile(x, 25) = 2.25: the mirror takes 0, 1, 2
    assert bottom_percent_indices(x, 25).tolist() == [0, 1, 2]
    assert bottom_percent_indices(x, 25, rule="round").tolist() == [0, 1]
    # percentile(x, 90) = 8.1: one value above it, as rounding takes
    assert top_percent_indices(x[::-1], 10).tolist() == [0]
    assert top_percent_indices(x, 100).tolist() == list(range(1, 10))  # x > min: the minimum is never taken


def test_ties_at_the_threshold():
    x = np.array([1.0, 1.0, 1.0, 1.0, 5.0])
    # percentile(x, 60) = 1 (both neighbours are 1): only the 5 lies above it; rounding takes 2, ties by index
    assert top_percent_indices(x, 40).tolist() == [4]
    assert top_percent_indices(x, 40, rule="round").tolist() == [0, 4]
    flat = np.full(4, 2.0)
    assert top_percent_indices(flat, 50).tolist() == []  # nothing lies above a constant
    assert bottom_percent_indices(flat, 50).tolist() == []
    assert top_percent_indices(flat, 50, rule="round").tolist() == [0, 1]


def test_nan_ranks_lowest_under_both_rules():
    x = np.array([np.nan, 3.0, 1.0, 2.0, np.nan])
    # NaN sorts below 1: sorted [nan, nan, 1, 2, 3]; percentile 60 lies between 1 and 2 (1.4), percentile 40
    # between a NaN and 1, so the bottom 40% is the two NaN
    for rule in ("authors", "round"):
        assert top_percent_indices(x, 40, rule=rule).tolist() == [1, 3]
        assert bottom_percent_indices(x, 40, rule=rule).tolist() == [0, 4]
    assert top_percent_indices(np.full(3, np.nan), 50).tolist() == []


def test_authors_count_for_distinct_values_is_not_rounding():
    # Linear interpolation puts percentile(x, 100 - p) between order statistics floor(h) and floor(h) + 1 with
    # h = (K - 1)(1 - p/100), so K - 1 - floor(h) values lie above it.
    rng = np.random.default_rng(0)
    for k, percent in [(1536, 1), (1536, 5), (1536, 0.5), (14336, 1), (64, 5)]:
        x = rng.permutation(k).astype(float)
        expected = k - 1 - int(np.floor((k - 1) * (1 - percent / 100)))
        assert len(top_percent_indices(x, percent)) == expected
    assert len(top_percent_indices(np.arange(1536.0), 1)) == 16 != neurons_per_layer(1536, 1) == 15


def test_bad_rule_and_shape():
    with pytest.raises(ValueError, match="count rule"):
        top_percent_indices(np.arange(5.0), 10, rule="floor")
    with pytest.raises(ValueError, match="1-D"):
        top_percent_indices(np.zeros((2, 2)), 10)
    with pytest.raises(ValueError, match="percent"):
        bottom_percent_indices(np.arange(5.0), 0)


def test_random_takes_the_wasserstein_count_of_each_layer():
    stats = stats_table(n_layers=2, n_neurons=50)
    ties = np.repeat([0.0, 1.0], [40, 10])  # layer 1: percentile 90 is 1.0, nothing above it
    stats = stats.with_columns(
        pl.when(pl.col("layer") == 1).then(pl.lit(ties[stats["neuron"].to_numpy()])).otherwise(pl.col("wd")).alias("wd")
    )
    for rule in ("authors", "round"):
        top = select_neurons(stats, "wasserstein", 10, [0, 1], rule=rule)
        rnd = select_neurons(stats, "random", 10, [0, 1], seed=1, rule=rule)
        assert {k: len(v) for k, v in rnd.items()} == {k: len(v) for k, v in top.items()}
    assert len(select_neurons(stats, "wasserstein", 10, [1])[1]) == 0


def test_wasserstein_picks_the_top_wd_and_lowest_the_bottom():
    stats = stats_table()
    top = select_neurons(stats, "wasserstein", 5, [0, 1, 2], rule="round")
    low = select_neurons(stats, "lowest", 5, [0, 1, 2], rule="round")
    for layer in range(3):
        wd = stats.filter(pl.col("layer") == layer)["wd"].to_numpy()
        cut_top, cut_low = np.percentile(wd, 95), np.percentile(wd, 5)
        assert set(select_neurons(stats, "wasserstein", 5, [layer])[layer].tolist()) == set(
            np.flatnonzero(wd > cut_top).tolist()
        )
        assert set(select_neurons(stats, "lowest", 5, [layer])[layer].tolist()) == set(
            np.flatnonzero(wd < cut_low).tolist()
        )
    for layer in range(3):
        wd = stats.filter(pl.col("layer") == layer)["wd"].to_numpy()
        k = neurons_per_layer(len(wd), 5)
        assert set(top[layer].tolist()) == set(np.argsort(wd)[-k:].tolist())
        assert set(low[layer].tolist()) == set(np.argsort(wd)[:k].tolist())
        assert wd[top[layer]].min() > wd[low[layer]].max()


def test_random_is_seeded_and_layer_independent():
    stats = stats_table()
    a = select_neurons(stats, "random", 10, [0, 1, 2], seed=3)
    b = select_neurons(stats, "random", 10, [0, 1, 2], seed=3)
    c = select_neurons(stats, "random", 10, [0, 1, 2], seed=4)
    d = select_neurons(stats, "random", 10, [2], seed=3)
    assert all(torch_equal(a[k], b[k]) for k in a)
    assert any(not torch_equal(a[k], c[k]) for k in a)
    assert torch_equal(a[2], d[2])  # a layer's draw does not depend on which other layers are selected


def torch_equal(x, y):
    return x.shape == y.shape and bool((x == y).all())


def test_dead_neurons_rank_lowest():
    stats = stats_table(n_layers=1, n_neurons=50).with_columns(
        pl.when(pl.col("neuron") == 7).then(None).otherwise(pl.col("wd")).alias("wd")
    )
    assert 7 in select_neurons(stats, "lowest", 2, [0])[0].tolist()
    assert 7 not in select_neurons(stats, "wasserstein", 10, [0])[0].tolist()


def test_bad_selector_and_missing_layer():
    stats = stats_table()
    with pytest.raises(ValueError, match="unknown selector"):
        select_neurons(stats, "best", 1, [0])
    with pytest.raises(ValueError, match="layer 9"):
        select_neurons(stats, "wasserstein", 1, [9])


def test_matched_bisection_finds_the_fraction():
    # perplexity rising smoothly with the clamped percent; the target is reached at m = 37.5
    def ppl(m):
        return 10.0 * (1 + m / 100) ** 2

    target = ppl(37.5)
    out = perplexity_matched_fraction(ppl, target, clean=ppl(0), tolerance=0.001, max_percent=95, max_steps=30)
    assert out["converged"] and out["reason"] == "within tolerance"
    assert abs(out["percent"] - 37.5) < 0.5
    assert out["trace"][0]["percent"] == 95
    # a 0.1% gap needs |m - 37.5| < 0.07 here (d log ppl / dm = 2 / (100 + m)): ~11 halvings of [0, 95] for
    # bisection; false position on log perplexity takes 5 evaluations
    assert len(out["trace"]) <= 6
    # without the clean perplexity the search measures it first (m = 0: nothing clamped)
    assert perplexity_matched_fraction(ppl, target, tolerance=0.001)["trace"][0]["percent"] == 0


def test_matched_converges_on_a_steep_step_like_curve():
    # a sharp rise near m = 80 (most of the damage from the last neurons): the midpoint fallback keeps it bracketed
    def ppl(m):
        return 10.0 + 500.0 / (1 + np.exp(-(m - 80) / 2))

    target = ppl(82.0)
    out = perplexity_matched_fraction(ppl, target, clean=ppl(0), tolerance=0.01, max_percent=95, max_steps=20)
    assert out["converged"]
    assert abs(out["percent"] - 82.0) < 0.5


def test_matched_reports_when_unreachable():
    out = perplexity_matched_fraction(
        lambda m: 10 + m / 100, 1000.0, clean=10.0, tolerance=0.01, max_percent=90, max_steps=5
    )
    assert not out["converged"]
    assert out["percent"] == 90
    assert len(out["trace"]) == 1
    assert "below the target" in out["reason"]


def test_matched_reports_running_out_of_steps():
    out = perplexity_matched_fraction(
        lambda m: 10.0 * (1 + m / 100) ** 8, 20.0, clean=10.0, tolerance=1e-6, max_percent=95, max_steps=3
    )
    assert not out["converged"] and out["reason"] == "3 evaluations"
    assert len(out["trace"]) == 3
    assert out["relative_gap"] == min(abs(t["perplexity"] / 20.0 - 1) for t in out["trace"])


def test_matched_nll_tolerance_keeps_searching_until_the_control_reaches_w():
    # A curve like the demo's SmolLM2 search (ppl 17.2 clean, 19.8 under W, ~1,250 at 95%): a 5% perplexity gap
    # stops with a control that has ~83% of W's NLL increase; nll_increase_tolerance 0.1 goes on to 90-110%.
    def ppl(m):
        return 17.22 * math.exp(0.0105 * m + 0.00035 * m * m)

    clean, target = 17.22, 19.79
    loose = perplexity_matched_fraction(ppl, target, clean=clean, tolerance=0.05, max_steps=8)
    assert loose["converged"] and "nll_increase_ratio" not in loose  # keys as before without the option
    assert math.log(loose["perplexity"] / clean) / math.log(target / clean) < 0.9
    tight = perplexity_matched_fraction(
        ppl, target, clean=clean, tolerance=0.05, nll_increase_tolerance=0.1, max_steps=8
    )
    assert tight["converged"] and abs(tight["nll_increase_ratio"] - 1) <= 0.1
    assert tight["nll_increase_tolerance"] == 0.1 and tight["unreachable"] is False
    # W lowering perplexity: nothing to match, never converged, and no share of an increase
    lower = perplexity_matched_fraction(ppl, 17.0, clean=clean, nll_increase_tolerance=0.1)
    assert not lower["converged"] and lower["nll_increase_ratio"] is None
