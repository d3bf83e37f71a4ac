"""The benchmark table: how each benchmark the workflow scores (BLiMP, TSE, WikiText-2 perplexity) reads its data
and scores a model, so that the scoring jobs (:mod:`wneurons.jobs.ablate`) look a benchmark up instead of
branching on its name. Adding a benchmark is one entry of :data:`BENCHMARKS` (and its name in
:data:`wneurons.experiment.grid.BENCHMARKS`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import polars as pl

from wneurons.lm.perplexity import perplexity
from wneurons.lm.scoring import CONVENTIONS, score_blimp, score_tse
from wneurons.store import data


class Benchmark(NamedTuple):
    """How one benchmark is scored: ``load(data_dir, evaluation)`` reads (and subsamples) its data;
    ``score(model, tokenizer, data, evaluation, window_bos)`` returns the summary (the JSON's ``scores``) and the
    per-item (per-token for ppl) frame written to ``{benchmark}.items.parquet``."""

    load: Callable[[str, dict], Any]
    score: Callable[..., tuple[dict, pl.DataFrame]]


def blimp_pairs(data_dir: str, evaluation: dict) -> pl.DataFrame:
    """The BLiMP pairs scored: ``evaluation.blimp_pairs_per_paradigm`` per paradigm (seeded; null = all)."""
    blimp = data.load_blimp(data_dir)
    return data.subsample_per_group(blimp, "paradigm", evaluation["blimp_pairs_per_paradigm"], evaluation["seed"])


def tse_items(data_dir: str, evaluation: dict) -> pl.DataFrame:
    """The TSE items scored: ``evaluation.tse_items_per_subtask`` per task (seeded; null = all)."""
    tse = data.load_tse(data_dir, evaluation.get("tse_format", "pickle"))
    return data.subsample_per_group(tse, "task", evaluation["tse_items_per_subtask"], evaluation["seed"])


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


BENCHMARKS: dict[str, Benchmark] = {
    "blimp": Benchmark(blimp_pairs, minimal_pair_scorer(score_blimp, "return_pairs")),
    "tse": Benchmark(tse_items, minimal_pair_scorer(score_tse, "return_items")),
    "ppl": Benchmark(validation_text, score_perplexity),
}
