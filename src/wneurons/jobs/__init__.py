"""One function per workflow job: compose the science modules, record provenance, write results atomically.

workflow/scripts/*.py are thin adapters that pass Snakemake's input/output/params to exactly one of these.
Each is callable (and tested) without Snakemake.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from wneurons.store import io

log = logging.getLogger("wneurons")


# ---------------------------------------------------------------- logging
@contextlib.contextmanager
def logged_to(path: str | os.PathLike | None, threads: int | None = None) -> Iterator[None]:
    """Send this job's log lines (and, in a process of its own, stderr) to ``path``; run it with torch's thread
    count at the job's threads. Jobs that share a process (:mod:`wneurons.jobs.inprocess`) each log their own thread's
    records only."""
    from wneurons.jobs.inprocess import in_main_thread, torch_threads

    with torch_threads(int(threads)) if threads else contextlib.nullcontext():
        if path is None:
            yield
            return
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        own_process = in_main_thread()
        with open(path, "w", buffering=1) as fh:
            handler = logging.StreamHandler(fh)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            thread = threading.get_ident()
            handler.addFilter(lambda record: record.thread == thread)
            root = logging.getLogger()
            root.addHandler(handler)
            if root.level > logging.INFO or root.level == logging.NOTSET:
                root.setLevel(logging.INFO)
            if own_process:
                old_stderr, sys.stderr = sys.stderr, fh
            try:
                yield
            except BaseException:
                log.exception("job failed")
                raise
            finally:
                if own_process:
                    sys.stderr = old_stderr
                root.removeHandler(handler)


# ---------------------------------------------------------------- data and models
def fetch_data_job(spec: dict, out_dir: str) -> dict:
    """Copy or download one data set into ``out_dir`` and verify it against the repository's checksums."""
    from wneurons.store.data import fetch_dataset, read_checksums

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
    from wneurons.lm.models import convert_gguf_source

    return convert_gguf_source(gguf["source"], gguf[gguf["source"]], out_dir)


def load_configured_model(spec: dict, dtype: str):
    """Load the model of a config entry (hub id + revision, or local directory) and check its layer count and,
    where the entry names one, its family against the loaded model's."""
    from wneurons.lm.models import job_device, load_model
    from wneurons.lm.registry import check_family, preactivation_modules

    source = {"hub_id": spec["hub_id"], "revision": spec["revision"]} if "hub_id" in spec else {}
    model, tokenizer = load_model(**(source or {"local_path": spec["local_path"]}), dtype=dtype, device=job_device())
    check_family(spec.get("family"), model, f"models.{spec['name']}.family")
    n_layers = len(preactivation_modules(model))
    if n_layers != spec["num_layers"]:
        raise ValueError(
            f"models.{spec['name']}.num_layers is {spec['num_layers']} but the loaded model has {n_layers} layers"
        )
    return model, tokenizer


@contextlib.contextmanager
def configured_model(spec: dict, dtype: str) -> Iterator[tuple[Any, Any]]:
    """``(model, tokenizer)`` of a config entry for the length of a job: loaded once per process and lent to the
    next job of the same model from :data:`wneurons.lm.model_pool.POOL` (see :mod:`wneurons.jobs.inprocess`)."""
    from wneurons.lm.model_pool import POOL
    from wneurons.lm.models import job_device

    key = (spec["name"], spec.get("hub_id") or spec.get("local_path"), spec["revision"], dtype, job_device())
    with POOL.checkout(key, lambda: load_configured_model(spec, dtype)) as loaded:
        yield loaded


def window_bos_of(spec: dict, model, tokenizer) -> tuple[bool, str]:
    """Whether every activation / perplexity window gets a BOS: the config entry's ``window_bos``, or (null) the
    family's default from the registry; and why."""
    from wneurons.lm.models import tokenizer_adds_bos
    from wneurons.lm.registry import family_spec, resolve_window_bos

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
def collect_activations_job(spec: dict, wikitext_dir: str, out_dir: str, params: dict) -> dict:
    """Run the model over WikiText-2 test and cache every layer's pre-activations as shards in ``out_dir``;
    ``params["shard_io"]``: how they are written (``neurons.shard_io``). Each window starts with a BOS when the
    model entry's ``window_bos`` (or its family's default) says so; index.json records the choice, its reason and
    the family."""
    from wneurons.lm.activations import collect_activation_shards
    from wneurons.store.data import load_wikitext

    with configured_model(spec, params["dtype"]) as (model, tokenizer):
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
            io=params["shard_io"],
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
    from wneurons.core.stats import neuron_statistics

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
    from wneurons.core.selection import select_neurons

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
    from wneurons.store import data

    blimp = data.load_blimp(data_dir)
    return data.subsample_per_group(blimp, "paradigm", evaluation["blimp_pairs_per_paradigm"], evaluation["seed"])


