"""Figures 1 and 2a: one neuron's pre-activations before and after its nonlinearity; WD over every model."""

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
from wneurons.lm import registry
from wneurons.report.figures.style import NEGATIVE_COLOR, POSITIVE_COLOR, save_figure
from wneurons.store.shards import ShardIndex

Nonlinearity = Callable[[torch.Tensor], torch.Tensor] | str


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
    save_figure(fig, out_path)


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
    save_figure(fig, out_path)
