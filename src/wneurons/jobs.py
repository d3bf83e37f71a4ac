"""One function per workflow job: compose the science modules, record provenance, write results atomically.

workflow/scripts/*.py are thin adapters that pass Snakemake's input/output/params to exactly one of these.
Each is callable (and tested) without Snakemake.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import polars as pl
import torch

from wneurons import io

log = logging.getLogger("wneurons")


# ---------------------------------------------------------------- logging
@contextlib.contextmanager
def logged_to(path: str | os.PathLike | None, threads: int | None = None) -> Iterator[None]:
    """Send this job's log lines (and stderr) to ``path``; set torch's thread count to the job's threads."""
    if threads:
        torch.set_num_threads(int(threads))
    if path is None:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", buffering=1) as fh:
        handler = logging.StreamHandler(fh)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        old_stderr, sys.stderr = sys.stderr, fh
        try:
            yield
        except BaseException:
            log.exception("job failed")
            raise
        finally:
            sys.stderr = old_stderr
            root.removeHandler(handler)


# ---------------------------------------------------------------- data and models
def fetch_data_job(spec: dict, out_dir: str) -> dict:
    """Copy or download one data set into ``out_dir`` and verify it against the repository's checksums."""
    from wneurons.data import fetch_dataset, read_checksums

    return fetch_dataset(
        out_dir,
        read_checksums(spec["checksums"]),
        local_dir=spec.get("local_dir"),
        url=spec.get("url"),
        archive_sha256=spec.get("archive_sha256"),
    )


def convert_model_job(gguf: dict, out_dir: str) -> dict:
    """Convert a GGUF model source (``{"source": "gguf_wheel" | "gguf_file", <source>: <value>}``) into a
    safetensors model directory (once)."""
    from wneurons.models import convert_gguf_source

    return convert_gguf_source(gguf["source"], gguf[gguf["source"]], out_dir)


def load_configured_model(spec: dict, dtype: str):
    """Load the model of a config entry (hub id + revision, or local directory) and check its layer count and,
    where the entry names one, its family against the loaded model's."""
    from wneurons.models import load_model
    from wneurons.registry import check_family, preactivation_modules

    if "hub_id" in spec:
        model, tokenizer = load_model(hub_id=spec["hub_id"], revision=spec["revision"], dtype=dtype)
    else:
        model, tokenizer = load_model(local_path=spec["local_path"], dtype=dtype)
    check_family(spec.get("family"), model, f"models.{spec['name']}.family")
    n_layers = len(preactivation_modules(model))
    if n_layers != spec["num_layers"]:
        raise ValueError(
            f"models.{spec['name']}.num_layers is {spec['num_layers']} but the loaded model has {n_layers} layers"
        )
    return model, tokenizer


def window_bos_of(spec: dict, model, tokenizer) -> tuple[bool, str]:
    """Whether every activation / perplexity window gets a BOS: the config entry's ``window_bos``, or (null) the
    family's default from the registry; and why."""
    from wneurons.models import tokenizer_adds_bos
    from wneurons.registry import family_spec, resolve_window_bos

    return resolve_window_bos(spec.get("window_bos"), family_spec(model), tokenizer_adds_bos(tokenizer))


def _model_provenance(spec: dict, model=None) -> dict:
    """Model name, family (the loaded model's ``model_type`` when given the model, else the entry's), revision,
    source, and the conversion record of converted models."""
    source = spec.get("hub_id") or spec.get("local_path")
    family = model.config.model_type if model is not None else spec.get("family")
    prov = {"model": spec["name"], "family": family, "revision": spec["revision"], "source": source}
    source_json = Path(spec.get("local_path", "")) / "SOURCE.json"
    if "local_path" in spec and source_json.is_file():
        prov["model_source"] = io.read_json(source_json)
    return prov


def _data_provenance(data_dir: str) -> dict:
    source = io.read_json(Path(data_dir) / "SOURCE.json")
    return {"data_sha256": source["sha256"], "data_source": source["source"]}


