"""Figures 3 and 4: what the sign-specific ablations do to perplexity, BLiMP and TSE (from aggregated results)."""

from __future__ import annotations

import os

import numpy as np
from matplotlib.figure import Figure

from wneurons.experiment.grid import parse_condition_key
from wneurons.report.figures.style import save_figure


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


def figure3(ppl: dict, blimp: dict, tse: dict, out_path: str | os.PathLike) -> None:
    """Figure 3 for one checkpoint: (a) perplexity vs fraction, wasserstein vs random (SEM), start and end values
    annotated; (b) matched fraction of lowest-WD neurons vs wasserstein fraction; (c) BLiMP / TSE accuracy under
    clean, wasserstein, random (mean +- SEM) and matched at the smallest fraction >= 1% (else the largest).
    A matched control that missed its perplexity tolerance (:func:`unmatched_controls`) is drawn in red with its
    gap, its bar hatched, and the title says so."""
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
    save_figure(fig, out_path)


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
