"""lm-evaluation-harness tasks as files: offline tasks built from WikiText-2, and the staging of hub tasks.

lm-eval reads a local task from a YAML whose ``dataset_path: json`` and ``dataset_kwargs.data_files`` name JSONL
files. :func:`write_wikitext_tasks` writes such a directory from the WikiText-2 **validation** split (the data
here), as two real, non-grammatical measurements over the same items:

``wikitext2_cloze`` (multiple_choice)
    a sentence-final word cloze: the context is the paragraph up to the last word of one of its sentences (at
    most ``context_words`` whitespace tokens); the choices are the true word and ``n_distractors`` words drawn,
    with a seed, from the sentence-final words of the same split (by occurrence, so a distractor is as frequent
    as a typical answer); chance is ``1 / (n_distractors + 1)``. Metrics: ``acc`` and ``acc_norm``.
``wikitext2_lastword`` (loglikelihood)
    LAMBADA-style last-word prediction on the same contexts: log-likelihood of ``" " + word`` and whether it is
    the greedy continuation (``acc``), with lm-eval's ``perplexity``.

A target word is alphabetic ASCII of at least :data:`MIN_WORD_CHARS` letters followed by `` .`` (WikiText's
sentence end), with at least :data:`MIN_CONTEXT_WORDS` words before it in its paragraph; headings are skipped.
The text keeps WikiText's own tokenization (``" @-@ "``, spaced punctuation), as the project's perplexity does.

Hub tasks (:data:`HUB_SUITE`) cannot be fetched on compute nodes; :func:`stage_hub_tasks` runs on the submit host
with internet and fills a Hugging Face datasets cache that the compute nodes then read offline. The workflow's
rule ``stage_lmeval_tasks`` (a local rule: it runs where Snakemake runs) does it into
``resources/lmeval-tasks/hub``; by hand::

    python -m wneurons.store.lmeval_tasks --cache-dir resources/lmeval-tasks/hub

and the scoring jobs read that cache offline (:func:`staged_datasets`), so lm-eval reads exactly the datasets its
own task configs name.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from wneurons.store.data import SOURCE_FILE, WIKITEXT_VALID
from wneurons.store.io import atomic_directory, sha256_file, write_json

CLOZE_TASK = "wikitext2_cloze"
LASTWORD_TASK = "wikitext2_lastword"
WIKITEXT_TASKS = (CLOZE_TASK, LASTWORD_TASK)
ITEMS_FILE = "wikitext2_lastword_items.jsonl"
MIN_WORD_CHARS = 3
MIN_CONTEXT_WORDS = 8
# Fields of each JSONL row (one item; both tasks read the same file).
ITEM_FIELDS = ("context", "answer", "choices", "label", "paragraph", "sentence")
HUB_SOURCE = "hub"  # evaluation.capability.source of the staged hub tasks
STAGED_FILE = "STAGED.json"

# The standard zero-shot suite of small-LM capability reports (Pythia, SmolLM2, OLMo model cards and the
# Open LLM Leaderboard v1 all report these): knowledge/reasoning (ARC-Easy), physical commonsense (PIQA),
# commonsense continuation (HellaSwag), coreference by commonsense (WinoGrande) and long-range last-word
# prediction (LAMBADA). None is a grammaticality judgement, all are log-likelihood or multiple choice, and a
# 135M-1.4B model is above chance on each, so a drop under ablation is measurable. Task names are lm-eval's.
HUB_SUITE: dict[str, str] = {
    "arc_easy": "allenai/ai2_arc (ARC-Easy), multiple_choice, test split (2,376 questions)",
    "piqa": "baber/piqa, multiple_choice, validation split (1,838 goals)",
    "hellaswag": "Rowan/hellaswag, multiple_choice, validation split (10,042 contexts)",
    "winogrande": "allenai/winogrande (winogrande_xl), multiple_choice, validation split (1,267 sentences)",
    "lambada_openai": "EleutherAI/lambada_openai (default), loglikelihood, test split (5,153 passages)",
}

# Documents of each task's evaluation split where the suite is not staged (yet): the hub tasks' as HUB_SUITE states
# them (the datasets' cards: ARC-Easy test, PIQA/HellaSwag/WinoGrande validation, LAMBADA test), the WikiText-2
# tasks' as config/demo.yaml states them (the items write_wikitext_tasks builds from the validation split).
STATED_EVAL_DOCS: dict[str, int] = {
    "arc_easy": 2_376,
    "piqa": 1_838,
    "hellaswag": 10_042,
    "winogrande": 1_267,
    "lambada_openai": 5_153,
    CLOZE_TASK: 6_381,
    LASTWORD_TASK: 6_381,
}


def staged_eval_docs(tasks_dir: str | os.PathLike) -> dict[str, int] | None:
    """Documents per task of a staged suite in ``tasks_dir`` (paths.capability_tasks): the hub tasks' evaluation
    splits from :data:`STAGED_FILE` (:func:`stage_hub_tasks`), or the WikiText-2 tasks' items from ``SOURCE.json``
    (:func:`write_wikitext_tasks`); None when neither is there (not staged)."""
    staged, source = Path(tasks_dir) / STAGED_FILE, Path(tasks_dir) / SOURCE_FILE
    if staged.exists():
        return {name: int(t["n_eval_docs"]) for name, t in json.loads(staged.read_text())["tasks"].items()}
    if source.exists():
        record = json.loads(source.read_text())
        if "n_items" in record:
            return dict.fromkeys(record.get("tasks") or WIKITEXT_TASKS, int(record["n_items"]))
    return None


_SENTENCE_END = re.compile(r" ([A-Za-z]+) \.(?= |$)")


def _paragraphs(raw_path: str | os.PathLike) -> list[str]:
    """Body paragraphs of a raw WikiText file (one per non-empty line; ``" = Heading = "`` lines skipped)."""
    with open(raw_path, encoding="utf-8") as fh:
        lines = (line.strip() for line in fh)
        return [line for line in lines if line and not line.startswith("=")]


def lastword_items(
    paragraphs: Sequence[str], *, n_distractors: int = 3, context_words: int = 64, seed: int = 0
) -> list[dict[str, Any]]:
    """The cloze / last-word items of ``paragraphs``, in text order: one per sentence-final target word.

    Each item is ``{"context", "answer", "choices", "label", "paragraph", "sentence"}``: the context (the paragraph
    up to the word, its last ``context_words`` whitespace tokens), the true word, the ``n_distractors + 1``
    choices with the true word at index ``label``, and where the item comes from (paragraph index, sentence-final
    occurrence index within it). Distractors are drawn without replacement from all target occurrences of
    ``paragraphs`` whose word differs (case-insensitively) from the answer, with ``numpy.random.default_rng(seed)``.
    """
    if n_distractors < 1 or context_words < MIN_CONTEXT_WORDS:
        raise ValueError(f"need n_distractors >= 1 and context_words >= {MIN_CONTEXT_WORDS}")
    found = []
    for p, text in enumerate(paragraphs):
        for s, match in enumerate(_SENTENCE_END.finditer(text)):
            word = match.group(1)
            before = text[: match.start()].split()
            if len(word) >= MIN_WORD_CHARS and word.isascii() and len(before) >= MIN_CONTEXT_WORDS:
                found.append((p, s, word, " ".join(before[-context_words:])))
    pool = np.array([word for _, _, word, _ in found])
    lowered = np.char.lower(pool)
    n_words = len(np.unique(lowered))
    if n_words <= n_distractors:
        raise ValueError(f"only {n_words} distinct target words; cannot draw {n_distractors} distractors")
    rng = np.random.default_rng(seed)
    items = []
    for (p, s, word, context), key in zip(found, lowered, strict=True):
        candidates = np.flatnonzero(lowered != key)
        distractors: list[str] = []
        # Draw occurrences until n distinct words (frequent words are drawn often, but kept once).
        while len(distractors) < n_distractors:
            pick = str(pool[candidates[rng.integers(candidates.size)]])
            if pick.lower() not in {d.lower() for d in distractors}:
                distractors.append(pick)
        label = int(rng.integers(n_distractors + 1))
        choices = [*distractors[:label], word, *distractors[label:]]
        items.append(
            {"context": context, "answer": word, "choices": choices, "label": label, "paragraph": p, "sentence": s}
        )
    return items


def _task_yaml(task: str, data_file: Path) -> dict[str, Any]:
    """lm-eval's config of one WikiText-2 task over ``data_file`` (an absolute path: lm-eval reads it as given)."""
    common = {
        "task": task,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_file)}},
        "test_split": "test",
        "doc_to_text": "context",
        "metadata": {"version": 1.0, "source": f"WikiText-2 {WIKITEXT_VALID}, built by wneurons.store.lmeval_tasks"},
    }
    if task == CLOZE_TASK:
        return {
            **common,
            "output_type": "multiple_choice",
            "doc_to_choice": "choices",
            "doc_to_target": "label",
            "metric_list": [
                {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
                {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True},
            ],
        }
    return {
        **common,
        "output_type": "loglikelihood",
        "doc_to_target": "{{' ' + answer}}",
        "metric_list": [
            {"metric": "perplexity", "aggregation": "perplexity", "higher_is_better": False},
            {"metric": "acc", "aggregation": "mean", "higher_is_better": True},
        ],
    }


def write_wikitext_tasks(
    wikitext_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    n_distractors: int = 3,
    context_words: int = 64,
    seed: int = 0,
) -> dict[str, Any]:
    """Write the two WikiText-2 validation tasks (module docstring) into ``out_dir``: one JSONL of items
    (:data:`ITEMS_FILE`), ``{task}.yaml`` for each of :data:`WIKITEXT_TASKS` and ``SOURCE.json``.

    ``out_dir`` is then an lm-eval ``include_path``. The directory is assembled aside and renamed into place.
    Returns the provenance written to ``SOURCE.json``: source file and items checksums (``sha256``: the items,
    the data every task reads), settings, item count.
    """
    source = Path(wikitext_dir) / WIKITEXT_VALID
    items = lastword_items(_paragraphs(source), n_distractors=n_distractors, context_words=context_words, seed=seed)
    final = Path(out_dir).resolve()
    with atomic_directory(final) as build:
        with open(build / ITEMS_FILE, "w", encoding="utf-8") as fh:
            for item in items:
                fh.write(json.dumps(item, ensure_ascii=False) + "\n")
        for task in WIKITEXT_TASKS:
            text = yaml.safe_dump(_task_yaml(task, final / ITEMS_FILE), sort_keys=False, allow_unicode=True)
            (build / f"{task}.yaml").write_text(text, encoding="utf-8")
        items_sha256 = sha256_file(build / ITEMS_FILE)
        record = {
            "tasks": list(WIKITEXT_TASKS),
            "sha256": items_sha256,
            "source": {"file": WIKITEXT_VALID, "sha256": sha256_file(source)},
            "items_sha256": items_sha256,
            "n_items": len(items),
            "n_distractors": n_distractors,
            "context_words": context_words,
            "seed": seed,
        }
        write_json(build / SOURCE_FILE, record)
    return record


def stage_hub_tasks(tasks: Iterable[str] = tuple(HUB_SUITE), out_path: str | os.PathLike | None = None) -> dict:
    """Load lm-eval ``tasks`` once, so that their datasets land in the Hugging Face datasets cache
    (``HF_DATASETS_CACHE``, which must be set before this process imports ``datasets``); for the submit host.

    Returns (and writes to ``out_path`` if given) what was staged per task: the dataset lm-eval's config names
    (path, name, revision), the evaluation split and its size, and each cached split's rows and cache files.
    """
    import datasets
    import lm_eval
    from lm_eval.tasks import TaskManager

    loaded = _load_each(TaskManager(), list(tasks), datasets.__version__)
    record: dict[str, Any] = {
        "lm_eval_version": lm_eval.__version__,
        "datasets_version": datasets.__version__,
        "cache_dir": str(datasets.config.HF_DATASETS_CACHE),
        "tasks": {},
    }
    for name, task in sorted(loaded.items()):
        config = task.config
        record["tasks"][name] = {
            "dataset_path": config.dataset_path,
            "dataset_name": config.dataset_name,
            "revision": (config.dataset_kwargs or {}).get("revision"),
            "eval_split": config.test_split or config.validation_split,
            "n_eval_docs": len(task.eval_docs),
            "splits": {
                split: {"num_rows": ds.num_rows, "cache_files": [f["filename"] for f in ds.cache_files]}
                for split, ds in task.dataset.items()
            },
        }
    if out_path is not None:
        write_json(out_path, record)
    return record


def _load_each(manager: Any, tasks: list[str], datasets_version: str) -> dict:
    """lm-eval's tasks loaded one by one (their datasets fetched); a task that cannot be loaded (a repository with
    a loading script, which ``datasets`` >= 4 refuses; one that is gone or gated) is a ValueError with one line per
    such task, naming it, the dataset its YAML names and the library's own message."""
    loaded, problems = {}, []
    for name in tasks:
        try:
            loaded |= manager.load([name])["tasks"]
        except Exception as err:  # noqa: BLE001 - every task's failure is named, not only the first
            entry = manager.task_index.get(name)
            text = Path(entry.yaml_path).read_text() if entry and entry.yaml_path else ""
            found = dict(re.findall(r"^(dataset_path|dataset_name): *(\S+)", text, flags=re.MULTILINE))
            dataset = " ".join(
                v for v in (found.get("dataset_path"), found.get("dataset_name")) if v not in (None, "null")
            )
            message = " ".join(str(err).split())
            problems.append(
                f"capability task {name} (dataset {dataset or '?'}, datasets {datasets_version}): {message}"
            )
    if problems:
        raise ValueError("\n".join(problems))
    return loaded


def stage_hub_tasks_into(cache_dir: str | os.PathLike, tasks: Iterable[str] = tuple(HUB_SUITE)) -> dict:
    """:func:`stage_hub_tasks` into ``cache_dir`` (a directory assembled aside and renamed into place, so an
    interrupted staging leaves nothing that looks staged): the datasets cache, :data:`STAGED_FILE` (the staging
    record) and ``SOURCE.json`` (``sha256`` of the record's tasks, for the results' provenance)."""
    final = Path(cache_dir).resolve()
    with atomic_directory(final) as build, staged_datasets(build, offline=False):
        record = stage_hub_tasks(tasks, build / STAGED_FILE)
        digest = hashlib.sha256(json.dumps(record["tasks"], sort_keys=True).encode()).hexdigest()
        write_json(build / SOURCE_FILE, {"sha256": digest, "source": f"hub, lm-eval {record['lm_eval_version']}"})
    return record


# The settings staged_datasets() holds, shared by the jobs that run in threads of one process (profiles/local, an
# allocation): the first block to enter applies them, the last to leave restores what was there before.
_STAGED_LOCK = threading.Lock()
_staged_depth = 0
_staged_key: tuple[Path, bool] | None = None
_staged_before: dict[tuple[Any, str], Any] = {}


def _offline_switches(offline: bool) -> dict[tuple[Any, str], Any]:
    """Every module attribute that decides whether ``datasets`` and ``huggingface_hub`` reach the hub. Both read
    ``HF_HUB_OFFLINE`` from the environment once, at import (datasets 5.x ignores ``HF_DATASETS_OFFLINE`` after
    that), so setting the environment here would change nothing: the attributes themselves are set.
    ``huggingface_hub.constants.HF_HUB_OFFLINE`` makes its HTTP session refuse every request offline."""
    import datasets
    import huggingface_hub.constants as hub_constants

    return {
        (datasets.config, "HF_HUB_OFFLINE"): offline,
        (datasets.config, "HF_DATASETS_OFFLINE"): offline,
        (hub_constants, "HF_HUB_OFFLINE"): offline,
    }


@contextlib.contextmanager
def staged_datasets(cache_dir: str | os.PathLike, *, offline: bool = True) -> Iterator[None]:
    """Hugging Face ``datasets`` reads (and writes) its cache in ``cache_dir`` for the length of the block, with no
    request to the hub at all unless ``offline=False`` (the staging itself); the previous settings are restored after
    it. Blocks of several threads nest when they agree on the cache and the mode; a disagreement raises (the settings
    are the process's)."""
    import datasets

    global _staged_depth, _staged_key, _staged_before
    key = (Path(cache_dir).resolve(), offline)
    with _STAGED_LOCK:
        if _staged_depth and key != _staged_key:
            raise RuntimeError(
                f"staged_datasets: {key} asked while {_staged_key} is active in this process "
                "(one cache and mode at a time)"
            )
        if not _staged_depth:
            settings = {(datasets.config, "HF_DATASETS_CACHE"): key[0], **_offline_switches(offline)}
            _staged_before = {target: getattr(*target) for target in settings}
            for (module, name), value in settings.items():
                setattr(module, name, value)
            _staged_key = key
        _staged_depth += 1
    try:
        yield
    finally:
        with _STAGED_LOCK:
            _staged_depth -= 1
            if not _staged_depth:
                for (module, name), value in _staged_before.items():
                    setattr(module, name, value)
                _staged_key, _staged_before = None, {}


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description="Stage lm-eval hub tasks into a datasets cache (needs internet).")
    parser.add_argument("--cache-dir", required=True, help="the HF datasets cache the compute nodes will read")
    parser.add_argument("--tasks", nargs="+", default=list(HUB_SUITE), help="lm-eval task names")
    args = parser.parse_args(argv)
    try:
        return stage_hub_tasks_into(args.cache_dir, args.tasks)
    except ValueError as err:  # a task that cannot be staged: its line(s), no traceback
        sys.exit(str(err))


if __name__ == "__main__":
    main()
