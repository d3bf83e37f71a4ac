"""Figures 3 and 4: what the sign-specific ablations do to perplexity, BLiMP and TSE (from aggregated results)."""

from __future__ import annotations

import math
import os
from typing import NamedTuple

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from wneurons.experiment.grid import condition_key, parse_condition_key
from wneurons.report.figures.style import save_figure

SELECTORS = ("wasserstein", "random", "matched")
SHORT = {"wasserstein": "W", "random": "random", "matched": "matched"}
BENCHMARK_NAMES = {"blimp": "BLiMP", "tse": "TSE", "ppl": "perplexity", "capability": "capability suite"}


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


def _nll_reason(search: dict) -> str:
    """Why a search within its perplexity tolerance still did not match: the control's NLL increase."""
    ratio = search.get("nll_increase_ratio")
    if ratio is None:
        return "W does not raise perplexity"
    return f"NLL increase {ratio:.0%} of W's (tolerance {search.get('nll_increase_tolerance', 0):.0%})"


def unmatched_controls(ppl: dict) -> dict[float, str]:
    """{percent: why} for every all-layer matched control of an aggregated ppl.json whose perplexity gap to the
    wasserstein condition exceeds the search's tolerance (or whose search stopped without converging)."""
    out = {}
    for percent, cond in _conditions_by(ppl, "all", "matched").items():
        search = cond.get("matched_search", {})
        gap = cond.get("matched_gap", search.get("relative_gap"))
        tolerance = cond.get("matched_tolerance", search.get("tolerance"))
        if not cond.get("matched_converged", search.get("converged", True)):
            why = f"gap {gap:.1%} > tolerance {tolerance:.1%}" if gap > tolerance else _nll_reason(search)
            out[percent] = f"NOT MATCHED at {percent:g}%: {why}"
    return out


class PairedDrop(NamedTuple):
    """One paired comparison of a checkpoint's paired table (overall group), in accuracy points:
    ``drop`` = acc(reference) - acc(condition) with its 95% CI (NaN where the table has none: ``note`` says why);
    ``trials``: random trials pooled on the control's side (two-stage CI)."""

    benchmark: str
    reference: str
    condition: str
    drop: float
    ci_lo: float
    ci_hi: float
    n: int
    trials: int
    note: str


def _points(x) -> float:
    return math.nan if x is None or (isinstance(x, float) and math.isnan(x)) else 100 * float(x)


def paired_drop(frame: pl.DataFrame, benchmark: str, reference: str, condition: str) -> PairedDrop | None:
    """The overall row ``reference -> condition`` of a paired table (random trials pooled where there are several,
    as the claims read it: :func:`wneurons.report.claims.run.paired_row`), or None when the table lacks it."""
    from wneurons.report.claims.run import NotRun, paired_row

    try:
        row = paired_row(frame, reference, condition)
    except NotRun:
        return None
    return PairedDrop(benchmark, reference, condition, _points(row["drop"]), _points(row["ci_lo"]),
                      _points(row["ci_hi"]), int(row["n"]), int(row.get("trials") or 1),
                      row.get("ci_note") or "")  # fmt: skip


def paired_drops(paired: dict[str, pl.DataFrame], percent: float | str, scope: str = "all") -> list[PairedDrop]:
    """Per benchmark of ``paired`` (name -> paired table), at ``percent`` over ``scope``: each control and W vs
    clean (W, random, matched), then W vs each control (reference = the control: how much more W costs); rows
    the tables lack are left out."""
    w = condition_key(scope, "wasserstein", percent)
    rows = []
    for bench, frame in paired.items():
        wanted = [("clean", condition_key(scope, s, percent)) for s in SELECTORS]
        wanted += [(condition_key(scope, s, percent), w) for s in SELECTORS[1:]]
        rows += [r for ref, cond in wanted if (r := paired_drop(frame, bench, ref, cond)) is not None]
    return rows


def comparison_label(row: PairedDrop) -> str:
    """ "W − clean", "random (10 trials) − clean", "W − matched": the condition, minus its reference."""
    cond = SHORT[parse_condition_key(row.condition).selector]
    if cond == "random" and row.trials > 1:
        cond = f"random ({row.trials} trials pooled)"
    ref = "clean" if row.reference == "clean" else SHORT[parse_condition_key(row.reference).selector]
    return f"{cond} vs {ref}"


