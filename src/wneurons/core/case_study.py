"""The single-neuron case study (paper §5, Fig. 5): one neuron's most differentiated pairs, with their tokens,
part-of-speech, raw pre-activations and sign class, and how robust the count of NN pairs is to the pairing.

Pure functions of the pair sample's arrays and tables; :mod:`wneurons.jobs.analyses` does the I/O.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from wneurons.core.pairs import SIGN_CLASSES, input_distances, pair_ratios, sign_classes, top_pairs
from wneurons.core.pos import FUNCTION_WORDS  # closed-class UPOS counted as function words (spec §C)


def top_pair_table(x: np.ndarray, y: np.ndarray, tokens: pl.DataFrame, k: int = 10) -> pl.DataFrame:
    """The ``k`` largest-ratio pairs of one neuron: rank, pair, and for both tokens (suffix _i / _j) position,
    token, context, upos, dep and raw y; then sign (nn / pn / pp), normalized input distance d_x / max d_x,
    normalized output distance d_y / median d_y, and the ratio r = (d_y / median) / (d_x / max).

    ``x`` [2P, d_in] and ``y`` [2P] (one neuron) in pair-sample row order; ``tokens`` has one row per sample row
    with columns position, token, context, upos, dep.
    """
    d_x = input_distances(x)
    y = np.asarray(y, dtype=np.float64)
    r = pair_ratios(d_x, y[:, None])[:, 0]
    order = top_pairs(r[:, None], k)[:, 0]
    signs = sign_classes(y[:, None])[:, 0]
    d_y = np.abs(y[0::2] - y[1::2])
    median = np.median(d_y[d_x > 0])
    first, second = tokens[2 * order], tokens[2 * order + 1]
    out = pl.DataFrame({"rank": np.arange(1, k + 1, dtype=np.int32), "pair": order.astype(np.int32)})
    for suffix, part in (("_i", first), ("_j", second)):
        out = out.with_columns(
            [part[c].alias(c + suffix) for c in ("position", "token", "context", "upos", "dep")]
            + [pl.Series("y" + suffix, y[2 * order + (suffix == "_j")])]
        )
    return out.with_columns(
        sign=pl.Series(np.array(SIGN_CLASSES)[signs[order]]),
        dx_norm=pl.Series(d_x[order] / d_x.max()),
        dy_norm=pl.Series(d_y[order] / median),
        r=pl.Series(r[order]),
    )


def all_pair_distances(x: np.ndarray, y: np.ndarray) -> pl.DataFrame:
    """Every pair of one neuron (Fig. 5c): pair, dx_norm = d_x / max d_x, dy_norm = d_y / median d_y, r."""
    d_x = input_distances(x)
    y = np.asarray(y, dtype=np.float64)
    d_y = np.abs(y[0::2] - y[1::2])
    r = pair_ratios(d_x, y[:, None])[:, 0]
    return pl.DataFrame(
        {
            "pair": np.arange(d_x.size, dtype=np.int32),
            "dx_norm": d_x / d_x.max(),
            "dy_norm": d_y / np.median(d_y[d_x > 0]),
            "r": r,
        }
    )


def pairing_robustness(x: np.ndarray, y: np.ndarray, upos: np.ndarray, seeds: list[int], k: int = 10) -> pl.DataFrame:
    """For each seed, the sampled rows re-paired at random (``default_rng(seed).permutation``) and the neuron's
    top-``k`` pairs recounted: n_nn (pairs with both pre-activations negative) and function_word_share (the share
    of the 2k tokens whose UPOS is in :data:`FUNCTION_WORDS`). ``y`` [2P] one neuron; ``upos`` [2P] str."""
    rows = []
    for seed in seeds:
        order = np.random.default_rng(seed).permutation(len(y))
        xs, ys = np.asarray(x)[order], np.asarray(y, dtype=np.float64)[order, None]
        top = top_pairs(pair_ratios(input_distances(xs), ys), k)[:, 0]
        n_nn = int((sign_classes(ys)[top, 0] == 0).sum())
        tags = np.asarray(upos, dtype=object)[order][np.concatenate([2 * top, 2 * top + 1])]
        rows.append({"seed": seed, "n_nn": n_nn, "function_word_share": float(np.isin(tags, FUNCTION_WORDS).mean())})
    return pl.DataFrame(rows)
