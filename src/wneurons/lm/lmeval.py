"""lm-evaluation-harness tasks scored on an already-loaded model, so the project's hooks stay on.

lm-eval is used as a library: its ``HFLM`` wraps the model instance (no reload, no copy), so a clamp attached
with ``lm.ablation.clamp_negative_preactivations`` acts on every forward lm-eval runs, and
``lm_eval.simple_evaluate`` scores the tasks with ``log_samples=True``. Log-likelihood and multiple-choice tasks
are supported (the capability suite is made of them); generation is not.

Scoring convention: lm-eval's own (``"lm-eval"``): the context is encoded with the tokenizer's defaults, the
continuation (``target_delimiter + choice``) is scored token by token and the log-probs are summed (nats);
``acc`` is the argmax over choices (first on a tie), ``acc_norm`` the argmax of log-likelihood per character,
and for a loglikelihood task ``acc`` says whether the continuation is the greedy one.

Items: ``limits`` caps the number of documents per task, drawn uniformly without replacement with
``numpy.random.default_rng(seed)`` (the same draw whatever the model or condition, so conditions pair item by
item). Few-shot examples, where a task has any, come from lm-eval's sampler seeded with ``seed``. No global
random state is touched.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import torch

from wneurons.store.io import sha256_file

log = logging.getLogger(__name__)

CONVENTION = "lm-eval"
OUTPUT_TYPES = ("loglikelihood", "multiple_choice")
SOFTMAX_DTYPE = "float32"
# Columns of the per-item results (``{benchmark}.items.parquet``), in file order.
LMEVAL_ITEM_COLUMNS = (
    "item", "task", "doc_id", "target", "gold", "logprob_choices", "is_greedy", "correct", "correct_norm",
    "doc_hash", "prompt_hash", "target_hash",
)  # fmt: skip
_ITEM_SCHEMA = {
    "item": pl.Int64,
    "task": pl.String,
    "doc_id": pl.Int64,
    "target": pl.String,
    "gold": pl.Int64,
    "logprob_choices": pl.List(pl.Float64),
    "is_greedy": pl.List(pl.Boolean),
    "correct": pl.Int8,
    "correct_norm": pl.Int8,
    "doc_hash": pl.String,
    "prompt_hash": pl.String,
    "target_hash": pl.String,
}


@dataclasses.dataclass(frozen=True)
class LmEvalSuite:
    """Which lm-eval tasks to score and on which items.

    ``tasks``: lm-eval task names (groups expand to their tasks). ``include_path``: a directory of task YAMLs
    (e.g. from ``store.lmeval_tasks.write_wikitext_tasks``); when given, only its tasks are visible, not
    lm-eval's built-in ones. ``limits``: documents per task (an int for every task, or task -> int; ``None`` = all).
    ``seed``: the item draw and the few-shot sampler. ``num_fewshot``: ``None`` keeps each task's own default.
    """

    tasks: tuple[str, ...]
    include_path: str | None = None
    limits: int | Mapping[str, int | None] | None = None
    seed: int = 0
    num_fewshot: int | None = None

    def limit_of(self, task: str) -> int | None:
        if isinstance(self.limits, Mapping):
            return self.limits.get(task)
        return self.limits


def select_items(n_docs: int, limit: int | None, seed: int) -> list[int] | None:
    """Sorted indices of ``limit`` of ``n_docs`` documents, uniform without replacement from
    ``numpy.random.default_rng(seed)`` (a uniform key per document, the ``limit`` smallest kept); ``None`` (all
    documents) when ``limit`` is ``None`` or at least ``n_docs``."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int | np.integer) or limit < 1:
        raise ValueError(f"item limit must be a positive int or None, got {limit!r}")
    if limit >= n_docs:
        return None
    keys = np.random.default_rng(seed).random(n_docs)
    # lm-eval maps its logged doc ids back through this list by position, so it must be sorted.
    return sorted(int(i) for i in np.argsort(keys, kind="stable")[:limit])


def _stable(obj: Any) -> Any:
    # Functions in a task config (process_docs, doc_to_text, ...) are named by module and qualname, not address.
    if callable(obj):
        return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"
    return str(obj)


