"""Which neurons an ablation condition perturbs, per layer (Section 3 of the paper).

- ``wasserstein``: the top p% WD neurons of each layer (the experimental group);
- ``random``: as many neurons per layer as ``wasserstein`` takes there, uniformly, seeded (the authors did not
  exclude top neurons; neither do we);
- ``lowest``: the bottom m% WD neurons of each layer (the least entangled);
- ``matched``: ``lowest`` with m found by :func:`perplexity_matched_fraction` so that perplexity matches the
  wasserstein condition.

Counts (``rule``): ``"authors"`` (the default) is the authors' code, ``x > np.percentile(x, 100 - p)`` for the top
and the mirror ``x < np.percentile(x, m)`` for the bottom; ``"round"`` takes ``max(1, round(K * p / 100))``
neurons, ties by neuron index. They do NOT always agree: for K distinct values the authors' rule takes
``K - 1 - floor((K - 1) * (1 - p / 100))`` neurons (linear interpolation between order statistics), one more
than rounding for some (K, p): on the demo's SmolLM2-135M table (30 layers x 1536 neurons, no ties) 16 instead
of 15 in every layer at 1%, the same counts at 0.5, 2 and 5%; Llama-3.1-8B (K = 14336) 144 vs 143 at 1%.
Ties at the threshold take fewer, and a small p over few neurons can take none. docs/conventions.md has the
table. Dead (constant) neurons have NaN WD and rank lowest under both rules.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import polars as pl
import torch

COUNT_RULES = ("authors", "round")


def neurons_per_layer(n_neurons: int, percent: float) -> int:
    """Neurons the ``"round"`` rule perturbs in a layer of ``n_neurons`` at ``percent`` (0 < percent <= 100)."""
    _check_percent(percent)
    return max(1, min(n_neurons, round(n_neurons * percent / 100)))


def _check_percent(percent: float) -> None:
    if not 0 < percent <= 100:
        raise ValueError(f"percent must be in (0, 100], got {percent}")


def _nan_lowest(values: np.ndarray) -> np.ndarray:
    """``values`` as float64 with NaN replaced by a finite number below every other value (so that it ranks
    lowest and np.percentile stays finite: an infinite stand-in would make the interpolation NaN)."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"expected a 1-D array of per-neuron values, got shape {x.shape}")
    nan = np.isnan(x)
    if not nan.any():
        return x
    finite = x[~nan]
    low = finite.min() - max(1.0, abs(finite.min())) if finite.size else 0.0
    return np.where(nan, low, x)


def top_percent_indices(values: np.ndarray, percent: float, rule: str = "authors") -> np.ndarray:
    """Sorted int64 indices of the top ``percent``% of a 1-D array (NaN ranks lowest).

    ``rule="authors"``: ``values > np.percentile(values, 100 - percent)`` (may select fewer than K * p / 100 when
    values tie at the threshold, and none at all); ``"round"``: the ``max(1, round(K * p / 100))`` highest, ties
    by lower index.
    """
    return _percent_indices(values, percent, rule, top=True)


def bottom_percent_indices(values: np.ndarray, percent: float, rule: str = "authors") -> np.ndarray:
    """Sorted int64 indices of the bottom ``percent``% (the mirror of :func:`top_percent_indices`):
    ``values < np.percentile(values, percent)`` under ``"authors"``; NaN ranks lowest, so it is taken first."""
    return _percent_indices(values, percent, rule, top=False)


def _percent_indices(values: np.ndarray, percent: float, rule: str, *, top: bool) -> np.ndarray:
    _check_percent(percent)
    x = _nan_lowest(values)
    if x.size == 0:
        return np.empty(0, dtype=np.int64)
    if rule == "authors":
        chosen = x > np.percentile(x, 100 - percent) if top else x < np.percentile(x, percent)
        return np.flatnonzero(chosen).astype(np.int64)
    if rule == "round":
        k = neurons_per_layer(x.size, percent)
        # a stable argsort keeps the lower index first among ties (on -x for the top)
        order = np.argsort(-x if top else x, kind="stable")[:k]
        return np.sort(order).astype(np.int64)
    raise ValueError(f"unknown count rule {rule!r}; expected one of {', '.join(COUNT_RULES)}")


def _layer_wd(stats: pl.DataFrame, layer: int) -> np.ndarray:
    rows = stats.filter(pl.col("layer") == layer).sort("neuron")
    if rows.height == 0:
        present = sorted(stats["layer"].unique().to_list())
        raise ValueError(f"no neuron statistics for layer {layer} (the table has layers {present}; see neurons.layers)")
    if not np.array_equal(rows["neuron"].to_numpy(), np.arange(rows.height)):
        raise ValueError(f"neuron statistics of layer {layer} are not one row per neuron 0..K-1")
    return rows["wd"].to_numpy().astype(np.float64)


