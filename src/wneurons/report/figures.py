"""The paper's figures, drawn from result tables and activation shards.

Figures are built on :class:`matplotlib.figure.Figure` directly (Agg canvas, no pyplot state shared between
calls) and saved atomically as PNG. Layers are 0-based in arguments and labelled 1-based ("MLP block L+1"), as
in the paper.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import torch
from matplotlib.figure import Figure

from wneurons.core.pairs import input_distances
from wneurons.experiment.grid import parse_condition_key
from wneurons.lm import registry
from wneurons.store.io import atomic_output
from wneurons.store.shards import ShardIndex

__all__ = ["figure1", "figure2a", "figure2b", "figure2c", "figure2d", "figure3", "figure4", "figure6b", "figure6cd"]

Nonlinearity = Callable[[torch.Tensor], torch.Tensor] | str
NEGATIVE_COLOR = "tab:red"
POSITIVE_COLOR = "tab:blue"
DPI = 150


def _save(fig: Figure, out_path: str | os.PathLike) -> None:
    with atomic_output(out_path, ".png") as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")


def _activation(nonlinearity: Nonlinearity) -> tuple[Callable[[torch.Tensor], torch.Tensor], str]:
    """The function and its label; a string is a transformers ``ACT2FN`` name (what ``FamilySpec`` records)."""
    if isinstance(nonlinearity, str):
        return registry.nonlinearity(nonlinearity), nonlinearity
    return nonlinearity, getattr(nonlinearity, "__name__", type(nonlinearity).__name__)


def _layer_rows(stats: pl.DataFrame, layer: int, what: str) -> pl.DataFrame:
    rows = stats.filter(pl.col("layer") == layer)
    if rows.is_empty():
        raise ValueError(f"{what}: the statistics table has no rows for layer {layer}")
    return rows


@dataclass(frozen=True)
class _NeuronView:
    """Everything figure 1 draws for one neuron of one model."""

    label: str
    layer: int
    neuron: int
    row: dict[str, Any]
    y: np.ndarray  # raw pre-activations [N], float64
    activation: np.ndarray  # act(y) [N]
    activation_name: str
    input_distance: np.ndarray  # d_x / max(d_x) of the stored MD pairs
    output_distance: np.ndarray  # d_y / median(d_y)

    @classmethod
    def load(
        cls,
        shard_dir: str | os.PathLike,
        stats: pl.DataFrame,
        layer: int,
        neuron: int | None,
        nonlinearity: Nonlinearity,
        label: str,
    ) -> _NeuronView:
        rows = _layer_rows(stats, layer, label)
        if neuron is None:  # the layer's top Wasserstein neuron
            neuron = int(rows.drop_nans("wd").sort("wd", descending=True)["neuron"][0])
        match = rows.filter(pl.col("neuron") == neuron)
        if match.is_empty():
            raise ValueError(f"{label}: no neuron {neuron} in layer {layer} of the statistics table")
        index = ShardIndex.load(shard_dir)
        y = index.y_neurons(layer, neuron, neuron + 1)[0].astype(np.float64)
        fn, fn_name = _activation(nonlinearity)
        activation = fn(torch.from_numpy(y)).numpy()
        n_pairs = len(index.md_positions) // 2
        positions = index.md_positions[: 2 * n_pairs]
        y_md = y[positions]
        d_x = input_distances(index.x_md(layer)[: 2 * n_pairs])
        d_y = np.abs(y_md[0::2] - y_md[1::2])
        keep = d_x > 0  # identical inputs have no defined ratio (as in stats.mapping_difficulty)
        d_x, d_y = d_x[keep], d_y[keep]
        return cls(
            label=label,
            layer=layer,
            neuron=neuron,
            row=match.row(0, named=True),
            y=y,
            activation=activation,
            activation_name=fn_name,
            input_distance=d_x / d_x.max(),
            output_distance=d_y / np.median(d_y),
        )


def _draw_neuron(axes, view: _NeuronView) -> None:
    ax_pre, ax_post, ax_io = axes
    row = view.row
    z = (view.y - row["mean"]) / row["std"]
    zero = -row["mean"] / row["std"]  # where the RAW pre-activation changes sign, in standardized units
    bins = np.linspace(z.min(), z.max(), 121)
    counts, edges = np.histogram(z, bins=bins, density=True)
    centers = 0.5 * (edges[1:] + edges[:-1])
    colors = np.where(centers < zero, NEGATIVE_COLOR, POSITIVE_COLOR)
    ax_pre.bar(centers, counts, width=np.diff(edges), color=colors, alpha=0.6, linewidth=0)
    grid = np.linspace(min(z.min(), -4), max(z.max(), 4), 400)
    ax_pre.plot(grid, np.exp(-0.5 * grid**2) / np.sqrt(2 * np.pi), color="black", lw=1.2, label="N(0, 1)")
    ax_pre.axvline(zero, color="grey", ls=":", lw=1, label="raw y = 0")
    wd = row["wd"]
    ax_pre.text(
        0.98,
        0.97,
        f"WD = {wd:.3f}\n"
        f"negative: {row['wd_negative']:.3f} ({100 * row['wd_negative'] / wd:.0f}%)\n"
        f"positive: {row['wd_positive']:.3f} ({100 * row['wd_positive'] / wd:.0f}%)\n"
        f"tokens y < 0: {100 * row['frac_negative']:.0f}%",
        transform=ax_pre.transAxes,
        ha="right",
        va="top",
        fontsize=8,
        bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"},
    )
    ax_pre.set_xlabel("standardized pre-activation")
    ax_pre.set_ylabel("density")
    ax_pre.legend(loc="upper left", fontsize=7, frameon=False)
    ax_pre.set_title(f"{view.label}: neuron {view.neuron}, MLP block {view.layer + 1}", fontsize=9)

    post_bins = np.linspace(view.activation.min(), view.activation.max(), 121)
    negative = view.y < 0
    ax_post.hist(
        [view.activation[negative], view.activation[~negative]],
        bins=post_bins,
        stacked=True,
        color=[NEGATIVE_COLOR, POSITIVE_COLOR],
        alpha=0.6,
        label=["from y < 0", "from y >= 0"],
    )
    ax_post.set_yscale("log")
    ax_post.set_xlabel(f"{view.activation_name}(y)")
    ax_post.set_ylabel("tokens")
    ax_post.legend(fontsize=7, frameon=False)
    ax_post.set_title("after the nonlinearity", fontsize=9)

    ax_io.scatter(view.input_distance, view.output_distance, s=4, alpha=0.5, color="black", linewidths=0)
    ax_io.set_xlabel("normalized input distance  d_x / max d_x")
    ax_io.set_ylabel("normalized output distance  d_y / median d_y")
    md = row.get("md")
    ax_io.set_title(
        f"IO pairs (n = {view.input_distance.size})" + (f", MD = {md:.2f}" if md is not None else ""), fontsize=9
    )


def figure1(
    shard_dir: str | os.PathLike,
    stats: pl.DataFrame,
    *,
    layer: int,
    neuron: int | None = None,
    nonlinearity: Nonlinearity,
    out_path: str | os.PathLike,
    contrast: tuple[str | os.PathLike, pl.DataFrame, int, Nonlinearity, str] | None = None,
    label: str = "model",
) -> None:
    """Figure 1: one Wasserstein neuron's pre-activation distribution, its split by sign, and its IO pairs.

    Row per model: (a) the standardized pre-activation histogram (tokens with raw y < 0 in red) with N(0,1),
    annotated with the exact WD and its negative / positive split; (b) the distribution after ``nonlinearity``
    (a callable or a transformers ``ACT2FN`` name); (c) normalized input vs output distance of the stored MD
    pairs. ``neuron`` defaults to the top-WD neuron of ``layer``. ``contrast`` = (shard_dir, stats, layer,
    nonlinearity, label) adds a second row for another model (OPT, ReLU, in the paper). Writes a PNG.
    """
    views = [_NeuronView.load(shard_dir, stats, layer, neuron, nonlinearity, label)]
    if contrast is not None:
        c_dir, c_stats, c_layer, c_nonlinearity, c_label = contrast
        views.append(_NeuronView.load(c_dir, c_stats, c_layer, None, c_nonlinearity, c_label))
    fig = Figure(figsize=(13, 3.6 * len(views)), layout="constrained")
    axes = fig.subplots(len(views), 3, squeeze=False)
    for row_axes, view in zip(axes, views, strict=True):
        _draw_neuron(row_axes, view)
    _save(fig, out_path)


def figure2a(stats_by_model: dict[str, pl.DataFrame], *, layer: int, out_path: str | os.PathLike) -> None:
    """Figure 2a: the distribution of WD over the neurons of ``layer``, one histogram per model (log y).

    A dotted line marks each model's mean WD; the text gives its maximum. Dead (NaN-WD) neurons are left out.
    Writes a PNG.
    """
    if not stats_by_model:
        raise ValueError("figure2a: no models given")
    wds = {
        name: _layer_rows(table, layer, name).drop_nans("wd")["wd"].to_numpy() for name, table in stats_by_model.items()
    }
    bins = np.linspace(0.0, max(v.max() for v in wds.values()) * 1.02, 80)
    fig = Figure(figsize=(6.5, 4), layout="constrained")
    ax = fig.subplots()
    colors = [f"C{i}" for i in range(len(wds))]
    for i, ((name, wd), color) in enumerate(zip(wds.items(), colors, strict=True)):
        ax.hist(wd, bins=bins, histtype="step", color=color, lw=1.4, label=f"{name} (n = {wd.size})")
        ax.axvline(wd.mean(), color=color, ls=":", lw=1.2)
        ax.text(
            0.98,
            0.95 - 0.07 * i,
            f"{name}: max WD {wd.max():.3f}, mean {wd.mean():.3f}",
            transform=ax.transAxes,
            ha="right",
            va="top",
            color=color,
            fontsize=8,
        )
    ax.set_yscale("log")
    ax.set_xlabel("WD to N(0, 1)")
    ax.set_ylabel("neurons")
    ax.set_title(f"WD of all neurons in MLP block {layer + 1}", fontsize=10)
    ax.legend(loc="center right", fontsize=8, frameon=False)
    _save(fig, out_path)


# ---------------------------------------------------------------- ablation figures (3 and 4)
def _conditions_by(result: dict, scope: str, selector: str) -> dict[float, dict]:
    """{percent: condition summary} of one scope and selector in an aggregated result file."""
    out = {}
    for key, cond in result["conditions"].items():
        c_scope, c_selector, _ = parse_condition_key(key)
        if c_scope == scope and c_selector == selector:
            out[float(cond["percent"])] = cond
    return dict(sorted(out.items()))


def _value(scores: dict, field: str) -> float:
    return float(scores[field])


def _sem(condition: dict | None, field: str) -> float:
    """A condition's SEM of ``field`` as an error bar: 0 (no bar) where it has none or it is undefined (null: one
    scored trial)."""
    sem = (condition or {}).get("sem", {}).get(field)
    return 0.0 if sem is None else float(sem)


def unmatched_controls(ppl: dict) -> dict[float, str]:
    """{percent: why} for every all-layer matched control of an aggregated ppl.json whose perplexity gap to the
    wasserstein condition exceeds the search's tolerance (or whose search stopped without converging)."""
    out = {}
    for percent, cond in _conditions_by(ppl, "all", "matched").items():
        search = cond.get("matched_search", {})
        gap = cond.get("matched_gap", search.get("relative_gap"))
        tolerance = cond.get("matched_tolerance", search.get("tolerance"))
        if not cond.get("matched_converged", search.get("converged", True)):
            out[percent] = f"NOT MATCHED at {percent:g}%: gap {gap:.1%} > tolerance {tolerance:.1%}"
    return out


