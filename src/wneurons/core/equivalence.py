"""The interval a two one-sided test (TOST) of equivalence reads: a paired accuracy difference lies within +-m at
alpha when its (1 - 2 alpha) interval lies inside (-m, m) (:func:`inside_margin`).

A percentile bootstrap of few discordant items is not that interval: with one item of 402 differing, its 98%
interval is [0, 0.995] points (the resampled count of that item is about Poisson(1), whose 99% quantile is 4),
inside +-1, while with none differing the exact bound is 1.14 points: more agreement would give the weaker verdict
(issue 44). So a single trial's interval is computed from its discordant counts exactly (:func:`discordance_interval`),
by one rule for zero, few and many discordant items, and it narrows whenever an agreeing item is added.

The accuracy difference of two conditions on the same items is ``p_r - p_c`` (items right only under the reference,
only under the compared condition) = ``p_d (2 pi - 1)``, with ``p_d`` the share of items that differ and ``pi`` the
share of those that favour the reference. Each is bounded by a one-sided Clopper-Pearson bound at alpha / 2
(``p_d`` from D of n items, ``pi`` from ``only_reference`` of D); by the union bound each end of the interval errs
with probability at most alpha, at every n: an exact, conservative TOST. For many discordant items it is about
1.1-1.3 times as wide as the bootstrap's interval (alpha / 2 instead of alpha, and ``p_d``'s own uncertainty).

Pooled random trials (per-item mean differences in [-1, 1]) have no such exact bound; their two-stage interval is
widened by the same exact bound on the share of items that differ (:func:`pooled_discordance_interval`).
"""

from __future__ import annotations

import math

from scipy import stats

from wneurons.core.uncertainty import CI_LEVEL, MIN_RESAMPLING_UNITS, equivalence_columns


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    """The one-sided exact (Clopper-Pearson) lower and upper bounds of a binomial proportion from k of n, each at
    confidence 1 - ``alpha`` (fractions; 0 below k = 0, 1 above k = n)."""
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k = {k}, n = {n}")
    lo = 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))
    hi = 1.0 if k == n else float(stats.beta.ppf(1 - alpha, k + 1, n - k))
    return lo, hi


def zero_discordance_bound(n: int, alpha: float) -> float:
    """With no discordant item among n, the exact one-sided (1 - alpha) upper bound of the discordance rate,
    1 - alpha^(1/n) (the Clopper-Pearson bound at 0 of n), which bounds |accuracy difference|."""
    return 1.0 - alpha ** (1.0 / n)


def discordance_interval(only_reference: int, only_condition: int, n: int, alpha: float) -> tuple[float, float]:
    """The exact (1 - 2 alpha) TOST interval of ``acc(reference) - acc(condition)`` from the discordant counts of
    n paired 0/1 outcomes: ``U_d * [min(0, 2 L_pi - 1), max(0, 2 U_pi - 1)]`` with ``U_d`` the upper
    Clopper-Pearson bound at alpha / 2 of D = only_reference + only_condition of n, and ``[L_pi, U_pi]`` those
    of only_reference of D (D = 0: [0, 1], nothing known of the direction). Fractions."""
    d = only_reference + only_condition
    upper_d = clopper_pearson(d, n, alpha / 2)[1]
    lo_pi, hi_pi = clopper_pearson(only_reference, d, alpha / 2) if d else (0.0, 1.0)
    return upper_d * min(0.0, 2 * lo_pi - 1), upper_d * max(0.0, 2 * hi_pi - 1)


def pooled_discordance_interval(lo: float, hi: float, differing: int, n: int, alpha: float) -> tuple[float, float]:
    """The (1 - 2 alpha) interval [lo, hi] of a pooled difference (per-item differences in [-1, 1], ``differing``
    of n non-zero) widened by the exact bound on the share that differs: each end away from 0 is scaled by
    ``U_d / (differing / n)`` (``U_d``: the Clopper-Pearson upper bound at alpha / 2), never past ``+-U_d``
    (|difference| <= the share that differs); with no item differing, ``+-U_d``."""
    upper_d = clopper_pearson(differing, n, alpha / 2)[1]
    if differing == 0:
        return -upper_d, upper_d
    scale = upper_d * n / differing
    return min(lo, max(lo * scale, -upper_d)), max(hi, min(hi * scale, upper_d))


def equivalence_interval(row: dict, alpha: float, level: float = CI_LEVEL) -> tuple[float, float, str]:
    """(lo, hi, how) of the (1 - 2 alpha) interval of a paired accuracy row, whose inclusion in (-m, m) is the TOST
    at alpha. With the row's discordant counts (``only_reference``, ``only_condition``): one trial, the exact
    :func:`discordance_interval`; pooled trials, the row's own interval widened by :func:`pooled_discordance_interval`.
    Without counts: the row's (1 - 2 alpha) column, else a normal approximation from its ``level`` CI
    (drop -+ z_{1-alpha} se). NaN (and why) without a CI or under MIN_RESAMPLING_UNITS items."""
    n = int(row.get("n") or 0)
    counted = row.get("only_reference") is not None and row.get("only_condition") is not None and n > 0
    if counted and n < MIN_RESAMPLING_UNITS:
        return math.nan, math.nan, f"no interval from {n} items (needs {MIN_RESAMPLING_UNITS})"
    differing = int(row["only_reference"]) + int(row["only_condition"]) if counted else 0
    exact_words = f"{differing} of {n} items differ: Clopper–Pearson at α/2 on that share"
    if counted and int(row.get("trials") or 1) == 1:
        lo, hi = discordance_interval(int(row["only_reference"]), int(row["only_condition"]), n, alpha)
        return lo, hi, f"exact, {exact_words} and on its direction"
    lo_col, hi_col = equivalence_columns(alpha)
    lo, hi = row.get(lo_col), row.get(hi_col)
    if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
        lo, hi, how = float(lo), float(hi), f"{1 - 2 * alpha:.0%} interval"
    else:
        c_lo, c_hi = row.get("ci_lo"), row.get("ci_hi")
        if c_lo is None or c_hi is None or not (math.isfinite(c_lo) and math.isfinite(c_hi)):
            return math.nan, math.nan, "no CI"
        half = stats.norm.ppf(1 - alpha) * (c_hi - c_lo) / (2 * stats.norm.ppf(0.5 + level / 2))
        lo, hi = row["drop"] - half, row["drop"] + half
        how = f"{1 - 2 * alpha:.0%} interval, normal approximation from the 95% CI"
    if counted:
        lo, hi = pooled_discordance_interval(lo, hi, differing, n, alpha)
        how += f", widened: {exact_words}"
    return lo, hi, how


def inside_margin(lo: float, hi: float, margin: float) -> bool:
    """Whether an interval lies inside (-margin, margin): equivalence by TOST when it is the (1 - 2 alpha) one."""
    return math.isfinite(lo) and math.isfinite(hi) and -margin < lo and hi < margin
