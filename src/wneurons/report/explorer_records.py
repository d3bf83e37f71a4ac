"""What the neuron explorer shows of each neuron, computed from arrays and tables (no HTML, no I/O): which neurons
get a page (:func:`listed_neurons`: the clamped W sets and the top-WD neurons of each layer, with their ranks), the
standardized histogram split by the raw sign, the extreme positions and their decoded contexts, the tokens with the
lowest and highest mean pre-activation, the W-set membership at each percent, the pair sample's note and the WD
across checkpoints.

:func:`wneurons.jobs.report.explorer_job` assembles these into one record per neuron; :mod:`wneurons.report.explorer`
renders the records as the static site.
"""

from __future__ import annotations

import numpy as np
import polars as pl

__all__ = [
    "HIST_RANGE",
    "checkpoint_wd",
    "clamped_percents_of",
    "clamped_sets",
    "extreme_positions",
    "listed_neurons",
    "pair_note",
    "sign_histogram",
    "token_contexts",
    "token_groups",
    "top_tokens",
]

HIST_RANGE = (-6.0, 6.0)  # standardized units; values outside are counted in the edge bins


def sign_histogram(y: np.ndarray, bins: int = 80) -> dict:
    """Histogram of one neuron's standardized pre-activations (ddof=0) on HIST_RANGE, split by the raw sign.

    Returns edges, ``negative`` / ``positive`` counts (raw y < 0 / >= 0; values outside the range clipped into
    the edge bins), the density scale (1 / (N * bin width)), n and the standardized position of raw zero.
    """
    y = np.asarray(y, dtype=np.float64)
    mean, std = y.mean(), y.std()
    if not std > 0:
        raise ValueError("explorer: constant neuron (std 0) has no standardized histogram")
    z = np.clip((y - mean) / std, *HIST_RANGE)
    edges = np.linspace(*HIST_RANGE, bins + 1)
    neg, _ = np.histogram(z[y < 0], bins=edges)
    pos, _ = np.histogram(z[y >= 0], bins=edges)
    return {
        "edges": edges.tolist(),
        "negative": neg.tolist(),
        "positive": pos.tolist(),
        "n": int(y.size),
        "density_scale": 1.0 / (y.size * (edges[1] - edges[0])),
        "zero_at": float(-mean / std),
    }