def _tse_items(data_dir: str, evaluation: dict) -> pl.DataFrame:
    from wneurons.store import data

    tse = data.load_tse(data_dir, evaluation.get("tse_format", "pickle"))
    return data.subsample_per_group(tse, "task", evaluation["tse_items_per_subtask"], evaluation["seed"])


def _validation_text(data_dir: str, evaluation: dict) -> str:
    from wneurons.store import data

    return data.load_wikitext(Path(data_dir) / "wiki.valid.raw")


def _perplexity_options(evaluation: dict, window_bos: bool) -> dict:
    """Keyword arguments of ``scoring.perplexity`` for this evaluation. ``window_bos`` does not apply under a
    convention whose stream carries the tokenizer's own special tokens (``authors``: one BOS for the whole text,
    as the authors' code), so it is off there (docs/conventions.md, "Perplexity windows")."""
    from wneurons.lm.scoring import CONVENTIONS

    convention = evaluation["convention"]
    return {
        "convention": convention,
        "window_bos": window_bos and not CONVENTIONS[convention].stream_special_tokens,
        "window": evaluation["perplexity_window"],
    }


def _score_blimp(model, tokenizer, pairs, evaluation: dict, window_bos: bool) -> tuple[dict, pl.DataFrame]:
    from wneurons.lm.scoring import score_blimp

    return score_blimp(
        model,
        tokenizer,
        pairs,
        convention=evaluation["convention"],
        batch_size=evaluation["batch_size"],
        return_pairs=True,
    )


def _score_tse(model, tokenizer, items, evaluation: dict, window_bos: bool) -> tuple[dict, pl.DataFrame]:
    from wneurons.lm.scoring import score_tse

    return score_tse(
        model,
        tokenizer,
        items,
        convention=evaluation["convention"],
        batch_size=evaluation["batch_size"],
        return_items=True,
    )


