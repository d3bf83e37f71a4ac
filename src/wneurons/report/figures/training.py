"""Figures 2b-d, 6b and 6c-d: the same neurons over training checkpoints."""

from __future__ import annotations

import os

import polars as pl
from matplotlib.figure import Figure

from wneurons.report.figures.style import NEGATIVE_COLOR, POSITIVE_COLOR, band, save_figure


def figure2b(tables: dict[str, pl.DataFrame], summaries: dict[str, dict], *, out_path: str | os.PathLike) -> None:
    """Cohort WD (mean ± SEM) over training steps per model, the layer mean dotted, the emergence step marked;
    a tokens axis on top where the models' tokens per step are known."""
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.add_subplot()
    for model, table in tables.items():
        x = table["step"].to_numpy()
        band(ax, x, table["cohort_wd_mean"], table["cohort_wd_sem"], label=model)
        color = ax.lines[-1].get_color()
        ax.plot(x, table["layer_wd_mean"], linestyle=":", color=color)
        step = summaries[model]["emergence_step"]
        if step is not None:
            ax.axvline(step, color=color, linestyle="--", linewidth=0.8)
    linthresh = max(1, int(min(t["step"].filter(t["step"] > 0).min() for t in tables.values())))
    ax.set_xscale("symlog", linthresh=linthresh)
    ax.set_xlabel("training step")
    ax.set_ylabel("WD of the final top-WD cohort")
    per_step = {
        int(t["tokens"][-1] // t["step"][-1])
        for t in tables.values()
        if t["tokens"][-1] is not None and t["step"][-1] > 0
    }
    if len(per_step) == 1:
        tokens = per_step.pop()
        top = ax.secondary_xaxis("top", functions=(lambda s: s * tokens, lambda t: t / tokens))
        top.set_xscale("symlog", linthresh=linthresh * tokens)  # the same symlog as the steps below
        top.set_xlabel(f"tokens ({tokens:,} per step)")
    ax.legend(fontsize=7, title="dotted: layer mean; dashed: emergence step", title_fontsize=7)
    save_figure(fig, out_path)


def figure2c(tables: dict[str, pl.DataFrame], *, out_path: str | os.PathLike) -> None:
    """Normalized cosine drift of the cohort (mean ± SEM) per weight-grid interval; 1 = the layer average."""
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.add_subplot()
    for model, table in tables.items():
        band(ax, table["end_step"].to_numpy(), table["cohort_ncd_mean"], table["cohort_ncd_sem"], label=model)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    ax.set_xlabel("training step (end of interval)")
    ax.set_ylabel("cosine dissimilarity / layer mean")
    ax.set_title("Weight drift of the cohort between successive checkpoints", fontsize=9)
    ax.legend(fontsize=7)
    save_figure(fig, out_path)


def figure2d(tables: dict[str, pl.DataFrame], summaries: dict[str, dict], *, out_path: str | os.PathLike) -> None:
    """Cohort WD vs clean TSE accuracy across checkpoints: micro (left) and macro over subtasks (right), one series
    per model, Pearson r [95% CI] in the legend."""
    fig = Figure(figsize=(10, 4.2))
    for i, (field, label) in enumerate(
        [("tse_overall", "TSE accuracy (micro)"), ("tse_macro", "TSE accuracy (macro)")]
    ):
        ax = fig.add_subplot(1, 2, i + 1)
        for model, table in tables.items():
            c = summaries[model]["correlations"][field]
            ax.plot(
                table["cohort_wd_mean"],
                table[field],
                marker="o",
                markersize=3,
                label=f"{model}: {_correlation_label(c)}",
            )
        ax.set_xlabel("cohort mean WD at the checkpoint")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    save_figure(fig, out_path)


def _correlation_label(c: dict) -> str:
    """'r=0.83 [0.41, 0.97]' from uncertainty.correlation_with_ci, or why r is undefined."""
    if c["pearson_r"] is None:
        return f"r undefined ({c['undefined']})"
    lo, hi = c["pearson_ci"]
    ci = "no CI" if lo is None else f"[{lo:.2f}, {hi:.2f}]"
    return f"r={c['pearson_r']:.2f} {ci}"


def figure6cd(table: pl.DataFrame, summary: dict, *, model: str, out_path: str | os.PathLike) -> None:
    """Error increase vs the cohort's WD at each checkpoint: the cohort (W), random (mean ± SEM over trials) and
    perplexity-matched controls drawn at the same WD; BLiMP (c) and TSE (d)."""
    fig = Figure(figsize=(10, 4.2))
    labels = {"wasserstein": "W (final cohort)", "random": "random", "matched": "perplexity-matched"}
    for i, benchmark in enumerate(("blimp", "tse")):
        ax = fig.add_subplot(1, 2, i + 1)
        for selector, label in labels.items():
            rows = table.filter((pl.col("benchmark") == benchmark) & (pl.col("selector") == selector)).sort(
                "cohort_wd_mean"
            )
            c = summary["correlations"][f"{benchmark}/{selector}"]
            band(
                ax,
                rows["cohort_wd_mean"].to_numpy(),
                rows["error_increase"],
                rows["error_increase_sem"].fill_null(0.0),
                label=f"{label}: {_correlation_label(c)}",
            )
        ax.axhline(0.0, color="black", linewidth=0.6)
        ax.set_xlabel("cohort mean WD at the checkpoint")
        ax.set_ylabel(f"{benchmark.upper() if benchmark == 'tse' else 'BLiMP'} error increase")
        ax.set_title(f"({'c' if i == 0 else 'd'}) {model}", fontsize=9)
        ax.legend(fontsize=7)
    save_figure(fig, out_path)


def figure6b(table: pl.DataFrame, *, model: str, out_path: str | os.PathLike) -> None:
    """NN / PN / PP shares (mean ± SEM across the MD cohort) of the most differentiated pairs at each checkpoint,
    with the NN share over all pairs of the same neurons (the null) dotted."""
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.add_subplot()
    steps = table["step"].to_numpy()
    for name, color in (("nn", NEGATIVE_COLOR), ("pn", "tab:purple"), ("pp", POSITIVE_COLOR)):
        band(ax, steps, table[f"share_{name}"], table[f"sem_{name}"], color=color, label=name.upper())
    ax.plot(steps, table["null_nn"], linestyle=":", color=NEGATIVE_COLOR, label="NN over all pairs")
    ax.set_xscale("symlog", linthresh=max(1, int(steps[steps > 0].min())) if (steps > 0).any() else 1)
    ax.set_xlabel("training step")
    ax.set_ylabel("share of top pairs")
    n, k = int(table["n_neurons"][-1]), int(table["top_k"][-1])
    ax.set_title(f"{model}: final top-MD cohort ({n} neurons), top {k} pairs each", fontsize=9)
    ax.legend(fontsize=7)
    save_figure(fig, out_path)


def figure2bd(tables: dict[str, pl.DataFrame], summaries: dict[str, dict], *, b: str, d: str) -> None:
    """Figures 2b and 2d, drawn by one job from the same tables (outputs ``b`` and ``d``)."""
    figure2b(tables, summaries, out_path=b)
    figure2d(tables, summaries, out_path=d)
