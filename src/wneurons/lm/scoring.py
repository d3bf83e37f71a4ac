"""Sentence log-probabilities and BLiMP / TSE minimal-pair accuracy (perplexity: :mod:`wneurons.lm.perplexity`).

Three scoring conventions (docs/conventions.md, "Scoring conventions"):

``authors``
    the authors' released utilities: the sentence is tokenized with the tokenizer's **own default special tokens**
    (``add_special_tokens=True``) and the first position is not scored. A tokenizer that prepends BOS
    (Llama-3.1, Mistral, OPT, Gemma) therefore has the first word scored; one that prepends nothing (Pythia,
    Qwen3, SmolLM2) does not. A tie (good == bad) counts as wrong.
``no-special-tokens``
    the project's earlier default: tokenized without special tokens, the first token is context only; ties wrong.
``harness``
    lm-evaluation-harness: the context is one prefix token (BOS, else EOS) and the continuation is
    ``" " + sentence``, so every word of the sentence is scored. A tie counts as correct, as lm-eval's argmax
    takes the first choice (the good sentence).

Whatever the convention, a sentence becomes one token sequence whose first token is context only and whose every
later token is scored, so one batched routine serves all three. Sentences are tokenized once, sorted
lexicographically by token ids and scored ``batch_size`` at a time, each batch packed into prefix trees
(:func:`pack_prefix_tree`): a prefix that several sentences share (minimal pairs, and a benchmark's templated
sentences, share many) is fed once, with an attention mask that lets every position see exactly its own prefix, so
each sentence's log-probs are those of scoring it alone, up to float rounding; on BLiMP this feeds 0.65x the
positions of whole sentences, padding included (docs/performance.md, section 1). Log-softmax is evaluated only at
the target ids (``logit[target] - logsumexp(logits)`` in float32), never as a full float64 copy of the logits.
Every summary records the convention and whether a BOS was actually prepended (``bos_prepended``, with the count
``n_bos_prepended`` of scored sequences that got one, in case a tokenizer decides per text).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import polars as pl
import torch

from wneurons.lm.registry import sliding_window

log = logging.getLogger(__name__)

REDUCTIONS = ("sum", "mean")
# How each minimal-pair benchmark reduces a sentence's token log-probs: BLiMP sums them, TSE averages them per token
# (the authors' choices, docs/conventions.md); score_blimp / score_tse and the notebook API read it here.
PAIR_REDUCTION = {"blimp": "sum", "tse": "mean"}

# Rows of logits turned into float32 at a time: bounds the temporary copy (~256 MiB for a 64k vocabulary).
_LOGIT_ELEMENTS_PER_CHUNK = 1 << 26
# Nodes per prefix-tree row (:func:`pack_prefix_tree`): longer rows share more prefixes but attend over more
# columns; on BLiMP (SmolLM2 tokens, batches of 64) rows of 64 feed 0.65x the positions of whole sentences, rows of
# 256 0.58x, padding included (python perf/scoring_positions.py --row-width N).
PREFIX_TREE_ROW = 64
# Seconds between progress lines in the log.
_LOG_INTERVAL_S = 30.0

BLIMP_COLUMNS = ("paradigm", "linguistics_term", "field", "sentence_good", "sentence_bad")
TSE_COLUMNS = ("task", "family", "condition", "sentence_good", "sentence_bad", "sentence_intrusive")
# Columns of the per-item / per-token results (`{benchmark}.items.parquet`), in file order.
BLIMP_ITEM_COLUMNS = (
    "item", "paradigm", "linguistics_term", "field", "logprob_good", "logprob_bad", "correct", "tie"
)  # fmt: skip
TSE_ITEM_COLUMNS = (
    "item", "task", "family", "condition", "logprob_good", "logprob_bad", "logprob_intrusive", "correct", "tie"
)  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# progress


class Progress:
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
# batches that shrink when the GPU runs out of memory


def run_in_batches(n: int, batch_size: int, step: Callable[[int, int], Any]) -> int:
    """Call ``step(lo, hi)`` over ``[0, n)`` in consecutive ranges of ``batch_size`` items. When a range raises
    ``torch.cuda.OutOfMemoryError``, its size is halved (for the rest of the job too), the line "CUDA out of
    memory at batch N: retrying at N/2" goes to the job's log and the same range is run again; at one item the
    error is raised. ``step`` must leave nothing half-done that a rerun of its range would not redo. Returns the
    batch size the job ended with."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    lo = 0
    while lo < n:
        hi = min(n, lo + batch_size)
        try:
            step(lo, hi)
        except torch.cuda.OutOfMemoryError:
            if hi - lo == 1:
                raise
        else:
            lo = hi
            continue
        # Out of the except block: the error's traceback (and the tensors its frames hold) is gone before the retry.
        smaller = (hi - lo) // 2
        log.warning("CUDA out of memory at batch %d: retrying at %d", hi - lo, smaller)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        batch_size = smaller
    return batch_size


