"""Part-of-speech surprisal (paper §3, Fig. 3d): which word classes carry the added NLL of an ablation.

Each scored (predicted) model token gets the UPOS and dependency label of the spaCy token it overlaps most in
characters; the per-token NLL difference between two conditions (the 1% Wasserstein clamp minus its
perplexity-matched control), shifted by its global mean, is then averaged per UPOS class.

Tags depend on the tokenizer and the text only, so they are computed once per model (from the character spans of
the per-token NLL file, ``{benchmark}.items.parquet`` of ppl) and reused for every revision and condition.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from wneurons.core.uncertainty import MIN_RESAMPLING_UNITS, mean_and_sem

SPECIAL = "SPECIAL"  # a token with no characters in the text (BOS, ...): char_start = -1
UNTAGGED = "X"  # a token that no spaCy token overlaps or contains
# The closed-class UPOS counted as function words (spec §C robustness summary, claims C17): the one definition.
FUNCTION_WORDS = ("DET", "ADP", "AUX", "PART", "PRON", "CCONJ", "SCONJ", "PUNCT")
# Fig. 3d's colours: the classes the paper calls syntactic scaffolding (the function words) vs content.
SCAFFOLDING = FUNCTION_WORDS
CONTENT = ("NOUN", "VERB", "ADJ", "ADV", "PROPN")
NOT_PLOTTED = ("SPACE", UNTAGGED, SPECIAL)


def covering_slices(frame: pl.DataFrame) -> pl.DataFrame:
    """Per window, the smallest character slice [start, end) of the text that covers its tokens (special
    tokens, char_start < 0, ignored): the unit spaCy tags, as in the authors' ``utils/tagging.py``."""
    return (
        frame.filter(pl.col("char_start") >= 0)
        .group_by("window")
        .agg(pl.col("char_start").min().alias("start"), pl.col("char_end").max().alias("end"))
        .sort("window")
    )


def align_tags(
    token_start: np.ndarray,
    token_end: np.ndarray,
    spacy_start: np.ndarray,
    spacy_end: np.ndarray,
    spacy_end_ws: np.ndarray,
) -> np.ndarray:
    """For each model token [token_start, token_end) the index of its spaCy token (int64; -1 untagged, -2 special).

    spaCy tokens are given as sorted, non-overlapping character spans [start, end) with ``end_ws`` the end
    including trailing whitespace. The spaCy token with the largest character overlap wins (the earlier one on a
    tie); a token overlapping none (e.g. a lone space) falls back to the spaCy token whose span with trailing
    whitespace contains its start; a token with char_start < 0 is special.
    """
    a = np.asarray(token_start, dtype=np.int64)
    b = np.asarray(token_end, dtype=np.int64)
    s = np.asarray(spacy_start, dtype=np.int64)
    e = np.asarray(spacy_end, dtype=np.int64)
    if s.size and (np.any(np.diff(s) <= 0) or np.any(s[1:] < e[:-1])):
        raise ValueError("pos: spaCy token spans must be sorted and non-overlapping")
    first = np.searchsorted(e, a, side="right")  # first spaCy token ending after the token starts
    stop = np.searchsorted(s, b, side="left")  # spaCy tokens starting before the token ends
    width = np.maximum(stop - first, 0)
    best = np.full(a.shape, -1, dtype=np.int64)
    best_overlap = np.zeros(a.shape, dtype=np.int64)
    for d in range(int(width.max(initial=0))):  # a model token spans a handful of spaCy tokens at most
        idx = first + d
        live = d < width
        j = np.where(live, idx, 0)
        overlap = np.where(live, np.minimum(b, e[j]) - np.maximum(a, s[j]), 0)
        better = overlap > best_overlap
        best = np.where(better, idx, best)
        best_overlap = np.where(better, overlap, best_overlap)
    fallback = np.full(a.shape, -1, dtype=np.int64)
    if s.size:
        containing = np.searchsorted(s, a, side="right") - 1
        j = np.maximum(containing, 0)
        inside = (containing >= 0) & (a < np.asarray(spacy_end_ws, dtype=np.int64)[j])
        fallback = np.where(inside, j, -1)
    best = np.where(best >= 0, best, fallback)
    return np.where(a < 0, -2, best)


