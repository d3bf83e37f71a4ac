"""What a reader of results/replication.{md,html} sees: the rows decided on the run's models first, "not
applicable" (an analysis the model cannot have) apart from "not run", one line per absent paper model, short cells
with the whole text one click away, and the generated results summary of clean / W / random / matched."""

import json

import numpy as np
import polars as pl
import pytest
from test_claims import make_run

from wneurons.jobs.report import replication_table_job
from wneurons.report.claims import HOLDS, NOT_RUN, claim_rows
from wneurons.report.replication import (
    anchor,
    claims_html,
    claims_markdown,
    paired_comparisons,
    results_summary,
    row_section,
)

W, RANDOM, MATCHED = "all/wasserstein/p1", "all/random/p1", "all/matched/p1"


def section_of(md: str, title: str) -> str:
    start = md.index(f"## {title}")
    end = md.find("\n## ", start + 1)
    return md[start : end if end > 0 else None]


def test_training_claims_on_a_model_without_checkpoints_are_not_applicable(tmp_path):
    run = make_run(tmp_path, {"toy": {"family": "llama"}, "suite": {"family": "gpt_neox"}})
    run.models["suite"]["checkpoints"] = ["step0", "step10"]  # has checkpoints, but no training tables yet
    rows = {(r["id"], r["model"]): r for r in claim_rows(run)}
    toy, suite = rows[("C3", "toy (not in paper)")], rows[("C3", "suite (not in paper)")]
    assert toy["verdict"] == suite["verdict"] == NOT_RUN  # the verdict logic is unchanged
    assert row_section(toy) == "not applicable" and "toy has no training checkpoints" in toy["not_applicable"]
    assert row_section(suite) == "not run"  # it could have them: its files are missing
    assert row_section(rows[("C1", "toy (not in paper)")]) == "not run"  # no neuron table: not run, not n/a
    md = claims_markdown(list(rows.values()), "results")
    assert "| C3 | " in section_of(md, "Not applicable") and "toy (not in paper)" in section_of(md, "Not applicable")
    assert "suite (not in paper)" not in section_of(md, "Not applicable")
    assert "suite (not in paper)" in section_of(md, "Not run")


def test_absent_paper_models_are_one_line_each(tmp_path):
    rows = claim_rows(make_run(tmp_path, {}))
    md = claims_markdown(rows, "results")
    absent = section_of(md, "Paper models not in this run")
    assert "- llama-3.1-8b: C1, C6, C8, C9, C10, C11" in absent and "- pythia-1.4b: C1, C18, " in absent
    assert "is not in this run's config" not in md  # no table row repeats it
    assert section_of(md, "Not run").count("| C") == 1  # only C28: the run has no BLiMP data directory
    assert md.index("## Decided on this run's models") < md.index("## Not enough data") < md.index("## Not run")


def long_row(**extra) -> dict:
    ours = "; ".join(f"blimp W−matched part {i}: 1.37 pts [0.25, 2.42], p = 0.013 (exact McNemar; n = 4000)"
                     for i in range(8))  # fmt: skip
    return {"id": "C11", "claim": "Only 1% W", "model": "smollm2-135m (not in paper)", "paper": "qualitative",
            "ours": ours, "ci": "paired bootstrap", "test": "p < 0.01 " + "x " * 80, "verdict": HOLDS, "note": "",
            "sources": ["results/s/main/paired/blimp.parquet"], **extra}  # fmt: skip


def test_long_cells_are_short_with_the_whole_text_one_click_away():
    row = long_row()
    md = claims_markdown([row], "results")
    line = next(x for x in md.splitlines() if x.startswith("| C11 |"))
    assert len(line) < 450 and " …" in line and f"[details](#{anchor(row)})" in line
    details = section_of(md, "Details")
    assert f'<a id="{anchor(row)}"></a>' in details and row["ours"] in details
    assert "[blimp.parquet](s/main/paired/blimp.parquet)" in details
    page = claims_html([row], {}, "results")
    assert "<script" not in page
    assert f"<details><summary>{row['ours'][:40]}" in page and f"{row['ours']}</details>" in page
    assert f"<tr id='{anchor(row)}'>" in page