# ---------------------------------------------------------------- neuron statistics
def collect_activations_job(spec: dict, wikitext_dir: str, out_dir: str, params: dict, io: str = "auto") -> dict:
    """Run the model over WikiText-2 test and cache every layer's pre-activations as shards in ``out_dir``;
    ``io``: how they are written (``neurons.shard_io``). Each window starts with a BOS when the model entry's
    ``window_bos`` (or its family's default) says so; index.json records the choice, its reason and the family."""
    from wneurons.activations import collect_activation_shards
    from wneurons.data import load_wikitext

    model, tokenizer = load_configured_model(spec, params["dtype"])
    window_bos, reason = window_bos_of(spec, model, tokenizer)
    text = load_wikitext(Path(wikitext_dir) / "wiki.test.raw")
    return collect_activation_shards(
        model,
        tokenizer,
        text,
        out_dir,
        layers=params.get("layers"),
        window=params["window"],
        max_tokens=params["max_tokens"],
        md_tokens=params["md_tokens"],
        seed=params["seed"],
        dtype=params["shard_dtype"],
        io=io,
        model_name=spec["name"],
        window_bos=window_bos,
        record={"family": model.config.model_type, "window_bos_reason": reason},
    )


def keep_activations_job(shard_dir: str, out_dir: str) -> None:
    """Hard-link every file of a revision's shards into ``out_dir``, so that a job reading them after the
    statistics (Figure 1) still finds them once the temporary shards are deleted; no bytes are copied."""
    with io.atomic_directory(out_dir) as tmp:
        for path in sorted(Path(shard_dir).iterdir()):
            os.link(path, tmp / path.name)
    log.info("kept %s as hard links in %s", shard_dir, out_dir)


def neuron_stats_job(spec: dict, shard_dir: str, out_path: str, params: dict) -> pl.DataFrame:
    """WD (exact / sampled), sign split, moments and MD of every neuron, from the cached shards."""
    from wneurons.stats import neuron_statistics

    start = time.perf_counter()
    table = neuron_statistics(
        shard_dir, wd_method=params["wd_method"], md_pairs=params["md_pairs"], seed=params["seed"]
    )
    shard_index = io.read_json(Path(shard_dir) / "index.json")
    prov = io.provenance(
        **_model_provenance(spec | {"family": shard_index.get("family", spec.get("family"))}),
        data="wikitext-2 test",
        window_bos=shard_index.get("window_bos"),
        window_bos_reason=shard_index.get("window_bos_reason"),
        text_sha256=shard_index.get("text_sha256"),
        n_tokens=shard_index.get("n_tokens"),
        wd_method=params["wd_method"],
        md_pairs=params["md_pairs"],
        seed=params["seed"],
    )
    io.write_parquet(out_path, table, metadata=prov)
    log.info("neuron statistics: %d rows in %.1f s", table.height, time.perf_counter() - start)
    return table


# ---------------------------------------------------------------- scoring under conditions
def _read_neurons(path: str) -> pl.DataFrame:
    return pl.read_parquet(path, columns=["layer", "neuron", "wd"])


def resolve_condition(condition: dict, neurons_path: str | None, search_path: str | None) -> tuple[dict, dict]:
    """Neurons per layer of a condition and its JSON record (per-layer counts, seed, count rule, the revision
    whose table chose the neurons, the matched m%)."""
    from wneurons.selection import select_neurons

    record = dict(condition)
    if condition["selector"] == "clean":
        return {}, record
    percent = condition["percent"]
    if condition["selector"] == "matched":
        search = io.read_json(search_path)
        record["matched_percent"] = search["percent"]
        record["matched_search"] = {k: v for k, v in search.items() if k != "provenance"}
        percent = search["percent"]
    neurons = select_neurons(
        _read_neurons(neurons_path),
        condition["selector"],
        percent,
        condition["layers"],
        seed=condition["seed"],
        rule=condition["count_rule"],
    )
    record["neurons_per_layer"] = {str(k): int(v.numel()) for k, v in neurons.items()}
    record["neurons"] = {str(k): v.tolist() for k, v in neurons.items()}
    return neurons, record


def _blimp_pairs(data_dir: str, evaluation: dict) -> pl.DataFrame:
    from wneurons import data

    blimp = data.load_blimp(data_dir)
    return data.subsample_per_group(blimp, "paradigm", evaluation["blimp_pairs_per_paradigm"], evaluation["seed"])


def _tse_items(data_dir: str, evaluation: dict) -> pl.DataFrame:
    from wneurons import data

    tse = data.load_tse(data_dir, evaluation.get("tse_format", "pickle"))
    return data.subsample_per_group(tse, "task", evaluation["tse_items_per_subtask"], evaluation["seed"])


def _validation_text(data_dir: str, evaluation: dict) -> str:
    from wneurons import data

    return data.load_wikitext(Path(data_dir) / "wiki.valid.raw")