def tag_tokens(frame: pl.DataFrame, text: str, nlp, batch_size: int = 8) -> pl.DataFrame:
    """UPOS and dependency label of every token of ``frame`` (columns window, position, token_id, char_start,
    char_end: the scored token stream), by running ``nlp`` (a spaCy pipeline with tagger, attribute ruler and
    parser) on each window's covering slice of ``text``. Returns ``frame`` with ``upos`` and ``dep`` added."""
    slices = covering_slices(frame)
    starts, ends, ends_ws, upos, dep = [], [], [], [], []
    offsets = slices["start"].to_list()
    texts = (text[lo:hi] for lo, hi in zip(offsets, slices["end"].to_list(), strict=True))
    for offset, doc in zip(offsets, nlp.pipe(texts, batch_size=batch_size), strict=True):
        starts.append(offset + np.fromiter((t.idx for t in doc), np.int64, len(doc)))
        ends.append(starts[-1] + np.fromiter((len(t.text) for t in doc), np.int64, len(doc)))
        ends_ws.append(starts[-1] + np.fromiter((len(t.text_with_ws) for t in doc), np.int64, len(doc)))
        upos += [t.pos_ or UNTAGGED for t in doc]
        dep += [t.dep_ for t in doc]
    cat = lambda parts: np.concatenate(parts) if parts else np.zeros(0, np.int64)  # noqa: E731
    index = align_tags(
        frame["char_start"].to_numpy(), frame["char_end"].to_numpy(), cat(starts), cat(ends), cat(ends_ws)
    )
    labels = np.array([*upos, SPECIAL, UNTAGGED], dtype=object)  # index -1 -> X, -2 -> SPECIAL
    deps = np.array([*dep, "", ""], dtype=object)
    return frame.with_columns(
        upos=pl.Series(labels[index], dtype=pl.String), dep=pl.Series(deps[index], dtype=pl.String)
    )


def shifted_differences(nll_w: np.ndarray, nll_m: np.ndarray) -> tuple[np.ndarray, float]:
    """Δ'_t = Δ_t - g with Δ_t = NLL_W(t) - NLL_M(t) and g = the token-weighted mean of Δ (Fig. 3d's "mean
    shifted by the global difference"); returns (Δ' float64, g)."""
    delta = np.asarray(nll_w, dtype=np.float64) - np.asarray(nll_m, dtype=np.float64)
    g = float(delta.mean())
    return delta - g, g


def surprisal_by_pos(
    tokens: pl.DataFrame, n_boot: int = 1000, seed: int = 0, ci: float = 0.95
) -> tuple[pl.DataFrame, float]:
    """Per UPOS class: n, mean shifted ΔNLL, SEM (ddof=1), a bootstrap CI over windows (the global shift
    recomputed in each resample), and the mean NLL of each condition. ``tokens``: one row per scored token with
    window, upos, nll_w, nll_m, nll_clean (nats). Under MIN_RESAMPLING_UNITS windows the CI is NaN and ``ci_note``
    says why. Returns (table sorted by mean, g)."""
    shifted, g = shifted_differences(tokens["nll_w"].to_numpy(), tokens["nll_m"].to_numpy())
    frame = tokens.with_columns(dnll=pl.Series(shifted))
    table = (
        frame.group_by("upos")
        .agg(
            pl.len().alias("n"),
            pl.col("dnll").mean().alias("mean_shifted_dnll"),
            pl.col("dnll").alias("sem"),  # the values, reduced to their SEM below
            pl.col("nll_w").mean().alias("mean_nll_w"),
            pl.col("nll_m").mean().alias("mean_nll_m"),
            pl.col("nll_clean").mean().alias("mean_nll_clean"),
        )
        .sort("upos")
    )
    # The project's one SEM (NaN for a class with a single token).
    sem = [mean_and_sem(values.to_numpy())[1] for values in table["sem"]]
    table = table.with_columns(sem=pl.Series(sem, dtype=pl.Float64))
    # Bootstrap over windows: per-window sums and counts per class, resampled as whole windows.
    classes = table["upos"].to_list()
    windows, w_index = np.unique(frame["window"].to_numpy(), return_inverse=True)
    c_index = pl.Series(frame["upos"]).replace_strict(classes, list(range(len(classes)))).to_numpy()
    raw = shifted + g
    sums = np.zeros((windows.size, len(classes)))
    counts = np.zeros((windows.size, len(classes)))
    np.add.at(sums, (w_index, c_index), raw)
    np.add.at(counts, (w_index, c_index), 1)
    rng = np.random.default_rng(seed)
    weights = np.zeros((n_boot, windows.size))
    np.add.at(
        weights, (np.repeat(np.arange(n_boot), windows.size), rng.integers(0, windows.size, n_boot * windows.size)), 1
    )
    s_b, n_b = weights @ sums, weights @ counts
    with np.errstate(invalid="ignore", divide="ignore"):
        means = s_b / n_b - (s_b.sum(axis=1) / n_b.sum(axis=1))[:, None]
    alpha = (1 - ci) / 2 * 100
    lo, hi = np.nanpercentile(means, [alpha, 100 - alpha], axis=0)
    note = ""
    if windows.size < MIN_RESAMPLING_UNITS:  # a bootstrap over 4 windows has 35 distinct resamples: no CI
        lo, hi = np.full(len(classes), np.nan), np.full(len(classes), np.nan)
        note = f"no CI from {windows.size} windows (a bootstrap needs {MIN_RESAMPLING_UNITS})"
    table = table.with_columns(ci_lo=pl.Series(lo), ci_hi=pl.Series(hi), g=pl.lit(g), ci_note=pl.lit(note))
    return table.sort("mean_shifted_dnll", descending=True), g
