"""lm-evaluation-harness tasks on a hooked model (wneurons.lm.lmeval) and the local task files they read
(wneurons.store.lmeval_tasks).

The model is the conftest's tiny random Llama; its tokenizer is a character-level one built here whose ids fit
the tiny vocabulary (any Hugging Face tokenizer would do for lm-eval; a real one would not fit 200 ids). The
per-item log-likelihoods of :func:`score_suite` are checked against ``lm_eval.simple_evaluate`` run directly on
the same hooked model, and against a forward pass written here.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from wneurons.lm.ablation import clamp_negative_preactivations
from wneurons.lm.lmeval import LMEVAL_ITEM_COLUMNS, LmEvalSuite, score_suite, select_items, task_config_sha256
from wneurons.store.data import WIKITEXT_VALID
from wneurons.store.lmeval_tasks import (
    CLOZE_TASK,
    ITEMS_FILE,
    LASTWORD_TASK,
    MIN_CONTEXT_WORDS,
    lastword_items,
    write_wikitext_tasks,
)

pytest.importorskip("lm_eval")

SHARED_DATA = Path(os.environ.get("WNEURONS_SHARED_DATA", "/work/shared/data"))
WORDS = "cat dog sun hat map cup pen box fox owl jam net bus kit log".split()
LIMIT = 6
# 12 neurons of every layer of the tiny model (96 wide), clamped as the paper's ablation does.
NEURONS = {layer: list(range(0, 96, 8)) for layer in range(3)}


def char_tokenizer(pad: bool = True):
    """Printable ASCII one id per character after <pad>=0, <s>=1, </s>=2 (the tiny model's ids), <unk>=3."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3} | {chr(c): c - 28 for c in range(32, 127)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    backend.decoder = decoders.Fuse()
    specials = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    return PreTrainedTokenizerFast(tokenizer_object=backend, **specials, **({"pad_token": "<pad>"} if pad else {}))


def fake_wikitext(directory: Path, n_paragraphs: int = 10, seed: int = 0) -> Path:
    """A WikiText-shaped validation file: a heading, then paragraphs of short sentences ending `` word .``."""
    rng = np.random.default_rng(seed)
    lines = [" \n", " = Heading = \n", " \n"]
    for _ in range(n_paragraphs):
        sentences = [" ".join(rng.choice(WORDS, size=int(rng.integers(4, 8)))) + " ." for _ in range(3)]
        lines += [" " + " ".join(sentences) + " \n", " \n"]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / WIKITEXT_VALID).write_text("".join(lines), encoding="utf-8")
    return directory


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path, monkeypatch):
    """lm-eval loads local JSON through `datasets`; its cache goes under the test's tmp_path, not $HOME."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")


@pytest.fixture
def task_dir(tmp_path) -> Path:
    wikitext = fake_wikitext(tmp_path / "wikitext")
    write_wikitext_tasks(wikitext, tmp_path / "tasks", context_words=MIN_CONTEXT_WORDS, seed=0)
    return tmp_path / "tasks"


def suite_of(task_dir: Path, limits=LIMIT, seed: int = 3) -> LmEvalSuite:
    return LmEvalSuite(tasks=(CLOZE_TASK, LASTWORD_TASK), include_path=str(task_dir), limits=limits, seed=seed)


def harness_direct(model, tokenizer, suite: LmEvalSuite, n_docs: int) -> dict:
    """lm-eval's own run (simple_evaluate on HFLM), same model, items and task files; per task, doc_id -> lls."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    samples = {task: select_items(n_docs, suite.limit_of(task), suite.seed) for task in suite.tasks}
    results = lm_eval.simple_evaluate(
        model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=1),
        tasks=list(suite.tasks),
        task_manager=TaskManager(include_path=suite.include_path, include_defaults=False),
        samples=samples,
        log_samples=True,
        bootstrap_iters=0,
    )
    return {
        task: {s["doc_id"]: ([ll for ll, _ in s["filtered_resps"]], s["acc"]) for s in results["samples"][task]}
        for task in suite.tasks
    }


def forward_logprob(model, tokenizer, context: str, continuation: str) -> float:
    """Sum of log p(continuation tokens | context) from one forward pass, as lm-eval defines it."""
    whole = tokenizer(context + continuation)["input_ids"]
    n_context = len(tokenizer(context)["input_ids"])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([whole[:-1]])).logits[0].double(), dim=-1)
    return float(sum(logprobs[t - 1, whole[t]] for t in range(n_context, len(whole))))


def read_items(task_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (task_dir / ITEMS_FILE).read_text().splitlines()]


# ----------------------------------------------------------------------------------------------------------------
# item selection and task files