def _perplexity_options(evaluation: dict, window_bos: bool) -> dict:
    """Keyword arguments of ``scoring.perplexity`` for this evaluation. ``window_bos`` does not apply under a
    convention whose stream carries the tokenizer's own special tokens (``authors``: one BOS for the whole text,
    as the authors' code), so it is off there (docs/conventions.md, "Perplexity windows")."""
    from wneurons.scoring import CONVENTIONS

    convention = evaluation["convention"]
    return {
        "convention": convention,
        "window_bos": window_bos and not CONVENTIONS[convention].stream_special_tokens,
        "window": evaluation["perplexity_window"],
    }


def _score_blimp(model, tokenizer, pairs, evaluation: dict, window_bos: bool) -> tuple[dict, pl.DataFrame]:
    from wneurons.scoring import score_blimp

    return score_blimp(
        model,
        tokenizer,
        pairs,
        convention=evaluation["convention"],
        batch_size=evaluation["batch_size"],
        return_pairs=True,
    )


def _score_tse(model, tokenizer, items, evaluation: dict, window_bos: bool) -> tuple[dict, pl.DataFrame]:
    from wneurons.scoring import score_tse

    return score_tse(
        model,
        tokenizer,
        items,
        convention=evaluation["convention"],
        batch_size=evaluation["batch_size"],
        return_items=True,
    )


def _score_ppl(model, tokenizer, text: str, evaluation: dict, window_bos: bool) -> tuple[dict, pl.DataFrame]:
    from wneurons.scoring import perplexity

    result = perplexity(
        model,
        tokenizer,
        text,
        max_tokens=evaluation["perplexity_max_tokens"],
        return_token_nll=True,
        **_perplexity_options(evaluation, window_bos),
    )
    return result, result.pop("tokens")


class Benchmark(NamedTuple):
    """How one benchmark is scored: ``load(data_dir, evaluation)`` reads (and subsamples) its data;
    ``score(model, tokenizer, data, evaluation, window_bos)`` returns the summary (the JSON's ``scores``) and the
    per-item (per-token for ppl) frame written to ``{benchmark}.items.parquet``."""

    load: Callable[[str, dict], Any]
    score: Callable[..., tuple[dict, pl.DataFrame]]


BENCHMARKS: dict[str, Benchmark] = {
    "blimp": Benchmark(_blimp_pairs, _score_blimp),
    "tse": Benchmark(_tse_items, _score_tse),
    "ppl": Benchmark(_validation_text, _score_ppl),
}


def items_path(out_path: str | os.PathLike) -> Path:
    """The per-item file beside a scoring job's JSON: ``x/{benchmark}.json`` -> ``x/{benchmark}.items.parquet``
    (the workflow spells it in common.smk; this is for callers that are given only the JSON path)."""
    path = Path(out_path)
    return path.with_name(f"{path.stem}.items.parquet")


def score_job(
    spec: dict,
    benchmark: str,
    data_dir: str,
    out_path: str,
    evaluation: dict,
    condition: dict,
    neurons_path: str | None = None,
    search_path: str | None = None,
    items_out: str | None = None,
) -> dict:
    """Score one benchmark under one condition (``{"selector": "clean"}`` or an ablation); write its JSON to
    ``out_path`` and its per-item / per-token results to ``items_out`` (default: beside the JSON,
    :func:`items_path`), both with the same provenance."""
    from wneurons.ablation import clamp_negative_preactivations

    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {benchmark!r}; expected one of {', '.join(BENCHMARKS)}")
    start = time.perf_counter()
    neurons, record = resolve_condition(condition, neurons_path, search_path)
    model, tokenizer = load_configured_model(spec, evaluation["dtype"])
    window_bos, window_bos_reason = window_bos_of(spec, model, tokenizer)
    bench = BENCHMARKS[benchmark]
    data = bench.load(data_dir, evaluation)
    with clamp_negative_preactivations(model, neurons, mode=condition.get("mode", "negative")):
        scores, items = bench.score(model, tokenizer, data, evaluation, window_bos)
    prov = io.provenance(
        **_model_provenance(spec, model),
        **_data_provenance(data_dir),
        convention=evaluation["convention"],
        bos_prepended=scores["bos_prepended"],
        window_bos=scores.get("window_bos"),
        window_bos_reason=window_bos_reason if benchmark == "ppl" else None,
        dtype=evaluation["dtype"],
        evaluation=evaluation,
        seed=condition.get("seed", evaluation["seed"]),
        neurons_sha256=io.sha256_file(neurons_path) if neurons_path else None,
        seconds=round(time.perf_counter() - start, 2),
    )
    result = {"benchmark": benchmark, "condition": record, "scores": scores, "provenance": prov}
    io.write_parquet(items_out or items_path(out_path), items, metadata={"benchmark": benchmark, **prov})
    io.write_json(out_path, result)
    log.info("%s %s: done in %.1f s", benchmark, condition["selector"], time.perf_counter() - start)
    return result


