"""Most-differentiated token pairs of each neuron and their sign composition (paper §5-7, Fig. 5, 6a, 7a).

A *pair sample* is 2P token positions drawn once per model (the same for every layer and neuron); pair p is
rows (2p, 2p+1), the convention of :func:`wneurons.core.stats.mapping_difficulty`, so a pair sample taken from the
test shards' MD positions reproduces the neuron table's MD exactly. For a pair (i, j) of one neuron the *pair
ratio* is ``r = (|y_i - y_j| / median_pairs |y-diff|) / (||x_i - x_j|| / max_pairs ||x-diff||)``; MD is the mean
of r over the pairs, and the "most differentiated pairs" are those with the largest r.

Each pair is labelled by the signs of its two raw pre-activations: NN (both < 0), PP (both >= 0; zero counts as
positive, as the clamp leaves it alone) or PN (one of each). Everything here is a pure function of arrays and
tables; the jobs in :mod:`wneurons.jobs.analyses` do the I/O.
"""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl

from wneurons.core.uncertainty import mean_and_sem

NN, PN, PP = 0, 1, 2
SIGN_CLASSES = ("nn", "pn", "pp")


def draw_pair_positions(n_tokens: int, n_positions: int, seed: int) -> np.ndarray:
    """``n_positions`` distinct token positions (int64, drawing order) out of ``n_tokens``, from
    ``numpy.random.default_rng(seed)``; consecutive entries form the pairs."""
    if n_positions % 2 or not 2 <= n_positions <= n_tokens:
        raise ValueError(f"pairs: need an even number of positions in [2, {n_tokens}], got {n_positions}")
    return np.random.default_rng(seed).choice(n_tokens, n_positions, replace=False).astype(np.int64)


def input_distances(x: np.ndarray) -> np.ndarray:
    """d_x = ||x_{2p} - x_{2p+1}||_2 for each pair p of ``x`` [2P, d_in], float64 [P]."""
    xa = np.asarray(x, dtype=np.float64)
    if xa.shape[0] % 2:
        raise ValueError(f"pairs: x needs an even number of rows (2P), got {xa.shape[0]}")
    return np.linalg.norm(xa[0::2] - xa[1::2], axis=1)