def select_neurons(
    stats: pl.DataFrame,
    selector: str,
    percent: float,
    layers: list[int],
    *,
    seed: int = 0,
    rule: str = "authors",
) -> dict[int, torch.Tensor]:
    """Sorted neuron indices per layer for ``selector`` at ``percent`` of each layer's neurons.

    ``stats`` is the neurons table (columns layer, neuron, wd); ``rule`` the count rule (see the module doc).
    ``random`` takes as many neurons per layer as ``wasserstein`` at the same percent, drawn from
    ``default_rng([seed, L])`` for layer L, so adding layers never changes another layer's draw.
    """
    if selector not in ("wasserstein", "random", "lowest", "matched"):
        raise ValueError(f"unknown selector {selector!r}; expected wasserstein, random, lowest or matched")
    chosen: dict[int, torch.Tensor] = {}
    for layer in layers:
        wd = _layer_wd(stats, layer)
        if selector in ("lowest", "matched"):
            idx = bottom_percent_indices(wd, percent, rule)
        else:
            idx = top_percent_indices(wd, percent, rule)
            if selector == "random":
                idx = np.sort(np.random.default_rng([seed, layer]).choice(len(wd), size=len(idx), replace=False))
        chosen[layer] = torch.as_tensor(idx, dtype=torch.long)
    return chosen


def perplexity_matched_fraction(
    perplexity_at: Callable[[float], float],
    target: float,
    *,
    clean: float | None = None,
    tolerance: float = 0.02,
    nll_increase_tolerance: float | None = None,
    max_percent: float = 95.0,
    max_steps: int = 12,
) -> dict:
    """Find m (percent of lowest-WD neurons per layer) so that ``perplexity_at(m)`` matches ``target``.

    Perplexity grows with m (more neurons clamped), so the root of g(m) = log(ppl(m) / target) is bracketed by
    m = 0 (``clean``, the unablated perplexity; evaluated as ``perplexity_at(0)`` when not given) and
    ``max_percent`` (evaluated first). Inside the bracket: false position with the Illinois modification
    (interpolation in log perplexity; converges in a few evaluations where bisection needs one per halving),
    falling back to the midpoint when an interpolated point leaves the bracket. Stops when the relative gap
    |ppl/target - 1| <= ``tolerance`` and, with ``nll_increase_tolerance`` (e.g. 0.1), the control's NLL increase
    over clean is within that fraction of the target's (|log(ppl/clean) / log(target/clean) - 1| <= it: a 5%
    perplexity gap leaves a control with a third less damage when the target raises perplexity by 15%), or after
    ``max_steps`` evaluations (the clean one not counted).

    Returns {"percent": best m, "perplexity": its perplexity, "target_perplexity", "relative_gap", "tolerance",
    "nll_increase_ratio" (the best m's NLL increase over the target's; None when the target does not raise
    perplexity), "nll_increase_tolerance", "converged", "unreachable" (even ``max_percent`` stays below target),
    "reason" (why it stopped), "trace": [{"percent", "perplexity"}...]}. If even ``max_percent`` stays below
    target, returns it with converged False (reported, not hidden).
    """
    if not (math.isfinite(target) and target > 0):
        raise ValueError(f"target perplexity must be positive and finite, got {target}")
    trace: list[dict] = []

    def evaluate(m: float) -> float:
        ppl = float(perplexity_at(m))
        trace.append({"percent": m, "perplexity": ppl})
        return ppl

    if clean is None:
        clean = evaluate(0.0)
    steps = 0
    lo, hi = 0.0, float(max_percent)
    g_lo = math.log(clean / target)
    ppl_hi = evaluate(hi)
    steps += 1
    g_hi = math.log(ppl_hi / target)
    best = (abs(ppl_hi / target - 1), hi, ppl_hi)

    def reach(ppl: float) -> float | None:
        return math.log(ppl / clean) / math.log(target / clean) if target > clean else None

    def matched(best: tuple) -> bool:
        if best[0] > tolerance:
            return False
        if nll_increase_tolerance is None:
            return True
        share = reach(best[2])
        return share is not None and abs(share - 1) <= nll_increase_tolerance

    if ppl_hi < target:
        reason = f"clamping the lowest {max_percent:g}% still leaves perplexity below the target"
    elif g_lo >= 0:
        reason = "the clean perplexity already reaches the target"
    else:
        reason = f"{max_steps} evaluations"
        side = 0  # which end moved last: -1 lo, +1 hi (Illinois halves the other end's value on repeats)
        while steps < max_steps and not matched(best):
            m = hi - g_hi * (hi - lo) / (g_hi - g_lo)
            if not lo < m < hi:
                m = (lo + hi) / 2
            ppl = evaluate(m)
            steps += 1
            best = min(best, (abs(ppl / target - 1), m, ppl))
            g = math.log(ppl / target)
            if g >= 0:
                hi, g_hi = m, g
                g_lo = g_lo / 2 if side == 1 else g_lo
                side = 1
            else:
                lo, g_lo = m, g
                g_hi = g_hi / 2 if side == -1 else g_hi
                side = -1
        if matched(best):
            reason = "within tolerance"
    gap, percent, ppl = best
    out = {
        "percent": percent,
        "perplexity": ppl,
        "target_perplexity": target,
        "relative_gap": gap,
        "tolerance": tolerance,
        "converged": gap <= tolerance,
        "reason": reason,
        "trace": trace,
    }
    if nll_increase_tolerance is not None:  # the keys of a search without it stay as they were
        out["converged"] = target > clean and matched(best)
        out["nll_increase_ratio"] = reach(ppl)
        out["nll_increase_tolerance"] = nll_increase_tolerance
        out["unreachable"] = ppl_hi < target
    return out