def matched_search_job(
    spec: dict,
    data_dir: str,
    neurons_path: str,
    target_path: str,
    clean_path: str,
    out_path: str,
    evaluation: dict,
    search: dict,
) -> dict:
    """Find m% of lowest-WD neurons whose clamp matches the wasserstein condition's perplexity.

    The search scores exactly the stream the ppl jobs score (the same function and evaluation settings), and its
    target is the wasserstein condition's ``ppl`` result itself: the perplexity it reaches at the chosen m is the
    one the matched condition's ppl job reports, so the gap recorded here is the gap ``ppl.json`` shows.
    """
    from wneurons.ablation import clamp_negative_preactivations
    from wneurons.selection import perplexity_matched_fraction, select_neurons

    target_result = io.read_json(target_path)
    condition = target_result["condition"]
    if condition["selector"] != "wasserstein" or condition["percent"] != search["percent"]:
        raise ValueError(
            f"{target_path}: expected the wasserstein condition at {search['percent']:g}%, got "
            f"{condition['selector']} at {condition['percent']:g}%"
        )
    target = target_result["scores"]["perplexity"]
    clean = io.read_json(clean_path)["scores"]["perplexity"]
    stats = _read_neurons(neurons_path)
    model, tokenizer = load_configured_model(spec, evaluation["dtype"])
    window_bos = window_bos_of(spec, model, tokenizer)[0]
    text = _validation_text(data_dir, evaluation)

    def perplexity_at(percent: float) -> float:
        neurons = select_neurons(stats, "lowest", percent, search["layers"], rule=search["count_rule"])
        with clamp_negative_preactivations(model, neurons, mode=search["mode"]):
            ppl = _score_ppl(model, tokenizer, text, evaluation, window_bos)[0]["perplexity"]
        counts = sum(int(v.numel()) for v in neurons.values())
        log.info("search: lowest %.4g%% (%d neurons) -> perplexity %.4f (target %.4f)", percent, counts, ppl, target)
        return ppl

    start = time.perf_counter()
    result = perplexity_matched_fraction(
        perplexity_at,
        target,
        clean=clean,
        tolerance=search["tolerance"],
        max_percent=search["max_percent"],
        max_steps=search["max_steps"],
    )
    result["wasserstein_percent"] = search["percent"]
    result["clean_perplexity"] = clean
    result["cohort_source"] = search["cohort_source"]
    result["count_rule"] = search["count_rule"]
    result["provenance"] = io.provenance(
        **_model_provenance(spec, model),
        **_data_provenance(data_dir),
        dtype=evaluation["dtype"],
        evaluation=evaluation,
        neurons_sha256=io.sha256_file(neurons_path),
        seconds=round(time.perf_counter() - start, 2),
        **_perplexity_options(evaluation, window_bos),
    )
    if result["converged"]:
        log.info("matched search converged: %.4g%% at gap %.4f", result["percent"], result["relative_gap"])
    else:
        log.warning(
            "matched search did NOT reach tolerance %.3f: best gap %.4f at %.4g%% (%s)",
            result["tolerance"],
            result["relative_gap"],
            result["percent"],
            result["reason"],
        )
    io.write_json(out_path, result)
    return result


# ---------------------------------------------------------------- aggregation
def _numeric_leaves(obj: Any, prefix: tuple = ()) -> dict[tuple, float]:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out |= _numeric_leaves(v, (*prefix, k))
        return out
    if isinstance(obj, int | float) and not isinstance(obj, bool):
        return {prefix: float(obj)}
    return {}


def _nest(flat: dict[tuple, float]) -> dict:
    out: dict = {}
    for path, value in flat.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def mean_and_sem(trials: list[dict]) -> tuple[dict, dict]:
    """Mean and standard error of the mean (ddof=1) of every numeric field across trials."""
    leaves = [_numeric_leaves(t) for t in trials]
    keys = [k for k in leaves[0] if all(k in lv for lv in leaves)]
    mean, sem = {}, {}
    for key in keys:
        values = np.array([lv[key] for lv in leaves])
        mean[key] = float(values.mean())
        sem[key] = float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0
    return _nest(mean), _nest(sem)