def _score_ppl(model, tokenizer, text: str, evaluation: dict, window_bos: bool) -> tuple[dict, pl.DataFrame]:
    from wneurons.lm.scoring import perplexity

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
    from wneurons.lm.ablation import clamp_negative_preactivations

    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {benchmark!r}; expected one of {', '.join(BENCHMARKS)}")
    start = time.perf_counter()
    neurons, record = resolve_condition(condition, neurons_path, search_path)
    with configured_model(spec, evaluation["dtype"]) as (model, tokenizer):
        window_bos, window_bos_reason = window_bos_of(spec, model, tokenizer)
        bench = BENCHMARKS[benchmark]
        data = bench.load(data_dir, evaluation)
        with clamp_negative_preactivations(model, neurons, mode=condition.get("mode", "negative")):
            scores, items = bench.score(model, tokenizer, data, evaluation, window_bos)
        model_prov = _model_provenance(spec, model)
    # The model is back in the pool from here: the next job can have it while this one writes its files.
    prov = io.provenance(
        **model_prov,
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
    from wneurons.core.selection import perplexity_matched_fraction, select_neurons
    from wneurons.lm.ablation import clamp_negative_preactivations

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
    with configured_model(spec, evaluation["dtype"]) as (model, tokenizer):
        window_bos = window_bos_of(spec, model, tokenizer)[0]
        text = _validation_text(data_dir, evaluation)

        def perplexity_at(percent: float) -> float:
            neurons = select_neurons(stats, "lowest", percent, search["layers"], rule=search["count_rule"])
            with clamp_negative_preactivations(model, neurons, mode=search["mode"]):
                ppl = _score_ppl(model, tokenizer, text, evaluation, window_bos)[0]["perplexity"]
            counts = sum(int(v.numel()) for v in neurons.values())
            log.info(
                "search: lowest %.4g%% (%d neurons) -> perplexity %.4f (target %.4f)", percent, counts, ppl, target
            )
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
    from wneurons.experiment.grid import format_percent

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
    from wneurons.lm.registry import family_spec
    from wneurons.report.figures import figure1

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
    from wneurons.report.figures import figure2a

    figure2a(
        {m: pl.read_parquet(p) for m, p in zip(models, neuron_tables, strict=True)}, layer=layer, out_path=out_path
    )


# ---------------------------------------------------------------- training dynamics (Fig. 2b-d, 6b-d)
def train_suite_job(wikitext_dir: str, out_dir: str, train: dict, revisions: list[str], max_tokens: int | None) -> dict:
    """Train the miniature GPT-NeoX suite on the tail of WikiText-2 test, saved at every configured revision."""
    from wneurons.lm.train_suite import train_checkpoint_suite
    from wneurons.store.checkpoints import step_of
    from wneurons.store.data import load_wikitext

    test_path = Path(wikitext_dir) / "wiki.test.raw"
    manifest = train_checkpoint_suite(
        out_dir,
        load_wikitext(test_path),
        [step_of(r) for r in revisions],
        train,
        statistics_max_tokens=max_tokens,
        text_sha256=io.sha256_file(test_path),
    )
    log.info("suite trained in %.1f s: %d checkpoints", manifest["seconds"], len(manifest["checkpoints"]))
    return manifest


def _hub_weights(spec: dict, tensors: list[str]) -> tuple[Path, str, list[str]]:
    """A hub revision's weights without downloading all of them: the digest of every weight file from the hub's
    LFS sha256 metadata (the digest :func:`store.io.sha256_files` gives for the same files on disk), and a local
    directory holding only the file that stores one of ``tensors`` (found through the shard index when sharded)."""
    import json

    from huggingface_hub import HfApi, hf_hub_download

    repo, revision = spec["hub_id"], spec["revision"]
    siblings = {f.rfilename: f for f in HfApi().model_info(repo, revision=revision, files_metadata=True).siblings}
    weights = sorted(n for n in siblings if n.endswith(".safetensors")) or sorted(
        n for n in siblings if n.startswith("pytorch_model") and n.endswith(".bin")
    )
    if not weights:
        raise FileNotFoundError(f"{repo}@{revision}: no *.safetensors or pytorch_model*.bin weight files")
    digest = hashlib.sha256()
    for name in weights:  # io.sha256_files' recipe: by name, the name then the file's hex sha256
        digest.update(name.encode())
        digest.update(siblings[name].lfs.sha256.encode())
    suffix = ".safetensors" if weights[0].endswith(".safetensors") else ".bin"
    index = f"{weights[0].split('-0')[0].removesuffix(suffix)}{suffix}.index.json"
    wanted = weights[0]
    if index in siblings:
        weight_map = json.loads(Path(hf_hub_download(repo, index, revision=revision)).read_text())["weight_map"]
        wanted = next((weight_map[t] for t in tensors if t in weight_map), wanted)
    path = Path(hf_hub_download(repo, wanted, revision=revision))
    return path.parent, digest.hexdigest(), weights


def weight_rows_job(spec: dict, layer: int, rows_path: str, record_path: str) -> dict:
    """One layer's pre-nonlinearity weight rows (float32 [neurons, d_in], bias excluded) of one revision, no
    forward pass, and the revision's weight hashes (all weight files; these rows) for the integrity gate."""
    from wneurons.lm.registry import family_spec
    from wneurons.store import checkpoints

    family = family_spec(spec["family"])
    candidates = [checkpoints.weight_tensor_name(path, family.projection, layer) for path in family.layers_paths]
    if "hub_id" in spec:
        directory, weights_sha256, names = _hub_weights(spec, candidates)
    else:
        directory = Path(spec["local_path"])
        files = checkpoints.checkpoint_weight_files(directory)
        weights_sha256, names = io.sha256_files(files), [f.name for f in files]
    tensor, rows = checkpoints.read_weight_rows(directory, candidates, transpose=family.conv1d)
    record = {
        "revision": spec["revision"],
        "tensor": tensor,
        "shape": list(rows.shape),
        "rows_sha256": checkpoints.rows_sha256(rows),
        "weights_sha256": weights_sha256,
        "weight_files": names,
        "provenance": io.provenance(**_model_provenance(spec)),
    }
    with io.atomic_output(rows_path) as tmp, open(tmp, "wb") as fh:
        np.save(fh, rows)  # to the handle: given a path, np.save would append ".npy" to the temporary name
    io.write_json(record_path, record)
    return record


def cohorts_job(
    spec: dict, final_neurons: str, out_path: str, settings: dict, md_pairs_path: str | None = None
) -> dict:
    """The cohorts of one model, chosen at its final revision (WD from the neuron table; MD from the pair sample
    when given, else the table's test-split MD)."""
    from wneurons.core.dynamics import choose_cohorts

    md_values = (
        pl.read_parquet(md_pairs_path).select("layer", "neuron", pl.col("md_pairs").alias("md"))
        if md_pairs_path
        else None
    )
    cohorts = choose_cohorts(pl.read_parquet(final_neurons), settings, md_values=md_values)
    out = {
        "model": spec["name"],
        "revision": spec["revision"],
        "settings": settings,
        "md_source": "pair sample" if md_pairs_path else "neurons table (test split)",
        "cohorts": cohorts,
        "provenance": io.provenance(**_model_provenance(spec), neurons_sha256=io.sha256_file(final_neurons)),
    }
    io.write_json(out_path, out)
    return out


def integrity_job(record_paths: list[str], final_revision: str, out_path: str, mode: str) -> dict:
    """The checkpoint integrity gate: every revision's weight hash; identical checkpoints (or one equal to the
    final revision) raise, naming them (``mode="error"``), or are recorded as dropped (``mode="drop"``)."""
    from wneurons.core.dynamics import CheckpointIntegrityError, integrity_problems

    records = [io.read_json(p) for p in record_paths]
    hashes = {r["revision"]: r["weights_sha256"] for r in records}
    problems = integrity_problems(hashes, final_revision)
    dropped: list[str] = []
    if problems and mode == "error":
        raise CheckpointIntegrityError("checkpoint integrity: " + "; ".join(problems))
    if problems:  # drop: keep the final revision, else the earliest of each identical group
        groups: dict[str, list[str]] = {}
        for revision, digest in hashes.items():
            groups.setdefault(digest, []).append(revision)
        for members in groups.values():
            keep = final_revision if final_revision in members else min(members, key=_step_key)
            dropped += [m for m in members if m != keep]
        log.warning("checkpoint integrity: dropping %s (%s)", dropped, "; ".join(problems))
    out = {"hashes": hashes, "problems": problems, "dropped": sorted(dropped, key=_step_key), "mode": mode}
    io.write_json(out_path, out)
    return out


def _step_key(revision: str) -> int:
    from wneurons.store.checkpoints import step_of

    return step_of(revision)


def _kept(revisions: list[str], paths: list[str], integrity_path: str) -> list[tuple[str, str]]:
    dropped = set(io.read_json(integrity_path)["dropped"])
    return [(r, p) for r, p in zip(revisions, paths, strict=True) if r not in dropped]


def emergence_job(
    spec: dict,
    revisions: list[str],
    inputs: dict,
    out_path: str,
    summary_path: str,
    params: dict,
    tokens_per_step: int | None = None,
) -> pl.DataFrame:
    """Fig. 2b/2d table: per revision (by step) the WD cohort's mean and SEM, the layer mean, clean TSE (micro
    and macro over subtasks) and BLiMP; summary: the emergence step and the WD-vs-TSE correlations."""
    from wneurons.core import dynamics, uncertainty
    from wneurons.store import checkpoints

    cohort = io.read_json(inputs["cohorts"])["cohorts"]["wd_layer"]
    kept = dict(_kept(revisions, list(range(len(revisions))), inputs["integrity"]))
    rows = []
    for i, revision in enumerate(revisions):
        if revision not in kept:
            continue
        stats = dynamics.cohort_statistic(
            pl.read_parquet(inputs["neurons"][i], columns=["layer", "neuron", "wd"]), cohort
        )
        tse = io.read_json(inputs["tse"][i])["scores"]
        blimp = io.read_json(inputs["blimp"][i])["scores"]
        step = checkpoints.step_of(revision)
        rows.append(
            {
                "revision": revision,
                "step": step,
                "tokens": step * tokens_per_step if tokens_per_step else None,
                "cohort_wd_mean": stats["cohort_mean"],
                "cohort_wd_sem": stats["cohort_sem"],
                "layer_wd_mean": stats["layer_mean"],
                "n_cohort": stats["n_cohort"],
                "tse_overall": tse["overall"],
                "tse_macro": float(np.mean(list(tse["by_task"].values()))),
                "blimp_overall": blimp["overall"],
            }
        )
    table = pl.DataFrame(rows, schema_overrides={"tokens": pl.Int64}).sort("step")
    emergence = dynamics.emergence_step(table["step"], table["cohort_wd_mean"], params["emergence_fraction"])
    corr = {
        target: uncertainty.correlation_with_ci(
            table["cohort_wd_mean"], table[target], n_boot=params["bootstrap"], seed=params["seed"]
        )
        for target in ("tse_overall", "tse_macro", "blimp_overall")
    }
    summary = {
        "model": spec["name"],
        "emergence_fraction": params["emergence_fraction"],
        "emergence_step": emergence,
        "emergence_tokens": emergence * tokens_per_step if emergence is not None and tokens_per_step else None,
        "final_cohort_wd": table["cohort_wd_mean"][-1],
        "final_layer_wd": table["layer_wd_mean"][-1],
        "n_cohort": int(table["n_cohort"][-1]),
        "correlations": corr,
        "dropped": io.read_json(inputs["integrity"])["dropped"],
        "provenance": io.provenance(model=spec["name"], revisions=table["revision"].to_list(), **params),
    }
    io.write_parquet(out_path, table, metadata={"model": spec["name"], "cohort": "wd_layer"})
    io.write_json(summary_path, summary)
    return table


def cosine_drift_job(spec: dict, revisions: list[str], inputs: dict, out_path: str) -> pl.DataFrame:
    """Fig. 2c table: the WD cohort's normalized cosine drift between successive weight-grid revisions."""
    from wneurons.core import dynamics

    cohort = io.read_json(inputs["cohorts"])["cohorts"]["wd_layer"]
    ((layer, neurons),) = cohort["layers"].items()
    kept = _kept(revisions, list(inputs["rows"]), inputs["integrity"])
    rows = {r: np.load(p, mmap_mode="r") for r, p in kept}
    table = dynamics.cosine_drift(rows, np.asarray(neurons, dtype=np.int64))
    io.write_parquet(
        out_path,
        table,
        metadata=io.provenance(model=spec["name"], layer=int(layer), cohort="wd_layer", revisions=[r for r, _ in kept]),
    )
    return table


def ablation_vs_wd_job(
    spec: dict, revisions: list[str], inputs: dict, out_path: str, summary_path: str, params: dict
) -> pl.DataFrame:
    """Fig. 6c-d table: at each revision with checkpoint ablations, the final revision's WD cohort (all layers)
    ablated, its random and matched controls; error increase (clean - ablated accuracy) on BLiMP and TSE vs the
    cohort's mean WD there. The ablations must have used the final revision's cohort (``cohort_source``)."""
    from wneurons.core import dynamics, uncertainty
    from wneurons.experiment.grid import format_percent
    from wneurons.store import checkpoints

    cohort = io.read_json(inputs["cohorts"])["cohorts"]["wd_all_layers"]
    if cohort["percent"] != params["percent"]:
        raise ValueError(
            f"training.cohorts.all_layers_percent is {cohort['percent']} but the checkpoint ablations compared are "
            f"at {params['percent']}% (ablation.checkpoint_percents[0]): the x axis must be the ablated cohort's WD"
        )
    key_of = {s: f"all/{s}/p{format_percent(params['percent'])}" for s in ("wasserstein", "random", "matched")}
    kept = dict(_kept(revisions, list(range(len(revisions))), inputs["integrity"]))
    rows = []
    for i, revision in enumerate(revisions):
        if revision not in kept:
            continue
        table = pl.read_parquet(inputs["neurons"][i], columns=["layer", "neuron", "wd"])
        wd = dynamics.cohort_statistic(table, cohort)
        for benchmark in ("blimp", "tse"):
            result = io.read_json(inputs[benchmark][i])
            for selector, key in key_of.items():
                condition = result["conditions"].get(key)
                if condition is None:
                    raise ValueError(f"{inputs[benchmark][i]}: no condition {key} (checkpoint ablations configured?)")
                if condition.get("cohort_source") != spec["revision"]:
                    raise ValueError(
                        f"{inputs[benchmark][i]}: condition {key} was not selected from the final revision's table "
                        f"(cohort_source {condition.get('cohort_source')!r}); set ablation.checkpoint_selection: final"
                    )
                rows.append(
                    {
                        "revision": revision,
                        "step": checkpoints.step_of(revision),
                        "benchmark": benchmark,
                        "selector": selector,
                        "cohort_wd_mean": wd["cohort_mean"],
                        "cohort_wd_sem": wd["cohort_sem"],
                        "error_increase": result["clean"]["overall"] - condition["scores"]["overall"],
                        "error_increase_sem": condition.get("sem", {}).get("overall"),
                        "n_trials": condition.get("n_trials", 1),
                    }
                )
    out = pl.DataFrame(rows, schema_overrides={"error_increase_sem": pl.Float64}).sort("benchmark", "selector", "step")
    corr = {}
    for (benchmark, selector), group in out.group_by(["benchmark", "selector"], maintain_order=True):
        corr[f"{benchmark}/{selector}"] = uncertainty.correlation_with_ci(
            group["cohort_wd_mean"], group["error_increase"], n_boot=params["bootstrap"], seed=params["seed"]
        )
    io.write_parquet(out_path, out, metadata={"model": spec["name"], "cohort": "wd_all_layers"})
    io.write_json(
        summary_path,
        {
            "model": spec["name"],
            "percent": params["percent"],
            "correlations": corr,
            "provenance": io.provenance(model=spec["name"], **params),
        },
    )
    return out


def figure2bd_job(tables: list[str], summaries: list[str], models: list[str], out_b: str, out_d: str) -> None:
    """Figures 2b and 2d from every model's emergence table and summary."""
    from wneurons.report.figures import figure2b, figure2d

    by_model = {m: pl.read_parquet(p) for m, p in zip(models, tables, strict=True)}
    summary = {m: io.read_json(p) for m, p in zip(models, summaries, strict=True)}
    figure2b(by_model, summary, out_path=out_b)
    figure2d(by_model, summary, out_path=out_d)


def figure2c_job(tables: list[str], models: list[str], out_path: str) -> None:
    """Figure 2c from every model's cosine-drift table."""
    from wneurons.report.figures import figure2c

    figure2c({m: pl.read_parquet(p) for m, p in zip(models, tables, strict=True)}, out_path=out_path)


def figure6cd_job(table: str, summary: str, model: str, out_path: str) -> None:
    """Figure 6c-d of one model from its ablation-vs-WD table."""
    from wneurons.report.figures import figure6cd

    figure6cd(pl.read_parquet(table), io.read_json(summary), model=model, out_path=out_path)


def pair_signs_over_training_job(
    spec: dict, revisions: list[str], inputs: dict, out_path: str, params: dict
) -> pl.DataFrame:
    """Fig. 6b table: at every revision, the NN / PN / PP shares of the top-k pairs of the final revision's MD
    cohort (the same pair positions at every revision: one pair sample, seeded), mean and SEM across neurons."""
    from wneurons.core import dynamics, pairs
    from wneurons.store import checkpoints

    cohort = io.read_json(inputs["cohorts"])["cohorts"]["md_layer"]
    selected = dynamics.cohort_frame(cohort)
    kept = _kept(revisions, list(inputs["signs"]), inputs["integrity"])
    frames = []
    for revision, path in kept:
        signs = pl.read_parquet(path).with_columns(pl.col("layer").cast(pl.Int64), pl.col("neuron").cast(pl.Int64))
        comp = pairs.composition(signs, selected, params["top_k"], cohort["percent"])
        frames.append(comp.with_columns(revision=pl.lit(revision), step=pl.lit(checkpoints.step_of(revision))))
    table = pl.concat(frames, how="diagonal_relaxed").sort("step")
    io.write_parquet(
        out_path, table, metadata=io.provenance(model=spec["name"], cohort="md_layer", top_k=params["top_k"])
    )
    return table


def figure6b_job(table: str, model: str, out_path: str) -> None:
    """Figure 6b of one model from its pair-sign table over training."""
    from wneurons.report.figures import figure6b

    figure6b(pl.read_parquet(table), model=model, out_path=out_path)
