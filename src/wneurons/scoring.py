"""Sentence log-probabilities, BLiMP / TSE minimal-pair accuracy and WikiText-2 perplexity.

Two scoring conventions (NOTES.md, "BLiMP"):

``authors``
    the authors' released utilities: the sentence is tokenized without special tokens and its first token is not
    scored (nothing precedes it).
``harness``
    lm-evaluation-harness: the context is one prefix token (BOS, else EOS) and the continuation is
    ``" " + sentence``, so every word of the sentence is scored.

Either way a sentence becomes one token sequence whose first token is context only and whose every later token is
scored, so one batched routine serves both. Sentences are tokenized once, sorted by length (little padding),
right-padded and scored with one forward pass per batch; log-softmax is evaluated only at the target ids
(``logit[target] - logsumexp(logits)`` in float32), never as a full float64 copy of the logits.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

log = logging.getLogger(__name__)

CONVENTIONS = ("authors", "harness")
REDUCTIONS = ("sum", "mean")

# Rows of logits turned into float32 at a time: bounds the temporary copy (~256 MiB for a 64k vocabulary).
_LOGIT_ELEMENTS_PER_CHUNK = 1 << 26
# Seconds between progress lines in the log.
_LOG_INTERVAL_S = 30.0

BLIMP_COLUMNS = ("paradigm", "linguistics_term", "field", "sentence_good", "sentence_bad")
TSE_COLUMNS = ("task", "family", "condition", "sentence_good", "sentence_bad", "sentence_intrusive")


# ----------------------------------------------------------------------------------------------------------------
# progress


class _Progress:
    """Calls ``callback(done, total)`` after every batch and logs a line with rate and ETA every so often."""

    def __init__(self, total: int, unit: str, callback: Callable[[int, int], Any] | None) -> None:
        self.total, self.unit, self.callback = total, unit, callback
        self.start = self.last_log = time.perf_counter()
        self.done = 0

    def advance(self, n: int) -> None:
        self.done += n
        if self.callback is not None:
            self.callback(self.done, self.total)
        now = time.perf_counter()
        if now - self.last_log >= _LOG_INTERVAL_S or self.done == self.total:
            self.last_log = now
            rate = self.done / max(now - self.start, 1e-9)
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            log.info("scored %d/%d %s (%.1f %s/s, ETA %.0f s)", self.done, self.total, self.unit, rate, self.unit, eta)


# ----------------------------------------------------------------------------------------------------------------
# tokenization and the batched core


def _check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown scoring convention {convention!r}; valid conventions: {', '.join(CONVENTIONS)}")


def _prefix_token_id(tokenizer) -> int:
    """The harness's context token for an empty context: BOS if the tokenizer has one, else EOS."""
    for name in ("bos_token_id", "eos_token_id"):
        token_id = getattr(tokenizer, name, None)
        if token_id is not None:
            return int(token_id)
    raise ValueError(f"tokenizer {type(tokenizer).__name__} has neither a BOS nor an EOS token for 'harness' scoring")


def _tokenize(tokenizer, texts: Sequence[str], convention: str) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of every text as one flat int64 array plus int64 offsets (CSR layout, ``len(texts) + 1``).

    Position 0 of each sequence is context only; every later position is scored.
    """
    _check_convention(convention)
    if convention == "authors":
        encoded = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    else:
        prefix = _prefix_token_id(tokenizer)
        encoded = [[prefix, *ids] for ids in tokenizer([" " + t for t in texts], add_special_tokens=False)["input_ids"]]
    lengths = np.fromiter((len(ids) for ids in encoded), dtype=np.int64, count=len(encoded))
    too_short = np.flatnonzero(lengths < 2)
    if too_short.size:
        i = int(too_short[0])
        raise ValueError(
            f"text {i} ({texts[i]!r}) leaves no token to score under the {convention!r} convention "
            f"({int(lengths[i])} token(s)); {too_short.size} such text(s) in all"
        )
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter(itertools.chain.from_iterable(encoded), dtype=np.int64, count=int(offsets[-1]))
    return flat, offsets


def _padded_batch(flat: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ``[len(rows), max_len]`` token ids (pad id 0, masked anyway) and the per-row lengths."""
    starts, lengths = offsets[rows], offsets[rows + 1] - offsets[rows]
    cols = np.arange(int(lengths.max()))
    inside = cols[None, :] < lengths[:, None]
    ids = np.where(inside, flat[np.where(inside, starts[:, None] + cols[None, :], 0)], 0)
    return ids, lengths