def test_select_items_is_a_seeded_sorted_uniform_subset():
    chosen = select_items(100, 10, seed=1)
    assert chosen == sorted(chosen) and len(set(chosen)) == 10 and all(0 <= i < 100 for i in chosen)
    assert chosen == select_items(100, 10, seed=1)
    assert chosen != select_items(100, 10, seed=2)
    # A smaller limit keeps a subset of the larger one's items (the same keys, fewer kept).
    assert set(select_items(100, 5, seed=1)) <= set(chosen)
    assert select_items(100, None, seed=1) is None and select_items(100, 100, seed=1) is None
    for bad in (0, -1, True, 0.5):
        with pytest.raises(ValueError, match="positive"):
            select_items(100, bad, seed=1)


def test_lastword_items_put_the_true_word_among_distinct_distractors():
    paragraphs = [
        "one two three four five six seven eight nine alpha . ten eleven twelve beta . x gamma .",
        "a b c d e f g h delta , and more words follow here epsilon . 42 .",
    ]
    items = lastword_items(paragraphs, n_distractors=2, context_words=MIN_CONTEXT_WORDS, seed=0)
    # Context words count across the paragraph, so "gamma" (its sentence is just "x gamma .") qualifies; "42" is
    # not a word and "delta ," ends no sentence.
    assert [i["answer"] for i in items] == ["alpha", "beta", "gamma", "epsilon"]
    for item in items:
        assert item["choices"][item["label"]] == item["answer"]
        assert len({c.lower() for c in item["choices"]}) == 3
        assert len(item["context"].split()) <= MIN_CONTEXT_WORDS
    assert items[1]["context"].endswith("ten eleven twelve") and items[0]["context"].endswith("eight nine")
    assert items == lastword_items(paragraphs, n_distractors=2, context_words=MIN_CONTEXT_WORDS, seed=0)
    assert items != lastword_items(paragraphs, n_distractors=2, context_words=MIN_CONTEXT_WORDS, seed=1)


def test_real_wikitext_validation_gives_thousands_of_cloze_items(tmp_path):
    wikitext = SHARED_DATA / "wikitext-2" / "raw"
    if not (wikitext / WIKITEXT_VALID).exists():
        pytest.skip(f"no WikiText-2 at {wikitext}")
    record = write_wikitext_tasks(wikitext, tmp_path / "tasks", seed=0)
    items = read_items(tmp_path / "tasks")
    assert record["n_items"] == len(items) > 3000
    assert sorted(p.name for p in (tmp_path / "tasks").iterdir()) == sorted(
        ["SOURCE.json", ITEMS_FILE, f"{CLOZE_TASK}.yaml", f"{LASTWORD_TASK}.yaml"]
    )
    assert all(item["choices"][item["label"]] == item["answer"] for item in items)
    # The true word's position is drawn, not fixed: every slot holds it about a quarter of the time.
    counts = np.bincount([item["label"] for item in items], minlength=4) / len(items)
    assert np.all(np.abs(counts - 0.25) < 0.03)


# ----------------------------------------------------------------------------------------------------------------
# scoring through lm-eval on a hooked model


def test_suite_equals_lm_eval_run_directly_with_and_without_the_clamp(tiny_model, task_dir):
    model, tokenizer = tiny_model("llama"), char_tokenizer()
    suite = suite_of(task_dir)
    n_docs = len(read_items(task_dir))
    summary, items = score_suite(model, tokenizer, suite, batch_size=4)
    with clamp_negative_preactivations(model, NEURONS):
        clamped_summary, clamped = score_suite(model, tokenizer, suite, batch_size=4)
        direct_clamped = harness_direct(model, tokenizer, suite, n_docs)
    direct = harness_direct(model, tokenizer, suite, n_docs)

    for frame, reference in ((items, direct), (clamped, direct_clamped)):
        assert frame.columns == list(LMEVAL_ITEM_COLUMNS)
        assert frame["item"].to_list() == list(range(2 * LIMIT))
        for row in frame.iter_rows(named=True):
            lls, acc = reference[row["task"]][row["doc_id"]]
            assert row["logprob_choices"] == lls  # equal values, not close ones
            assert row["correct"] == acc
    # The clamp reached lm-eval's forwards: every log-likelihood moved.
    before = np.concatenate(items["logprob_choices"].to_list())
    after = np.concatenate(clamped["logprob_choices"].to_list())
    assert before.shape == after.shape and np.all(before != after)
    assert summary["provenance"] == clamped_summary["provenance"]


def test_clamped_log_likelihoods_match_a_forward_pass_under_the_same_clamp(tiny_model, task_dir):
    model, tokenizer = tiny_model("llama"), char_tokenizer()
    docs = read_items(task_dir)
    with clamp_negative_preactivations(model, NEURONS):
        _, items = score_suite(model, tokenizer, suite_of(task_dir, limits=3), batch_size=2)
        for row in items.iter_rows(named=True):
            doc = docs[row["doc_id"]]
            choices = doc["choices"] if row["task"] == CLOZE_TASK else [doc["answer"]]
            expected = [forward_logprob(model, tokenizer, doc["context"], " " + c) for c in choices]
            np.testing.assert_allclose(row["logprob_choices"], expected, rtol=1e-5, atol=1e-5)