def _check_matched_gaps(conditions: dict) -> None:
    """For each matched condition with a perplexity, the gap to its wasserstein condition as this file shows them
    (``matched_gap``), checked against the search's tolerance (``matched_converged``); a miss is logged."""
    for key, summary in conditions.items():
        scope, selector, percent = key.split("/")
        target = conditions.get(f"{scope}/wasserstein/{percent}")
        if selector != "matched" or target is None or "perplexity" not in summary["scores"]:
            continue
        gap = abs(summary["scores"]["perplexity"] / target["scores"]["perplexity"] - 1)
        tolerance = summary["matched_search"]["tolerance"]
        summary["matched_gap"] = gap
        summary["matched_tolerance"] = tolerance
        summary["matched_converged"] = gap <= tolerance
        if gap > tolerance:
            log.warning(
                "%s: perplexity gap to the wasserstein condition %.4f exceeds tolerance %.3f", key, gap, tolerance
            )


def aggregate_job(result_paths: list[str], out_path: str, model: str, revision: str, benchmark: str) -> dict:
    """Collect clean + all conditions of one benchmark into ``results/{model}/{revision}/{benchmark}.json``.

    Conditions are keyed ``{scope}/{selector}/p{percent}``; random trials are summarised as mean and SEM with
    every trial kept.
    """
    from wneurons.grid import format_percent

    results = [io.read_json(p) for p in result_paths]
    clean = [r for r in results if r["condition"]["selector"] == "clean"]
    if len(clean) != 1:
        raise ValueError(f"expected exactly one clean result among {len(result_paths)} inputs, got {len(clean)}")
    groups: dict[str, list[dict]] = {}
    for r in results:
        c = r["condition"]
        if c["selector"] == "clean":
            continue
        key = f"{c['scope']}/{c['selector']}/p{format_percent(c['percent'])}"
        groups.setdefault(key, []).append(r)
    conditions = {}
    for key, members in sorted(groups.items()):
        members.sort(key=lambda r: r["condition"]["trial"])
        summary = {k: v for k, v in members[0]["condition"].items() if k not in ("neurons", "trial", "seed")}
        if len(members) == 1 and members[0]["condition"]["selector"] != "random":
            summary["seed"] = members[0]["condition"]["seed"]
            summary["scores"] = members[0]["scores"]
        else:
            mean, sem = mean_and_sem([m["scores"] for m in members])
            summary |= {
                "n_trials": len(members),
                "seeds": [m["condition"]["seed"] for m in members],
                "scores": mean,
                "sem": sem,
                "trials": [m["scores"] for m in members],
            }
        conditions[key] = summary
    _check_matched_gaps(conditions)
    out = {
        "model": model,
        "revision": revision,
        "benchmark": benchmark,
        "clean": clean[0]["scores"],
        "conditions": conditions,
        "provenance": clean[0]["provenance"],
    }
    io.write_json(out_path, out)
    return out


# ---------------------------------------------------------------- figures
def figure1_job(inputs: dict, out_path: str, params: dict) -> None:
    """Figure 1 from the shards and neuron tables of the figure model (index 0) and its ReLU contrast (index 1);
    each member's nonlinearity is its family's, as recorded in its neuron table."""
    from wneurons.figures import figure1
    from wneurons.registry import family_spec

    def member(i: int) -> tuple:
        # The family recorded from the loaded model when its neuron table was made (the config key is optional).
        nonlinearity = family_spec(io.read_parquet_metadata(inputs[f"neurons{i}"])["family"]).nonlinearity
        return inputs[f"shards{i}"], pl.read_parquet(inputs[f"neurons{i}"]), nonlinearity, params["models"][i]

    shards, stats, nonlinearity, label = member(0)
    contrast = None
    if len(params["models"]) > 1:
        c_shards, c_stats, c_nonlinearity, c_label = member(1)
        contrast = (c_shards, c_stats, params["layer"], c_nonlinearity, c_label)
    figure1(
        shards,
        stats,
        layer=params["layer"],
        neuron=params["neuron"],
        nonlinearity=nonlinearity,
        out_path=out_path,
        contrast=contrast,
        label=label,
    )


def figure2a_job(neuron_tables: list[str], models: list[str], out_path: str, layer: int) -> None:
    """Figure 2a: WD distribution of one layer for every model (final revisions)."""
    from wneurons.figures import figure2a

    figure2a(
        {m: pl.read_parquet(p) for m, p in zip(models, neuron_tables, strict=True)}, layer=layer, out_path=out_path
    )
