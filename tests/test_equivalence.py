"""Decisive verdicts (issue 29): exact paired intervals, Monte Carlo error stated, and equivalence by two one-sided
tests, in core.uncertainty and in the claims that a null decides (C11, C14, C16, C30), on synthetic paired tables."""

import math

import numpy as np
import pytest
from scipy import stats

from wneurons.core.uncertainty import (
    MC_ERROR_SHARE,
    bootstrap_mean,
    equivalence_interval,
    exact_paired_bootstrap_ci,
    inside_margin,
    paired_accuracy_difference,
    paired_perplexity_ratio,
    percentile_ci,
    percentile_ci_with_error,
    zero_discordance_bound,
)


@pytest.mark.parametrize(("a", "b", "n"), [(30, 10, 400), (3, 1, 50), (0, 5, 40), (200, 190, 4087)])
def test_exact_paired_interval_is_the_limit_of_the_drawn_bootstrap(a, b, n):
    d = np.zeros(n)
    d[:a], d[a : a + b] = 1, -1
    exact = exact_paired_bootstrap_ci(d)
    drawn = percentile_ci(bootstrap_mean(d, resamples=200_000, seed=3))
    # 200,000 draws land within one item step of the exact quantiles (the exact ones are on the item grid)
    assert exact[0] == pytest.approx(drawn[0], abs=1 / n) and exact[1] == pytest.approx(drawn[1], abs=1 / n)
    assert np.allclose(np.array(exact) * n, np.round(np.array(exact) * n))


def test_pooled_rows_state_a_monte_carlo_error_below_a_quarter_item_step():
    rng = np.random.default_rng(0)
    n = 2000
    clean = rng.random(n) < 0.8
    w = clean & (rng.random(n) < 0.97)
    random = np.stack([clean ^ (rng.random(n) < 0.05) for _ in range(4)])
    row = paired_accuracy_difference(random, w, resamples=500, seed=0)
    assert row["resamples"] > 500  # 500 draws were not enough; more were drawn
    assert row["ci_mc_error"] <= MC_ERROR_SHARE / n
    one = paired_accuracy_difference(clean, w, resamples=500)
    assert one["ci_mc_error"] == 0 and one["resamples"] == 0  # exact: nothing drawn
    assert one["ci98_lo"] <= one["ci_lo"] <= one["ci90_lo"] <= one["drop"] <= one["ci90_hi"] <= one["ci_hi"]


def test_monte_carlo_error_is_the_quantiles_standard_error():
    draws = np.random.default_rng(1).normal(size=40_000)
    _, _, error = percentile_ci_with_error(draws)
    q = 0.025  # the standard error of a normal sample quantile: sqrt(q(1-q)/R) / pdf(z_q)
    expected = math.sqrt(q * (1 - q) / draws.size) / stats.norm.pdf(stats.norm.ppf(q))
    assert error == pytest.approx(expected, rel=0.35)


def test_perplexity_rows_state_their_monte_carlo_error():
    rng = np.random.default_rng(2)
    counts = np.full(40, 100.0)
    clean = rng.gamma(3.0, 1.0, 40) * 100
    row = paired_perplexity_ratio(clean, clean + 30 + rng.normal(0, 5, 40), counts, resamples=300, seed=0)
    assert row["resamples"] >= 300 and 0 < row["ci_mc_error"] < row["ci_hi"] - row["ci_lo"]


def test_equivalence_interval_reads_its_column_then_approximates_and_bounds_zero_discordance():
    row = {"n": 1000, "drop": 0.0, "ci_lo": -0.01, "ci_hi": 0.01, "ci98_lo": -0.012, "ci98_hi": 0.011}
    assert equivalence_interval(row, 0.01)[:2] == (-0.012, 0.011)
    lo, hi, how = equivalence_interval({k: row[k] for k in ("n", "drop", "ci_lo", "ci_hi")}, 0.01)
    z = stats.norm.ppf(0.99) / stats.norm.ppf(0.975)
    assert (lo, hi) == pytest.approx((-0.01 * z, 0.01 * z)) and "normal approximation" in how
    # No item differs among 40: the bootstrap is the point 0 at any n; the exact bound 1 - alpha^(1/n) is not.
    zero = {"n": 40, "drop": 0.0, "ci_lo": 0.0, "ci_hi": 0.0, "only_reference": 0, "only_condition": 0}
    lo, hi, how = equivalence_interval(zero, 0.05)
    assert hi == pytest.approx(zero_discordance_bound(40, 0.05)) == pytest.approx(1 - 0.05 ** (1 / 40))
    assert not inside_margin(lo, hi, 0.05) and inside_margin(lo, hi, 0.08) and "no item differs" in how
