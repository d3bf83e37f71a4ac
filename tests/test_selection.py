"""Neuron selectors and the perplexity-matched bisection."""

import numpy as np
import polars as pl
import pytest

from wneurons.selection import neurons_per_layer, perplexity_matched_fraction, select_neurons


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


def test_wasserstein_picks_the_top_wd_and_lowest_the_bottom():
    stats = stats_table()
    top = select_neurons(stats, "wasserstein", 5, [0, 1, 2])
    low = select_neurons(stats, "lowest", 5, [0, 1, 2])
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
    out = perplexity_matched_fraction(ppl, target, tolerance=0.001, max_percent=95, max_steps=30)
    assert out["converged"]
    assert abs(out["percent"] - 37.5) < 0.5
    assert out["trace"][0]["percent"] == 95
    assert len(out["trace"]) <= 30


def test_matched_reports_when_unreachable():
    out = perplexity_matched_fraction(lambda m: 10 + m / 100, 1000.0, tolerance=0.01, max_percent=90, max_steps=5)
    assert not out["converged"]
    assert out["percent"] == 90
    assert len(out["trace"]) == 1
