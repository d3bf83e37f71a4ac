"""Jobs of ``workflow/rules/ablate.smk``: score a benchmark under one condition (clean or an ablation), search the
perplexity-matched control, and aggregate a checkpoint's conditions into ``{benchmark}.json``.

A condition's neurons come from :func:`wneurons.core.selection.select_neurons`; a benchmark's data and scorer
from :data:`wneurons.lm.benchmarks.BENCHMARKS`; the clamp is :func:`wneurons.lm.ablation.clamp_negative_preactivations`.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import polars as pl

from wneurons.core.uncertainty import mean_and_sem
from wneurons.experiment.grid import condition_key, parse_condition_key
from wneurons.jobs.base import configured_model, data_provenance, model_provenance, window_bos_of
from wneurons.store import io

log = logging.getLogger("wneurons")


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
    from wneurons.lm.benchmarks import BENCHMARKS

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
        model_prov = model_provenance(spec, model)
    # The model is back in the pool from here: the next job can have it while this one writes its files.
    prov = io.provenance(
        **model_prov,
        **data_provenance(data_dir),
        # The text perplexity scored, by checksum: C29 reads which WikiText-2 split it is (validation).
        **({"text_sha256": hashlib.sha256(data.encode("utf-8")).hexdigest()} if isinstance(data, str) else {}),
        # The benchmark's own convention: the evaluation's, except the capability suite's (lm-eval's).
        convention=scores.get("convention", evaluation["convention"]),
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


def search_matched_percent(
    model,
    tokenizer,
    stats: pl.DataFrame,
    text: str,
    target: float,
    clean: float,
    evaluation: dict,
    search: dict,
    window_bos: bool,
) -> dict:
    """The m% of each layer's lowest-WD neurons (``stats``: the neurons table) whose clamp brings the perplexity of
    ``text`` to ``target`` (W's), scored as the ppl jobs score it (``evaluation``'s settings): the search of
    :func:`wneurons.core.selection.perplexity_matched_fraction` with ``search``'s tolerance, steps, layers, mode and
    count rule; returns its record (``percent``, ``converged``, ``relative_gap``, the steps)."""
    from wneurons.core.selection import perplexity_matched_fraction, select_neurons
    from wneurons.lm.ablation import clamp_negative_preactivations
    from wneurons.lm.benchmarks import score_perplexity

    def perplexity_at(percent: float) -> float:
        neurons = select_neurons(stats, "lowest", percent, search["layers"], rule=search["count_rule"])
        with clamp_negative_preactivations(model, neurons, mode=search["mode"]):
            ppl = score_perplexity(model, tokenizer, text, evaluation, window_bos)[0]["perplexity"]
        counts = sum(int(v.numel()) for v in neurons.values())
        log.info("search: lowest %.4g%% (%d neurons) -> perplexity %.4f (target %.4f)", percent, counts, ppl, target)
        return ppl

    return perplexity_matched_fraction(
        perplexity_at,
        target,
        clean=clean,
        tolerance=search["tolerance"],
        nll_increase_tolerance=search.get("nll_increase_tolerance"),
        max_percent=search["max_percent"],
        max_steps=search["max_steps"],
    )


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
    from wneurons.lm.benchmarks import perplexity_options, validation_text

    target_result = io.read_json(target_path)
    condition = target_result["condition"]
    if condition["selector"] != "wasserstein" or condition["percent"] != search["percent"]:
        raise ValueError(
            f"{target_path}: expected the wasserstein condition at {search['percent']:g}%, got "
            f"{condition['selector']} at {condition['percent']:g}%"
        )
    target = target_result["scores"]["perplexity"]
    clean_result = io.read_json(clean_path)
    clean = clean_result["scores"]["perplexity"]
    stats = _read_neurons(neurons_path)
    with configured_model(spec, evaluation["dtype"]) as (model, tokenizer):
        window_bos = window_bos_of(spec, model, tokenizer)[0]
        text = validation_text(data_dir, evaluation)
        start = time.perf_counter()
        result = search_matched_percent(model, tokenizer, stats, text, target, clean, evaluation, search, window_bos)
        result["wasserstein_percent"] = search["percent"]
        result["clean_perplexity"] = clean
        # The search branches on its inputs' last bits (neuron counts round m): which thread counts computed them.
        result["input_torch_threads"] = {
            "target": target_result.get("provenance", {}).get("torch_threads"),
            "clean": clean_result.get("provenance", {}).get("torch_threads"),
        }
        result["cohort_source"] = search["cohort_source"]
        result["count_rule"] = search["count_rule"]
        result["provenance"] = io.provenance(
            **model_provenance(spec, model),
            **data_provenance(data_dir),
            dtype=evaluation["dtype"],
            evaluation=evaluation,
            neurons_sha256=io.sha256_file(neurons_path),
            seconds=round(time.perf_counter() - start, 2),
            **perplexity_options(evaluation, window_bos),
        )
        reach = result.get("nll_increase_ratio")
        reached = "" if reach is None else f", {100 * reach:.1f}% of W's NLL increase"
        if result["converged"]:
            log.info(
                "matched search converged: %.4g%% at gap %.4f%s", result["percent"], result["relative_gap"], reached
            )
        else:
            log.warning(
                "matched search did NOT reach tolerance %.3f: best gap %.4f at %.4g%%%s (%s)",
                result["tolerance"],
                result["relative_gap"],
                result["percent"],
                reached,
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


def _nest(flat: dict[tuple, float | None]) -> dict:
    out: dict = {}
    for path, value in flat.items():
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return out


def _json_number(x: float) -> float | None:
    """NaN (undefined) as None, which JSON writes as null."""
    return None if math.isnan(x) else x


def mean_and_sem_by_field(trials: list[dict]) -> tuple[dict, dict]:
    """Mean and standard error of the mean of every numeric field across trials, as
    :func:`wneurons.core.uncertainty.mean_and_sem` gives them (ddof=1, finite values); a value that is undefined
    (the SEM of a single trial) is None, null in the JSON."""
    leaves = [_numeric_leaves(t) for t in trials]
    keys = [k for k in leaves[0] if all(k in lv for lv in leaves)]
    mean, sem = {}, {}
    for key in keys:
        m, s = mean_and_sem([lv[key] for lv in leaves])
        mean[key], sem[key] = _json_number(m), _json_number(s)
    return _nest(mean), _nest(sem)


def check_matched_gaps(conditions: dict) -> list[str]:
    """For each matched condition with a perplexity, the gap to its wasserstein condition as this file shows them
    (``matched_gap``), checked against the search's tolerance; ``matched_converged`` is that check and the search's
    own verdict (which, with ``ablation.matched.nll_increase_tolerance``, also needs the control's NLL increase
    within that fraction of W's). Returns one line per miss, with its reason."""
    misses = []
    for key, summary in conditions.items():
        scope, selector, percent = parse_condition_key(key)
        target = conditions.get(condition_key(scope, "wasserstein", percent))
        if selector != "matched" or target is None or "perplexity" not in summary["scores"]:
            continue
        gap = abs(summary["scores"]["perplexity"] / target["scores"]["perplexity"] - 1)
        tolerance = summary["matched_search"]["tolerance"]
        summary["matched_gap"] = gap
        summary["matched_tolerance"] = tolerance
        search_converged = summary["matched_search"].get("converged", True)
        summary["matched_converged"] = gap <= tolerance and search_converged
        if gap > tolerance:
            gap_words = f"perplexity gap to the wasserstein condition {gap:.4f} exceeds tolerance {tolerance:.3f}"
            misses.append(f"{key}: {gap_words}")
        elif not search_converged:
            misses.append(f"{key}: the matched search did not converge ({summary['matched_search'].get('reason')})")
    return misses


def pooled_conditions(results: list[dict]) -> dict[str, dict]:
    """The ablation conditions among one benchmark's per-condition results (clean ones skipped), keyed
    ``{scope}/{selector}/p{percent}`` (:func:`wneurons.experiment.grid.condition_key`): a single result as it is,
    random trials (and any condition with several) as mean and SEM (:func:`mean_and_sem_by_field`), every trial
    kept. The aggregate job's conditions, and ``wneurons summary``'s."""
    groups: dict[str, list[dict]] = {}
    for r in results:
        c = r["condition"]
        if c["selector"] == "clean":
            continue
        groups.setdefault(condition_key(c["scope"], c["selector"], c["percent"]), []).append(r)
    conditions = {}
    for key, members in sorted(groups.items()):
        members.sort(key=lambda r: r["condition"]["trial"])
        summary = {k: v for k, v in members[0]["condition"].items() if k not in ("neurons", "trial", "seed")}
        if len(members) == 1 and members[0]["condition"]["selector"] != "random":
            summary["seed"] = members[0]["condition"]["seed"]
            summary["scores"] = members[0]["scores"]
        else:
            mean, sem = mean_and_sem_by_field([m["scores"] for m in members])
            summary |= {
                "n_trials": len(members),
                "seeds": [m["condition"]["seed"] for m in members],
                "scores": mean,
                "sem": sem,
                "trials": [m["scores"] for m in members],
            }
        conditions[key] = summary
    return conditions


def aggregate_job(result_paths: list[str], out_path: str, model: str, revision: str, benchmark: str) -> dict:
    """Collect clean + all conditions of one benchmark into ``results/{model}/{revision}/{benchmark}.json``:
    the conditions of :func:`pooled_conditions`, the matched ones checked against their wasserstein condition."""
    results = [io.read_json(p) for p in result_paths]
    clean = [r for r in results if r["condition"]["selector"] == "clean"]
    if len(clean) != 1:
        raise ValueError(f"expected exactly one clean result among {len(result_paths)} inputs, got {len(clean)}")
    conditions = pooled_conditions(results)
    for miss in check_matched_gaps(conditions):
        log.warning(miss)
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
