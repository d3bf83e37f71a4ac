"""The mechanism analyses on the tiny project with the real Snakefile: the pair sample, pair signs, POS tags and
surprisal, the case study, the single-layer ablations and the layerwise table run as cached jobs; their tables
agree with the files they are computed from; a deleted single-layer result is recomputed alone."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
import yaml
from tiny_project import dry_run_jobs, make_tiny_project, snakemake

from wneurons.core.selection import top_percent_indices
from wneurons.experiment import paths
from wneurons.experiment.grid import Condition, format_percent

pytestmark = pytest.mark.slow

MODEL, MAIN = "tiny-llama", "main"
TARGETS = [paths.figure("figure3d"), paths.figure("figure5"), paths.figure("figure6a"), paths.figure("figure7")]


@pytest.fixture(scope="module")
def analyses_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("analyses")
    config_path = make_tiny_project(root)
    config = yaml.safe_load(config_path.read_text())
    percent = config["ablation"]["percents"][0]
    config["figures"] |= {
        "figure5": {"model": MODEL, "layer": 1, "top_k": 4, "seeds": 3, "bins": 20},
        "figure6": {"model": MODEL, "md_percent": 25, "top_k": 5},
        "figure7": {"model": MODEL, "md_percent": 10, "top_k": 4, "ablation_percent": percent},
    }
    config["pairs"] = {"tokens": 64, "max_tokens": 256, "top_k": [3]}
    config["pos"] = {"model": MODEL, "percent": percent, "min_tokens": 1, "n_boot": 50}
    config["ablation"]["single_layers"] = {"models": [MODEL], "percents": [percent], "layers": [0, 2]}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    jobs = dry_run_jobs(root, *TARGETS)
    snakemake(root, "--cores", "2", *TARGETS, timeout=1800)
    return root, jobs


def test_the_analyses_enumerate_their_jobs(analyses_run):
    _, jobs = analyses_run
    for rule in ("pair_sample", "pair_signs", "pos_tags", "pos_surprisal", "case_study", "layerwise"):
        assert jobs[rule] == 1, rule
    # clean + 2 single layers on BLiMP and TSE (layerwise) and the ppl items of clean, W and matched (POS)
    assert jobs["score_ablation"] >= 2 * 2 + 2


def test_composition_is_recomputed_from_the_per_neuron_signs(analyses_run):
    root, _ = analyses_run
    signs = pl.read_parquet(root / paths.pair_signs(MODEL, MAIN))
    comp = pl.read_parquet(root / paths.pair_composition(MODEL, MAIN)).filter(pl.col("percent") == 25)
    assert signs["layer"].n_unique() == 4 and comp.height == 4
    for row in comp.iter_rows(named=True):
        rows = signs.filter(pl.col("layer") == row["layer"])
        chosen = rows[top_percent_indices(rows["md_pairs"].to_numpy(), 25)]
        assert row["n_neurons"] == chosen.height
        assert row["share_nn"] == pytest.approx(chosen["n_nn_at_5"].mean() / 5)
        assert row["share_nn"] + row["share_pn"] + row["share_pp"] == pytest.approx(1.0)


def test_pos_surprisal_covers_every_scored_token_and_is_centred(analyses_run):
    root, _ = analyses_run
    table = pl.read_parquet(root / paths.pos_surprisal(MODEL, MAIN))
    items = pl.read_parquet(root / paths.clean_items(MODEL, MAIN, "ppl"))
    assert table["n"].sum() == items.height
    assert (table["n"] * table["mean_shifted_dnll"]).sum() == pytest.approx(0.0, abs=1e-6)
    tags = pl.read_parquet(root / paths.pos_tags(MODEL))
    assert tags.height == items.height and tags["upos"].null_count() == 0


def test_layerwise_errors_are_clean_minus_ablated_accuracy(analyses_run):
    root, _ = analyses_run
    table = pl.read_parquet(root / paths.layerwise_table(MODEL, MAIN))
    assert table["layer"].to_list() == [0, 2]
    percent = yaml.safe_load((root / "config.yaml").read_text())["ablation"]["percents"][0]
    for row in table.iter_rows(named=True):
        for bench in ("blimp", "tse"):
            clean = pl.read_parquet(root / paths.clean_items(MODEL, MAIN, bench))["correct"].mean()
            single = Condition(f"l{row['layer'] + 1}", "wasserstein", format_percent(percent), 0)
            path = root / paths.ablation_items(MODEL, MAIN, single, bench)
            assert row[f"err_{bench}"] == pytest.approx(clean - pl.read_parquet(path)["correct"].mean())
    case = pl.read_csv(root / paths.case_study_pairs(MODEL, MAIN))
    assert case.height == 4 and np.all(np.diff(case["r"].to_numpy()) <= 0)


def test_a_run_stopped_before_a_single_layer_job_resumes_with_it(analyses_run):
    # What a kill during the l3 BLiMP job leaves (atomic outputs): neither its files nor anything downstream.
    root, _ = analyses_run
    percent = yaml.safe_load((root / "config.yaml").read_text())["ablation"]["percents"][0]
    before = pl.read_parquet(root / paths.layerwise_table(MODEL, MAIN))
    l3 = Condition("l3", "wasserstein", format_percent(percent), 0)
    for path in (paths.ablation(MODEL, MAIN, l3, "blimp"), paths.ablation_items(MODEL, MAIN, l3, "blimp")):
        (root / path).unlink()
    for path in (paths.layerwise_table(MODEL, MAIN), paths.layerwise_correlations(MODEL, MAIN)):
        (root / path).unlink()
    (root / paths.figure("figure7")).unlink()
    jobs = dry_run_jobs(root, *TARGETS)
    assert jobs["score_ablation"] == 1 and jobs["layerwise"] == 1 and jobs["figure7"] == 1
    assert not {"pair_sample", "pair_signs", "pos_tags", "collect_activations"} & set(jobs)
    snakemake(root, "--cores", "2", *TARGETS)
    after = pl.read_parquet(root / paths.layerwise_table(MODEL, MAIN))
    assert after.equals(before)  # deterministic scoring: the same errors again