def task_config_sha256(config: Mapping[str, Any]) -> str:
    """sha256 of a task's config as lm-eval dumps it, independent of where its files are: local ``data_files``
    enter by content (their sha256), the YAML's own path (``metadata.config_source``) not at all."""
    config = copy.deepcopy(dict(config))
    config.get("metadata", {}).pop("config_source", None)
    data_files = (config.get("dataset_kwargs") or {}).get("data_files")
    if isinstance(data_files, Mapping):
        config["dataset_kwargs"]["data_files"] = {
            split: sha256_file(path) if Path(path).is_file() else path for split, path in data_files.items()
        }
    text = json.dumps(config, sort_keys=True, default=_stable)
    return hashlib.sha256(text.encode()).hexdigest()


def _finite_metrics(results: Mapping[str, Any]) -> dict[str, float | None]:
    """lm-eval's ``{"acc,none": x, "acc_stderr,none": "N/A", ...}`` as ``{"acc": x}``: the ``none`` filter's
    numeric metrics; a non-finite value (perplexity overflow) becomes None, as JSON has no inf."""
    metrics: dict[str, float | None] = {}
    for key, value in results.items():
        name, _, filter_name = key.partition(",")
        if filter_name != "none" or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        metrics[name] = float(value) if math.isfinite(value) else None
    return metrics


