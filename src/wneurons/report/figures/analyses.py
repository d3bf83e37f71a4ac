"""Figures 3d, 5, 6a and 7: POS surprisal, the single-neuron case study, pair-sign composition, layerwise error."""

from __future__ import annotations

import os

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from wneurons.report.figures.style import NEGATIVE_COLOR, POSITIVE_COLOR, SIGN_COLORS, save_figure


def figure3d(table: pl.DataFrame, out_path: str | os.PathLike, *, min_tokens: int, label: str) -> pl.DataFrame:
    """Figure 3d: mean-shifted ΔNLL (W clamp - perplexity-matched control) per UPOS class with at least
    ``min_tokens`` tokens, sorted, SEM error bars; scaffolding classes coloured apart from content classes.
    SPACE, X and SPECIAL stay in the table only. Returns the rows drawn, in bar order."""
    from wneurons.core.pos import CONTENT, NOT_PLOTTED, SCAFFOLDING

    rows = table.filter((pl.col("n") >= min_tokens) & ~pl.col("upos").is_in(list(NOT_PLOTTED)))
    rows = rows.sort("mean_shifted_dnll", descending=True)
    colors = [NEGATIVE_COLOR if u in SCAFFOLDING else POSITIVE_COLOR if u in CONTENT else "grey" for u in rows["upos"]]
    fig = Figure(figsize=(max(6, 0.5 * rows.height + 2), 4), layout="constrained")
    ax = fig.subplots()
    ax.bar(range(rows.height), rows["mean_shifted_dnll"], yerr=rows["sem"], color=colors, capsize=3)
    ax.set_xticks(range(rows.height), [f"{u}\n{n}" for u, n in zip(rows["upos"], rows["n"], strict=True)], fontsize=7)
    ax.axhline(0, color="black", lw=0.8)
    w, m = table["w_percent"][0], table["matched_percent"][0]
    ax.set(
        ylabel="shifted ΔNLL (nats)",
        title=f"{label}: {w:g}% W vs {m:.3g}% matched, {int(table['n'].sum())} tokens (n per class below)",
    )
    save_figure(fig, out_path)
    return rows


def figure5(pairs: pl.DataFrame, all_pairs: pl.DataFrame, summary: dict, out_path: str | os.PathLike) -> list[int]:
    """Figure 5: (a) the neuron's top pairs with tokens, POS / dep and sign; (b) its pre-activation histogram
    (log y) with the pair values marked and joined; (c) all pairs' normalized output vs input distance.
    Returns the pairs highlighted in (c)."""
    fig = Figure(figsize=(15, 5.5), layout="constrained")
    ax_a, ax_b, ax_c = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.6, 1, 1]})
    ax_a.axis("off")
    cells = [
        [
            str(r["rank"]),
            f"{r['token_i']!r} {r['upos_i']}/{r['dep_i']}",
            f"{r['token_j']!r} {r['upos_j']}/{r['dep_j']}",
            r["sign"].upper(),
            f"{r['y_i']:.2f} / {r['y_j']:.2f}",
            f"{r['r']:.1f}",
        ]
        for r in pairs.iter_rows(named=True)
    ]
    labels = ["#", "token i (UPOS/dep)", "token j (UPOS/dep)", "sign", "y_i / y_j", "r"]
    tab = ax_a.table(cells, colLabels=labels, loc="center", colWidths=[0.05, 0.34, 0.34, 0.07, 0.14, 0.06])
    tab.auto_set_font_size(False)
    tab.set_fontsize(7)
    ax_a.set_title(f"(a) top {len(cells)} of {summary['n_pairs']} pairs: {summary['n_nn_top']} NN")
    hist = summary["histogram"]
    edges = np.asarray(hist["edges"])
    ax_b.stairs(hist["counts"], edges, fill=True, color="lightgrey")
    ax_b.set_yscale("log")
    for r in pairs.iter_rows(named=True):
        ax_b.plot([r["y_i"], r["y_j"]], [1.5, 1.5 + r["rank"]], color=SIGN_COLORS[r["sign"]], marker="o", lw=0.8)
    ax_b.axvline(0, color="black", lw=0.6)
    ax_b.set(
        xlabel="pre-activation", ylabel=f"tokens (of {hist['n_tokens']}, {hist['split']})", title="(b) distribution"
    )
    top = set(pairs["pair"].to_list())
    is_top = all_pairs["pair"].is_in(list(top)).to_numpy()
    ax_c.scatter(all_pairs["dx_norm"], all_pairs["dy_norm"], s=4, color="grey", alpha=0.5)
    ax_c.scatter(
        all_pairs["dx_norm"].to_numpy()[is_top], all_pairs["dy_norm"].to_numpy()[is_top], s=18, color=NEGATIVE_COLOR
    )
    ax_c.set(xlabel="input distance / max", ylabel="output distance / median", title="(c) all pairs, top highlighted")
    fig.suptitle(
        f"{summary['model']} layer {summary['layer'] + 1} neuron {summary['neuron']} (WD rank {summary['wd_rank']}); "
        f"NN in top {summary['top_k']} over {len(summary['robustness']['seeds'])} re-pairings: "
        f"{min(summary['robustness']['n_nn'])}-{max(summary['robustness']['n_nn'])}"
    )
    save_figure(fig, out_path)
    return sorted(top)


