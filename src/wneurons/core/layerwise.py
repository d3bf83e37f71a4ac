"""Layerwise NN share vs single-layer ablation error (paper §7, Fig. 7b-d).

The error of a layer is the clean accuracy minus the accuracy with the top-1% WD neurons of that layer alone
clamped (scope ``lK``), with a paired SEM over the same items. It is set against the layer's NN / PN / PP shares
among the most differentiated pairs (:func:`wneurons.core.pairs.composition`) by Pearson and Spearman correlation over
the layers, with bootstrap CIs over layers. Pure functions; :mod:`wneurons.jobs.analyses` does the I/O.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from scipy import stats

from wneurons.core.pairs import SIGN_CLASSES
from wneurons.core.uncertainty import MIN_CORRELATION_POINTS


def paired_error(clean: pl.DataFrame, ablated: pl.DataFrame) -> tuple[float, float, int]:
    """(clean accuracy - ablated accuracy, its paired SEM, items) over the items both tables hold (``item``,
    ``correct``): SEM = std(correct_clean - correct_ablated, ddof=1) / sqrt(n)."""
    both = clean.select("item", "correct").join(ablated.select("item", "correct"), on="item", suffix="_ablated")
    if both.height != clean.height or both.height != ablated.height:
        raise ValueError(f"layerwise: clean and ablated items differ ({clean.height} vs {ablated.height} rows)")
    diff = both["correct"].cast(pl.Float64).to_numpy() - both["correct_ablated"].cast(pl.Float64).to_numpy()
    sem = float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else float("nan")
    return float(diff.mean()), sem, int(diff.size)


def normalize_minmax(values: np.ndarray) -> np.ndarray:
    """Min-max scaling to [0, 1] over layers (Fig. 7d; the paper does not say how it normalized); a constant
    series maps to 0."""
    values = np.asarray(values, dtype=np.float64)
    span = np.nanmax(values) - np.nanmin(values)
    return (values - np.nanmin(values)) / span if span > 0 else np.zeros_like(values)


def correlations(table: pl.DataFrame, errors: list[str], n_boot: int = 2000, seed: int = 0) -> pl.DataFrame:
    """Pearson r and Spearman rho (with p-values) of each error column vs share_nn / share_pn / share_pp over the
    layers (rows of ``table``), and a 95% bootstrap CI of r over layers (seeded; resamples with a constant series
    are skipped)."""
    rng = np.random.default_rng(seed)
    n = table.height
    draws = rng.integers(0, n, size=(n_boot, n))
    rows = []
    for error in errors:
        e = table[error].to_numpy().astype(np.float64)
        for name in SIGN_CLASSES:
            s = table[f"share_{name}"].to_numpy().astype(np.float64)
            row = {"error": error, "share": name, "n_layers": n}
            if n >= 3 and np.ptp(e) > 0 and np.ptp(s) > 0:
                pearson, spearman = stats.pearsonr(s, e), stats.spearmanr(s, e)
                es, ss = e[draws], s[draws]
                ok = (np.ptp(es, axis=1) > 0) & (np.ptp(ss, axis=1) > 0)
                ec = es[ok] - es[ok].mean(axis=1, keepdims=True)
                sc = ss[ok] - ss[ok].mean(axis=1, keepdims=True)
                boot = (ec * sc).sum(axis=1) / np.sqrt((ec**2).sum(axis=1) * (sc**2).sum(axis=1))
                few = n < MIN_CORRELATION_POINTS  # 3 layers resample to [r, 1]: no CI, the reason instead
                row |= {
                    "pearson_r": float(pearson.statistic),
                    "pearson_p": float(pearson.pvalue),
                    "spearman_rho": float(spearman.statistic),
                    "spearman_p": float(spearman.pvalue),
                    "r_ci_lo": None if few else float(np.percentile(boot, 2.5)),
                    "r_ci_hi": None if few else float(np.percentile(boot, 97.5)),
                }
                if few:
                    row["ci_undefined"] = f"{n} layers (a bootstrap CI needs {MIN_CORRELATION_POINTS})"
            rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)
