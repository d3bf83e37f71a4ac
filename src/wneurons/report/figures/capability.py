"""Beside Fig. 3c: what each ablation condition does to grammar (BLiMP, TSE) and to the capability suite (lm-eval
tasks), from the aggregated results; the picture of claim C30's double dissociation."""

from __future__ import annotations

import os

import numpy as np
from matplotlib.figure import Figure

from wneurons.experiment.grid import CAPABILITY, parse_condition_key
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


def capability_figure(blimp: dict, tse: dict, capability: dict, out_path: str | os.PathLike, label: str = "") -> None:
    """Accuracy drop from clean (points) of BLiMP, TSE and the capability suite under each all-layer condition
    (wasserstein, random: mean +- SEM over trials, matched), grouped by condition. The capability suite's tasks and
    their clean accuracies are named in the title."""
    rows = accuracy_drops({"blimp": blimp, "tse": tse, CAPABILITY: capability})
    fig = Figure(figsize=(max(5.0, 1.8 * len(rows) + 2), 4.2), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(rows))
    width = 0.8 / len(BARS)
    for i, (bench, name, color) in enumerate(BARS):
        drops = [r[1][bench][0] for r in rows]
        sems = [r[1][bench][1] for r in rows]
        ax.bar(x + (i - 1) * width, drops, width, yerr=sems, capsize=3, color=color, label=name)
    names = {"wasserstein": "W", "random": "random", "matched": "matched"}
    ticks = []
    for key, _ in rows:
        _, selector, percent = parse_condition_key(key)
        ticks.append(f"{names[selector]} {percent}%")
    ax.set_xticks(x, ticks)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel("accuracy drop from clean (points)")
    tasks = ", ".join(
        f"{task} {100 * summary['metrics'].get('acc', float('nan')):.0f}%"
        for task, summary in sorted(capability["clean"]["tasks"].items())
    )
    ax.set_title(f"{label}: grammar vs capability (clean: {tasks})" if label else f"clean: {tasks}", fontsize=9)
    ax.legend(fontsize=8)
    save_figure(fig, out_path)
