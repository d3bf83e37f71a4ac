"""Paired statistics against textbook cases: McNemar by hand and by scipy, bootstrap coverage on synthetic data."""

import math

import numpy as np
import pytest
from scipy import stats

from wneurons.core.uncertainty import (
    EXACT_BOOTSTRAP,
    MCNEMAR,
    MIN_CORRELATION_POINTS,
    MIN_RESAMPLING_UNITS,
    SIGN_TEST,
    TWO_STAGE_BOOTSTRAP,
    bootstrap_mean,
    correlation_with_ci,
    items_to_detect,
    mcnemar_exact,
    paired_accuracy_difference,
    paired_perplexity_ratio,
    percentile_ci,
    sign_test,
    two_stage_bootstrap_mean,
    window_nll_sums,
)


def outcomes_from_table(a: int, b: int, c: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Item outcomes of a 2x2 table: a both right, b reference only, c condition only, d both wrong."""
    ref = np.array([1] * a + [1] * b + [0] * c + [0] * d, dtype=bool)
    cond = np.array([1] * a + [0] * b + [1] * c + [0] * d, dtype=bool)
    return ref, cond


def test_mcnemar_matches_the_hand_computed_binomial_tail():
    # b = 10 discordant one way, c = 2 the other: p = 2 * sum_{k<=2} C(12, k) / 2^12 = 2 * (1 + 12 + 66) / 4096.
    ref, cond = outcomes_from_table(40, 10, 2, 8)
    result = mcnemar_exact(ref, cond)
    assert (result.only_reference, result.only_condition) == (10, 2)
    assert result.p_value == pytest.approx(158 / 4096, rel=1e-12)
    assert result.p_value == pytest.approx(stats.binomtest(2, 12, 0.5).pvalue, rel=1e-12)


@pytest.mark.parametrize(("b", "c"), [(0, 0), (3, 3), (7, 0), (1, 30), (55, 41)])
def test_mcnemar_equals_scipy_binomtest(b, c):
    ref, cond = outcomes_from_table(5, b, c, 4)
    expected = 1.0 if b + c == 0 else stats.binomtest(min(b, c), b + c, 0.5).pvalue
    assert mcnemar_exact(ref, cond).p_value == pytest.approx(expected, rel=1e-12)
    # Concordant items carry no information: adding them leaves the test unchanged.
    ref2, cond2 = outcomes_from_table(500, b, c, 400)
    assert mcnemar_exact(ref2, cond2).p_value == pytest.approx(expected, rel=1e-12)


def test_pooled_trials_reduce_to_mcnemar_for_one_trial_and_use_per_item_means():
    ref, cond = outcomes_from_table(20, 9, 3, 6)
    one = paired_accuracy_difference(ref[None, :], cond, resamples=200)
    assert one["p_value"] == pytest.approx(mcnemar_exact(ref, cond).p_value)
    # Two trials: item i's reference outcome is the mean of its two trials.
    trials = np.stack([ref, np.roll(ref, 1)])
    pooled = paired_accuracy_difference(trials, cond, resamples=200)
    assert pooled["acc_reference"] == pytest.approx(trials.mean())
    d = trials.mean(axis=0) - cond
    assert (pooled["only_reference"], pooled["only_condition"]) == ((d > 0).sum(), (d < 0).sum())
    assert pooled["p_value"] == pytest.approx(sign_test(d)[2])


def test_drop_and_accuracies_are_the_plain_means():
    ref, cond = outcomes_from_table(40, 10, 2, 8)
    r = paired_accuracy_difference(ref, cond, resamples=500, seed=3)
    assert r["n"] == 60
    assert r["acc_reference"] == pytest.approx(50 / 60)
    assert r["acc_condition"] == pytest.approx(42 / 60)
    assert r["drop"] == pytest.approx(8 / 60)
    assert r["ci_lo"] < r["drop"] < r["ci_hi"]


def test_bootstrap_is_seeded_and_has_the_standard_error_of_the_mean():
    rng = np.random.default_rng(0)
    values = rng.normal(size=400)
    a = bootstrap_mean(values, resamples=4000, seed=1)
    assert np.array_equal(a, bootstrap_mean(values, resamples=4000, seed=1))
    assert not np.array_equal(a, bootstrap_mean(values, resamples=4000, seed=2))
    # The bootstrap distribution of the mean: centred on the sample mean, spread = plug-in SD / sqrt(n).
    plug_in_se = values.std(ddof=0) / math.sqrt(values.size)
    assert a.mean() == pytest.approx(values.mean(), abs=0.1 * plug_in_se)
    assert a.std() == pytest.approx(plug_in_se, rel=0.05)


def test_paired_bootstrap_ci_covers_the_true_drop_at_its_stated_rate():
    # Correlated paired outcomes with a known drop: reference right w.p. 0.8; the condition flips a right item to
    # wrong w.p. 0.15 and a wrong one to right w.p. 0.1, so the true drop is 0.8*0.15 - 0.2*0.1 = 0.10. An
    # unpaired interval would be ~1.7x too wide here (coverage ~0.999) and a 90% one too narrow: both fail.
    rng = np.random.default_rng(12345)
    reps, n, true_drop = 500, 300, 0.8 * 0.15 - 0.2 * 0.1
    ref = rng.random((reps, n)) < 0.8
    flip = rng.random((reps, n)) < np.where(ref, 0.15, 0.1)
    cond = ref ^ flip
    covered = 0
    for r in range(reps):
        out = paired_accuracy_difference(ref[r], cond[r], resamples=1000, seed=r)
        covered += out["ci_lo"] <= true_drop <= out["ci_hi"]
    coverage = covered / reps  # SE of a 0.95 rate over 500 repetitions: ~0.01
    assert 0.925 <= coverage <= 0.975, coverage


def test_perplexity_ratio_of_a_known_shift_is_exact():
    # Condition NLL = reference NLL + log 2 on every token: perplexity doubles in every resample.
    counts = np.full(12, 1023)
    ref = np.tile([3000.0, 2900.0, 3100.0, 3050.0], 3)
    cond = ref + counts * math.log(2)
    r = paired_perplexity_ratio(ref, cond, counts, resamples=300)
    assert r["ratio"] == pytest.approx(2.0)
    assert r["ci_lo"] == pytest.approx(2.0) and r["ci_hi"] == pytest.approx(2.0)
    assert r["ppl_reference"] == pytest.approx(math.exp(ref.sum() / counts.sum()))
    assert r["delta_nll"] == pytest.approx(math.log(2))


def test_perplexity_ratio_pools_trials_by_mean_perplexity_and_ci_covers_noise():
    rng = np.random.default_rng(5)
    counts = np.full(60, 100)
    ref = rng.normal(3.0, 0.3, 60) * counts
    trials = ref[None, :] + rng.normal(0.2, 0.05, (3, 60)) * counts
    r = paired_perplexity_ratio(ref, trials, counts, resamples=1000, seed=0)
    ppl_ref = math.exp(ref.sum() / counts.sum())
    expected = np.mean([math.exp(t.sum() / counts.sum()) for t in trials]) / ppl_ref
    assert r["ratio"] == pytest.approx(expected)
    assert r["ci_lo"] < r["ratio"] < r["ci_hi"]
    assert r["ci_lo"] > 1.0  # a 0.2 nats/token shift is far outside the noise of 60 windows


def test_window_sums_group_tokens_by_window():
    ids, sums, counts = window_nll_sums(np.array([1, 0, 1, 1, 0]), np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert ids.tolist() == [0, 1]
    assert sums.tolist() == [7.0, 8.0]
    assert counts.tolist() == [2, 3]


def test_bad_shapes_and_nan_are_refused():
    with pytest.raises(ValueError, match="one length"):
        paired_accuracy_difference(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="NaN"):
        sign_test(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="disagree"):
        paired_perplexity_ratio(np.ones(3), np.ones(3), np.ones(2))


def test_no_ci_from_too_few_windows_or_items():
    # 4 windows have 35 distinct resamples: no CI, and the reason instead (the ratio itself stays).
    counts = np.full(4, 1023)
    ref = np.array([3000.0, 2900.0, 3100.0, 3050.0])
    r = paired_perplexity_ratio(ref, ref + counts * math.log(2), counts, resamples=300)
    assert r["ratio"] == pytest.approx(2.0)
    assert math.isnan(r["ci_lo"]) and math.isnan(r["ci_hi"])
    assert r["ci_note"] == f"no CI from 4 windows (a bootstrap needs {MIN_RESAMPLING_UNITS})"
    few = paired_accuracy_difference(np.ones(6), np.zeros(6))
    assert few["drop"] == 1.0 and math.isnan(few["ci_lo"]) and "6 items" in few["ci_note"]
    enough = paired_accuracy_difference(np.ones(MIN_RESAMPLING_UNITS), np.zeros(MIN_RESAMPLING_UNITS))
    assert enough["ci_lo"] == 1.0 and enough["ci_note"] is None


def test_pooled_trials_ci_includes_the_variance_between_draws():
    # Two draws that disagree: one drop of ~0 and one of ~0.3. Items alone (draws fixed) give a narrow CI around
    # their mean; resampling the draws first must widen it, and the labels must say which test and CI each is.
    rng = np.random.default_rng(0)
    n = 400
    cond = (rng.random(n) < 0.5).astype(float)
    near = np.where(rng.random(n) < 0.05, 1 - cond, cond)
    far = np.maximum(cond, rng.random(n) < 0.6)
    pooled = paired_accuracy_difference(np.stack([near, far]), cond, resamples=2000, seed=0)
    items_only = percentile_ci(bootstrap_mean(np.stack([near, far]).mean(axis=0) - cond, resamples=2000, seed=0))
    assert pooled["ci_hi"] - pooled["ci_lo"] > 1.5 * (items_only[1] - items_only[0])
    assert pooled["ci_method"] == TWO_STAGE_BOOTSTRAP and pooled["test"] == SIGN_TEST and pooled["trials"] == 2
    one = paired_accuracy_difference(near[None, :], cond, resamples=500)
    assert one["test"] == MCNEMAR and one["ci_method"] == EXACT_BOOTSTRAP


def test_two_stage_bootstrap_resamples_draws_then_items():
    # Identical draws: the two-stage spread is the item spread alone (same law as bootstrap_mean).
    rng = np.random.default_rng(2)
    d = rng.integers(-1, 2, 300).astype(float)
    same = two_stage_bootstrap_mean(np.stack([d, d, d]), resamples=4000, seed=1)
    items = bootstrap_mean(d, resamples=4000, seed=1)
    assert same.std() == pytest.approx(items.std(), rel=0.1)
    # Constant per draw (no item variance): the spread is the spread of the mean of 3 resampled draws.
    draws = two_stage_bootstrap_mean(np.array([[0.0] * 50, [1.0] * 50, [2.0] * 50]), resamples=4000, seed=1)
    assert set(np.round(draws * 3).astype(int)) <= set(range(7))
    assert draws.std() == pytest.approx(np.sqrt((2 / 3) / 3), rel=0.1)
    assert np.array_equal(draws, two_stage_bootstrap_mean(np.array([[0.0] * 50, [1.0] * 50, [2.0] * 50]),
                                                          resamples=4000, seed=1))  # fmt: skip


def test_pooled_perplexity_ci_resamples_the_draws():
    rng = np.random.default_rng(5)
    counts = np.full(60, 100)
    ref = rng.normal(3.0, 0.3, 60) * counts
    shifts = np.array([0.0, 0.4])[:, None]  # two draws: one harmless, one raising NLL by 0.4 nats/token
    trials = ref[None, :] + (shifts + rng.normal(0, 0.01, (2, 60))) * counts
    r = paired_perplexity_ratio(ref, trials, counts, resamples=1000, seed=0)
    assert r["ci_method"].startswith("two-stage") and r["trials"] == 2
    assert r["ci_lo"] < 1.02 and r["ci_hi"] > math.exp(0.4) * 0.98  # spans both draws' ratios
    one = paired_perplexity_ratio(ref, trials[1], counts, resamples=1000, seed=0)
    assert one["ci_hi"] - one["ci_lo"] < 0.05 and one["ci_method"] == "bootstrap over windows"


def test_correlation_ci_needs_five_points():
    three = correlation_with_ci([0.0, 1.0, 2.0], [0.1, 0.9, 2.5])
    assert three["pearson_r"] > 0.9 and three["pearson_ci"] == [None, None]
    assert three["ci_undefined"] == f"3 points (a bootstrap CI needs {MIN_CORRELATION_POINTS})"
    five = correlation_with_ci(np.arange(5.0), np.array([0.0, 1.2, 1.9, 3.3, 3.8]), n_boot=200)
    assert None not in five["pearson_ci"] and "ci_undefined" not in five


def test_layerwise_correlations_print_no_ci_from_three_layers():
    # The demo's 3 single-layer ablations printed r = 0.873 with CI [0.873, 1.000]: now no CI and the reason.
    import polars as pl

    from wneurons.core.layerwise import correlations

    three = pl.DataFrame({"share_nn": [0.0, 0.05, 0.1], "share_pn": [0.4, 0.8, 0.9], "share_pp": [0.6, 0.15, 0.0],
                          "err": [0.0, 0.0, 0.0025]})  # fmt: skip
    nn = correlations(three, ["err"]).filter(pl.col("share") == "nn").row(0, named=True)
    assert nn["pearson_r"] > 0.8 and nn["r_ci_lo"] is None and nn["r_ci_hi"] is None
    assert nn["ci_undefined"] == f"3 points (a bootstrap CI needs {MIN_CORRELATION_POINTS})"


def test_items_to_detect_is_mcnemars_sample_size_from_the_ci():
    """From a paired 0/1 comparison's bootstrap CI, the items needed match the normal-approximation McNemar
    sample size n = (z_{1-a/2} + z_power)^2 (p_d - d^2) / d^2 of its own discordance and difference."""
    rng = np.random.default_rng(5)
    n = 4000
    ref = rng.random(n) < 0.7
    cond = ref.copy()
    flip = rng.choice(n, size=160, replace=False)  # 120 right only under ref, 40 only under cond: p_d = 4%
    cond[flip[:120]] = False
    ref[flip[120:]], cond[flip[120:]] = False, True
    row = paired_accuracy_difference(ref, cond, resamples=4000, seed=1)
    d, p_d = row["drop"], (row["only_reference"] + row["only_condition"]) / n
    z = stats.norm.ppf(1 - 0.01 / 2) + stats.norm.ppf(0.8)
    expected = z**2 * (p_d - d**2) / d**2
    needed = items_to_detect(n, d, row["ci_lo"], row["ci_hi"], alpha=0.01)
    assert needed == pytest.approx(expected, rel=0.1)
    # Halving the difference at the same spread needs four times the items; no difference, no n; no CI, NaN.
    half = items_to_detect(n, d / 2, row["ci_lo"], row["ci_hi"], alpha=0.01)
    assert half == pytest.approx(4 * needed, rel=0.01)
    assert math.isinf(items_to_detect(n, 0.0, row["ci_lo"], row["ci_hi"], alpha=0.01))
    assert math.isnan(items_to_detect(n, d, math.nan, math.nan, alpha=0.01))
