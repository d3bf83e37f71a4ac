"""Jobs of ``workflow/rules/figures.smk``: the table of the paper's figures, and the one job that draws any of them.

A row of :data:`FIGURES` says what a figure reads (``read``: the rule's named inputs, params and wildcards → the
keyword arguments of the drawing function, result files opened here and never in :mod:`wneurons.report.figures`),
how it is drawn (``draw``), where the report shows it (``category``) and its caption (``captions``: the files under
``workflow/report/``, Jinja over the run's config, one per output). Every figure rule runs
``workflow/scripts/figure.py``, which calls :func:`figure_job` with the rule's name; docs/design.md has the recipe
for adding a figure.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import polars as pl

from wneurons.store import io


class Figure(NamedTuple):
    read: Callable[[Any, Any, Any], dict]  # (inputs, params, wildcards) -> keyword arguments of ``draw``
    # "<module>.<function>" of wneurons.report.figures (imported when drawn: the workflow reads this table to parse
    # the rules, and must not import matplotlib and torch for that); it takes ``out_path`` (or the named outputs)
    draw: str
    category: str  # the report's section
    captions: tuple[str, ...]  # caption files (workflow/report/), in the order of the rule's outputs


def _by_model(paths: list[str], models: list[str], read: Callable[[str], Any]) -> dict[str, Any]:
    return {m: read(p) for m, p in zip(models, paths, strict=True)}


def _figure1(inputs, params, wildcards) -> dict:
    """The figure model (index 0) and its ReLU contrast (index 1): shards, neuron table and the nonlinearity its
    neuron table recorded from the loaded model (the config's ``family`` is optional)."""
    from wneurons.lm.registry import family_spec

    fig = params["figure"]

    def member(i: int) -> tuple:
        nonlinearity = family_spec(io.read_parquet_metadata(inputs[f"neurons{i}"])["family"]).nonlinearity
        return inputs[f"shards{i}"], pl.read_parquet(inputs[f"neurons{i}"]), nonlinearity, fig["models"][i]

    shards, stats, nonlinearity, label = member(0)
    contrast = None
    if len(fig["models"]) > 1:
        c_shards, c_stats, c_nonlinearity, c_label = member(1)
        contrast = (c_shards, c_stats, fig["layer"], c_nonlinearity, c_label)
    return {
        "shard_dir": shards,
        "stats": stats,
        "layer": fig["layer"],
        "neuron": fig["neuron"],
        "nonlinearity": nonlinearity,
        "contrast": contrast,
        "label": label,
    }


def _figure2a(inputs, params, wildcards) -> dict:
    return {"stats_by_model": _by_model(list(inputs), params["models"], pl.read_parquet), "layer": params["layer"]}


def _figure2bd(inputs, params, wildcards) -> dict:
    return {
        "tables": _by_model(list(inputs["tables"]), params["models"], pl.read_parquet),
        "summaries": _by_model(list(inputs["summaries"]), params["models"], io.read_json),
    }


def _figure2c(inputs, params, wildcards) -> dict:
    return {"tables": _by_model(list(inputs), params["models"], pl.read_parquet)}


def _figure3(inputs, params, wildcards) -> dict:
    return {b: io.read_json(inputs[b]) for b in ("ppl", "blimp", "tse")}


def _figure3d(inputs, params, wildcards) -> dict:
    return {
        "table": pl.read_parquet(inputs[0]),
        "min_tokens": params["figure"]["min_tokens"],
        "label": params["figure"]["label"],
    }


def _figure4(inputs, params, wildcards) -> dict:
    return {b: io.read_json(inputs[b]) for b in ("blimp", "tse")}


def _figure5(inputs, params, wildcards) -> dict:
    return {
        "pairs": pl.read_csv(inputs["pairs"]),
        "all_pairs": pl.read_parquet(inputs["all_pairs"]),
        "summary": io.read_json(inputs["robustness"]),
    }


def _composition(path: str, fig: Mapping) -> pl.DataFrame:
    """The pair-sign composition rows of the figure's selection (``md_percent``, ``top_k``)."""
    return pl.read_parquet(path).filter(
        (pl.col("percent") == float(fig["md_percent"])) & (pl.col("top_k") == fig["top_k"])
    )


def _figure6a(inputs, params, wildcards) -> dict:
    return {"comp": _composition(inputs[0], params["figure"]), "label": params["figure"]["label"]}


def _figure6b(inputs, params, wildcards) -> dict:
    return {"table": pl.read_parquet(inputs[0]), "model": wildcards["model"]}


def _figure6cd(inputs, params, wildcards) -> dict:
    return {
        "table": pl.read_parquet(inputs["table"]),
        "summary": io.read_json(inputs["summary"]),
        "model": wildcards["model"],
    }


def _figure7(inputs, params, wildcards) -> dict:
    fig = params["figure"]
    return {
        "comp": _composition(inputs["composition"], fig),
        "layerwise": pl.read_parquet(inputs["layerwise"]),
        "correlations": io.read_json(inputs["correlations"]),
        "label": fig["label"],
        "ablation_percent": fig["ablation_percent"],
    }


# Rule name -> figure, in the paper's order.
FIGURES: dict[str, Figure] = {
    "figure1": Figure(_figure1, "neurons.figure1", "Neurons", ("figure1.rst",)),
    "figure2a": Figure(_figure2a, "neurons.figure2a", "Neurons", ("figure2a.rst",)),
    "figure2bd": Figure(_figure2bd, "training.figure2bd", "Training", ("figure2b.rst", "figure2d.rst")),
    "figure2c": Figure(_figure2c, "training.figure2c", "Training", ("figure2c.rst",)),
    "figure3": Figure(_figure3, "ablations.figure3", "Ablations", ("figure3.rst",)),
    "figure3d": Figure(_figure3d, "analyses.figure3d", "Mechanism", ("figure3d.rst",)),
    "figure4": Figure(_figure4, "ablations.figure4", "Ablations", ("figure4.rst",)),
    "figure5": Figure(_figure5, "analyses.figure5", "Mechanism", ("figure5.rst",)),
    "figure6a": Figure(_figure6a, "analyses.figure6a", "Mechanism", ("figure6a.rst",)),
    "figure6b": Figure(_figure6b, "training.figure6b", "Training", ("figure6b.rst",)),
    "figure6cd": Figure(_figure6cd, "training.figure6cd", "Training", ("figure6cd.rst",)),
    "figure7": Figure(_figure7, "analyses.figure7", "Mechanism", ("figure7.rst",)),
}


def figure_job(name: str, inputs, outputs, params, wildcards) -> Any:
    """Draw the figure of rule ``name`` from the rule's inputs, params and wildcards (Snakemake's named lists, or
    dicts / lists with the same items) into its outputs; returns what the drawing returns (the
    rows drawn, where a figure says). A single output is the drawing's ``out_path``; named outputs are passed by
    their names."""
    if name not in FIGURES:
        raise KeyError(f"figure {name!r}: not in wneurons.jobs.figures.FIGURES ({', '.join(FIGURES)})")
    figure = FIGURES[name]
    module, _, function = figure.draw.rpartition(".")
    draw = getattr(importlib.import_module(f"wneurons.report.figures.{module}"), function)
    named = dict(outputs.items()) if hasattr(outputs, "items") else {}
    out = named if len(named) > 1 else {"out_path": outputs[0]}
    return draw(**figure.read(inputs, params, wildcards), **out)