def pair_ratios(d_x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The pair ratio r [P, K] (float64) of every pair and neuron from d_x [P] and raw outputs y [2P, K].

    Pairs with identical inputs (d_x = 0) have an undefined ratio and get NaN; they are also left out of the
    median, as in :func:`wneurons.core.stats.mapping_difficulty`. A neuron whose median d_y is 0 gets NaN throughout.
    """
    ya = np.asarray(y, dtype=np.float64)
    if ya.shape[0] != 2 * d_x.shape[0]:
        raise ValueError(f"pairs: y has {ya.shape[0]} rows, d_x {d_x.shape[0]} pairs (need 2P rows)")
    keep = d_x > 0
    if not keep.any():
        raise ValueError("pairs: every pair has identical inputs (d_x = 0)")
    d_y = np.abs(ya[0::2] - ya[1::2])
    median = np.median(d_y[keep], axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (d_y / median) * (d_x[keep].max() / d_x)[:, None]
    r[~keep] = np.nan
    r[:, median == 0] = np.nan
    return r


def sign_classes(y: np.ndarray) -> np.ndarray:
    """NN / PN / PP code (0 / 1 / 2, int8) of every pair and neuron from raw outputs y [2P, K] -> [P, K]."""
    positive = np.asarray(y) >= 0
    return (positive[0::2].astype(np.int8) + positive[1::2].astype(np.int8)).astype(np.int8)


def top_pairs(r: np.ndarray, k: int) -> np.ndarray:
    """Indices [k, K] of each neuron's k largest ratios, largest first; ties by pair index, NaN ranks last."""
    if not 1 <= k <= r.shape[0]:
        raise ValueError(f"pairs: top_k={k} must lie in [1, {r.shape[0]}] pairs")
    key = np.where(np.isnan(r), -np.inf, r)
    return np.argsort(-key, axis=0, kind="stable")[:k]


def pair_signs(x: np.ndarray, y: np.ndarray, layer: int, top_k: list[int], chunk: int = 2048) -> pl.DataFrame:
    """One row per neuron of a layer: md_pairs (mean r), frac_negative at the sampled tokens, NN/PN/PP counts
    among its top-k pairs for each k (``n_nn_at_10`` ...) and the shares over all valid pairs (``share_all_nn``
    ...: the null an NN excess is measured against). ``x`` [2P, d_in], ``y`` [2P, K] raw outputs."""
    d_x = input_distances(x)
    y = np.asarray(y)
    n_neurons = y.shape[1]
    columns: dict[str, list[np.ndarray]] = {}

    def add(name: str, values: np.ndarray) -> None:
        columns.setdefault(name, []).append(values)

    for lo in range(0, n_neurons, chunk):  # chunks of neurons bound the [P, chunk] float64 temporaries
        ys = y[:, lo : lo + chunk]
        r = pair_ratios(d_x, ys)
        signs = sign_classes(ys)
        valid = ~np.isnan(r)
        with warnings.catch_warnings():  # a dead neuron's all-NaN column is meant to give NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            add("md_pairs", np.nanmean(r, axis=0))
        add("frac_negative", (np.asarray(ys) < 0).mean(axis=0))
        n_valid = valid.sum(axis=0)
        for code, name in enumerate(SIGN_CLASSES):
            with np.errstate(invalid="ignore", divide="ignore"):
                add(f"share_all_{name}", ((signs == code) & valid).sum(axis=0) / n_valid)
        for k in top_k:
            picked = np.take_along_axis(signs, top_pairs(r, k), axis=0)
            for code, name in enumerate(SIGN_CLASSES):
                add(f"n_{name}_at_{k}", (picked == code).sum(axis=0).astype(np.int32))
    table = {"layer": np.full(n_neurons, layer, dtype=np.int32), "neuron": np.arange(n_neurons, dtype=np.int32)}
    table |= {name: np.concatenate(parts) for name, parts in columns.items()}
    return pl.DataFrame(table)


def composition(signs: pl.DataFrame, selected: pl.DataFrame, top_k: int, percent: float) -> pl.DataFrame:
    """Per layer, the NN / PN / PP shares among the top-``top_k`` pairs of the ``selected`` neurons (rows of
    ``signs`` whose (layer, neuron) appear in ``selected``): pooled counts / (n_neurons * top_k), which equals
    the mean of the per-neuron shares, with the SEM across neurons (ddof=1); and the null shares over all pairs
    of the same neurons (``null_*``) and the sign base rate for NN (mean frac_negative^2)."""
    rows = signs.join(selected.select("layer", "neuron"), on=["layer", "neuron"], how="semi")
    exprs, order = [pl.len().alias("n_neurons")], ["layer", "n_neurons"]
    for name in SIGN_CLASSES:
        exprs += [
            (pl.col(f"n_{name}_at_{top_k}").sum() / (pl.len() * top_k)).alias(f"share_{name}"),
            pl.col(f"share_all_{name}").mean().alias(f"null_{name}"),
        ]
        order += [f"share_{name}", f"sem_{name}", f"null_{name}"]
    exprs.append((pl.col("frac_negative") ** 2).mean().alias("base_rate_nn"))
    out = rows.group_by("layer").agg(exprs).sort("layer")
    # The SEM of the per-neuron shares, from the project's one definition (NaN for a single neuron).
    sems = {f"sem_{name}": [] for name in SIGN_CLASSES}
    for layer in out["layer"]:
        counts = rows.filter(pl.col("layer") == layer)
        for name in SIGN_CLASSES:
            sems[f"sem_{name}"].append(mean_and_sem(counts[f"n_{name}_at_{top_k}"].to_numpy() / top_k)[1])
    out = out.with_columns(pl.Series(name, values, dtype=pl.Float64) for name, values in sems.items())
    out = out.select(*order, "base_rate_nn")
    return out.with_columns(percent=pl.lit(float(percent)), top_k=pl.lit(int(top_k), dtype=pl.Int32))