def _ci_errors(rows: list[PairedDrop]) -> np.ndarray:
    """[2, n] asymmetric error bars (drop - lo, hi - drop) of rows; 0 where a row has no CI (marked apart)."""
    lo = np.array([r.drop - r.ci_lo for r in rows])
    hi = np.array([r.ci_hi - r.drop for r in rows])
    return np.nan_to_num(np.vstack([lo, hi]))


def _draw_paired_panel(ax, rows: list[PairedDrop], at: float, unmatched: bool) -> None:
    """Figure 3c: a forest plot of paired drops (points) with 95% CIs, one line per comparison, BLiMP and TSE side
    by side; a row without a CI is an open marker labelled "no CI"."""
    benches = list(dict.fromkeys(r.benchmark for r in rows))
    labels = list(dict.fromkeys(comparison_label(r) for r in rows))
    height = 0.8 / max(1, len(benches))
    for i, bench in enumerate(benches):
        part = [r for r in rows if r.benchmark == bench]
        ys = np.array([labels.index(comparison_label(r)) for r in part]) + (i - (len(benches) - 1) / 2) * height
        xs = np.array([r.drop for r in part])
        color = f"C{2 * i}"
        label = BENCHMARK_NAMES.get(bench, bench)
        ax.errorbar(xs, ys, xerr=_ci_errors(part), fmt="o", color=color, capsize=3, label=label)
        for x, y, r in zip(xs, ys, part, strict=True):
            if math.isnan(r.ci_lo):
                ax.plot([x], [y], "o", mfc="white", color=color)
                ax.annotate("no CI", (x, y), xytext=(4, 2), textcoords="offset points", fontsize=7, color=color)
    ax.axvline(0, color="black", lw=0.8)
    mark = "\n(NOT matched)"
    ax.set_yticks(range(len(labels)), [t + (mark if unmatched and "matched" in t else "") for t in labels], fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="accuracy drop (points): reference − condition, paired 95% CI",
           title=f"(c) grammar at {at:g}% per layer: paired drops")  # fmt: skip
    ax.legend(fontsize=8)


def figure3(
    ppl: dict, blimp: dict, tse: dict, out_path: str | os.PathLike, paired: dict[str, pl.DataFrame] | None = None
) -> list[PairedDrop]:
    """Figure 3 for one checkpoint: (a) perplexity vs fraction, wasserstein vs random (SEM), start and end values
    annotated; (b) matched fraction of lowest-WD neurons vs wasserstein fraction; (c) from the paired tables
    (``paired``: benchmark -> the paired_stats table of BLiMP and TSE), the paired accuracy drops with their 95%
    CIs at the smallest fraction >= 1% (else the largest): W, random (trials pooled, two-stage CI) and matched vs
    clean, and W vs each control (:func:`paired_drops`) -- what claim C11 decides on. A matched control that
    missed its perplexity tolerance (:func:`unmatched_controls`) is drawn in red with its gap, labelled in (c),
    and the title says so. Returns the rows drawn in (c)."""
    fig = Figure(figsize=(16, 4.6), layout="constrained")
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
    rows: list[PairedDrop] = []
    if fractions and paired:
        at = next((f for f in fractions if f >= 1), fractions[-1])
        rows = paired_drops({b: paired[b] for b in ("blimp", "tse") if b in paired}, at)
    if rows:
        _draw_paired_panel(ax, rows, at, at in unmatched)
    else:
        why = "no paired tables given" if not paired else "no all-layer conditions in the paired tables"
        ax.text(0.5, 0.5, why, transform=ax.transAxes, ha="center", va="center")
        ax.set(title="(c) grammar: paired drops", xticks=[], yticks=[])
    title = f"{ppl['model']} @ {ppl['revision']}: sign-specific ablation"
    if unmatched:
        title += " -- perplexity-matched control NOT converged at " + ", ".join(f"{p:g}%" for p in unmatched)
    fig.suptitle(title, color="red" if unmatched else "black")
    save_figure(fig, out_path)
    return rows


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


def figure4(blimp: dict, tse: dict, out_path: str | os.PathLike) -> None:
    """Figure 4: error increase (clean - ablated accuracy) per BLiMP term and TSE family, for individual layer-group
    ablations (g1..gK) and cumulative ones (groups 1..k; c1 = g1)."""
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
    save_figure(fig, out_path)
