"""Layerwise NN share vs single-layer ablation error (paper §7, Fig. 7b-d).

The error of a layer is the clean accuracy minus the accuracy with the top-1% WD neurons of that layer alone
clamped (scope ``lK``), with a paired SEM over the same items. It is set against the layer's NN / PN / PP shares
among the most differentiated pairs (:func:`wneurons.core.pairs.composition`) by Pearson and Spearman correlation over
the layers, with bootstrap CIs over layers. Pure functions; :mod:`wneurons.jobs.analyses` does the I/O.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy import stats

from wneurons.core.pairs import SIGN_CLASSES
from wneurons.core.uncertainty import correlation_with_ci, mean_and_sem


def paired_error(clean: pl.DataFrame, ablated: pl.DataFrame) -> tuple[float, float, int]:
    """(clean accuracy - ablated accuracy, its paired SEM, items) over the items both tables hold (``item``,
    ``correct``): SEM = std(correct_clean - correct_ablated, ddof=1) / sqrt(n)."""
    both = clean.select("item", "correct").join(ablated.select("item", "correct"), on="item", suffix="_ablated")
    if both.height != clean.height or both.height != ablated.height:
        raise ValueError(f"layerwise: clean and ablated items differ ({clean.height} vs {ablated.height} rows)")
    diff = both["correct"].cast(pl.Float64).to_numpy() - both["correct_ablated"].cast(pl.Float64).to_numpy()
    mean, sem = mean_and_sem(diff)
    return mean, sem, int(diff.size)


def normalize_minmax(values: np.ndarray) -> np.ndarray:
    """Min-max scaling to [0, 1] over layers (Fig. 7d; the paper does not say how it normalized); a constant
    series maps to 0."""
    values = np.asarray(values, dtype=np.float64)
    span = np.nanmax(values) - np.nanmin(values)
    return (values - np.nanmin(values)) / span if span > 0 else np.zeros_like(values)


def correlations(table: pl.DataFrame, errors: list[str], n_boot: int = 2000, seed: int = 0) -> pl.DataFrame:
    """Pearson r and Spearman rho (with p-values) of each error column vs share_nn / share_pn / share_pp over the
    layers (rows of ``table``), and a 95% bootstrap CI of r over layers
    (:func:`wneurons.core.uncertainty.correlation_with_ci`: seeded; resamples with a constant series are skipped).
    Where a correlation is undefined (fewer than 3 layers, or a constant series) the row has only its names."""
    rows = []
    for error in errors:
        e = table[error].to_numpy().astype(np.float64)
        for name in SIGN_CLASSES:
            s = table[f"share_{name}"].to_numpy().astype(np.float64)
            row = {"error": error, "share": name, "n_layers": table.height}
            ci = correlation_with_ci(s, e, n_boot=n_boot, seed=seed)
            if ci["pearson_r"] is not None:
                finite = np.isfinite(s) & np.isfinite(e)
                pearson, spearman = stats.pearsonr(s[finite], e[finite]), stats.spearmanr(s[finite], e[finite])
                row |= {
                    "pearson_r": ci["pearson_r"],
                    "pearson_p": float(pearson.pvalue),
                    "spearman_rho": ci["spearman_rho"],
                    "spearman_p": float(spearman.pvalue),
                    "r_ci_lo": ci["pearson_ci"][0],
                    "r_ci_hi": ci["pearson_ci"][1],
                }
                if "ci_undefined" in ci:  # too few layers for a bootstrap CI: the reason instead
                    row["ci_undefined"] = ci["ci_undefined"]
            rows.append(row)
    return pl.DataFrame(rows, infer_schema_length=None)
