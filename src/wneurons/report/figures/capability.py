"""Beside Fig. 3c: what each ablation condition does to grammar (BLiMP, TSE) and to the capability suite (lm-eval
tasks), from the aggregated results; the picture of claim C30's double dissociation."""

from __future__ import annotations

import os

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from wneurons.experiment.grid import CAPABILITY, parse_condition_key
from wneurons.report.figures.ablations import PairedDrop, paired_drop
from wneurons.report.figures.style import save_figure

SELECTORS = ("wasserstein", "random", "matched")
BARS = (("blimp", "BLiMP", "C0"), ("tse", "TSE", "C2"), (CAPABILITY, "capability suite", "C1"))


def accuracy_drops(results: dict[str, dict]) -> list[tuple[str, dict[str, tuple[float, float]]]]:
    """Per all-layer condition present in every benchmark (by percent, then W / random / matched): benchmark ->
    (drop, SEM) in accuracy points, drop = clean - condition; SEM 0 where the condition has none (one trial)."""
    keys = set.intersection(*(set(r["conditions"]) for r in results.values()))
    chosen = []
    for key in keys:
        scope, selector, percent = parse_condition_key(key)
        if scope == "all" and selector in SELECTORS:
            chosen.append((float(percent), SELECTORS.index(selector), key))
    rows = []
    for _, _, key in sorted(chosen):
        drops = {}
        for bench, result in results.items():
            condition = result["conditions"][key]
            sem = (condition.get("sem") or {}).get("overall")
            drops[bench] = (100 * (result["clean"]["overall"] - condition["scores"]["overall"]),
                            0.0 if sem is None else 100 * sem)  # fmt: skip
        rows.append((key, drops))
    return rows


def paired_condition_drops(paired: dict[str, pl.DataFrame]) -> list[tuple[str, dict[str, PairedDrop]]]:
    """Per all-layer condition (by percent, then W / random / matched) that every paired table compares with clean:
    benchmark -> its :class:`~wneurons.report.figures.ablations.PairedDrop` vs clean (points, paired 95% CI; random
    trials pooled, two-stage)."""
    chosen = set()
    for frame in paired.values():
        for key in frame.filter(pl.col("reference") == "clean")["condition"].unique().to_list():
            scope, selector, percent = parse_condition_key(key)
            if scope == "all" and selector in SELECTORS:
                chosen.add((float(percent), SELECTORS.index(selector), key))
    rows = []
    for _, _, key in sorted(chosen):
        drops = {b: paired_drop(frame, b, "clean", key) for b, frame in paired.items()}
        if all(d is not None for d in drops.values()):
            rows.append((key, drops))
    return rows


def capability_figure(
    blimp: dict,
    tse: dict,
    capability: dict,
    out_path: str | os.PathLike,
    label: str = "",
    paired: dict[str, pl.DataFrame] | None = None,
) -> list:
    """Accuracy drop from clean (points) of BLiMP, TSE and the capability suite under each all-layer condition,
    grouped by condition. With ``paired`` (benchmark -> paired_stats table of the three): every bar with its paired
    95% CI (W and matched: one trial, exact; random: trials pooled, two-stage; a bar without a CI is marked "no
    CI"); without, the aggregates' drops with the SEM over random trials only. The capability suite's tasks and
    their clean accuracies are named in the title. Returns the rows drawn."""
    if paired:
        rows = paired_condition_drops({b: paired[b] for b in ("blimp", "tse", CAPABILITY)})
        bars = {key: {b: (d.drop, d.drop - d.ci_lo, d.ci_hi - d.drop) for b, d in drops.items()}
                for key, drops in rows}  # fmt: skip
        ylabel = "accuracy drop from clean (points), paired 95% CI"
    else:
        rows = accuracy_drops({"blimp": blimp, "tse": tse, CAPABILITY: capability})
        bars = {key: {b: (d, s, s) for b, (d, s) in drops.items()} for key, drops in rows}
        ylabel = "accuracy drop from clean (points), ± SEM over random trials"
    fig = Figure(figsize=(max(5.0, 1.8 * len(bars) + 2), 4.2), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(bars))
    width = 0.8 / len(BARS)
    for i, (bench, name, color) in enumerate(BARS):
        values = np.array([b[bench] for b in bars.values()], dtype=float).reshape(-1, 3)
        xs = x + (i - 1) * width
        errors = np.nan_to_num(values[:, 1:].T)
        ax.bar(xs, values[:, 0], width, yerr=errors, capsize=3, color=color, label=name)
        for xi, (drop, lo, _) in zip(xs, values, strict=True):
            if paired and np.isnan(lo):
                ax.annotate("no CI", (xi, drop), ha="center", xytext=(0, 3), textcoords="offset points", fontsize=7)
    names = {"wasserstein": "W", "random": "random", "matched": "matched"}
    ticks = []
    for key in bars:
        _, selector, percent = parse_condition_key(key)
        ticks.append(f"{names[selector]} {percent}%")
    ax.set_xticks(x, ticks)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel(ylabel)
    tasks = ", ".join(
        f"{task} {100 * summary['metrics'].get('acc', float('nan')):.0f}%"
        for task, summary in sorted(capability["clean"]["tasks"].items())
    )
    ax.set_title(f"{label}: grammar vs capability (clean: {tasks})" if label else f"clean: {tasks}", fontsize=9)
    ax.legend(fontsize=8)
    save_figure(fig, out_path)
    return rows
