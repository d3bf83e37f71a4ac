"""Claim C30, the double dissociation of the paper's final version (arXiv 2509.24198 v2): clamping the negative
pre-activations of the 1% Wasserstein neurons (W) hurts grammar more than the perplexity-matched control does,
and the matched control hurts the non-grammatical capability suite more than W does.

Read from the paired tables (``paired/{benchmark}.parquet``, :func:`wneurons.report.replication.paired_comparisons`)
of BLiMP, TSE and the capability suite: the comparison matched -> W over all items, whose ``drop`` is
``acc(matched) - acc(W)``. The claim holds when the drop is above 0 on BLiMP and on TSE and below 0 on the
capability suite, each by its paired test: the 95% paired bootstrap CI excludes 0 on the claimed side and the
exact McNemar test gives p < 0.05. A part significant on the other side, or whose 90% interval lies inside
±:data:`MARGIN` (two one-sided tests at alpha = 0.05: the two conditions cost the same), fails the claim; otherwise
a part that is not decided makes it "not enough data". Each part is guarded by how well the matched control
matched (:func:`wneurons.report.claims.perturbation.control_match`: the search's achieved vs target perplexity):
a mismatched control decides only what its mismatch works against. Registered in
:data:`wneurons.report.claims.table.CLAIMS`.
"""

from __future__ import annotations

import polars as pl

from wneurons.experiment.grid import CAPABILITY, condition_key
from wneurons.report.claims.perturbation import control_match, guard_by_match
from wneurons.report.claims.run import (
    Margin,
    NotRun,
    Outcome,
    Run,
    combine,
    difference_verdict,
    equivalence_note,
    items_needed,
)

PERCENT = 1  # the paper's W condition and its matched control
# The v2 paper states no test level for C30; 0.05 is the conventional one, as for C14's paired tests.
ALPHA = 0.05
# Equivalence margin of every part (accuracy points): a matched − W difference within ±1 point counts as none.
# The same resolution as C11's (the runs are sized for 1 point); the capability suite's accuracies are read in
# the same points.
MARGIN = Margin(0.01, ALPHA, "the 1-point resolution the runs are sized for, as C11's")
# Benchmark -> the claimed sign of acc(matched) - acc(W): W worse on grammar, matched worse on capabilities.
DIRECTIONS = {"blimp": 1, "tse": 1, CAPABILITY: -1}


def matched_vs_w(run: Run, model: str, benchmark: str) -> tuple[dict, str]:
    """The overall paired row matched -> W at :data:`PERCENT` of one benchmark, and its file."""
    frame, src = run.parquet(model, f"paired_{benchmark}", ("reference", "condition", "group_kind", "drop"))
    rows = frame.filter(
        (pl.col("reference") == condition_key("all", "matched", PERCENT))
        & (pl.col("condition") == condition_key("all", "wasserstein", PERCENT))
        & (pl.col("group_kind") == "overall")
    )
    if rows.height != 1:
        raise NotRun(f"{src}: no overall paired comparison matched -> W at {PERCENT}%")
    return rows.row(0, named=True), src


def c30_double_dissociation(run: Run, model: str) -> Outcome:
    text, parts, sources = [], {}, []
    state, match_words = control_match(run, model, PERCENT)
    # A run without the model's perplexity results cannot say how its control matched; C30 (unlike C11, whose
    # spec needs the reach) then reads the comparisons as they are, and the row says the match is unknown.
    guard = "matched" if state == "unknown" else state
    for benchmark, direction in DIRECTIONS.items():
        row, src = matched_vs_w(run, model, benchmark)
        sources.append(src)
        part = guard_by_match(difference_verdict(row, MARGIN, direction), guard, w_hurts_more=direction > 0)
        parts[f"{benchmark} matched−W"] = part
        text.append(
            f"{benchmark} matched−W: {100 * row['drop']:.3g} pts [{100 * row['ci_lo']:.3g}, "
            f"{100 * row['ci_hi']:.3g}], p = {row['p_value']:.3g} (n = {row['n']}{items_needed(row, ALPHA)}); "
            f"{part.text}"
        )
    return Outcome(
        f"{match_words}; " + "; ".join(text),
        combine([p.verdict for p in parts.values()]),
        "paired bootstrap 95% (one trial: exact)",
        f"matched−W > 0 on BLiMP and TSE, < 0 on the capability suite: CI excludes 0 and exact McNemar p < {ALPHA:g}; "
        f"equivalent within {MARGIN.words()} (TOST, α = {ALPHA:g}) does not hold; a mismatched control decides "
        "only against its mismatch",
        sources,
        note=equivalence_note(parts, MARGIN.words()),
        margin=MARGIN.words(),
        alpha=ALPHA,
    )
