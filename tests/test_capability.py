"""The capability suite in the grid (which checkpoints and conditions score it, what data it reads, its paired
statistics), claim C30 on paired tables made from per-item outcomes, and its figure."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from wneurons.experiment import grid, paths, targets
from wneurons.experiment.config import validate_config
from wneurons.experiment.grid import CAPABILITY, condition_key
from wneurons.report.claims import FAILS, HOLDS, NO_DATA, NOT_RUN, Run, claim_rows
from wneurons.report.claims.capability import c30_double_dissociation
from wneurons.report.replication import paired_comparisons

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"
W, MATCHED, RANDOM = (condition_key("all", s, 1) for s in ("wasserstein", "matched", "random"))


def config_of(name: str) -> dict:
    import yaml

    return validate_config(yaml.safe_load((ROOT / "config" / name).read_text()), SCHEMA, ROOT)


def test_the_suite_is_scored_at_final_revisions_under_the_all_layer_conditions():
    demo = config_of("demo.yaml")
    assert grid.benchmarks_at(demo, "smollm2-135m", "main") == list(grid.BENCHMARKS)
    assert CAPABILITY not in grid.benchmarks_at(demo, "neox-mini", "step20")  # a checkpoint
    conditions = grid.conditions_for(demo, "smollm2-135m", "main")
    scored = grid.conditions_scored(demo, "smollm2-135m", "main", CAPABILITY)
    assert {c.scope for c in scored} == {"all"} and len(scored) < len(conditions)
    assert {c.selector for c in scored} == {"wasserstein", "random", "matched"}
    assert grid.conditions_scored(demo, "smollm2-135m", "main", "blimp") == conditions
    demo["evaluation"]["capability"]["layer_scopes"] = True
    assert grid.conditions_scored(demo, "smollm2-135m", "main", CAPABILITY) == conditions
    every = targets.all_targets(demo)
    assert paths.aggregate("smollm2-135m", "main", CAPABILITY) in every
    assert paths.figure("capability", "smollm2-135m", "main") in every
    assert targets.benchmark_input(demo, CAPABILITY) == paths.capability_tasks("wikitext2")
    assert targets.benchmark_input(demo, "ppl") == paths.benchmark_data("ppl")
    # No tasks: no capability result, no figure, no paired table for the claims.
    demo["evaluation"]["capability"]["tasks"] = []
    assert CAPABILITY not in grid.benchmarks_at(demo, "smollm2-135m", "main")
    assert not any("capability" in t for t in targets.all_targets(demo) + targets.claim_inputs(demo))


def test_the_paper_grid_scores_the_hub_suite_from_the_staged_cache():
    paper = config_of("config.yaml")
    from wneurons.store.lmeval_tasks import HUB_SUITE

    assert paper["evaluation"]["capability"]["tasks"] == list(HUB_SUITE)
    assert targets.benchmark_input(paper, CAPABILITY) == paths.capability_tasks("hub")
    assert paths.paired("llama-3.1-8b", "main", CAPABILITY) in targets.claim_inputs(paper)


def items(correct: np.ndarray, tasks=("a", "b")) -> pl.DataFrame:
    n = correct.size
    return pl.DataFrame({"item": np.arange(n), "task": [tasks[i % len(tasks)] for i in range(n)], "correct": correct})


def paired_table(benchmark: str, clean: np.ndarray, w: np.ndarray, matched: np.ndarray) -> pl.DataFrame:
    extra = {"blimp": {"linguistics_term": "t", "paradigm": "p"}, "tse": {"family": "f", "task": "x"}}.get(benchmark)
    frames = {k: items(v) for k, v in (("clean", clean), (W, w), (MATCHED, matched))}
    if extra:
        frames = {k: f.with_columns(**{c: pl.lit(v) for c, v in extra.items()}) for k, f in frames.items()}
    tables = {W: {0: frames[W]}, MATCHED: {0: frames[MATCHED]}}
    return paired_comparisons(benchmark, frames["clean"], tables, resamples=500, seed=0)


def run_with(tmp_path, capability_sign: int) -> Run:
    """BLiMP and TSE: W wrong on 60 of 200 items matched gets right; capability: the other way round (sign +1),
    or W worse there too (sign -1)."""
    n = 200
    clean = np.ones(n, dtype=np.int8)
    w_bad = np.where(np.arange(n) < 60, 0, 1).astype(np.int8)
    files = {}
    for bench in ("blimp", "tse", CAPABILITY):
        w, matched = (w_bad, clean) if bench != CAPABILITY or capability_sign < 0 else (clean, w_bad)
        path = tmp_path / f"paired_{bench}.parquet"
        paired_table(bench, clean, w, matched).write_parquet(path)
        files[f"paired_{bench}"] = path.name
    config = {"random_trials": 10, "percents": [1.0], "resamples": 500, "seed": 0}
    return Run(
        models={"m": {"family": "llama", "params_b": 0.1, "files": files}}, config=config, data={}, root=tmp_path
    )


def test_c30_holds_on_a_double_dissociation_and_fails_on_a_general_damage(tmp_path):
    (tmp_path / "yes").mkdir(), (tmp_path / "no").mkdir()
    holds = c30_double_dissociation(run_with(tmp_path / "yes", +1), "m")
    assert holds.verdict == HOLDS and "capability matched−W: -30 pts" in holds.ours
    assert len(holds.sources) == 3
    assert c30_double_dissociation(run_with(tmp_path / "no", -1), "m").verdict == FAILS


def test_c30_without_a_capability_suite_is_not_run_and_ties_are_not_enough_data(tmp_path):
    run = run_with(tmp_path, +1)
    run.models["m"]["files"].pop(f"paired_{CAPABILITY}")
    rows = [r for r in claim_rows(run) if r["id"] == "C30"]
    assert {r["model"] for r in rows} >= {"llama-3.1-8b", "m (not in paper)"}
    assert all(r["verdict"] == NOT_RUN for r in rows)
    same = np.ones(50, dtype=np.int8)
    paired_table(CAPABILITY, same, same, same).write_parquet(tmp_path / "paired_capability.parquet")
    run.models["m"]["files"][f"paired_{CAPABILITY}"] = "paired_capability.parquet"
    assert c30_double_dissociation(run, "m").verdict == NO_DATA


def test_the_capability_figure_is_drawn_from_aggregates(tmp_path):
    from wneurons.report.figures.capability import accuracy_drops, capability_figure

    def aggregate(clean: float, w: float, matched: float, tasks: bool = False) -> dict:
        conditions = {W: {"scores": {"overall": w}}, MATCHED: {"scores": {"overall": matched}},
                      RANDOM: {"scores": {"overall": clean}, "sem": {"overall": 0.01}}}  # fmt: skip
        out = {"clean": {"overall": clean}, "conditions": conditions}
        if tasks:
            out["clean"]["tasks"] = {"a": {"metrics": {"acc": clean}}}
        return out

    blimp, tse, capability = aggregate(0.8, 0.7, 0.8), aggregate(0.9, 0.8, 0.9), aggregate(0.6, 0.6, 0.5, True)
    drops = dict(accuracy_drops({"blimp": blimp, CAPABILITY: capability}))
    assert list(drops) == [W, RANDOM, MATCHED]
    assert drops[W]["blimp"][0] == pytest.approx(10) and drops[MATCHED][CAPABILITY][0] == pytest.approx(10)
    assert drops[RANDOM]["blimp"] == (0.0, 1.0)
    capability_figure(blimp, tse, capability, tmp_path / "f.png", label="m")
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    json.dumps(drops)