# ----------------------------------------------------------------------------------------------------------------
# conventions


def _prefix_token_id(tokenizer) -> int:
    """The harness's context token for an empty context: BOS if the tokenizer has one, else EOS."""
    for name in ("bos_token_id", "eos_token_id"):
        token_id = getattr(tokenizer, name, None)
        if token_id is not None:
            return int(token_id)
    raise ValueError(f"tokenizer {type(tokenizer).__name__} has neither a BOS nor an EOS token for 'harness' scoring")


def leading_bos(tokenizer, encoded: Sequence[Sequence[int]]) -> int:
    """How many token sequences start with the tokenizer's BOS (0 when it has none)."""
    bos = getattr(tokenizer, "bos_token_id", None)
    return 0 if bos is None else sum(1 for ids in encoded if len(ids) and ids[0] == bos)


def _encode_defaults(tokenizer, texts: Sequence[str]) -> tuple[list[list[int]], int]:
    encoded = tokenizer(list(texts), add_special_tokens=True)["input_ids"]
    return encoded, leading_bos(tokenizer, encoded)


def _encode_plain(tokenizer, texts: Sequence[str]) -> tuple[list[list[int]], int]:
    return tokenizer(list(texts), add_special_tokens=False)["input_ids"], 0


def _encode_harness(tokenizer, texts: Sequence[str]) -> tuple[list[list[int]], int]:
    prefix = _prefix_token_id(tokenizer)
    encoded = [[prefix, *ids] for ids in tokenizer([" " + t for t in texts], add_special_tokens=False)["input_ids"]]
    return encoded, len(encoded) if prefix == getattr(tokenizer, "bos_token_id", None) else 0


@dataclasses.dataclass(frozen=True)
class Convention:
    """How one scoring convention turns texts into scored token sequences and decides ties.

    ``encode(tokenizer, texts)`` returns one id list per text (position 0 is context only, every later position
    is scored) and how many of them start with a prepended BOS. ``tie_correct``: whether good == bad counts as
    correct. ``stream_special_tokens``: whether the perplexity text is tokenized with the tokenizer's defaults.
    """

    encode: Callable[[Any, Sequence[str]], tuple[list[list[int]], int]]
    tie_correct: bool
    stream_special_tokens: bool


CONVENTIONS: dict[str, Convention] = {
    "authors": Convention(_encode_defaults, tie_correct=False, stream_special_tokens=True),
    "no-special-tokens": Convention(_encode_plain, tie_correct=False, stream_special_tokens=False),
    # lm-eval scores [good, bad] as choices and takes argmax, which picks the first (good) on a tie.
    "harness": Convention(_encode_harness, tie_correct=True, stream_special_tokens=False),
}


def resolve_convention(name: str) -> Convention:
    try:
        return CONVENTIONS[name]
    except KeyError:
        raise ValueError(f"unknown scoring convention {name!r}; valid conventions: {', '.join(CONVENTIONS)}") from None


