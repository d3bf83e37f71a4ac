"""The single-neuron case study, the layerwise error vs NN share, and the content of Figures 3d, 5, 6a and 7."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from wneurons.core.case_study import FUNCTION_WORDS, all_pair_distances, pairing_robustness, top_pair_table
from wneurons.core.layerwise import correlations, normalize_minmax, paired_error
from wneurons.core.pairs import input_distances, pair_ratios


def _neuron(seed=0, pairs=50):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2 * pairs, 8))
    y = rng.normal(size=2 * pairs) - 0.5
    tokens = pl.DataFrame(
        {
            "position": np.arange(2 * pairs) * 3,
            "token": [f"t{i}" for i in range(2 * pairs)],
            "context": [f"c{i}" for i in range(2 * pairs)],
            "upos": rng.choice(["DET", "NOUN", "ADP", "VERB"], 2 * pairs),
            "dep": ["dep"] * (2 * pairs),
        }
    )
    return x, y, tokens


def test_top_pair_table_lists_the_largest_ratios_with_both_tokens():
    x, y, tokens = _neuron()
    top = top_pair_table(x, y, tokens, k=10)
    r = pair_ratios(input_distances(x), y[:, None])[:, 0]
    assert top["r"].to_list() == pytest.approx(sorted(r, reverse=True)[:10])
    for row in top.iter_rows(named=True):
        p = row["pair"]
        assert row["r"] == pytest.approx(r[p])
        assert (row["y_i"], row["y_j"]) == (y[2 * p], y[2 * p + 1])
        assert (row["token_i"], row["upos_j"]) == (f"t{2 * p}", tokens["upos"][2 * p + 1])
        expect = "nn" if max(y[2 * p], y[2 * p + 1]) < 0 else "pp" if min(y[2 * p], y[2 * p + 1]) >= 0 else "pn"
        assert row["sign"] == expect
        assert row["dx_norm"] * row["r"] == pytest.approx(row["dy_norm"])  # r = (d_y / med) / (d_x / max)
    every = all_pair_distances(x, y)
    assert every.height == 50 and every["dx_norm"].max() == pytest.approx(1.0)
    np.testing.assert_allclose(every["r"].to_numpy(), r)


def test_pairing_robustness_counts_nn_and_function_words_per_seed():
    x, y, tokens = _neuron(seed=1)
    upos = tokens["upos"].to_numpy()
    out = pairing_robustness(x, y, upos, seeds=[3, 4], k=5)
    for row in out.iter_rows(named=True):
        order = np.random.default_rng(row["seed"]).permutation(100)
        top = top_pair_table(x[order], y[order], tokens[order], k=5)
        assert row["n_nn"] == (top["sign"] == "nn").sum()
        tags = np.concatenate([top["upos_i"].to_numpy(), top["upos_j"].to_numpy()])
        assert row["function_word_share"] == pytest.approx(np.isin(tags, FUNCTION_WORDS).mean())


def test_paired_error_and_its_sem():
    clean = pl.DataFrame({"item": [0, 1, 2, 3], "correct": [True, True, False, True]})
    ablated = pl.DataFrame({"item": [3, 2, 1, 0], "correct": [False, False, True, False]})
    err, sem, n = paired_error(clean, ablated)
    diff = np.array([1, 0, 0, 1])
    assert (err, n) == (0.5, 4)
    assert sem == pytest.approx(diff.std(ddof=1) / 2)
    with pytest.raises(ValueError, match="differ"):
        paired_error(clean, ablated.head(3))


def test_correlations_against_scipy_and_minmax():
    from scipy import stats

    rng = np.random.default_rng(0)
    table = pl.DataFrame(
        {
            "share_nn": rng.random(8),
            "share_pn": rng.random(8),
            "share_pp": np.zeros(8),  # constant: no correlation defined
        }
    ).with_columns(err=2 * pl.col("share_nn") + 0.01)
    out = correlations(table, ["err"], n_boot=200, seed=0)
    nn = out.filter(pl.col("share") == "nn").row(0, named=True)
    assert nn["pearson_r"] == pytest.approx(1.0) and nn["r_ci_lo"] == pytest.approx(1.0)
    pn = out.filter(pl.col("share") == "pn").row(0, named=True)
    ref = stats.spearmanr(table["share_pn"], table["err"])
    assert pn["spearman_rho"] == pytest.approx(ref.statistic) and pn["spearman_p"] == pytest.approx(ref.pvalue)
    assert out.filter(pl.col("share") == "pp")["pearson_r"][0] is None
    np.testing.assert_allclose(normalize_minmax(np.array([2.0, 4.0, 3.0])), [0, 1, 0.5])
