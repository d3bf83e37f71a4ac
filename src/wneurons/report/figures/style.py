"""What every figure shares: the sign colours, the resolution, the ±SEM band and the atomic PNG writer."""

from __future__ import annotations

import os

import numpy as np
from matplotlib.figure import Figure

from wneurons.store.io import atomic_output

NEGATIVE_COLOR = "tab:red"
POSITIVE_COLOR = "tab:blue"
SIGN_COLORS = {"nn": NEGATIVE_COLOR, "pn": "tab:purple", "pp": POSITIVE_COLOR}
DPI = 150


def save_figure(fig: Figure, out_path: str | os.PathLike) -> None:
    """Write ``fig`` as a PNG at ``out_path``, atomically."""
    with atomic_output(out_path, ".png") as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")


def band(axes, x, mean, sem, **kwargs) -> None:
    """A line with a shaded ±1 SEM band (the paper's "shaded bands are one standard error of the mean")."""
    mean, sem = np.asarray(mean, dtype=float), np.nan_to_num(np.asarray(sem, dtype=float))
    (line,) = axes.plot(x, mean, marker="o", markersize=3, **kwargs)
    axes.fill_between(x, mean - sem, mean + sem, color=line.get_color(), alpha=0.2, linewidth=0)
