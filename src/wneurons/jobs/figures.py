"""Jobs of ``workflow/rules/figures.smk``: the table of the paper's figures, and the one job that draws any of them.

A row of :data:`FIGURES` says what a figure reads (``inputs``: the result files its rule depends on, and
``params``: its settings, both functions of the config; ``read``: those files and settings → the keyword
arguments of the drawing function: result files are opened here, never in :mod:`wneurons.report.figures`), how it
is drawn (``draw``), where the report shows it (``category``) and its caption (``captions``: files under
``workflow/report/``, Jinja over the run's config, one per output). Every figure rule takes its inputs and params
from its row and runs ``workflow/scripts/figure.py``, which calls :func:`figure_job` with the rule's name;
docs/design.md has the recipe for adding a figure.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import polars as pl

from wneurons.experiment import paths, targets
from wneurons.store import io


class Figure(NamedTuple):
    inputs: Callable[[dict, Any], dict | list]  # (config, wildcards) -> the rule's input files
    params: Callable[[dict], dict]  # config -> the figure's settings (the rule's ``figure`` param)
    read: Callable[[Any, dict, Any], dict]  # (inputs, settings, wildcards) -> keyword arguments of ``draw``
    # "<module>.<function>" of wneurons.report.figures (imported when drawn: the workflow reads this table to parse
    # the rules, and must not import matplotlib and torch for that); it takes ``out_path`` (or the named outputs)
    draw: str
    category: str  # the report's section
    captions: tuple[str, ...]  # caption files (workflow/report/), in the order of the rule's outputs


def _by_model(files: list[str], models: list[str], read: Callable[[str], Any]) -> dict[str, Any]:
    return {m: read(f) for m, f in zip(models, files, strict=True)}


def _final(config: dict, model: str) -> str:
    return targets.final_revision(config, model)


def _none(config: dict) -> dict:
    return {}


# ---------------------------------------------------------------- Fig. 1, 2a: neurons
def _figure1_inputs(config: dict, wildcards) -> dict:
    inputs = {}
    for i, m in enumerate(targets.figure1_models(config)):
        inputs[f"shards{i}"] = paths.kept_shards(m, _final(config, m))
        inputs[f"neurons{i}"] = paths.neurons(m, _final(config, m))
    return inputs


def _figure1_params(config: dict) -> dict:
    """Model(s), layer and neuron (index 0 = main model, 1 = ReLU contrast)."""
    fig = config["figures"]["figure1"]
    return {"models": targets.figure1_models(config), "layer": fig["layer"], "neuron": fig["neuron"]}


def _figure1(inputs, fig: dict, wildcards) -> dict:
    """The figure model (index 0) and its ReLU contrast (index 1): shards, neuron table and the nonlinearity its
    neuron table recorded from the loaded model (the config's ``family`` is optional)."""
    from wneurons.lm.registry import family_spec

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


def _figure2a_inputs(config: dict, wildcards) -> list:
    return [paths.neurons(m, _final(config, m)) for m in config["models"]]


def _figure2a_params(config: dict) -> dict:
    return {"layer": config["figures"]["figure2a_layer"], "models": list(config["models"])}


def _figure2a(inputs, fig: dict, wildcards) -> dict:
    return {"stats_by_model": _by_model(list(inputs), fig["models"], pl.read_parquet), "layer": fig["layer"]}


# ---------------------------------------------------------------- Fig. 2b-d, 6b, 6c-d: training dynamics
def _figure2bd_inputs(config: dict, wildcards) -> dict:
    models = targets.training_models(config)
    return {
        "tables": [paths.emergence_table(m) for m in models],
        "summaries": [paths.emergence_summary(m) for m in models],
    }


def _training_models(config: dict) -> dict:
    return {"models": targets.training_models(config)}


def _figure2bd(inputs, fig: dict, wildcards) -> dict:
    return {
        "tables": _by_model(list(inputs["tables"]), fig["models"], pl.read_parquet),
        "summaries": _by_model(list(inputs["summaries"]), fig["models"], io.read_json),
    }


def _figure2c_inputs(config: dict, wildcards) -> list:
    return [paths.cosine_drift(m) for m in targets.drift_models(config)]


def _figure2c_params(config: dict) -> dict:
    return {"models": targets.drift_models(config)}


def _figure2c(inputs, fig: dict, wildcards) -> dict:
    return {"tables": _by_model(list(inputs), fig["models"], pl.read_parquet)}


def _figure6b_inputs(config: dict, wildcards) -> list:
    return [paths.pair_signs_training(wildcards.model)]


def _figure6b(inputs, fig: dict, wildcards) -> dict:
    return {"table": pl.read_parquet(inputs[0]), "model": wildcards["model"]}


def _figure6cd_inputs(config: dict, wildcards) -> dict:
    m = wildcards.model
    return {"table": paths.ablation_vs_wd_table(m), "summary": paths.ablation_vs_wd_summary(m)}


def _figure6cd(inputs, fig: dict, wildcards) -> dict:
    return {
        "table": pl.read_parquet(inputs["table"]),
        "summary": io.read_json(inputs["summary"]),
        "model": wildcards["model"],
    }


# ---------------------------------------------------------------- Fig. 3, 4: ablations
def _aggregates(*benchmarks: str, paired: tuple[str, ...] = ()) -> Callable[[dict, Any], dict]:
    """The aggregates of ``benchmarks`` and, as ``paired_{b}``, the paired tables of ``paired`` at the checkpoint."""

    def inputs(config: dict, wildcards) -> dict:
        m, r = wildcards.model, wildcards.revision
        return {b: paths.aggregate(m, r, b) for b in benchmarks} | {
            f"paired_{b}": paths.paired(m, r, b) for b in paired
        }

    return inputs


def _paired_tables(inputs, benchmarks: tuple[str, ...]) -> dict[str, pl.DataFrame]:
    return {b: pl.read_parquet(inputs[f"paired_{b}"]) for b in benchmarks}


def _figure3(inputs, fig: dict, wildcards) -> dict:
    return {b: io.read_json(inputs[b]) for b in ("ppl", "blimp", "tse")} | {
        "paired": _paired_tables(inputs, ("blimp", "tse"))
    }


def _figure4(inputs, fig: dict, wildcards) -> dict:
    return {b: io.read_json(inputs[b]) for b in ("blimp", "tse")}


def _capability(inputs, fig: dict, wildcards) -> dict:
    benchmarks = ("blimp", "tse", "capability")
    return {b: io.read_json(inputs[b]) for b in benchmarks} | {
        "label": wildcards["model"],
        "paired": _paired_tables(inputs, benchmarks),
    }


# ---------------------------------------------------------------- Fig. 3d, 5, 6a, 7: the mechanism analyses
def _figure3d_inputs(config: dict, wildcards) -> list:
    m = config["pos"]["model"]
    return [paths.pos_surprisal(m, _final(config, m))]


def _figure3d_params(config: dict) -> dict:
    return {"min_tokens": config["pos"]["min_tokens"], "label": config["pos"]["model"]}


def _figure3d(inputs, fig: dict, wildcards) -> dict:
    return {"table": pl.read_parquet(inputs[0]), "min_tokens": fig["min_tokens"], "label": fig["label"]}


def _figure5_inputs(config: dict, wildcards) -> dict:
    m = config["figures"]["figure5"]["model"]
    r = _final(config, m)
    return {
        "pairs": paths.case_study_pairs(m, r),
        "all_pairs": paths.case_study_all_pairs(m, r),
        "robustness": paths.case_study_robustness(m, r),
    }


def _figure5(inputs, fig: dict, wildcards) -> dict:
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


def _figure6a_inputs(config: dict, wildcards) -> list:
    m = config["figures"]["figure6"]["model"]
    return [paths.pair_composition(m, _final(config, m))]


def _figure6a_params(config: dict) -> dict:
    fig = config["figures"]["figure6"]
    return {"md_percent": fig["md_percent"], "top_k": fig["top_k"], "label": fig["model"]}


def _figure6a(inputs, fig: dict, wildcards) -> dict:
    return {"comp": _composition(inputs[0], fig), "label": fig["label"]}


def _figure7_inputs(config: dict, wildcards) -> dict:
    m = config["figures"]["figure7"]["model"]
    r = _final(config, m)
    return {
        "composition": paths.pair_composition(m, r),
        "layerwise": paths.layerwise_table(m, r),
        "correlations": paths.layerwise_correlations(m, r),
    }


def _figure7_params(config: dict) -> dict:
    fig = config["figures"]["figure7"]
    return {k: fig[k] for k in ("md_percent", "top_k", "ablation_percent")} | {"label": fig["model"]}


def _figure7(inputs, fig: dict, wildcards) -> dict:
    return {
        "comp": _composition(inputs["composition"], fig),
        "layerwise": pl.read_parquet(inputs["layerwise"]),
        "correlations": io.read_json(inputs["correlations"]),
        "label": fig["label"],
        "ablation_percent": fig["ablation_percent"],
    }


# Rule name -> figure, in the paper's order.
# fmt: off
FIGURES: dict[str, Figure] = {
    "figure1": Figure(_figure1_inputs, _figure1_params, _figure1, "neurons.figure1", "Neurons", ("figure1.rst",)),
    "figure2a": Figure(_figure2a_inputs, _figure2a_params, _figure2a, "neurons.figure2a", "Neurons",
                       ("figure2a.rst",)),
    "figure2bd": Figure(_figure2bd_inputs, _training_models, _figure2bd, "training.figure2bd", "Training",
                        ("figure2b.rst", "figure2d.rst")),
    "figure2c": Figure(_figure2c_inputs, _figure2c_params, _figure2c, "training.figure2c", "Training",
                       ("figure2c.rst",)),
    "figure3": Figure(_aggregates("ppl", "blimp", "tse", paired=("blimp", "tse")), _none, _figure3,
                      "ablations.figure3", "Ablations", ("figure3.rst",)),
    "capability_figure": Figure(_aggregates("blimp", "tse", "capability", paired=("blimp", "tse", "capability")),
                                _none, _capability,
                                "capability.capability_figure", "Ablations", ("capability_figure.rst",)),
    "figure3d": Figure(_figure3d_inputs, _figure3d_params, _figure3d, "analyses.figure3d", "Mechanism",
                       ("figure3d.rst",)),
    "figure4": Figure(_aggregates("blimp", "tse"), _none, _figure4, "ablations.figure4", "Ablations",
                      ("figure4.rst",)),
    "figure5": Figure(_figure5_inputs, _none, _figure5, "analyses.figure5", "Mechanism", ("figure5.rst",)),
    "figure6a": Figure(_figure6a_inputs, _figure6a_params, _figure6a, "analyses.figure6a", "Mechanism",
                       ("figure6a.rst",)),
    "figure6b": Figure(_figure6b_inputs, _none, _figure6b, "training.figure6b", "Training", ("figure6b.rst",)),
    "figure6cd": Figure(_figure6cd_inputs, _none, _figure6cd, "training.figure6cd", "Training", ("figure6cd.rst",)),
    "figure7": Figure(_figure7_inputs, _figure7_params, _figure7, "analyses.figure7", "Mechanism",
                      ("figure7.rst",)),
}
# fmt: on


def figure_job(name: str, inputs, outputs, params, wildcards) -> Any:
    """Draw the figure of rule ``name`` from the rule's inputs, its ``figure`` param (the row's settings) and
    wildcards (Snakemake's named lists, or dicts / lists with the same items) into its outputs; returns what the
    drawing returns (the rows drawn, where a figure says). A single output is the drawing's ``out_path``; named
    outputs are passed by their names."""
    if name not in FIGURES:
        raise KeyError(f"figure {name!r}: not in wneurons.jobs.figures.FIGURES ({', '.join(FIGURES)})")
    figure = FIGURES[name]
    module, _, function = figure.draw.rpartition(".")
    draw = getattr(importlib.import_module(f"wneurons.report.figures.{module}"), function)
    named = dict(outputs.items()) if hasattr(outputs, "items") else {}
    out = named if len(named) > 1 else {"out_path": outputs[0]}
    return draw(**figure.read(inputs, params["figure"], wildcards), **out)
