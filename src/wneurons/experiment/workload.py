"""How much data each job of a checkpoint runs through its model: tokens per benchmark, the matched search and the
collection, and the capability suite's documents (staged, else stated). The planner's measure of a job's work
(:func:`wneurons.experiment.allocations.job_work`) is 2 x parameters x these tokens."""

from __future__ import annotations

from pathlib import Path

from wneurons.experiment import paths
from wneurons.experiment.grid import CAPABILITY, WIKITEXT2_TEST_TOKENS
from wneurons.store import lmeval_tasks

# Full data sets; the config's caps apply where set.
BLIMP_PARADIGMS, BLIMP_PAIRS_PER_PARADIGM, BLIMP_TOKENS_PER_SENTENCE = 67, 1000, 12  # SmolLM2's tokenizer: 11.6
TSE_ITEMS, TSE_SENTENCES, TSE_SUBTASKS, TSE_TOKENS_PER_SENTENCE = 163_124, 337_072, 22, 12  # EMNLP2018 (MANIFEST)
WIKITEXT2_VALID_TOKENS = 245_000
# The capability suite (lm-eval): tokens one document runs through the model, by task (lm-eval scores every choice
# of a multiple-choice document with its context). Stated estimates of typical lengths, not counts (the 2026-12-04
# cluster review, N5): ARC-Easy ~4 x 40, PIQA 2 x 55, HellaSwag 4 x 120, WinoGrande 2 x 28, LAMBADA ~80; the
# WikiText-2 tasks a context of at most 64 words (~90 tokens), 4 choices of it for the cloze. A task not listed
# costs the bound CAPABILITY_TOKENS_PER_DOC, and CAPABILITY_DOCS_PER_TASK documents when neither staged nor stated.
CAPABILITY_TOKENS_PER_TASK_DOC = {
    "arc_easy": 160,
    "piqa": 110,
    "hellaswag": 480,
    "winogrande": 56,
    "lambada_openai": 80,
    lmeval_tasks.CLOZE_TASK: 360,
    lmeval_tasks.LASTWORD_TASK: 90,
}
CAPABILITY_TOKENS_PER_DOC, CAPABILITY_DOCS_PER_TASK = 600, 10_000


def blimp_tokens(evaluation: dict) -> float:
    per = evaluation.get("blimp_pairs_per_paradigm") or BLIMP_PAIRS_PER_PARADIGM
    left = max(BLIMP_PAIRS_PER_PARADIGM - evaluation.get("blimp_pairs_offset", 0), 0)
    return 2 * BLIMP_PARADIGMS * min(per, left) * BLIMP_TOKENS_PER_SENTENCE


def tse_tokens(evaluation: dict) -> float:
    # tse_items_offset is left out: subtasks differ in size, and an upper bound only pads the walltime estimate.
    per = evaluation.get("tse_items_per_subtask")
    sentences = TSE_SENTENCES if per is None else min(TSE_SENTENCES, TSE_SENTENCES / TSE_ITEMS * TSE_SUBTASKS * per)
    return sentences * TSE_TOKENS_PER_SENTENCE


def capability_docs(capability: dict, root: str | Path = ".") -> tuple[dict[str, int], str]:
    """Documents each task of the suite (``evaluation.capability``) scores, its limit where the config sets one, and
    where the counts come from: the suite staged under ``root`` (paths.capability_tasks), else the stated counts
    (lmeval_tasks.STATED_EVAL_DOCS), else the bound CAPABILITY_DOCS_PER_TASK."""
    tasks_dir = Path(root) / paths.capability_tasks(capability["source"])
    staged = lmeval_tasks.staged_eval_docs(tasks_dir) or {}
    limits = capability.get("limits") or {}
    docs, sources = {}, set()
    for task in capability.get("tasks") or []:
        if task in staged:
            n, source = staged[task], f"staged ({tasks_dir})"
        elif task in lmeval_tasks.STATED_EVAL_DOCS:
            n, source = lmeval_tasks.STATED_EVAL_DOCS[task], "stated (lmeval_tasks.STATED_EVAL_DOCS)"
        else:
            n, source = CAPABILITY_DOCS_PER_TASK, f"the bound of {CAPABILITY_DOCS_PER_TASK:,} documents"
        docs[task] = min(n, limits.get(task) or n)
        sources.add(source)
    return docs, " + ".join(sorted(sources)) or "no tasks"


def capability_tokens(evaluation: dict, root: str | Path = ".") -> float:
    docs, _ = capability_docs(evaluation["capability"], root)
    return sum(n * CAPABILITY_TOKENS_PER_TASK_DOC.get(t, CAPABILITY_TOKENS_PER_DOC) for t, n in docs.items())


def perplexity_tokens(evaluation: dict) -> float:
    return evaluation.get("perplexity_max_tokens") or WIKITEXT2_VALID_TOKENS


def tokens_of(config: dict, rule: str, wildcards: dict, root: str | Path = ".") -> float:
    """Tokens one job of ``rule`` runs through its model (0 for jobs that run none); ``root``: where the capability
    suite is staged (the workflow's working directory)."""
    evaluation = config["evaluation"]
    if rule in ("collect_activations", "sign_cases"):  # the sign cases: the same windows again (at most)
        return config["neurons"]["max_tokens"] or WIKITEXT2_TEST_TOKENS
    if rule == "pair_sample":
        return config["pairs"]["max_tokens"] or WIKITEXT2_VALID_TOKENS
    if rule == "matched_search":
        return perplexity_tokens(evaluation) * config["ablation"]["matched"]["max_steps"]
    benchmark = wildcards.get("benchmark")
    if benchmark == CAPABILITY:
        return capability_tokens(evaluation, root)
    per_benchmark = {"blimp": blimp_tokens, "tse": tse_tokens, "ppl": perplexity_tokens}
    return per_benchmark[benchmark](evaluation) if benchmark in per_benchmark else 0.0