def test_run_facts_are_counted_apart_from_the_models_verdicts():
    facts = long_row(id="C27", model="(run)", ours="2 random trials", verdict="does not hold", run_fact=True)
    md = claims_markdown([long_row(), facts], "results")
    assert "On this run's models: holds: 1, does not hold: 0" in md and "Run facts: does not hold: 1" in md
    assert "| C27 |" in section_of(md, "Run facts") and "| C27 |" not in section_of(md, "Decided on this run")


def _items(n: int, correct: np.ndarray) -> pl.DataFrame:
    return pl.DataFrame({"item": np.arange(n), "correct": correct, "paradigm": ["p"] * n,
                         "linguistics_term": ["t"] * n})  # fmt: skip


def test_results_summary_is_the_aggregates_and_the_paired_drops(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    n = 400
    clean = rng.random(n) < 0.8
    outcomes = {W: {0: clean & (rng.random(n) > 0.2)}, MATCHED: {0: clean & (rng.random(n) > 0.03)},
                RANDOM: {t: clean & (rng.random(n) > 0.01) for t in range(3)}}  # fmt: skip
    tables = {k: {t: _items(n, c) for t, c in trials.items()} for k, trials in outcomes.items()}
    paired = paired_comparisons("blimp", _items(n, clean), tables, resamples=200, seed=0)
    conditions = {k: {"percent": 1.0, "scores": {"overall": float(np.mean([c.mean() for c in v.values()]))}}
                  for k, v in outcomes.items()}  # fmt: skip
    conditions[RANDOM]["n_trials"] = 3
    conditions[MATCHED]["matched_percent"] = 35.0
    aggregate = {"revision": "main", "clean": {"overall": float(clean.mean())}, "conditions": conditions}
    run = make_run(tmp_path, {"toy": {"family": "llama", "files": {"blimp": aggregate, "paired_blimp": paired}}})
    (row,) = results_summary(run)
    assert (row["model"], row["benchmark"], row["percent"]) == ("toy", "blimp", 1.0)
    assert row["clean"] == pytest.approx(clean.mean())
    pooled = paired.filter(
        (pl.col("reference") == "clean") & (pl.col("condition") == RANDOM) & (pl.col("trial") == "pooled")
    )
    pooled = pooled.filter(pl.col("group_kind") == "overall").row(0, named=True)
    assert row["random"]["trials"] == 3
    assert (row["random"]["change"], row["random"]["ci_lo"], row["random"]["ci_hi"]) == pytest.approx(
        (pooled["drop"], pooled["ci_lo"], pooled["ci_hi"])
    )
    assert row["wasserstein"]["ci_lo"] < row["wasserstein"]["change"] < row["wasserstein"]["ci_hi"]
    md = claims_markdown(claim_rows(run), "results", summary=[row])
    table = section_of(md, "Results")
    w = row["wasserstein"]
    cell = f"{100 * w['score']:.1f} (drop {100 * w['change']:.1f} [{100 * w['ci_lo']:.1f}, {100 * w['ci_hi']:.1f}])"
    assert f"| toy | blimp | 1% | {100 * clean.mean():.1f} | {cell} |" in table
    assert "; 3 trials" in table and "35% lowest-WD" in table
    assert cell in claims_html([], {}, "results", summary=[row])
    few = make_run(tmp_path / "few", {"toy": {"files": {"blimp": aggregate, "paired_blimp": paired.with_columns(
        ci_lo=pl.lit(float("nan")), ci_hi=pl.lit(float("nan")))}}})  # fmt: skip
    assert results_summary(few)[0]["wasserstein"]["ci_lo"] is None  # no CI from too few items: null, not NaN

    monkeypatch.chdir(tmp_path)  # the job writes the summary beside the claims
    spec = {"models": run.models, "config": run.config, "data": {}}
    replication_table_job(spec, "out/replication.md", "out/replication.json", "out/replication.html")
    saved = json.loads((tmp_path / "out/replication.json").read_text())
    assert saved["summary"][0]["wasserstein"]["change"] == pytest.approx(w["change"])
    assert cell in (tmp_path / "out/replication.md").read_text()