def figure3(ppl_path, blimp_path, tse_path, out_path) -> None:
    """Figure 3 for one checkpoint: (a) perplexity vs fraction, wasserstein vs random (SEM), start and end values
    annotated; (b) matched fraction of lowest-WD neurons vs wasserstein fraction; (c) BLiMP / TSE accuracy under
    clean, wasserstein, random (mean +- SEM) and matched at the smallest fraction >= 1% (else the largest).
    A matched control that missed its perplexity tolerance (:func:`unmatched_controls`) is drawn in red with its
    gap, its bar hatched, and the title says so."""
    from wneurons.store import io

    ppl, blimp, tse = (io.read_json(p) for p in (ppl_path, blimp_path, tse_path))
    fig = Figure(figsize=(15, 4.2), layout="constrained")
    axes = fig.subplots(1, 3)

    ax = axes[0]
    clean_ppl = _value(ppl["clean"], "perplexity")
    for selector, color in (("wasserstein", "C3"), ("random", "C0")):
        conds = _conditions_by(ppl, "all", selector)
        if not conds:
            continue
        xs = [0.0, *conds]
        ys = [clean_ppl, *(_value(c["scores"], "perplexity") for c in conds.values())]
        errs = [0.0, *(_sem(c, "perplexity") for c in conds.values())]
        ax.errorbar(xs, ys, yerr=errs, marker="o", color=color, label=selector, capsize=3)
        ax.annotate(f"{ys[-1]:.1f}", (xs[-1], ys[-1]), textcoords="offset points", xytext=(4, 4), color=color)
    ax.annotate(f"{clean_ppl:.1f}", (0, clean_ppl), textcoords="offset points", xytext=(4, -12))
    ax.set(xlabel="% neurons perturbed per layer", ylabel="WikiText-2 perplexity", title="(a) perplexity")
    ax.legend()

    ax = axes[1]
    matched = _conditions_by(ppl, "all", "matched")
    unmatched = unmatched_controls(ppl)
    for i, (x, why) in enumerate(unmatched.items()):
        ax.plot([x], [matched[x]["matched_percent"]], marker="X", ms=14, color="red", zorder=5)
        ax.text(0.02, 0.97 - 0.07 * i, why, transform=ax.transAxes, color="red", va="top", fontsize=9)
    if matched:
        # (0, 0) anchors the curve: perturbing nothing is matched by perturbing nothing
        xs = [0.0, *matched]
        ax.plot(xs, [0.0, *(c["matched_percent"] for c in matched.values())], marker="s", color="C2")
        for x, c in matched.items():
            ax.annotate(
                f"{c['matched_percent']:.1f}%", (x, c["matched_percent"]), xytext=(4, 4), textcoords="offset points"
            )
    ax.set(
        xlabel="% Wasserstein neurons perturbed",
        ylabel="% lowest-WD neurons for equal perplexity",
        title="(b) perplexity-matched fraction",
    )

    ax = axes[2]
    fractions = sorted(_conditions_by(blimp, "all", "wasserstein"))
    if fractions:
        at = next((f for f in fractions if f >= 1), fractions[-1])
        labels = ["clean", "wasserstein", "random", "matched"]
        width = 0.38
        for i, (name, result) in enumerate((("BLiMP", blimp), ("TSE", tse))):
            values, errors = [_value(result["clean"], "overall")], [0.0]
            for selector in labels[1:]:
                cond = _conditions_by(result, "all", selector).get(at)
                values.append(_value(cond["scores"], "overall") if cond else np.nan)
                errors.append(_sem(cond, "overall"))
            xs = np.arange(len(labels)) + (i - 0.5) * width
            bars = ax.bar(xs, values, width, yerr=errors, capsize=3, label=name)
            if at in unmatched:
                bars[-1].set(hatch="xx", edgecolor="red")
        if at in unmatched:
            labels[-1] = "matched\n(NOT matched)"
        ax.set_xticks(np.arange(len(labels)), labels)
        ax.set(ylabel="accuracy", title=f"(c) grammar at {at:g}% per layer", ylim=(0, 1))
        ax.axhline(0.5, color="grey", lw=0.8, ls=":")
        ax.legend()
    title = f"{ppl['model']} @ {ppl['revision']}: sign-specific ablation"
    if unmatched:
        title += " -- perplexity-matched control NOT converged at " + ", ".join(f"{p:g}%" for p in unmatched)
    fig.suptitle(title, color="red" if unmatched else "black")
    _save(fig, out_path)


