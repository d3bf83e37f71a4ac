"""The benchmark table: how each benchmark the workflow scores (BLiMP, TSE, WikiText-2 perplexity, the capability
suite of lm-eval tasks) reads its data and scores a model, so that the scoring jobs (:mod:`wneurons.jobs.ablate`)
look a benchmark up instead of branching on its name. Adding a benchmark is one entry of :data:`BENCHMARKS` (and
its name in :data:`wneurons.experiment.grid.BENCHMARKS`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import polars as pl

from wneurons.lm.lmeval import LmEvalSuite, score_suite
from wneurons.lm.perplexity import perplexity
from wneurons.lm.scoring import CONVENTIONS, score_blimp, score_tse
from wneurons.store import data
from wneurons.store.lmeval_tasks import HUB_SOURCE, staged_datasets


class Benchmark(NamedTuple):
    """How one benchmark is scored: ``load(data_dir, evaluation)`` reads (and subsamples) its data;
    ``score(model, tokenizer, data, evaluation, window_bos)`` returns the summary (the JSON's ``scores``) and the
    per-item (per-token for ppl) frame written to ``{benchmark}.items.parquet``."""

    load: Callable[[str, dict], Any]
    score: Callable[..., tuple[dict, pl.DataFrame]]


def blimp_pairs(data_dir: str, evaluation: dict) -> pl.DataFrame:
    """The BLiMP pairs scored: ``evaluation.blimp_pairs_per_paradigm`` per paradigm (seeded; null = all), after
    the seeded order's first ``evaluation.blimp_pairs_offset`` (absent = 0)."""
    blimp = data.load_blimp(data_dir)
    per, offset = evaluation["blimp_pairs_per_paradigm"], evaluation.get("blimp_pairs_offset", 0)
    return data.subsample_per_group(blimp, "paradigm", per, evaluation["seed"], offset)


def tse_items(data_dir: str, evaluation: dict) -> pl.DataFrame:
    """The TSE items scored: ``evaluation.tse_items_per_subtask`` per task (seeded; null = all), after the seeded
    order's first ``evaluation.tse_items_offset`` (absent = 0)."""
    tse = data.load_tse(data_dir, evaluation.get("tse_format", "pickle"))
    per, offset = evaluation["tse_items_per_subtask"], evaluation.get("tse_items_offset", 0)
    return data.subsample_per_group(tse, "task", per, evaluation["seed"], offset)


def validation_text(data_dir: str, evaluation: dict) -> str:
    """The WikiText-2 validation text whose perplexity is scored."""
    return data.wikitext_split(data_dir, "valid")


def perplexity_options(evaluation: dict, window_bos: bool) -> dict:
    """Keyword arguments of ``lm.perplexity.perplexity`` for this evaluation. ``window_bos`` does not apply under a
    convention whose stream carries the tokenizer's own special tokens (``authors``: one BOS for the whole text,
    as the authors' code), so it is off there (docs/conventions.md, "Perplexity windows")."""
    convention = evaluation["convention"]
    return {
        "convention": convention,
        "window_bos": window_bos and not CONVENTIONS[convention].stream_special_tokens,
        "window": evaluation["perplexity_window"],
    }


def minimal_pair_scorer(scorer: Callable, per_item_flag: str) -> Callable[..., tuple[dict, pl.DataFrame]]:
    """The table's ``score`` of a minimal-pair benchmark: ``scorer`` (``score_blimp`` / ``score_tse``) under the
    evaluation's convention and batch size, asked for its per-item frame through ``per_item_flag``."""

    def score(model, tokenizer, pairs: pl.DataFrame, evaluation: dict, window_bos: bool) -> tuple[dict, pl.DataFrame]:
        return scorer(
            model,
            tokenizer,
            pairs,
            convention=evaluation["convention"],
            batch_size=evaluation["batch_size"],
            **{per_item_flag: True},
        )

    return score


def score_perplexity(model, tokenizer, text: str, evaluation: dict, window_bos: bool) -> tuple[dict, pl.DataFrame]:
    """Perplexity of ``text`` (at most ``evaluation.perplexity_max_tokens``) and its per-token NLL frame."""
    result = perplexity(
        model,
        tokenizer,
        text,
        max_tokens=evaluation["perplexity_max_tokens"],
        return_token_nll=True,
        **perplexity_options(evaluation, window_bos),
    )
    return result, result.pop("tokens")


class CapabilityTasks(NamedTuple):
    """The capability suite of one evaluation and where its data is: ``hub_cache`` is the staged datasets cache
    of hub tasks (None for local task files, which ``suite.include_path`` names)."""

    suite: LmEvalSuite
    hub_cache: str | None


def capability_tasks(tasks_dir: str, evaluation: dict) -> CapabilityTasks:
    """The lm-eval suite of ``evaluation.capability`` over ``tasks_dir``: a directory of task YAMLs (source
    ``wikitext2``: only its tasks are visible) or a staged datasets cache (source ``hub``: lm-eval's own tasks)."""
    capability = evaluation["capability"]
    hub = capability["source"] == HUB_SOURCE
    where = str(Path(tasks_dir).resolve())
    suite = LmEvalSuite(
        tasks=tuple(capability["tasks"]),
        include_path=None if hub else where,
        limits=dict(capability["limits"]),
        seed=capability["seed"],
        num_fewshot=capability["num_fewshot"],
    )
    return CapabilityTasks(suite, where if hub else None)


def score_capability(model, tokenizer, tasks: CapabilityTasks, evaluation: dict, window_bos: bool):
    """The suite scored through lm-eval (:func:`wneurons.lm.lmeval.score_suite`) on the model as it is (the
    condition's clamp on) at the evaluation's batch size; its summary records lm-eval's convention
    (``convention``) beside the project's (``project_convention``, the one BLiMP / TSE / perplexity use)."""
    with staged_datasets(tasks.hub_cache) if tasks.hub_cache else contextlib.nullcontext():
        summary, items = score_suite(model, tokenizer, tasks.suite, batch_size=evaluation["batch_size"])
    summary["project_convention"] = evaluation["convention"]
    return summary, items


BENCHMARKS: dict[str, Benchmark] = {
    "blimp": Benchmark(blimp_pairs, minimal_pair_scorer(score_blimp, "return_pairs")),
    "tse": Benchmark(tse_items, minimal_pair_scorer(score_tse, "return_items")),
    "ppl": Benchmark(validation_text, score_perplexity),
    "capability": Benchmark(capability_tasks, score_capability),
}