def _item_rows(task: str, samples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for sample in sorted(samples, key=lambda s: s["doc_id"]):
        # One (log-likelihood, is_greedy) per request: one per choice, in lm-eval's order (a single one for a
        # loglikelihood task; conditional then unconditional for acc_mutual_info).
        responses = sample["filtered_resps"]
        target = sample["target"]
        rows.append(
            {
                "task": task,
                "doc_id": int(sample["doc_id"]),
                "target": str(target),
                "gold": target if isinstance(target, int) and not isinstance(target, bool) else None,
                "logprob_choices": [float(ll) for ll, _ in responses],
                "is_greedy": [bool(greedy) for _, greedy in responses],
                "correct": None if "acc" not in sample else int(sample["acc"]),
                "correct_norm": None if "acc_norm" not in sample else int(sample["acc_norm"]),
                "doc_hash": sample["doc_hash"],
                "prompt_hash": sample["prompt_hash"],
                "target_hash": sample["target_hash"],
            }
        )
    return rows


def items_frame(samples: Mapping[str, Sequence[Mapping[str, Any]]], tasks: Sequence[str]) -> pl.DataFrame:
    """Per-item frame (exactly :data:`LMEVAL_ITEM_COLUMNS`) from lm-eval's logged ``samples`` (task -> list):
    tasks in the order of ``tasks``, documents by ``doc_id``; ``item`` numbers the rows from 0, so two runs of the
    same suite and items (any condition) have the same ``item`` for the same document. ``correct`` /
    ``correct_norm`` are lm-eval's ``acc`` / ``acc_norm`` as 0/1 (null where the task has no such metric);
    ``gold`` is the target's choice index when lm-eval's target is one (null otherwise, e.g. WinoGrande)."""
    rows = [row for task in tasks for row in _item_rows(task, samples[task])]
    frame = pl.DataFrame(rows, schema={k: v for k, v in _ITEM_SCHEMA.items() if k != "item"})
    return frame.with_row_index("item").with_columns(pl.col("item").cast(pl.Int64)).select(LMEVAL_ITEM_COLUMNS)


def _harness_model(model: torch.nn.Module, tokenizer, batch_size: int, max_length: int | None):
    from lm_eval.models.huggingface import HFLM

    if getattr(tokenizer, "pad_token_id", None) is None:
        # HFLM gives a tokenizer without one a pad token in place; the caller's tokenizer stays as it was.
        tokenizer = copy.deepcopy(tokenizer)
    return HFLM(
        pretrained=model,
        tokenizer=tokenizer,
        backend="causal",
        batch_size=batch_size,
        max_length=max_length,
        # Log-softmax in float32 whatever the model's dtype, as lm.scoring does (a no-op on a float32 model).
        softmax_dtype=SOFTMAX_DTYPE,
    )


def _bos_prepended(lm) -> bool:
    """Whether lm-eval's encoding of a context starts with BOS (it uses the tokenizer's own default)."""
    bos = lm.tokenizer.bos_token_id
    return bos is not None and lm.tok_encode("The")[:1] == [bos]


def score_suite(
    model: torch.nn.Module,
    tokenizer,
    suite: LmEvalSuite,
    *,
    batch_size: int = 32,
    max_length: int | None = None,
) -> tuple[dict[str, Any], pl.DataFrame]:
    """Score ``suite`` on ``model`` as it is (hooks included) through ``lm_eval.simple_evaluate``.

    Returns ``(summary, items)``. ``summary``: ``{"overall", "n_items", "tasks", "convention", "bos_prepended",
    "prefix_token_id", "softmax_dtype", "seed", "provenance"}`` where ``overall`` is ``correct`` averaged over all
    items (the micro-average, as BLiMP's), ``tasks`` maps each task to ``{"metrics", "n_items", "n_docs", "output_type",
    "num_fewshot", "version"}`` (lm-eval's aggregate metrics, accuracies as fractions, ``perplexity`` as lm-eval
    computes it) and ``provenance`` holds the lm-eval version, each task's :func:`task_config_sha256` and
    lm-eval's own task hash (over its logged document, prompt and target hashes). ``items``: :func:`items_frame`.
    """
    import lm_eval
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import hash_string

    start = time.perf_counter()
    manager = TaskManager(include_path=suite.include_path, include_defaults=suite.include_path is None)
    tasks = manager.load(list(suite.tasks))["tasks"]
    for name, task in tasks.items():
        if task.OUTPUT_TYPE not in OUTPUT_TYPES:
            raise ValueError(f"lm-eval task {name!r} is {task.OUTPUT_TYPE!r}; supported: {', '.join(OUTPUT_TYPES)}")
    if isinstance(suite.limits, Mapping) and (unknown := sorted(set(suite.limits) - set(tasks))):
        # A misspelt task name would otherwise silently score every document of the task meant.
        raise ValueError(f"item limits name task(s) {', '.join(unknown)} not in the suite ({', '.join(sorted(tasks))})")
    n_docs = {name: len(task.eval_docs) for name, task in tasks.items()}
    chosen = {name: select_items(n_docs[name], suite.limit_of(name), suite.seed) for name in tasks}
    while True:
        lm = _harness_model(model, tokenizer, batch_size, max_length)
        try:
            results = lm_eval.simple_evaluate(
                model=lm,
                tasks=list(tasks.values()),
                task_manager=manager,
                num_fewshot=suite.num_fewshot,
                samples={name: ids for name, ids in chosen.items() if ids is not None} or None,
                log_samples=True,
                # The project computes its own paired statistics; lm-eval's bootstrap would only cost time.
                bootstrap_iters=0,
                random_seed=None,
                numpy_random_seed=None,
                torch_random_seed=None,
                fewshot_random_seed=suite.seed,
            )
            break
        except torch.cuda.OutOfMemoryError:
            if batch_size == 1:
                raise
        # lm-eval batches inside simple_evaluate: a CUDA OOM reruns the whole suite at half the batch size.
        log.warning("CUDA out of memory at batch %d: retrying at %d", batch_size, batch_size // 2)
        del lm
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        batch_size //= 2
    names = sorted(tasks)
    items = items_frame(results["samples"], names)
    summary_tasks = {}
    task_hashes = {}
    for name in names:
        logged = results["samples"][name]
        # As lm-eval's EvaluationTracker writes it (``task_hashes``) when it saves samples.
        task_hashes[name] = hash_string("".join(s["doc_hash"] + s["prompt_hash"] + s["target_hash"] for s in logged))
        summary_tasks[name] = {
            "metrics": _finite_metrics(results["results"][name]),
            "n_items": len(logged),
            "n_docs": n_docs[name],
            "output_type": tasks[name].OUTPUT_TYPE,
            "num_fewshot": results["n-shot"][name],
            "version": results["versions"][name],
        }
    correct = items["correct"].drop_nulls()
    summary = {
        "overall": float(correct.mean()) if correct.len() else None,
        "n_items": items.height,
        "tasks": summary_tasks,
        "convention": CONVENTION,
        "bos_prepended": _bos_prepended(lm),
        "prefix_token_id": int(lm.prefix_token_id),
        "softmax_dtype": SOFTMAX_DTYPE,
        "seed": suite.seed,
        "provenance": {
            "lm_eval_version": lm_eval.__version__,
            "task_config_sha256": {name: task_config_sha256(results["configs"][name]) for name in names},
            "task_hash": task_hashes,
        },
    }
    log.info("lm-eval: %d items of %d task(s) in %.1f s", items.height, len(names), time.perf_counter() - start)
    return summary, items
