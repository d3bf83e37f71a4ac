"""Paired statistics between two conditions scored on the same items: never an unpaired test of two accuracies.

Every comparison here pairs item i under the reference condition (clean, random, matched) with item i under the
compared condition (the Wasserstein ablation): the accuracy difference gets a percentile bootstrap CI that
resamples *items* (the same draw for both conditions), and the exact McNemar test (a binomial test on the
discordant pairs) decides whether the difference is real. Perplexity differences resample *windows*, the unit
inside which tokens are correlated.

Random controls come in T trials (T draws of neurons) on the same items. Pooled over trials (as the paper's mean
over trials) the per-item reference is the mean of the T trials' 0/1 outcomes, and the uncertainty has two sources:
which neurons were drawn, and which items were scored. The CI of a pooled comparison is a two-stage bootstrap
(:func:`two_stage_bootstrap_mean`: resample the T draws, then the items); its test is the exact sign test over the
per-item mean differences (:data:`SIGN_TEST`), which is McNemar's test itself when T = 1 (differences in
{-1, 0, 1}) and which, like McNemar's, holds the draws fixed.

A single trial's accuracy difference (per-item differences in {-1, 0, 1}) gets the *exact* percentile interval of
its paired bootstrap (:func:`exact_paired_bootstrap_ci`: the resampled counts are trinomial, so the limit of
infinitely many resamples is computed, with no Monte Carlo error). Where no exact interval exists (pooled trials,
perplexity) the resamples are drawn in doublings until the Monte Carlo error bound of every endpoint
(:func:`percentile_ci_with_error`: each endpoint lies within it of its infinite-resample limit with 99% Monte Carlo
confidence) is at most :data:`MC_ERROR_SHARE` of one item step (1/n), up to :data:`MAX_RESAMPLES`; each row states
its bound (``ci_mc_error``, larger than the target where the cap was reached) and its resamples.

Besides the 95% CI each accuracy row carries the (1 - 2 alpha) intervals of :data:`EQUIVALENCE_ALPHAS`: a two
one-sided test (TOST) at alpha that a difference lies within +-m is the same decision as that interval lying inside
(-m, m); :mod:`core.equivalence` builds the interval a claim's TOST reads (with the exact bound of the discordant
counts) and the claims' margins are in ``report/claims``.

No CI is computed from fewer resampling units than it needs (a bootstrap over 4 windows has 35 distinct resamples;
one over 3 points of a correlation is its own extremes): :data:`MIN_RESAMPLING_UNITS` items / windows / neurons,
:data:`MIN_CORRELATION_POINTS` points; the result says why instead (``ci_note``, ``ci_undefined``).

Pure functions over numpy arrays; resamples are drawn as multinomial counts over the distinct per-item values
(exactly the distribution of resampling items with replacement), so no Python loop runs over resamples or items.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
from scipy import stats

CI_LEVEL = 0.95
RESAMPLES = 2000
# The fewest units a percentile bootstrap resamples before its CI is reported (items, windows, neurons): 10 units
# give 92,378 distinct resamples, 4 give 35. Below it the CI is NaN and ``ci_note`` says why.
MIN_RESAMPLING_UNITS = 10
# The fewest points of a correlation before its bootstrap CI is reported (3 points: the CI is [r, 1]).
MIN_CORRELATION_POINTS = 5
MCNEMAR = "exact McNemar"
SIGN_TEST = "exact sign test over per-item mean differences (draws held fixed)"
ITEM_BOOTSTRAP = "paired bootstrap over items"  # drawn; single trials now use EXACT_BOOTSTRAP
TWO_STAGE_BOOTSTRAP = "two-stage bootstrap (neuron draws, then items)"
# Monte Carlo error bound of a bootstrap endpoint, as a share of one item step (1/n), that more resamples are drawn
# to reach (doubling from the configured count), and the most resamples drawn: 200,000-resample references moved
# 2,000-resample endpoints by one item step (issue 29). The bound is MC_CONFIDENCE_Z standard errors of the sample
# quantile (99%): one standard error, stated until issue 44, was exceeded twice over by 3 of 24 pooled endpoints.
MC_ERROR_SHARE = 0.5
MC_CONFIDENCE_Z = 2.576
MAX_RESAMPLES = 256_000
# The alphas of the equivalence tests the claims use (C11 at 0.01, C14 and C30 at 0.05): each accuracy row carries
# the (1 - 2 alpha) interval of each, columns ci90_lo/ci90_hi and ci98_lo/ci98_hi.
EQUIVALENCE_ALPHAS = (0.05, 0.01)
EXACT_BOOTSTRAP = "exact paired bootstrap over items (trinomial, no Monte Carlo error)"
# Bound on one chunk of the resample-count matrix (resamples x distinct values), in elements.
_CHUNK_ELEMENTS = 1 << 22


class McNemar(NamedTuple):
    """Exact McNemar test: ``only_reference`` items right only under the reference, ``only_condition`` right only
    under the compared condition; ``p_value`` two-sided (binomial, p = 1/2, on the discordant pairs)."""

    only_reference: int
    only_condition: int
    p_value: float


def sign_test(differences: np.ndarray) -> tuple[int, int, float]:
    """Exact two-sided sign test on paired differences: (#positive, #negative, p); zeros are dropped.

    For 0/1 outcomes (difference in {-1, 0, 1}) this is the exact McNemar test. p = min(1, 2 P(X <= min)) with
    X ~ Binomial(#nonzero, 1/2), the two-sided p-value of ``scipy.stats.binomtest`` for a symmetric null.
    """
    d = np.asarray(differences, dtype=np.float64)
    if np.isnan(d).any():
        raise ValueError("paired differences contain NaN")
    positive, negative = int((d > 0).sum()), int((d < 0).sum())
    n = positive + negative
    p = 1.0 if n == 0 else min(1.0, 2.0 * float(stats.binom.cdf(min(positive, negative), n, 0.5)))
    return positive, negative, p


def mcnemar_exact(reference_correct: np.ndarray, condition_correct: np.ndarray) -> McNemar:
    """Exact McNemar test of two 0/1 outcome vectors over the same items."""
    ref, cond = _paired_bool(reference_correct, condition_correct)
    only_ref, only_cond, p = sign_test(ref.astype(np.int8) - cond.astype(np.int8))
    return McNemar(only_ref, only_cond, p)


def _paired_bool(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired outcomes need two 1-D arrays of one length, got shapes {a.shape} and {b.shape}")
    return a.astype(bool), b.astype(bool)


def _multinomial_chunks(n: int, probabilities: np.ndarray, resamples: int, rng: np.random.Generator):
    """Counts [chunk, len(probabilities)] of resamples of n draws, in chunks that bound memory."""
    per_chunk = max(1, _CHUNK_ELEMENTS // max(1, probabilities.size))
    for start in range(0, resamples, per_chunk):
        yield rng.multinomial(n, probabilities, size=min(per_chunk, resamples - start))


def bootstrap_mean(values: np.ndarray, *, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """Means of ``resamples`` bootstrap resamples (items drawn with replacement) of a 1-D array, float64.

    Drawn as multinomial counts over the distinct values (identical in law to resampling items), so paired 0/1
    differences cost O(resamples) whatever the number of items.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"bootstrap needs a non-empty 1-D array, got shape {v.shape}")
    if np.isnan(v).any():
        raise ValueError("bootstrap values contain NaN")
    distinct, counts = np.unique(v, return_counts=True)
    rng = np.random.default_rng(seed)
    chunks = [c @ distinct for c in _multinomial_chunks(v.size, counts / v.size, resamples, rng)]
    return np.concatenate(chunks) / v.size


def two_stage_bootstrap_mean(values: np.ndarray, *, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """Bootstrap draws of the mean over items of the per-item mean over trials of ``values`` [T, n] (e.g. per-item
    differences of T random draws of neurons): each resample first draws T trials with replacement, then n items
    with replacement (independently), so the spread holds both the draw-to-draw and the item-to-item variance.

    Drawn as multinomial counts over trials and over the distinct per-item columns (identical in law to
    resampling indices); float64, ``resamples`` values.
    """
    return _two_stage_draws(_two_stage_patterns(values), resamples, np.random.default_rng(seed))


def _two_stage_patterns(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(distinct per-item columns [T, P], their item counts [P], n) of a [T, n] array, validated."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.size == 0:
        raise ValueError(f"two-stage bootstrap needs a non-empty [trials, items] array, got shape {v.shape}")
    if np.isnan(v).any():
        raise ValueError("bootstrap values contain NaN")
    patterns, counts = np.unique(v, axis=1, return_counts=True)  # [T, P]: items with the same outcomes
    return patterns, counts, v.shape[1]


def _two_stage_draws(data: tuple[np.ndarray, np.ndarray, int], resamples: int, rng: np.random.Generator):
    patterns, counts, n = data
    trials = patterns.shape[0]
    per_chunk = max(1, _CHUNK_ELEMENTS // (patterns.shape[1] + trials))
    out = []
    for start in range(0, resamples, per_chunk):
        size = min(per_chunk, resamples - start)
        weights = rng.multinomial(trials, np.full(trials, 1.0 / trials), size=size) / trials  # [R, T]
        items = rng.multinomial(n, counts / n, size=size)  # [R, P]
        out.append(((weights @ patterns) * items).sum(axis=1) / n)
    return np.concatenate(out)


def percentile_ci_with_error(draws: np.ndarray, level: float = CI_LEVEL) -> tuple[float, float, float]:
    """(lo, hi, Monte Carlo error bound) of the percentile interval of bootstrap draws: the bound is the larger,
    over both endpoints, of half the spread of the draws between the ranks R(q -+ z s), s = sqrt(q(1-q)/R) the
    standard error of a sample quantile's rank and z = MC_CONFIDENCE_Z (a 99% order-statistic interval for the
    quantile, read off the draws themselves: no shape assumed)."""
    x = np.sort(np.asarray(draws, dtype=np.float64))
    r = x.size
    tail = (1 - level) / 2
    lo, hi = percentile_ci(x, level)
    errors = []
    for q in (tail, 1 - tail):
        s = MC_CONFIDENCE_Z * math.sqrt(q * (1 - q) / r)
        a, b = int(np.floor(r * (q - s))), int(np.ceil(r * (q + s)))
        errors.append((x[min(r - 1, max(0, b))] - x[min(r - 1, max(0, a))]) / 2)
    return lo, hi, float(max(errors))


def adaptive_percentile_cis(
    draw, resamples: int, step, levels: Iterable[float], rng: np.random.Generator
) -> tuple[dict[float, tuple[float, float]], float, int]:
    """Percentile intervals at ``levels`` from ``draw(count, rng)`` (bootstrap draws), doubling the resamples from
    ``resamples`` until every endpoint's Monte Carlo error is at most MC_ERROR_SHARE * ``step`` (one unit's step:
    a float, or a function of the draws) or MAX_RESAMPLES are drawn. Returns ({level: (lo, hi)}, the largest
    Monte Carlo error, resamples drawn)."""
    levels = tuple(levels)
    draws = draw(resamples, rng)
    while True:
        found = {level: percentile_ci_with_error(draws, level) for level in levels}
        error = max(e for _, _, e in found.values())
        unit = step(draws) if callable(step) else step
        if error <= MC_ERROR_SHARE * unit or draws.size >= MAX_RESAMPLES:
            return {k: (lo, hi) for k, (lo, hi, _) in found.items()}, error, int(draws.size)
        draws = np.concatenate([draws, draw(min(draws.size, MAX_RESAMPLES - draws.size), rng)])


def exact_paired_bootstrap_ci(differences: np.ndarray, level: float = CI_LEVEL) -> tuple[float, float]:
    """The percentile interval of the paired item bootstrap of a mean of differences in {-1, 0, 1}, computed
    exactly (the limit of infinitely many resamples): with a items at +1 and b at -1 of n, a resample's
    (K+, K-) is trinomial, K+ + K- = D ~ Binomial(n, (a+b)/n) and K+ | D ~ Binomial(D, a/(a+b)), so
    P(K+ - K- <= s) is one sum over D. Returns the smallest s/n whose CDF reaches each tail (the quantile the
    bootstrap's percentiles converge to)."""
    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 1 or d.size == 0 or not np.isin(d, (-1.0, 0.0, 1.0)).all():
        raise ValueError("exact paired bootstrap needs a non-empty 1-D array of -1, 0 and 1")
    n, a, b = d.size, int((d > 0).sum()), int((d < 0).sum())
    if a + b == 0:
        return 0.0, 0.0
    discordant = np.arange(n + 1)
    p_d = stats.binom.pmf(discordant, n, (a + b) / n)
    keep = p_d > 1e-300
    discordant, p_d = discordant[keep], p_d[keep]

    def cdf(s: int) -> float:  # P(K+ - K- <= s) = P(K+ <= (s + D) / 2)
        return float((p_d * stats.binom.cdf(np.floor((s + discordant) / 2), discordant, a / (a + b))).sum())

    def quantile(q: float) -> int:
        low, high = -n, n  # cdf(high) = 1 >= q; find the smallest s with cdf(s) >= q
        while low < high:
            mid = (low + high) // 2
            if cdf(mid) >= q:
                high = mid
            else:
                low = mid + 1
        return low

    tail = (1 - level) / 2
    return quantile(tail) / n, quantile(1 - tail) / n


def equivalence_columns(alpha: float) -> tuple[str, str]:
    """The columns of a paired row holding its (1 - 2 alpha) interval (alpha in EQUIVALENCE_ALPHAS)."""
    pct = round(100 * (1 - 2 * alpha))
    return f"ci{pct}_lo", f"ci{pct}_hi"


def percentile_ci(draws: np.ndarray, level: float = CI_LEVEL) -> tuple[float, float]:
    """Percentile interval of bootstrap draws at ``level`` (e.g. 0.95 -> 2.5th and 97.5th percentiles)."""
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(draws, [tail, 100 - tail])
    return float(lo), float(hi)


def paired_accuracy_difference(
    reference_correct: np.ndarray,
    condition_correct: np.ndarray,
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
    level: float = CI_LEVEL,
) -> dict:
    """Accuracy drop ``acc(reference) - acc(condition)`` over the same items, with its paired bootstrap CI and
    the exact test.

    ``reference_correct``, ``condition_correct``: [n] 0/1, or on one side [T, n] 0/1 for T random trials pooled
    (per-item mean over trials; for T > 1 the CI is :func:`two_stage_bootstrap_mean` and the test the sign test
    on per-item mean differences, McNemar's test when T = 1). Returns n, trials, accuracies (fractions),
    ``drop``, ``ci_lo``/``ci_hi`` (NaN under :data:`MIN_RESAMPLING_UNITS` items, ``ci_note`` then says why, else
    None), the (1 - 2 alpha) intervals of :data:`EQUIVALENCE_ALPHAS` (``ci90_*``, ``ci98_*``), ``ci_method``
    (one trial: :func:`exact_paired_bootstrap_ci`; pooled trials: two-stage draws, as many as
    :func:`adaptive_percentile_cis` needs), ``ci_mc_error`` (fraction, 0 for exact intervals) and ``resamples``
    (drawn; 0 for exact intervals), the discordant counts ``only_reference``/``only_condition`` (items where
    that side is better), ``p_value`` and ``test`` (which test gave it).
    """
    ref_stack = np.atleast_2d(np.asarray(reference_correct, dtype=np.float64))
    cond_stack = np.atleast_2d(np.asarray(condition_correct, dtype=np.float64))
    if min(ref_stack.shape[0], cond_stack.shape[0]) > 1:
        raise ValueError("paired outcomes: only one side can hold several trials")
    ref, cond = ref_stack.mean(axis=0), cond_stack.mean(axis=0)
    if ref.shape != cond.shape or ref_stack.ndim != 2 or cond_stack.ndim != 2:
        raise ValueError(f"paired outcomes need one length of items, got shapes {ref.shape} and {cond.shape}")
    d = ref - cond
    trials = max(ref_stack.shape[0], cond_stack.shape[0])
    only_ref, only_cond, p = sign_test(d)
    levels = (level, *(1 - 2 * a for a in EQUIVALENCE_ALPHAS))
    note, mc_error, drawn = None, 0.0, 0
    if d.size < MIN_RESAMPLING_UNITS:
        cis = dict.fromkeys(levels, (math.nan, math.nan))
        mc_error = math.nan
        note = f"no CI from {d.size} items (a bootstrap needs {MIN_RESAMPLING_UNITS})"
    elif trials > 1:
        data = _two_stage_patterns(ref_stack - cond_stack)
        cis, mc_error, drawn = adaptive_percentile_cis(
            lambda count, rng: _two_stage_draws(data, count, rng),
            resamples,
            1.0 / d.size,
            levels,
            np.random.default_rng(seed),
        )
    else:  # differences in {-1, 0, 1}: the bootstrap's limit is computed, not drawn
        cis = {lv: exact_paired_bootstrap_ci(d, lv) for lv in levels}
    lo, hi = cis[level]
    equivalence = {}
    for a in EQUIVALENCE_ALPHAS:
        lo_col, hi_col = equivalence_columns(a)
        equivalence[lo_col], equivalence[hi_col] = cis[1 - 2 * a]
    return {
        "n": int(d.size),
        "acc_reference": float(ref.mean()),
        "acc_condition": float(cond.mean()),
        "drop": float(d.mean()),
        "ci_lo": lo,
        "ci_hi": hi,
        **equivalence,
        "only_reference": only_ref,
        "only_condition": only_cond,
        "p_value": p,
        "trials": trials,
        "test": MCNEMAR if trials == 1 else SIGN_TEST,
        "ci_method": EXACT_BOOTSTRAP if trials == 1 else TWO_STAGE_BOOTSTRAP,
        "ci_mc_error": mc_error,
        "resamples": drawn,
        "ci_note": note,
    }


def detectable_difference(
    ci_lo: float, ci_hi: float, *, alpha: float, power: float = 0.8, level: float = CI_LEVEL
) -> float:
    """The difference a paired comparison detects at two-sided ``alpha`` with ``power``, read from its ``level``
    CI: ``(z_{1-alpha/2} + z_power) se`` with the standard error ``se = (ci_hi - ci_lo) / (2 z_{(1+level)/2})``.
    NaN without a CI."""
    if not (math.isfinite(ci_lo) and math.isfinite(ci_hi)):
        return math.nan
    se = (ci_hi - ci_lo) / (2 * stats.norm.ppf(0.5 + level / 2))
    return (stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * se


def items_to_detect(
    n: int, difference: float, ci_lo: float, ci_hi: float, *, alpha: float, power: float = 0.8, level: float = CI_LEVEL
) -> float:
    """Items a paired comparison needs to detect ``difference`` at two-sided ``alpha`` with ``power``, read from
    its CI at ``n`` items: the standard error shrinks as 1/sqrt(n), so the :func:`detectable_difference` at n
    scales to ``difference`` at ``n (detectable / difference)^2``. For 0/1 outcomes with discordance p_d, se^2 =
    (p_d - difference^2) / n, the normal-approximation sample size of McNemar's test (Connor 1987) with one
    variance under both hypotheses. A two-stage CI holds draw variance too, which more items do not shrink: the
    n is then a lower bound. ``inf`` when the difference is 0; NaN without a CI."""
    detectable = detectable_difference(ci_lo, ci_hi, alpha=alpha, power=power, level=level)
    if math.isnan(detectable) or n < 1:
        return math.nan
    if difference == 0:
        return math.inf
    return math.ceil(n * (detectable / difference) ** 2)


def mcnemar_items(discordance: float, difference: float, *, alpha: float, power: float = 0.8) -> int:
    """Pairs a McNemar test needs to detect ``difference`` at two-sided ``alpha`` with ``power`` when a share
    ``discordance`` of the pairs is discordant, by the normal approximation with the variance under each hypothesis
    (Connor 1987): ``n = (z_{1-alpha/2} sqrt(p_d) + z_power sqrt(p_d - difference^2))^2 / difference^2``. Needs no
    run's CI, only its discordance: the formula a run is sized by before it exists (:func:`items_to_detect` reads a
    run's own CI instead, with one variance for both)."""
    if not 0 < abs(difference) <= discordance <= 1:
        raise ValueError(f"needs 0 < |difference| <= discordance <= 1, got {difference} and {discordance}")
    z_a, z_b = stats.norm.ppf(1 - alpha / 2), stats.norm.ppf(power)
    spread = z_a * math.sqrt(discordance) + z_b * math.sqrt(discordance - difference**2)
    return math.ceil(spread**2 / difference**2)


def mcnemar_exact_power(n: int, discordance: float, difference: float, *, alpha: float) -> float:
    """Power of the exact McNemar test (:func:`mcnemar_exact`: two-sided binomial p < ``alpha`` on the discordant
    pairs) over ``n`` pairs, a share ``discordance`` of them discordant and the accuracy ``difference`` between the
    conditions: the number of discordant pairs D ~ Binomial(n, p_d), one direction's count given D ~ Binomial(D,
    1/2 + difference / (2 p_d)); summed over D within 10 standard deviations of its mean."""
    if not 0 < abs(difference) <= discordance <= 1:
        raise ValueError(f"needs 0 < |difference| <= discordance <= 1, got {difference} and {discordance}")
    spread = 10 * math.sqrt(n * discordance * (1 - discordance)) + 10
    d = np.arange(max(1, math.floor(n * discordance - spread)), min(n, math.ceil(n * discordance + spread)) + 1)
    c = stats.binom.ppf(alpha / 2, d, 0.5) - 1  # the largest count whose two-sided p, 2 P(X <= c), is below alpha
    q = 0.5 + abs(difference) / (2 * discordance)
    reject = stats.binom.cdf(c, d, q) + stats.binom.sf(d - c - 1, d, q)
    return float(np.sum(stats.binom.pmf(d, n, discordance) * reject))


def window_nll_sums(window: np.ndarray, nll: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-token NLL grouped by window: (window ids sorted, summed NLL in nats float64, token counts)."""
    window = np.asarray(window)
    ids, inverse, counts = np.unique(window, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=np.asarray(nll, dtype=np.float64), minlength=ids.size)
    return ids, sums, counts


def paired_perplexity_ratio(
    reference_sums: np.ndarray,
    condition_sums: np.ndarray,
    counts: np.ndarray,
    *,
    resamples: int = RESAMPLES,
    seed: int = 0,
    level: float = CI_LEVEL,
) -> dict:
    """Perplexity ratio ``ppl(condition) / ppl(reference)`` over the same windows, with a window bootstrap CI.

    ``*_sums``: summed token NLL (nats) per window, [W] or [T, W] for T random trials (pooled: that side's
    perplexity is the mean over its trials, as the paper averages perplexities over random trials; its CI is
    two-stage: each resample draws the T trials, then the windows); ``counts``: tokens per window [W].
    Perplexity = exp(sum NLL / sum tokens) over the resampled windows (each window keeps its tokens together).
    Returns ppl of both sides, ``ratio``, ``ci_lo``/``ci_hi`` (NaN under :data:`MIN_RESAMPLING_UNITS` windows,
    ``ci_note`` then says why), ``ci_method``, ``ci_mc_error`` and ``resamples`` (drawn until the error is at most
    MC_ERROR_SHARE of one window's step, sd(draws)/sqrt(W); :func:`adaptive_percentile_cis`), ``delta_nll``
    (nats/token), n_windows and trials.
    """
    counts = np.asarray(counts, dtype=np.float64)
    ref = np.atleast_2d(np.asarray(reference_sums, dtype=np.float64))
    cond = np.atleast_2d(np.asarray(condition_sums, dtype=np.float64))
    if ref.shape[-1] != counts.size or cond.shape[-1] != counts.size:
        raise ValueError(
            f"window sums and counts disagree: {ref.shape[-1]}, {cond.shape[-1]} windows vs {counts.size} counts"
        )

    def side_ppl(weights: np.ndarray, tokens: np.ndarray, sums: np.ndarray, trial_weights) -> np.ndarray:
        ppl = np.exp((weights @ sums.T) / tokens[:, None])  # [R, T]
        return ppl.mean(axis=1) if trial_weights is None else (ppl * trial_weights).sum(axis=1)

    def ratio(weights: np.ndarray, ref_trials=None, cond_trials=None) -> np.ndarray:
        tokens = weights @ counts  # [R]
        return side_ppl(weights, tokens, cond, cond_trials) / side_ppl(weights, tokens, ref, ref_trials)

    def trial_weights(rng: np.random.Generator, trials: int, size: int):
        if trials == 1:  # nothing to resample (and no draw: single-trial CIs stay as they were)
            return None
        return rng.multinomial(trials, np.full(trials, 1.0 / trials), size=size) / trials

    point = ratio(np.ones((1, counts.size)))[0]
    trials = max(ref.shape[0], cond.shape[0])
    note, mc_error, drawn = None, math.nan, 0
    if counts.size < MIN_RESAMPLING_UNITS:
        lo, hi = math.nan, math.nan
        note = f"no CI from {counts.size} windows (a bootstrap needs {MIN_RESAMPLING_UNITS})"
    else:
        uniform = np.full(counts.size, 1.0 / counts.size)
        per_chunk = max(1, _CHUNK_ELEMENTS // counts.size)

        def draw(count: int, rng: np.random.Generator) -> np.ndarray:
            draws = []
            for start in range(0, count, per_chunk):
                size = min(per_chunk, count - start)
                ref_t = trial_weights(rng, ref.shape[0], size)  # the draws first, then the windows
                cond_t = trial_weights(rng, cond.shape[0], size)
                windows = rng.multinomial(counts.size, uniform, size=size).astype(np.float64)
                draws.append(ratio(windows, ref_t, cond_t))
            return np.concatenate(draws)

        # One window's step: how far the ratio moves when one window of W moves by the windows' spread.
        cis, mc_error, drawn = adaptive_percentile_cis(
            draw, resamples, lambda d: float(d.std()) / math.sqrt(counts.size), (level,), np.random.default_rng(seed)
        )
        lo, hi = cis[level]
    total = counts.sum()
    return {
        "n_windows": int(counts.size),
        "n_tokens": int(total),
        "ppl_reference": float(np.exp(ref.sum(axis=1) / total).mean()),
        "ppl_condition": float(np.exp(cond.sum(axis=1) / total).mean()),
        "ratio": float(point),
        "ci_lo": lo,
        "ci_hi": hi,
        "delta_nll": float((cond.sum(axis=1).mean() - ref.sum(axis=1).mean()) / total),
        "trials": trials,
        "ci_method": "bootstrap over windows" if trials == 1 else "two-stage bootstrap (neuron draws, then windows)",
        "ci_mc_error": mc_error,
        "resamples": drawn,
        "ci_note": note,
    }


# ---------------------------------------------------------------- one value's spread, and correlations
def mean_and_sem(values: Iterable[float]) -> tuple[float, float]:
    """Mean and standard error (ddof=1) of the finite values. The one definition of the project: with no finite
    value both are NaN, and with a single value the SEM is NaN (one value says nothing about its spread)."""
    v = np.asarray(list(values) if not isinstance(values, np.ndarray) else values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan
    sem = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan
    return float(v.mean()), sem


def correlation_with_ci(x: Iterable[float], y: Iterable[float], *, n_boot: int = 2000, seed: int = 0) -> dict:
    """Pearson r and Spearman rho of paired values with percentile bootstrap 95% CIs (pairs resampled with
    replacement, ``default_rng(seed)``; resamples with a constant side are skipped and counted).
    Where a correlation is undefined (fewer than 3 finite pairs, or one side constant) every statistic is None
    and ``undefined`` says why: results are JSON, which has no NaN. With fewer than
    :data:`MIN_CORRELATION_POINTS` pairs r and rho are given but their CIs are None and ``ci_undefined`` says
    why (3 points resample to their own extremes)."""
    xa, ya = np.asarray(list(x), dtype=np.float64), np.asarray(list(y), dtype=np.float64)
    keep = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[keep], ya[keep]
    n = xa.size
    why = (
        f"{n} finite pairs (needs 3)"
        if n < 3
        else "x is constant"
        if np.ptp(xa) == 0
        else "y is constant"
        if np.ptp(ya) == 0
        else None
    )
    if why is not None:
        return {
            "pearson_r": None,
            "pearson_ci": [None, None],
            "spearman_rho": None,
            "spearman_ci": [None, None],
            "n": int(n),
            "n_boot": n_boot,
            "n_boot_used": 0,
            "seed": seed,
            "undefined": why,
        }
    if n < MIN_CORRELATION_POINTS:
        return {
            "pearson_r": float(stats.pearsonr(xa, ya).statistic),
            "pearson_ci": [None, None],
            "spearman_rho": float(stats.spearmanr(xa, ya).statistic),
            "spearman_ci": [None, None],
            "n": int(n),
            "n_boot": n_boot,
            "n_boot_used": 0,
            "seed": seed,
            "ci_undefined": f"{n} points (a bootstrap CI needs {MIN_CORRELATION_POINTS})",
        }
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    bx, by = xa[idx], ya[idx]
    ok = (np.ptp(bx, axis=1) > 0) & (np.ptp(by, axis=1) > 0)
    bx, by = bx[ok], by[ok]
    pearson_boot = _rowwise_pearson(bx, by)
    spearman_boot = _rowwise_pearson(_ranks(bx), _ranks(by))
    return {
        "pearson_r": float(stats.pearsonr(xa, ya).statistic),
        "pearson_ci": np.percentile(pearson_boot, [2.5, 97.5]).tolist() if ok.any() else [None, None],
        "spearman_rho": float(stats.spearmanr(xa, ya).statistic),
        "spearman_ci": np.percentile(spearman_boot, [2.5, 97.5]).tolist() if ok.any() else [None, None],
        "n": int(n),
        "n_boot": n_boot,
        "n_boot_used": int(ok.sum()),
        "seed": seed,
    }


def _ranks(a: np.ndarray) -> np.ndarray:
    return stats.rankdata(a, axis=1)


def _rowwise_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    return (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
