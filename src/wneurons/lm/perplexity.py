"""WikiText-2 perplexity and per-token NLL over non-overlapping windows, under the scoring conventions of
:mod:`wneurons.lm.scoring` (which tokenizes and scores; docs/conventions.md, "Perplexity windows")."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import torch

from wneurons.lm.registry import context_length
from wneurons.lm.scoring import (
    Progress,
    leading_bos,
    model_device,
    resolve_convention,
    run_in_batches,
    target_logprobs,
)

log = logging.getLogger(__name__)

PPL_TOKEN_COLUMNS = ("window", "position", "token_id", "char_start", "char_end", "nll")
# Bytes of float32 logits one forward pass may return: a window of 2,048 tokens over Gemma-3's 262,144-token
# vocabulary is 2 GiB of logits, so batch_size windows at once would need batch_size x 2 GiB (8 GiB at the default
# 4, beyond what a job requests); the batch shrinks to fit, down to one window.
_LOGIT_BYTES_PER_BATCH = 1 << 31


def window_bos_token(tokenizer, window_bos: bool) -> int | None:
    """The BOS id prepended to every window when ``window_bos`` is on (None when off); an error if the
    tokenizer has no BOS."""
    if not window_bos:
        return None
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        raise ValueError(f"window_bos is on but tokenizer {type(tokenizer).__name__} has no BOS token")
    return int(bos)


def perplexity(
    model,
    tokenizer,
    text: str,
    *,
    convention: str = "authors",
    window_bos: bool = False,
    window: int | None = 2048,
    max_tokens: int | None = None,
    batch_size: int = 4,
    return_token_nll: bool = False,
    progress: Callable[[int, int], Any] | None = None,
) -> dict[str, Any]:
    """Perplexity of ``text`` over non-overlapping windows (docs/conventions.md, "Perplexity windows").

    The text is tokenized once into a token stream, with the tokenizer's default special tokens under ``authors``
    (one BOS at the very start where the tokenizer adds one, as the authors' code) and without them otherwise.
    The stream is cut into windows of ``window`` tokens (``None``: the model's context length); the tail shorter
    than a window is dropped, and ``max_tokens`` caps the tokens used to whole windows. Within a window every
    token but the first is predicted. With ``window_bos`` (not under ``authors``, whose stream is the authors'),
    every window gets a BOS prepended as its context, so all ``window`` tokens of it are predicted and the model
    sees ``window + 1`` positions.

    Returns ``{"perplexity": exp(mean_nll), "mean_nll" (nats per token), "n_tokens" (predicted tokens),
    "n_windows", "window", "convention", "window_bos", "bos_prepended", "n_bos_prepended" (windows whose context
    starts with a BOS)}``; with ``return_token_nll=True`` also ``"tokens"``: one row per predicted token with
    :data:`PPL_TOKEN_COLUMNS` (``position`` indexes the stream; character spans -1/-1 for special tokens).
    """
    conv = resolve_convention(convention)
    if window_bos and conv.stream_special_tokens:
        raise ValueError(f"window_bos does not apply to {convention!r} perplexity (one BOS for the whole text)")
    bos = window_bos_token(tokenizer, window_bos)
    context = context_length(model) if window is None or window_bos else None
    window = context - int(window_bos) if window is None else int(window)
    if window < 2:
        raise ValueError(f"window must be >= 2 tokens, got {window}")
    if window_bos and window + 1 > context:
        raise ValueError(f"window {window} + its BOS exceeds the model's context of {context} tokens")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    encoding = tokenizer(
        text,
        add_special_tokens=conv.stream_special_tokens,
        return_offsets_mapping=return_token_nll,
        return_special_tokens_mask=return_token_nll,
        verbose=False,
    )
    ids = np.asarray(encoding["input_ids"], dtype=np.int64)
    usable = len(ids) if max_tokens is None else min(len(ids), int(max_tokens))
    n_windows = usable // window
    if n_windows == 0:
        raise ValueError(
            f"text has {len(ids)} tokens (max_tokens={max_tokens}): not enough for one window of {window} tokens"
        )
    windows = torch.from_numpy(ids[: n_windows * window].reshape(n_windows, window))
    if bos is not None:
        windows = torch.cat([torch.full((n_windows, 1), bos, dtype=windows.dtype), windows], dim=1)
    batch_size = windows_per_batch(model, windows.shape[1] - 1, batch_size)
    device = model_device(model)
    nll = torch.empty(n_windows, windows.shape[1] - 1, dtype=torch.float32)
    tracker = Progress(n_windows, "windows", progress)

    def score_windows(lo: int, hi: int) -> None:
        batch = windows[lo:hi].to(device)
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        nll[lo:hi] = -target_logprobs(logits, batch[:, 1:]).cpu()
        tracker.advance(batch.shape[0])

    with torch.inference_mode():
        run_in_batches(n_windows, batch_size, score_windows)  # a CUDA OOM halves the batch and retries it
    token_nll = nll.reshape(-1).numpy()
    mean_nll = float(token_nll.astype(np.float64).mean())
    # Windows whose context starts with a BOS: every one with window_bos; else only the first, where the stream
    # (authors: the tokenizer's defaults) starts with one.
    n_bos = n_windows if bos is not None else leading_bos(tokenizer, [ids[:1]])
    result: dict[str, Any] = {
        "perplexity": math.exp(mean_nll),
        "mean_nll": mean_nll,
        "n_tokens": int(token_nll.size),
        "n_windows": int(n_windows),
        "window": window,
        "convention": convention,
        "window_bos": bool(window_bos),
        "bos_prepended": n_bos > 0,
        "n_bos_prepended": int(n_bos),
    }
    if return_token_nll:
        result["tokens"] = _token_frame(encoding, window, n_windows, first=int(bos is None), nll=token_nll)
    return result


def windows_per_batch(model, positions: int, batch_size: int) -> int:
    """``batch_size``, shrunk so one batch's float32 logits (windows x positions x vocabulary) stay within
    :data:`_LOGIT_BYTES_PER_BATCH`; at least one window."""
    vocab = int(model.get_output_embeddings().weight.shape[0])
    return max(1, min(batch_size, _LOGIT_BYTES_PER_BATCH // (positions * vocab * 4)))


def _token_frame(encoding, window: int, n_windows: int, *, first: int, nll: np.ndarray) -> pl.DataFrame:
    """Per predicted token: window, stream position, id, character span (-1/-1 for special tokens) and NLL.
    ``first``: the first predicted position inside a window (1 without a window BOS, 0 with one)."""
    offsets_in_window = np.arange(first, window, dtype=np.int64)
    position = (np.arange(n_windows, dtype=np.int64)[:, None] * window + offsets_in_window[None, :]).reshape(-1)
    ids = np.asarray(encoding["input_ids"], dtype=np.int64)[position]
    spans = np.asarray(encoding["offset_mapping"], dtype=np.int64).reshape(-1, 2)[position]
    special = np.asarray(encoding["special_tokens_mask"], dtype=bool)[position]
    spans[special] = -1
    return pl.DataFrame(
        {
            "window": pl.Series(position // window, dtype=pl.Int32),
            "position": pl.Series(position, dtype=pl.Int64),
            "token_id": pl.Series(ids, dtype=pl.Int32),
            "char_start": pl.Series(spans[:, 0], dtype=pl.Int32),
            "char_end": pl.Series(spans[:, 1], dtype=pl.Int32),
            "nll": pl.Series(nll, dtype=pl.Float32),
        }
    )