def extreme_positions(y: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the ``k`` most negative (most negative first) and ``k`` most positive values (largest first)."""
    y = np.asarray(y)
    k = min(k, y.size)
    low = np.argpartition(y, k - 1)[:k]
    high = np.argpartition(-y, k - 1)[:k]
    return low[np.argsort(y[low], kind="stable")], high[np.argsort(-y[high], kind="stable")]


def token_groups(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct token ids, each position's index into them, their counts): computed once per token stream."""
    return np.unique(np.asarray(ids, dtype=np.int64), return_inverse=True, return_counts=True)


def top_tokens(
    ids: np.ndarray, y: np.ndarray, k: int, min_count: int = 5, groups: tuple | None = None
) -> dict[str, list[dict]]:
    """The ``k`` token ids with the lowest and the highest mean ``y`` among those seen at least ``min_count`` times:
    ``{"lowest": [...], "highest": [...]}``, each ``{"id", "count", "mean"}``, most extreme first. ``groups``:
    :func:`token_groups` of ``ids`` when already computed."""
    uniq, inverse, counts = token_groups(ids) if groups is None else groups
    means = np.bincount(inverse, weights=np.asarray(y, dtype=np.float64), minlength=uniq.size) / counts
    keep = np.flatnonzero(counts >= min_count)
    order = keep[np.argsort(means[keep], kind="stable")]

    def rows(chosen) -> list[dict]:
        return [{"id": int(uniq[i]), "count": int(counts[i]), "mean": float(means[i])} for i in chosen]

    return {"lowest": rows(order[:k]), "highest": rows(order[::-1][:k])}


def clamped_percents_of(wd: np.ndarray, percents: list[float]) -> tuple[np.ndarray, dict[float, int]]:
    """For one layer's WD: the smallest percent at which each neuron is in the W set (the clamp's selection,
    :func:`wneurons.core.selection.top_percent_indices`, authors' rule; NaN where in none) and the set's size at
    each percent."""
    from wneurons.core.selection import top_percent_indices

    at = np.full(wd.size, np.nan)
    sizes = {}
    for p in sorted(percents, reverse=True):  # smaller percents overwrite: the smallest set a neuron is in
        idx = top_percent_indices(wd, p)
        at[idx] = p
        sizes[p] = int(idx.size)
    return at, dict(sorted(sizes.items()))


def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based rank by descending value (NaN last, ties by index)."""
    key = np.where(np.isnan(values), -np.inf, values)
    order = np.argsort(-key, kind="stable")
    ranks = np.empty(values.size, dtype=np.int64)
    ranks[order] = np.arange(1, values.size + 1)
    return ranks


def listed_neurons(
    stats: pl.DataFrame,
    per_layer: int,
    layers: list[int] | None,
    clamped_percents: list[float] = (1.0,),
    extra: list[tuple[int, int]] = (),
) -> pl.DataFrame:
    """The neurons the explorer has pages for, layer by layer: every neuron of the clamped (W) sets at
    ``clamped_percents`` (:func:`clamped_percents_of`), the top ``per_layer`` by WD and the (layer, neuron) pairs of
    ``extra`` (e.g. a figure's neuron), with their WD and MD ranks within the layer, the layer's size,
    ``clamped_at`` (the smallest percent whose set holds the neuron, null if none) and ``set_sizes`` (the W set's
    size at each percent, as "percent:size" strings), ordered by WD rank within a layer."""
    frames = []
    wanted = {(int(layer), int(neuron)) for layer, neuron in extra}
    for layer in sorted(stats["layer"].unique().to_list()) if layers is None else layers:
        rows = stats.filter(pl.col("layer") == layer).sort("neuron")
        if rows.height == 0:
            raise ValueError(f"explorer: no neuron statistics for layer {layer}")
        wd = rows["wd"].to_numpy().astype(np.float64)
        at, sizes = clamped_percents_of(wd, list(clamped_percents))
        rows = rows.with_columns(
            wd_rank=pl.Series(_ranks(wd)),
            md_rank=pl.Series(_ranks(rows["md"].to_numpy().astype(np.float64))),
            layer_size=pl.lit(rows.height),
            clamped_at=pl.Series(at, dtype=pl.Float64).fill_nan(None),
            set_sizes=pl.lit(",".join(f"{p:g}:{n}" for p, n in sizes.items())),
        )
        extra_here = [n for (lay, n) in wanted if lay == layer]
        keep = (
            (pl.col("wd_rank") <= per_layer) | pl.col("clamped_at").is_not_null() | pl.col("neuron").is_in(extra_here)
        )
        frames.append(rows.filter(keep).sort("wd_rank"))
    return pl.concat(frames)


def clamped_sets(row: dict) -> list[dict]:
    """A listed neuron's membership of the W set at each percent: ``{"percent", "in_set", "set_size"}``."""
    out = []
    for part in filter(None, str(row.get("set_sizes") or "").split(",")):
        percent, size = part.split(":")
        at = row.get("clamped_at")
        out.append({"percent": float(percent), "in_set": at is not None and at <= float(percent),
                    "set_size": int(size)})  # fmt: skip
    return out


def token_contexts(tokenizer, ids: np.ndarray, positions: np.ndarray, y: np.ndarray, width: int) -> list[dict]:
    """One neuron's value ``y`` at each of ``positions`` of the token stream ``ids``, with the token and ``width``
    tokens of context on each side, decoded."""
    return [
        {
            "y": float(y[p]),
            "left": tokenizer.decode(ids[max(0, p - width) : p].tolist()),
            "token": tokenizer.decode([int(ids[p])]),
            "right": tokenizer.decode(ids[p + 1 : p + 1 + width].tolist()),
        }
        for p in positions.tolist()
    ]


def pair_note(meta: dict, tags_path: str | None) -> str:
    """What a neuron page says of its pairs: how many, from which split and seed, tagged or not."""
    tagged = "POS / dep from spaCy" if meta["split"] == "validation" and tags_path else "no POS tags"
    return (
        f"top pairs by ratio r among {meta['n_pairs']} pairs of WikiText-2 {meta['split']} tokens "
        f"(pair sample seed {meta['seed']}); {tagged}"
    )


def checkpoint_wd(tables: dict[str, pl.DataFrame], layer: int, neuron: int) -> list[dict]:
    """The neuron's WD and rank in its layer at each other revision (revision -> its neuron table)."""
    out = []
    for revision, table in tables.items():
        rows = table.filter(pl.col("layer") == layer).sort("neuron")
        wd = rows["wd"].to_numpy().astype(np.float64)
        if neuron < wd.size:
            out.append({"revision": revision, "wd": float(wd[neuron]), "rank": int(_ranks(wd)[neuron])})
    return out
