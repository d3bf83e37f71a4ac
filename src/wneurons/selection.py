"""Which neurons an ablation condition perturbs, per layer (Section 3 of the paper).

- ``wasserstein``: the top p% WD neurons of each layer (the experimental group);
- ``random``: the same count per layer, uniformly, seeded (the authors did not exclude top neurons; neither do we);
- ``lowest``: the bottom m% WD neurons of each layer (the least entangled);
- ``matched``: ``lowest`` with m found by :func:`perplexity_matched_fraction` so that perplexity matches the
  wasserstein condition.

Counts: k = round(K * p / 100) neurons per layer of K, at least 1 (the authors' ``WD > percentile(WD, 100 - p)``
gives the same count up to ties). Ties in WD are broken by neuron index, so selections are deterministic.
Dead (constant) neurons have NaN WD and rank lowest.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import polars as pl
import torch


def neurons_per_layer(n_neurons: int, percent: float) -> int:
    """Neurons perturbed in a layer of ``n_neurons`` at ``percent`` (0 < percent <= 100)."""
    if not 0 < percent <= 100:
        raise ValueError(f"percent must be in (0, 100], got {percent}")
    return max(1, min(n_neurons, round(n_neurons * percent / 100)))


def _layer_wd(stats: pl.DataFrame, layer: int) -> np.ndarray:
    rows = stats.filter(pl.col("layer") == layer).sort("neuron")
    if rows.height == 0:
        raise ValueError(f"no neuron statistics for layer {layer}")
    if not np.array_equal(rows["neuron"].to_numpy(), np.arange(rows.height)):
        raise ValueError(f"neuron statistics of layer {layer} are not one row per neuron 0..K-1")
    wd = rows["wd"].to_numpy().astype(np.float64)
    return np.where(np.isnan(wd), -np.inf, wd)


def select_neurons(
    stats: pl.DataFrame, selector: str, percent: float, layers: list[int], *, seed: int = 0
) -> dict[int, torch.Tensor]:
    """Sorted neuron indices per layer for ``selector`` at ``percent`` of each layer's neurons.

    ``stats`` is the neurons table (columns layer, neuron, wd). ``seed`` is used by ``random`` only: layer L
    draws from ``default_rng([seed, L])``, so adding layers never changes another layer's draw.
    """
    chosen: dict[int, torch.Tensor] = {}
    for layer in layers:
        wd = _layer_wd(stats, layer)
        k = neurons_per_layer(len(wd), percent)
        # stable argsort on (-wd) puts the highest WD first, ties by lower neuron index
        if selector == "wasserstein":
            idx = np.argsort(-wd, kind="stable")[:k]
        elif selector in ("lowest", "matched"):
            idx = np.argsort(wd, kind="stable")[:k]
        elif selector == "random":
            idx = np.random.default_rng([seed, layer]).choice(len(wd), size=k, replace=False)
        else:
            raise ValueError(f"unknown selector {selector!r}; expected wasserstein, random, lowest or matched")
        chosen[layer] = torch.as_tensor(np.sort(idx), dtype=torch.long)
    return chosen


def perplexity_matched_fraction(
    perplexity_at: Callable[[float], float],
    target: float,
    *,
    tolerance: float = 0.02,
    max_percent: float = 95.0,
    max_steps: int = 12,
) -> dict:
    """Bisection on m (percent of lowest-WD neurons per layer) so that perplexity_at(m) matches ``target``.

    Perplexity grows with m (more neurons clamped), so bisection applies. Stops when the relative gap
    |ppl/target - 1| <= tolerance or after ``max_steps`` evaluations. Returns {"percent": best m,
    "perplexity": its perplexity, "relative_gap", "converged", "trace": [{"percent", "perplexity"}...]}.
    If even ``max_percent`` stays below target, returns it with converged False (reported, not hidden).
    """
    if not (math.isfinite(target) and target > 0):
        raise ValueError(f"target perplexity must be positive and finite, got {target}")
    trace: list[dict] = []

    def evaluate(m: float) -> float:
        ppl = float(perplexity_at(m))
        trace.append({"percent": m, "perplexity": ppl})
        return ppl

    lo, hi = 0.0, float(max_percent)
    best = (math.inf, hi, math.nan)
    ppl_hi = evaluate(hi)
    best = min(best, (abs(ppl_hi / target - 1), hi, ppl_hi))
    if ppl_hi >= target:
        for _ in range(max_steps - 1):
            if best[0] <= tolerance:
                break
            mid = (lo + hi) / 2
            ppl = evaluate(mid)
            best = min(best, (abs(ppl / target - 1), mid, ppl))
            if ppl < target:
                lo = mid
            else:
                hi = mid
    gap, percent, ppl = best
    return {
        "percent": percent,
        "perplexity": ppl,
        "target_perplexity": target,
        "relative_gap": gap,
        "converged": gap <= tolerance,
        "trace": trace,
    }


def top_percent_indices(values: np.ndarray, percent: float, rule: str = "authors") -> np.ndarray:
    """Sorted int64 indices of the top ``percent`` % of a 1-D array (NaN ranks lowest).

    ``rule="authors"``: ``values > np.percentile(values, 100 - percent)`` (the authors' code; ties at the
    threshold are left out, so the count can be one short of K·p/100); ``rule="round"``:
    ``max(1, round(K·p/100))`` highest values, ties by lower index.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"top_percent_indices: values must be 1-D, got shape {v.shape}")
    if not 0 < percent <= 100:
        raise ValueError(f"percent must be in (0, 100], got {percent}")
    ranked = np.where(np.isnan(v), -np.inf, v)
    if rule == "authors":
        finite = ranked[np.isfinite(ranked)]
        if finite.size == 0:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(ranked > np.percentile(finite, 100 - percent)).astype(np.int64)
    if rule == "round":
        k = neurons_per_layer(v.size, percent)
        return np.sort(np.argsort(-ranked, kind="stable")[:k]).astype(np.int64)
    raise ValueError(f"unknown top-percent rule {rule!r}; expected authors or round")