def test_frame_summary_and_provenance(tiny_model, task_dir, tmp_path):
    model, tokenizer = tiny_model("llama"), char_tokenizer(pad=False)
    docs = read_items(task_dir)
    summary, items = score_suite(model, tokenizer, suite_of(task_dir, limits={CLOZE_TASK: 4}), batch_size=4)
    assert tokenizer.pad_token is None  # HFLM padded a copy, not the caller's tokenizer
    cloze, lastword = items.filter(task=CLOZE_TASK), items.filter(task=LASTWORD_TASK)
    assert cloze["doc_id"].to_list() == select_items(len(docs), 4, seed=3)
    assert lastword["doc_id"].to_list() == list(range(len(docs)))  # no limit for this task: every document
    assert cloze["gold"].to_list() == [docs[i]["label"] for i in cloze["doc_id"]]
    assert cloze["logprob_choices"].list.len().to_list() == [4] * 4
    # A loglikelihood task has one "choice", the true continuation, and a string target (no choice index).
    assert lastword["logprob_choices"].list.len().to_list() == [1] * len(docs)
    assert lastword["gold"].null_count() == lastword.height
    assert lastword["target"].to_list() == [" " + docs[i]["answer"] for i in lastword["doc_id"]]
    assert lastword["correct_norm"].null_count() == lastword.height and cloze["correct_norm"].null_count() == 0
    assert summary["overall"] == pytest.approx(items["correct"].mean())
    assert summary["tasks"][CLOZE_TASK]["metrics"]["acc"] == pytest.approx(cloze["correct"].mean())
    assert summary["tasks"][LASTWORD_TASK]["n_items"] == summary["tasks"][LASTWORD_TASK]["n_docs"] == len(docs)
    assert summary["convention"] == "lm-eval" and summary["bos_prepended"] is False
    assert summary["provenance"]["lm_eval_version"] == importlib.metadata.version("lm-eval")

    # The config hash follows the task, not where its files are: a moved copy hashes the same...
    moved = tmp_path / "moved"
    write_wikitext_tasks(tmp_path / "wikitext", moved, context_words=MIN_CONTEXT_WORDS, seed=0)
    shutil.rmtree(task_dir)
    again, _ = score_suite(model, tokenizer, suite_of(moved, limits={CLOZE_TASK: 4}), batch_size=4)
    assert again["provenance"] == summary["provenance"]
    # ...and other items (another distractor seed) hash differently.
    config = json.loads(json.dumps({"dataset_kwargs": {"data_files": {"test": str(moved / ITEMS_FILE)}}}))
    digest = task_config_sha256(config)
    write_wikitext_tasks(tmp_path / "wikitext", moved, context_words=MIN_CONTEXT_WORDS, seed=1)
    assert task_config_sha256(config) != digest


def test_limits_must_name_tasks_of_the_suite(tiny_model, task_dir):
    suite = LmEvalSuite(tasks=(CLOZE_TASK,), include_path=str(task_dir), limits={"wikitext2_clozee": 4})
    with pytest.raises(ValueError, match="wikitext2_clozee not in the suite"):
        score_suite(tiny_model("llama"), char_tokenizer(), suite)


def test_generation_tasks_are_refused(tiny_model, tmp_path):
    (tmp_path / "gen.yaml").write_text(
        "task: toy_generation\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {tmp_path / 'd.jsonl'}\n"
        "test_split: test\noutput_type: generate_until\ndoc_to_text: q\ndoc_to_target: a\n"
    )
    (tmp_path / "d.jsonl").write_text('{"q": "2+2=", "a": "4"}\n')
    suite = LmEvalSuite(tasks=("toy_generation",), include_path=str(tmp_path))
    with pytest.raises(ValueError, match="generate_until.*loglikelihood, multiple_choice"):
        score_suite(tiny_model("llama"), char_tokenizer(), suite)


def test_a_cuda_oom_reruns_the_suite_at_half_the_batch(tiny_model, task_dir, monkeypatch, caplog):
    import logging

    import lm_eval

    model, tokenizer = tiny_model("llama"), char_tokenizer()
    suite = suite_of(task_dir, limits=3)
    expected, expected_items = score_suite(model, tokenizer, suite, batch_size=2)
    real, batch_sizes = lm_eval.simple_evaluate, []

    def oom_once(*args, **kwargs):
        batch_sizes.append(kwargs["model"].batch_size)
        if len(batch_sizes) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (injected by the test)")
        return real(*args, **kwargs)

    monkeypatch.setattr(lm_eval, "simple_evaluate", oom_once)
    with caplog.at_level(logging.WARNING):
        summary, items = score_suite(model, tokenizer, suite, batch_size=4)
    assert batch_sizes == [4, 2] and "CUDA out of memory at batch 4: retrying at 2" in caplog.text
    assert items.equals(expected_items) and summary["overall"] == expected["overall"]
