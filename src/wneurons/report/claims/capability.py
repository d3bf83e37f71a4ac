"""Claim C30, the double dissociation of the paper's final version (arXiv 2509.24198 v2): clamping the negative
pre-activations of the 1% Wasserstein neurons (W) hurts grammar more than the perplexity-matched control does,
and the matched control hurts the non-grammatical capability suite more than W does.

Read from the paired tables (``paired/{benchmark}.parquet``, :func:`wneurons.report.replication.paired_comparisons`)
of BLiMP, TSE and the capability suite: the comparison matched -> W over all items, whose ``drop`` is
``acc(matched) - acc(W)``. The claim holds when the drop is above 0 on BLiMP and on TSE and below 0 on the
capability suite, each by its paired test: the 95% paired bootstrap CI excludes 0 on the claimed side and the
exact McNemar test gives p < 0.05. A part whose CI excludes 0 on the other side fails the claim; otherwise a part
that is not decided makes it "not enough data". Registered in :data:`wneurons.report.claims.table.CLAIMS`.
"""

from __future__ import annotations

import polars as pl

from wneurons.experiment.grid import CAPABILITY, condition_key
from wneurons.report.claims.run import FAILS, HOLDS, NO_DATA, NotRun, Outcome, Run, items_needed

PERCENT = 1  # the paper's W condition and its matched control
ALPHA = 0.05
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


def part_verdict(row: dict, direction: int) -> str:
    """holds: CI beyond 0 on the claimed side and p < ALPHA; fails: CI beyond 0 on the other side."""
    lo, hi = direction * row["ci_lo"], direction * row["ci_hi"]
    if min(lo, hi) > 0 and row["p_value"] < ALPHA:
        return HOLDS
    if max(lo, hi) < 0:
        return FAILS
    return NO_DATA


def c30_double_dissociation(run: Run, model: str) -> Outcome:
    parts, verdicts, sources = [], [], []
    for benchmark, direction in DIRECTIONS.items():
        row, src = matched_vs_w(run, model, benchmark)
        sources.append(src)
        verdicts.append(part_verdict(row, direction))
        parts.append(
            f"{benchmark} matched−W: {100 * row['drop']:.3g} pts [{100 * row['ci_lo']:.3g}, "
            f"{100 * row['ci_hi']:.3g}], p = {row['p_value']:.3g} (n = {row['n']}{items_needed(row, ALPHA)})"
        )
    verdict = FAILS if FAILS in verdicts else (HOLDS if all(v == HOLDS for v in verdicts) else NO_DATA)
    return Outcome(
        "; ".join(parts),
        verdict,
        "paired bootstrap 95%",
        "matched−W > 0 on BLiMP and TSE, < 0 on the capability suite; CI excludes 0 and exact McNemar p < 0.05",
        sources,
    )