def _error_increase(result: dict, field: str, scopes: list[str]) -> tuple[list[str], np.ndarray]:
    """Rows = categories of ``field`` (e.g. by_term), columns = scopes: clean accuracy minus ablated accuracy."""
    clean = result["clean"][field]
    categories = sorted(clean)
    matrix = np.full((len(categories), len(scopes)), np.nan)
    for j, scope in enumerate(scopes):
        conds = _conditions_by(result, scope, "wasserstein")
        if not conds:
            continue
        scores = next(iter(conds.values()))["scores"][field]
        for i, cat in enumerate(categories):
            matrix[i, j] = clean[cat] - scores[cat]
    return categories, matrix


def figure4(blimp_path, tse_path, out_path) -> None:
    """Figure 4: error increase (clean - ablated accuracy) per BLiMP term and TSE family, for individual layer-group
    ablations (g1..gK) and cumulative ones (groups 1..k; c1 = g1)."""
    from wneurons.store import io

    blimp, tse = io.read_json(blimp_path), io.read_json(tse_path)
    scopes = {parse_condition_key(k).scope for k in blimp["conditions"]}
    groups = sorted((s for s in scopes if s[0] == "g"), key=lambda s: int(s[1:]))
    cumulative = ["g1", *sorted((s for s in scopes if s[0] == "c"), key=lambda s: int(s[1:]))]
    panels = [
        (blimp, "by_term", groups, "(a) BLiMP, individual groups"),
        (blimp, "by_term", cumulative, "(b) BLiMP, cumulative"),
        (tse, "by_family", groups, "(c) TSE, individual groups"),
        (tse, "by_family", cumulative, "(d) TSE, cumulative"),
    ]
    fig = Figure(figsize=(13, 10), layout="constrained")
    axes = fig.subplots(2, 2, gridspec_kw={"height_ratios": [3, 1.2]})
    for ax, (result, field, scopes, title) in zip(axes.flat, panels, strict=True):
        categories, matrix = _error_increase(result, field, scopes)
        limit = np.nanmax(np.abs(matrix)) if np.isfinite(matrix).any() else 1.0
        image = ax.imshow(matrix, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        ax.set_yticks(range(len(categories)), categories, fontsize=8)
        labels = [f"1-{s[1:]}" if s[0] == "c" else s[1:] for s in scopes]
        ax.set_xticks(range(len(scopes)), labels)
        ax.set(xlabel="layer group" + (" (cumulative)" if "cumulative" in title else ""), title=title)
        fig.colorbar(image, ax=ax, label="error increase")
    fig.suptitle(f"{blimp['model']} @ {blimp['revision']}: layer-group ablations")
    _save(fig, out_path)


# ---------------------------------------------------------------- the mechanism analyses (Fig. 3d, 5, 6a, 7)
SIGN_COLORS = {"nn": NEGATIVE_COLOR, "pn": "tab:purple", "pp": POSITIVE_COLOR}


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
    _save(fig, out_path)
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
    _save(fig, out_path)
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
    _save(fig, out_path)
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
    _save(fig, out_path)
    return pl.DataFrame(overlay)


# ---------------------------------------------------------------- training dynamics (Fig. 2b-d, 6c-d)
def _band(axes, x, mean, sem, **kwargs) -> None:
    """A line with a shaded ±1 SEM band (the paper's "shaded bands are one standard error of the mean")."""
    mean, sem = np.asarray(mean, dtype=float), np.nan_to_num(np.asarray(sem, dtype=float))
    (line,) = axes.plot(x, mean, marker="o", markersize=3, **kwargs)
    axes.fill_between(x, mean - sem, mean + sem, color=line.get_color(), alpha=0.2, linewidth=0)


def figure2b(tables: dict[str, pl.DataFrame], summaries: dict[str, dict], *, out_path: str | os.PathLike) -> None:
    """Cohort WD (mean ± SEM) over training steps per model, the layer mean dotted, the emergence step marked;
    a tokens axis on top where the models' tokens per step are known."""
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.add_subplot()
    for model, table in tables.items():
        x = table["step"].to_numpy()
        _band(ax, x, table["cohort_wd_mean"], table["cohort_wd_sem"], label=model)
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
    _save(fig, out_path)


def figure2c(tables: dict[str, pl.DataFrame], *, out_path: str | os.PathLike) -> None:
    """Normalized cosine drift of the cohort (mean ± SEM) per weight-grid interval; 1 = the layer average."""
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.add_subplot()
    for model, table in tables.items():
        _band(ax, table["end_step"].to_numpy(), table["cohort_ncd_mean"], table["cohort_ncd_sem"], label=model)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    ax.set_xlabel("training step (end of interval)")
    ax.set_ylabel("cosine dissimilarity / layer mean")
    ax.set_title("Weight drift of the cohort between successive checkpoints", fontsize=9)
    ax.legend(fontsize=7)
    _save(fig, out_path)


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
    _save(fig, out_path)


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
            _band(
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
    _save(fig, out_path)


def figure6b(table: pl.DataFrame, *, model: str, out_path: str | os.PathLike) -> None:
    """NN / PN / PP shares (mean ± SEM across the MD cohort) of the most differentiated pairs at each checkpoint,
    with the NN share over all pairs of the same neurons (the null) dotted."""
    fig = Figure(figsize=(6.5, 4.2))
    ax = fig.add_subplot()
    steps = table["step"].to_numpy()
    for name, color in (("nn", NEGATIVE_COLOR), ("pn", "tab:purple"), ("pp", POSITIVE_COLOR)):
        _band(ax, steps, table[f"share_{name}"], table[f"sem_{name}"], color=color, label=name.upper())
    ax.plot(steps, table["null_nn"], linestyle=":", color=NEGATIVE_COLOR, label="NN over all pairs")
    ax.set_xscale("symlog", linthresh=max(1, int(steps[steps > 0].min())) if (steps > 0).any() else 1)
    ax.set_xlabel("training step")
    ax.set_ylabel("share of top pairs")
    n, k = int(table["n_neurons"][-1]), int(table["top_k"][-1])
    ax.set_title(f"{model}: final top-MD cohort ({n} neurons), top {k} pairs each", fontsize=9)
    ax.legend(fontsize=7)
    _save(fig, out_path)