def _target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[..., target]`` in float32, shape of ``targets``.

    Computed as ``logit[target] - logsumexp(logit)`` on row chunks so no full float32/float64 copy of a bf16 or
    large logits tensor is ever held at once.
    """
    vocab = logits.shape[-1]
    flat_logits = logits.reshape(-1, vocab)
    flat_targets = targets.reshape(-1, 1).to(logits.device)
    out = torch.empty(flat_targets.shape[0], dtype=torch.float32, device=logits.device)
    step = max(1, _LOGIT_ELEMENTS_PER_CHUNK // vocab)
    for lo in range(0, flat_logits.shape[0], step):
        chunk = flat_logits[lo : lo + step].float()
        out[lo : lo + step] = chunk.gather(1, flat_targets[lo : lo + step]).squeeze(1) - chunk.logsumexp(dim=1)
    return out.reshape(targets.shape)


def _model_device(model) -> torch.device:
    return next(model.parameters()).device


def _batched_logprob_sums(
    model,
    flat: np.ndarray,
    offsets: np.ndarray,
    *,
    batch_size: int,
    progress: Callable[[int, int], Any] | None,
) -> np.ndarray:
    """Float64 sum of scored-token log-probs of every sequence (all tokens but the first), in input order."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = len(offsets) - 1
    sums = np.zeros(n, dtype=np.float64)
    # Longest first: the largest batch comes first (memory peak shows at once) and neighbours have similar length.
    order = np.argsort(-(offsets[1:] - offsets[:-1]), kind="stable")
    device = _model_device(model)
    tracker = _Progress(n, "sentences", progress)
    with torch.inference_mode():
        for lo in range(0, n, batch_size):
            rows = order[lo : lo + batch_size]
            ids, lengths = _padded_batch(flat, offsets, rows)
            ids_t = torch.from_numpy(ids).to(device)
            # Position t predicts token t+1; the last position predicts nothing, so it is not fed.
            inputs, targets = ids_t[:, :-1], ids_t[:, 1:]
            valid = torch.from_numpy(np.arange(1, ids.shape[1])[None, :] < lengths[:, None]).to(device)
            logits = model(input_ids=inputs, attention_mask=valid.long(), use_cache=False).logits
            token_lp = _target_logprobs(logits, targets)
            sums[rows] = token_lp.double().masked_fill(~valid, 0.0).sum(dim=1).cpu().numpy()
            tracker.advance(len(rows))
    return sums


# ----------------------------------------------------------------------------------------------------------------
# public scoring API