def _decide(good: np.ndarray, bad: np.ndarray, convention: str) -> tuple[np.ndarray, np.ndarray]:
    """``(correct, tie)`` of minimal pairs: good strictly higher, or tied where the convention counts ties."""
    tie = good == bad
    correct = good > bad
    if resolve_convention(convention).tie_correct:
        correct = correct | tie
    return correct, tie


def _bos_record(n_bos: int, n_sequences: int) -> dict[str, Any]:
    """What a result records about BOS: true only when every scored sequence got one (the count says if some)."""
    return {"bos_prepended": bool(n_sequences) and n_bos == n_sequences, "n_bos_prepended": int(n_bos)}


# ----------------------------------------------------------------------------------------------------------------
# tokenization and the batched core


def tokenize(tokenizer, texts: Sequence[str], convention: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Token ids of every text as one flat int64 array plus int64 offsets (CSR layout, ``len(texts) + 1``), and
    how many sequences start with a prepended BOS.

    Position 0 of each sequence is context only; every later position is scored.
    """
    encoded, n_bos = resolve_convention(convention).encode(tokenizer, texts)
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
    return flat, offsets, n_bos


def padded_rows(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray, pad: int = 0) -> np.ndarray:
    """Right-padded ``[len(starts), max(lengths)]`` token ids, row i = ``flat[starts[i] : starts[i] + lengths[i]]``
    (pad id ``pad``: 0 where it is masked anyway)."""
    cols = np.arange(int(lengths.max()))
    inside = cols[None, :] < lengths[:, None]
    return np.where(inside, flat[np.where(inside, starts[:, None] + cols[None, :], 0)], pad)


def row_logsumexp(flat_logits: torch.Tensor) -> torch.Tensor:
    """``logsumexp`` of every row of ``[positions, vocab]`` logits in float32, on row chunks so that no full
    float32 copy of a bf16 or large logits tensor is ever held at once."""
    out = torch.empty(flat_logits.shape[0], dtype=torch.float32, device=flat_logits.device)
    step = max(1, _LOGIT_ELEMENTS_PER_CHUNK // flat_logits.shape[-1])
    for lo in range(0, flat_logits.shape[0], step):
        out[lo : lo + step] = flat_logits[lo : lo + step].float().logsumexp(dim=1)
    return out


def target_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[..., target]`` in float32, shape of ``targets``: ``logit[target] - logsumexp(logit)``
    (:func:`row_logsumexp`), never a log-softmax over the vocabulary."""
    flat_logits = logits.reshape(-1, logits.shape[-1])
    picked = flat_logits.gather(1, targets.reshape(-1, 1).to(logits.device)).squeeze(1).float()
    return (picked - row_logsumexp(flat_logits)).reshape(targets.shape)


def query_logprobs(logits: torch.Tensor, query: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Float32 ``log_softmax`` of the flat position ``query[t]`` at token ``target[t]``: one logsumexp per
    position, however many targets it predicts (a node of a prefix tree predicts each of its children)."""
    flat_logits = logits.reshape(-1, logits.shape[-1])
    query, target = query.to(logits.device), target.to(logits.device)
    return flat_logits[query, target].float() - row_logsumexp(flat_logits)[query]


def model_device(model) -> torch.device:
    """The device of the model's (first) parameters, where its inputs go."""
    return next(model.parameters()).device


def lexicographic_order(flat: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The order the engine scores sequences in: lexicographic by token ids (a sequence before its extensions), so
    that sequences sharing a prefix are neighbours and land in one prefix tree (:func:`pack_prefix_tree`)."""
    dense = padded_rows(flat, offsets[:-1], offsets[1:] - offsets[:-1], pad=-1)  # -1 sorts before every token id
    return np.lexsort(dense.T[::-1])  # first column most significant


@dataclasses.dataclass(frozen=True)
class PrefixTreeBatch:
    """Sequences packed as prefix trees, one tree (or several) per row, each shared prefix fed once.

    A node is a prefix of at least one sequence that some token follows; it sits in one column of its row, holds
    its prefix's last token at position id = its depth, and attends to exactly its ancestors (``allowed``), so its
    hidden states are those of the prefix scored alone. ``query[t]`` (flat ``row * width + column``) predicts
    ``target[t]``, the next token of sequence ``owner[t]``: every scored token of every sequence is one ``t``.
    """

    ids: np.ndarray  # int64 [rows, width], pad 0
    positions: np.ndarray  # int64 [rows, width]
    allowed: np.ndarray  # bool [rows, width, width]: query column attends to key column
    query: np.ndarray  # int64 [n_targets]
    target: np.ndarray  # int64 [n_targets]
    owner: np.ndarray  # int64 [n_targets], index into the packed sequences

    @property
    def nodes(self) -> int:
        """Positions that hold a node; the rest of ``ids.size`` is padding (a padding column attends to nothing)."""
        return int(self.allowed.any(axis=2).sum())


def pack_prefix_tree(flat: np.ndarray, starts: np.ndarray, lengths: np.ndarray, row_width: int) -> PrefixTreeBatch:
    """Pack sequences (``flat[starts[i] : starts[i] + lengths[i]]``, lexicographically sorted) into prefix-tree
    rows: as many as ``row_width`` nodes a row asks for, filled evenly (a row holds at most its even share plus
    the batch's mean sequence, or the longest sequence); the array is as wide as its longest row.

    Sequence k feeds its tokens 0 .. len-2 (the last one predicts nothing); its node at depth d is shared with
    its predecessor k-1 in the same row while both sequences agree on tokens 0 .. d (sorted order: a prefix shared
    with any earlier sequence is shared with the predecessor), and new otherwise.
    """
    n = len(starts)
    fed = lengths - 1
    dense = padded_rows(flat, starts, lengths)
    depth = np.arange(dense.shape[1] - 1)
    shared = np.zeros(n, dtype=np.int64)
    if n > 1:
        differ = dense[1:] != dense[:-1]
        lcp = np.where(differ.any(axis=1), differ.argmax(axis=1), dense.shape[1])
        shared[1:] = np.minimum(lcp, np.minimum(fed[1:], fed[:-1]))
    # As many rows as row_width asks for, filled evenly: the last row of a batch is not left half empty.
    nodes = int(fed.sum() - shared.sum())  # without the prefixes fed again at the start of a row
    cap = max(-(-nodes // -(-nodes // row_width)) + int(fed.mean()), int(fed.max()))
    # Rows fill greedily in sorted order: a loop over sequences (not tokens), cheap beside a forward pass.
    row = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)  # column of the sequence's first new node
    r, used, width = -1, cap, 0
    for k in range(n):
        if used + fed[k] - shared[k] > cap:
            r, used, shared[k] = r + 1, 0, 0
        row[k], first[k] = r, used
        used += fed[k] - shared[k]
        width = max(width, used)  # the longest row: a batch of a few short sentences is not padded to the cap
    on_path = depth[None, :] < fed[:, None]
    new = on_path & (depth[None, :] >= shared[:, None])
    own = first[:, None] + depth[None, :] - shared[:, None]
    # The node of (k, d) is the one introduced by the last sequence up to k that introduced a node at depth d.
    intro = np.maximum.accumulate(np.where(new, np.arange(n)[:, None], -1), axis=0)
    col = own[np.maximum(intro, 0), depth[None, :]]
    ids = np.zeros((r + 1, width), dtype=np.int64)
    positions = np.zeros((r + 1, width), dtype=np.int64)
    k_new, d_new = np.nonzero(new)
    ids[row[k_new], own[k_new, d_new]] = dense[k_new, d_new]
    positions[row[k_new], own[k_new, d_new]] = d_new
    # Each new node (k, d) attends to the columns of (k, 0 .. d): its own path from the root.
    allowed = np.zeros((r + 1, width, width), dtype=bool)
    ancestors = depth[None, :] <= d_new[:, None]  # [new nodes, depth]
    k_a, e_a = np.broadcast_to(k_new[:, None], ancestors.shape)[ancestors], np.nonzero(ancestors)[1]
    n_a = np.repeat(np.arange(len(k_new)), ancestors.sum(axis=1))
    allowed[row[k_a], own[k_new, d_new][n_a], col[k_a, e_a]] = True
    k_t, d_t = np.nonzero(on_path)
    return PrefixTreeBatch(
        ids=ids,
        positions=positions,
        allowed=allowed,
        query=row[k_t] * width + col[k_t, d_t],
        target=dense[k_t, d_t + 1],
        owner=k_t,
    )


def attention_bias(allowed: np.ndarray, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """The ``[rows, 1, width, width]`` additive attention mask of a :class:`PrefixTreeBatch` (0 where a column
    attends, the dtype's lowest value where not), which transformers passes to every family's attention as it is
    (a float mask: eager attention adds it, SDPA too). Padding columns attend to themselves, so no row is empty."""
    allowed = torch.from_numpy(allowed).to(device) | torch.eye(allowed.shape[-1], dtype=torch.bool, device=device)
    bias = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, torch.finfo(dtype).min)
    return bias[:, None]


def batched_logprob_sums(
    model,
    flat: np.ndarray,
    offsets: np.ndarray,
    *,
    batch_size: int,
    progress: Callable[[int, int], Any] | None,
    row_width: int = PREFIX_TREE_ROW,
) -> np.ndarray:
    """Float64 sum of scored-token log-probs of every sequence (all tokens but the first), in input order.

    Sequences are scored ``batch_size`` at a time in lexicographic order, each batch packed into prefix-tree rows
    (:func:`pack_prefix_tree`): a prefix that several sequences share is fed once, its hidden states those of each
    sequence scored alone up to float rounding (which, like any change of batch shape, moves a sentence's fp32
    log-prob by up to ~2e-3 nats on SmolLM2, lm-evaluation-harness's own batch sizes too: docs/performance.md,
    section 1). A CUDA out-of-memory error halves the
    batch and retries it (:func:`run_in_batches`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = len(offsets) - 1
    if n == 0:
        return np.zeros(0, dtype=np.float64)
    window, longest = sliding_window(model), int((offsets[1:] - offsets[:-1]).max(initial=0))
    if window is not None and longest > window:
        # The prefix-tree mask gives every layer the same span; a local layer must not see past its window.
        raise ValueError(
            f"a sequence of {longest} tokens is longer than the model's sliding attention window ({window} tokens), "
            "which minimal-pair scoring does not apply: score shorter texts (perplexity windows handle long text)"
        )
    sums = np.zeros(n, dtype=np.float64)
    order = lexicographic_order(flat, offsets)
    device = model_device(model)
    dtype = next(model.parameters()).dtype
    tracker = Progress(n, "sentences", progress)

    def score_rows(lo: int, hi: int) -> None:
        rows = order[lo:hi]
        packed = pack_prefix_tree(flat, offsets[rows], offsets[rows + 1] - offsets[rows], row_width)
        logits = model(
            input_ids=torch.from_numpy(packed.ids).to(device),
            position_ids=torch.from_numpy(packed.positions).to(device),
            attention_mask=attention_bias(packed.allowed, dtype, device),
            use_cache=False,
        ).logits
        token_lp = query_logprobs(logits, torch.from_numpy(packed.query), torch.from_numpy(packed.target))
        owner = torch.from_numpy(packed.owner).to(device)
        per_sequence = torch.zeros(len(rows), dtype=torch.float64, device=device)
        sums[rows] = per_sequence.index_add_(0, owner, token_lp.double()).cpu().numpy()
        tracker.advance(len(rows))

    with torch.inference_mode():
        run_in_batches(n, batch_size, score_rows)
    return sums


# ----------------------------------------------------------------------------------------------------------------
# public scoring API


def _score_texts(
    model,
    tokenizer,
    texts: Sequence[str],
    *,
    convention: str,
    reduce: str,
    batch_size: int,
    progress: Callable[[int, int], Any] | None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`sequence_logprobs` plus the count of sequences that got a prepended BOS."""
    resolve_convention(convention)
    if reduce not in REDUCTIONS:
        raise ValueError(f"unknown reduce {reduce!r}; valid: {', '.join(REDUCTIONS)}")
    if len(texts) == 0:
        return np.zeros(0, dtype=np.float64), np.zeros(0, dtype=np.int64), 0
    flat, offsets, n_bos = tokenize(tokenizer, texts, convention)
    n_scored = offsets[1:] - offsets[:-1] - 1
    sums = batched_logprob_sums(model, flat, offsets, batch_size=batch_size, progress=progress)
    return (sums / n_scored if reduce == "mean" else sums), n_scored, n_bos


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
    ``convention`` is one of :data:`CONVENTIONS` (module docstring). ``progress(done, total)`` is called after
    every batch. Raises ``ValueError`` for an unknown convention/reduction or a text with no token to score.
    """
    scores, n_scored, _ = _score_texts(
        model, tokenizer, texts, convention=convention, reduce=reduce, batch_size=batch_size, progress=progress
    )
    return scores, n_scored


def _scores_deduplicated(
    model, tokenizer, groups: Sequence[Sequence[str]], **kwargs
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Scores of several lists of texts from one sorted pass over their distinct texts (one array per list), and
    the BOS record of that pass (:func:`_bos_record` over the distinct texts)."""
    index: dict[str, int] = {}
    inverse = [np.array([index.setdefault(t, len(index)) for t in group], dtype=np.int64) for group in groups]
    scores, _, n_bos = _score_texts(model, tokenizer, list(index), **kwargs)
    return [scores[inv] for inv in inverse], _bos_record(n_bos, len(index))


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
    """Bool ``[n]``: ``score(good[i]) > score(bad[i])`` strictly; a tie counts as wrong except under ``harness``
    (lm-eval's argmax takes the first choice).

    Good and bad sentences are scored in one pass (:func:`batched_logprob_sums`); a sentence occurring several times is
    scored once.
    """
    if len(good) != len(bad):
        raise ValueError(f"good and bad differ in length: {len(good)} vs {len(bad)}")
    (good_lp, bad_lp), _ = _scores_deduplicated(
        model, tokenizer, [good, bad], convention=convention, reduce=reduce, batch_size=batch_size, progress=None
    )
    return _decide(good_lp, bad_lp, convention)[0]


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


def _ties_by(frame: pl.DataFrame, key: str) -> dict[str, int]:
    """Number of tied pairs per value of ``key`` (every value listed, zeros included), sorted by key."""
    grouped = frame.group_by(key).agg(pl.col("tie").sum().alias("_ties")).sort(key)
    return dict(zip(grouped[key].to_list(), grouped["_ties"].to_list(), strict=True))


def _with_decisions(frame: pl.DataFrame, good: np.ndarray, bad: np.ndarray, convention: str) -> pl.DataFrame:
    """``frame`` with its row number ``item`` first and float64 ``logprob_good/bad``, bool ``correct``, ``tie``."""
    correct, tie = _decide(good, bad, convention)
    return frame.with_row_index("item").with_columns(
        pl.col("item").cast(pl.Int64),
        logprob_good=pl.Series(good, dtype=pl.Float64),
        logprob_bad=pl.Series(bad, dtype=pl.Float64),
        correct=pl.Series(correct),
        tie=pl.Series(tie),
    )


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
    """BLiMP accuracy: a pair is correct when the good sentence's **summed** log-prob is higher (ties: see
    :data:`CONVENTIONS`).

    ``pairs`` has columns paradigm, linguistics_term, field, sentence_good, sentence_bad (``store.data.load_blimp``).
    Returns ``{"overall", "n_pairs", "by_term", "by_paradigm", "by_field", "n_ties", "ties_by_paradigm",
    "convention", "bos_prepended", "n_bos_prepended", "reduce"}`` with accuracies as fractions in [0, 1] (overall
    is the micro-average over pairs). With ``return_pairs=True`` returns ``(summary, frame)``: the per-pair frame
    with exactly :data:`BLIMP_ITEM_COLUMNS` (``item`` = row of ``pairs``).
    """
    _require_columns(pairs, BLIMP_COLUMNS, "BLiMP")
    (good_lp, bad_lp), bos = _scores_deduplicated(
        model,
        tokenizer,
        [pairs["sentence_good"].to_list(), pairs["sentence_bad"].to_list()],
        convention=convention,
        reduce=PAIR_REDUCTION["blimp"],
        batch_size=batch_size,
        progress=progress,
    )
    scored = _with_decisions(pairs, good_lp, bad_lp, convention)
    summary = {
        "overall": float(scored["correct"].mean()),
        "n_pairs": scored.height,
        "by_term": _accuracy_by(scored, "linguistics_term"),
        "by_paradigm": _accuracy_by(scored, "paradigm"),
        "by_field": _accuracy_by(scored, "field"),
        "n_ties": int(scored["tie"].sum()),
        "ties_by_paradigm": _ties_by(scored, "paradigm"),
        "convention": convention,
        **bos,
        "reduce": PAIR_REDUCTION["blimp"],
    }
    return (summary, scored.select(BLIMP_ITEM_COLUMNS)) if return_pairs else summary


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
    NPI triples; ``wneurons.store.data.load_tse``). An item is correct when good scores higher than bad (for NPI
    triples: first vs last element, as the authors compare; ties: see :data:`CONVENTIONS`). Returns
    ``{"overall", "n_items", "by_family", "by_task", "by_task_condition": {"task:condition": acc},
    "npi_good_vs_intrusive": {"overall", "n_items", "by_task"}, "n_ties", "ties_by_task", "convention",
    "bos_prepended", "n_bos_prepended", "reduce"}``, accuracies as fractions in [0, 1]. With ``return_items=True``
    returns ``(summary, frame)``: the per-item frame with exactly :data:`TSE_ITEM_COLUMNS` (log-probs are means
    per token; ``logprob_intrusive`` null outside NPI triples).
    """
    _require_columns(items, TSE_COLUMNS, "TSE")
    intrusive_rows = items["sentence_intrusive"].is_not_null().to_numpy()
    (good_lp, bad_lp, intrusive_lp), bos = _scores_deduplicated(
        model,
        tokenizer,
        [
            items["sentence_good"].to_list(),
            items["sentence_bad"].to_list(),
            items["sentence_intrusive"].filter(intrusive_rows).to_list(),
        ],
        convention=convention,
        reduce=PAIR_REDUCTION["tse"],
        batch_size=batch_size,
        progress=progress,
    )
    intrusive_full = np.full(items.height, np.nan)
    intrusive_full[intrusive_rows] = intrusive_lp
    scored = _with_decisions(items, good_lp, bad_lp, convention).with_columns(
        logprob_intrusive=pl.Series(intrusive_full, dtype=pl.Float64, nan_to_null=True)
    )
    npi = scored.filter(pl.Series(intrusive_rows)).with_columns(
        correct_vs_intrusive=pl.Series(
            _decide(scored["logprob_good"].filter(intrusive_rows).to_numpy(), intrusive_lp, convention)[0]
        )
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
        "n_ties": int(scored["tie"].sum()),
        "ties_by_task": _ties_by(scored, "task"),
        "convention": convention,
        **bos,
        "reduce": PAIR_REDUCTION["tse"],
    }
    return (summary, scored.select(TSE_ITEM_COLUMNS)) if return_items else summary