def _composition_axes(ax, comp: pl.DataFrame, log_y: bool) -> None:
    layers = comp["layer"].to_numpy() + 1
    # On a log axis a share of 0 (and a band reaching below it) is drawn at half of the smallest share one pair
    # can make, so that the axis keeps the range of the data.
    floor = 0.5 / float((comp["n_neurons"] * comp["top_k"]).max()) if log_y else -np.inf
    for name, color in SIGN_COLORS.items():
        share, sem = comp[f"share_{name}"].to_numpy(), comp[f"sem_{name}"].to_numpy()
        ax.plot(layers, np.maximum(share, floor), marker="o", color=color, label=name.upper())
        ax.fill_between(layers, np.maximum(share - sem, floor), share + sem, color=color, alpha=0.2)
    ax.plot(layers, comp["null_nn"], ls=":", color=SIGN_COLORS["nn"], label="NN over all pairs")
    if log_y:
        ax.set_yscale("log")
        ax.set_ylim(floor / 1.5, 1.5)
    ax.set(xlabel="layer", ylabel="share of top pairs" + (f" (0 drawn at {floor:.1g})" if log_y else ""))
    ax.legend(fontsize=7)


def figure6a(comp: pl.DataFrame, out_path: str | os.PathLike, *, label: str) -> pl.DataFrame:
    """Figure 6a: NN / PN / PP share of the top-k pairs of the top-p% MD neurons per layer (SEM bands), with the
    NN share over all pairs of the same neurons as the null. Returns the rows drawn (one per layer)."""
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    _composition_axes(ax, comp, log_y=False)
    p, k, n = comp["percent"][0], comp["top_k"][0], int(comp["n_neurons"].sum())
    ax.set_title(f"{label}: top {p:g}% MD neurons ({n} in all), top {k} pairs each")
    save_figure(fig, out_path)
    return comp


def figure7(
    comp: pl.DataFrame,
    layerwise: pl.DataFrame,
    correlations: dict,
    out_path: str | os.PathLike,
    *,
    label: str,
    ablation_percent: float,
) -> pl.DataFrame:
    """Figure 7: (a) composition, log y; (b, c) single-layer ablation error (BLiMP, TSE) vs NN share with a
    least-squares line and Pearson r; (d) NN share and both errors min-max normalized over the ablated layers.
    Returns panel (d)'s normalized series (layer 0-based, share_nn, err_blimp, err_tse)."""
    from wneurons.core.layerwise import normalize_minmax

    fig = Figure(figsize=(14, 9), layout="constrained")
    (ax_a, ax_b), (ax_c, ax_d) = fig.subplots(2, 2)
    _composition_axes(ax_a, comp, log_y=True)
    ax_a.set_title(f"(a) top {comp['percent'][0]:g}% MD neurons, top {comp['top_k'][0]} pairs")
    corr = {(c["error"], c["share"]): c for c in correlations["correlations"]}
    for ax, bench, title in ((ax_b, "blimp", "(b) BLiMP"), (ax_c, "tse", "(c) TSE")):
        x, y = layerwise["share_nn"].to_numpy(), layerwise[f"err_{bench}"].to_numpy()
        ax.errorbar(x, y, yerr=layerwise[f"sem_err_{bench}"].to_numpy(), fmt="o", color=SIGN_COLORS["nn"])
        for xi, yi, layer in zip(x, y, layerwise["layer"].to_list(), strict=True):
            ax.annotate(str(layer + 1), (xi, yi), fontsize=7)
        if len(x) >= 2 and np.ptp(x) > 0:
            slope, intercept = np.polyfit(x, y, 1)
            ax.plot(np.sort(x), slope * np.sort(x) + intercept, color="black", lw=0.8)
        c = corr.get((f"err_{bench}", "nn"), {})
        stat = f"r = {c['pearson_r']:.2f} (p = {c['pearson_p']:.2g})" if "pearson_r" in c else "r undefined"
        ax.set(xlabel="NN share of top pairs", ylabel="error (clean - ablated accuracy)", title=f"{title}: {stat}")
    layers = layerwise["layer"].to_numpy() + 1
    overlay = {"layer": layerwise["layer"].to_numpy()}
    for column, name, color in (
        ("share_nn", "NN share", SIGN_COLORS["nn"]),
        ("err_blimp", "BLiMP error", "black"),
        ("err_tse", "TSE error", "tab:green"),
    ):
        overlay[column] = normalize_minmax(layerwise[column].to_numpy())
        ax_d.plot(layers, overlay[column], marker="o", label=name, color=color)
    ax_d.set(xlabel="layer (ablated alone)", ylabel="min-max normalized", title="(d) normalized overlay")
    ax_d.legend(fontsize=7)
    shown = ", ".join(str(v) for v in layers)
    fig.suptitle(f"{label}: single-layer {ablation_percent:g}% W ablation, each of layers {shown} alone")
    save_figure(fig, out_path)
    return pl.DataFrame(overlay)