def sequence_logprobs(
    model,
    tokenizer,
    texts: Sequence[str],
    *,
    convention: str = "authors",
    reduce: str = "sum",
    batch_size: int = 64,
    progress: Callable[[int, int], Any] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Log-probability of each text under ``model``.

    Returns ``(scores, n_scored)``: float64 ``[n]`` natural-log probabilities (the total over scored tokens for
    ``reduce="sum"``, the mean per scored token for ``reduce="mean"``) and int64 ``[n]`` counts of scored tokens.
    ``convention`` is ``"authors"`` or ``"harness"`` (module docstring). ``progress(done, total)`` is called after
    every batch. Raises ``ValueError`` for an unknown convention/reduction or a text with no token to score.
    """
    _check_convention(convention)
    if reduce not in REDUCTIONS:
        raise ValueError(f"unknown reduce {reduce!r}; valid: {', '.join(REDUCTIONS)}")
    if len(texts) == 0:
        return np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int64)
    flat, offsets = _tokenize(tokenizer, texts, convention)
    n_scored = offsets[1:] - offsets[:-1] - 1
    sums = _batched_logprob_sums(model, flat, offsets, batch_size=batch_size, progress=progress)
    return (sums / n_scored if reduce == "mean" else sums), n_scored


def _scores_deduplicated(model, tokenizer, groups: Sequence[Sequence[str]], **kwargs) -> list[np.ndarray]:
    """Scores of several lists of texts from one sorted pass over their distinct texts (one array per list)."""
    index: dict[str, int] = {}
    inverse = [np.array([index.setdefault(t, len(index)) for t in group], dtype=np.int64) for group in groups]
    scores, _ = sequence_logprobs(model, tokenizer, list(index), **kwargs)
    return [scores[inv] for inv in inverse]


def score_minimal_pairs(
    model,
    tokenizer,
    good: Sequence[str],
    bad: Sequence[str],
    *,
    convention: str = "authors",
    reduce: str = "sum",
    batch_size: int = 64,
) -> np.ndarray:
    """Bool ``[n]``: ``score(good[i]) > score(bad[i])`` strictly (a tie counts as wrong).

    Good and bad sentences are scored in one length-sorted pass; a sentence occurring several times is scored once.
    """
    if len(good) != len(bad):
        raise ValueError(f"good and bad differ in length: {len(good)} vs {len(bad)}")
    good_lp, bad_lp = _scores_deduplicated(
        model, tokenizer, [good, bad], convention=convention, reduce=reduce, batch_size=batch_size
    )
    return good_lp > bad_lp


def _require_columns(frame: pl.DataFrame, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} frame lacks column(s) {missing}; it has {frame.columns}")
    if frame.height == 0:
        raise ValueError(f"{what} frame is empty: nothing to score")


def _accuracy_by(frame: pl.DataFrame, key: str | pl.Expr, correct: str = "correct") -> dict[str, float]:
    """Mean of the bool column ``correct`` per value of ``key`` (a column name or expression), sorted by key."""
    key_expr = pl.col(key) if isinstance(key, str) else key
    grouped = frame.group_by(key_expr.alias("_key")).agg(pl.col(correct).mean().alias("_acc")).sort("_key")
    return dict(zip(grouped["_key"].to_list(), grouped["_acc"].to_list(), strict=True))


def score_blimp(
    model,
    tokenizer,
    pairs: pl.DataFrame,
    *,
    convention: str = "authors",
    batch_size: int = 64,
    return_pairs: bool = False,
    progress: Callable[[int, int], Any] | None = None,
) -> dict[str, Any] | tuple[dict[str, Any], pl.DataFrame]:
    """BLiMP accuracy: a pair is correct when the good sentence's **summed** log-prob is strictly higher.

    ``pairs`` has columns paradigm, linguistics_term, field, sentence_good, sentence_bad (``wneurons.data.load_blimp``).
    Returns ``{"overall", "n_pairs", "by_term", "by_paradigm", "by_field", "convention", "reduce"}`` with accuracies
    as fractions in [0, 1] (overall is the micro-average over pairs). With ``return_pairs=True`` returns
    ``(summary, frame)`` where the frame is ``pairs`` plus float64 ``logprob_good``, ``logprob_bad`` and bool
    ``correct``.
    """
    _require_columns(pairs, BLIMP_COLUMNS, "BLiMP")
    good_lp, bad_lp = _scores_deduplicated(
        model,
        tokenizer,
        [pairs["sentence_good"].to_list(), pairs["sentence_bad"].to_list()],
        convention=convention,
        reduce="sum",
        batch_size=batch_size,
        progress=progress,
    )
    scored = pairs.with_columns(
        logprob_good=pl.Series(good_lp), logprob_bad=pl.Series(bad_lp), correct=pl.Series(good_lp > bad_lp)
    )
    summary = {
        "overall": float(scored["correct"].mean()),
        "n_pairs": scored.height,
        "by_term": _accuracy_by(scored, "linguistics_term"),
        "by_paradigm": _accuracy_by(scored, "paradigm"),
        "by_field": _accuracy_by(scored, "field"),
        "convention": convention,
        "reduce": "sum",
    }
    return (summary, scored) if return_pairs else summary


def score_tse(
    model,
    tokenizer,
    items: pl.DataFrame,
    *,
    convention: str = "authors",
    batch_size: int = 64,
    return_items: bool = False,
    progress: Callable[[int, int], Any] | None = None,
) -> dict[str, Any] | tuple[dict[str, Any], pl.DataFrame]:
    """TSE (Marvin & Linzen) accuracy with **mean** per-token log-prob (length-normalized, the authors' choice).

    ``items`` has columns task, family, condition, sentence_good, sentence_bad, sentence_intrusive (null except for
    NPI triples; ``wneurons.data.load_tse``). An item is correct when good scores strictly higher than bad (for NPI
    triples: first vs last element, as the authors compare). Returns ``{"overall", "n_items", "by_family",
    "by_task", "by_task_condition": {"task:condition": acc}, "npi_good_vs_intrusive": {"overall", "n_items",
    "by_task"}, "convention", "reduce"}``, accuracies as fractions in [0, 1]. With ``return_items=True`` returns
    ``(summary, frame)`` with float64 ``logprob_good/bad/intrusive`` (mean per token) and bool ``correct`` added.
    """
    _require_columns(items, TSE_COLUMNS, "TSE")
    intrusive_rows = items["sentence_intrusive"].is_not_null().to_numpy()
    good_lp, bad_lp, intrusive_lp = _scores_deduplicated(
        model,
        tokenizer,
        [
            items["sentence_good"].to_list(),
            items["sentence_bad"].to_list(),
            items["sentence_intrusive"].filter(intrusive_rows).to_list(),
        ],
        convention=convention,
        reduce="mean",
        batch_size=batch_size,
        progress=progress,
    )
    intrusive_full = np.full(items.height, np.nan)
    intrusive_full[intrusive_rows] = intrusive_lp
    scored = items.with_columns(
        logprob_good=pl.Series(good_lp),
        logprob_bad=pl.Series(bad_lp),
        logprob_intrusive=pl.Series(intrusive_full, nan_to_null=True),
        correct=pl.Series(good_lp > bad_lp),
    )
    npi = scored.filter(pl.Series(intrusive_rows)).with_columns(
        correct_vs_intrusive=pl.col("logprob_good") > pl.col("logprob_intrusive")
    )
    summary = {
        "overall": float(scored["correct"].mean()),
        "n_items": scored.height,
        "by_family": _accuracy_by(scored, "family"),
        "by_task": _accuracy_by(scored, "task"),
        "by_task_condition": _accuracy_by(scored, pl.concat_str("task", "condition", separator=":")),
        "npi_good_vs_intrusive": {
            "overall": float(npi["correct_vs_intrusive"].mean()) if npi.height else None,
            "n_items": npi.height,
            "by_task": _accuracy_by(npi, "task", "correct_vs_intrusive") if npi.height else {},
        },
        "convention": convention,
        "reduce": "mean",
    }
    return (summary, scored) if return_items else summary


def _context_length(model) -> int:
    config = model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if value:
            return int(value)
    raise ValueError(f"cannot tell the context length of model_type {config.model_type!r}; pass window=")


def perplexity(
    model,
    tokenizer,
    text: str,
    *,
    window: int | None = 2048,
    max_tokens: int | None = None,
    batch_size: int = 4,
    return_token_nll: bool = False,
    progress: Callable[[int, int], Any] | None = None,
) -> dict[str, Any]:
    """Perplexity of ``text`` in the authors' convention (NOTES.md, "Perplexity").

    The text is tokenized once without special tokens and cut into non-overlapping windows of ``window`` tokens
    (``None``: the model's context length); the tail shorter than a window is dropped, and ``max_tokens`` caps the
    tokens used to whole windows. Within a window every token but the first is predicted.
    Returns ``{"perplexity": exp(mean_nll), "mean_nll" (nats per token), "n_tokens" (predicted tokens),
    "n_windows", "window"}``; with ``return_token_nll=True`` also ``"token_nll"`` (float32 ``[n_tokens]``, nats)
    and ``"token_positions"`` (int64 index of each predicted token in the tokenized text, in the same order).
    """
    window = _context_length(model) if window is None else int(window)
    if window < 2:
        raise ValueError(f"window must be >= 2 tokens, got {window}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    ids = np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"], dtype=np.int64)
    usable = len(ids) if max_tokens is None else min(len(ids), int(max_tokens))
    n_windows = usable // window
    if n_windows == 0:
        raise ValueError(
            f"text has {len(ids)} tokens (max_tokens={max_tokens}): not enough for one window of {window} tokens"
        )
    windows = torch.from_numpy(ids[: n_windows * window].reshape(n_windows, window))
    device = _model_device(model)
    nll = torch.empty(n_windows, window - 1, dtype=torch.float32)
    tracker = _Progress(n_windows, "windows", progress)
    with torch.inference_mode():
        for lo in range(0, n_windows, batch_size):
            batch = windows[lo : lo + batch_size].to(device)
            logits = model(input_ids=batch[:, :-1], use_cache=False).logits
            nll[lo : lo + batch_size] = -_target_logprobs(logits, batch[:, 1:]).cpu()
            tracker.advance(batch.shape[0])
    token_nll = nll.reshape(-1).numpy()
    mean_nll = float(token_nll.astype(np.float64).mean())
    result: dict[str, Any] = {
        "perplexity": math.exp(mean_nll),
        "mean_nll": mean_nll,
        "n_tokens": int(token_nll.size),
        "n_windows": int(n_windows),
        "window": window,
    }
    if return_token_nll:
        result["token_nll"] = token_nll
        result["token_positions"] = (
            np.arange(n_windows, dtype=np.int64)[:, None] * window + np.arange(1, window, dtype=np.int64)[None, :]
        ).reshape(-1)
    return result
