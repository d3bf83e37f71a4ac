"""The real Snakefile end to end on a tiny offline project: every rule runs, results carry provenance, and the
grid grows incrementally (new percents / MD settings rerun only what they change); shards are deleted once read,
checkpoints ablate the final revision's cohort, single-layer scopes enumerate one job per layer and benchmark."""

from __future__ import annotations

import hashlib
import json
import re

import polars as pl
import pytest
import yaml
from tiny_project import SCORED_BENCHMARKS as BENCHMARKS
from tiny_project import dry_run_jobs, make_tiny_project, snakemake, tiny_grid

from wneurons.core.selection import select_neurons
from wneurons.experiment import paths
from wneurons.experiment.grid import Condition, conditions_for

pytestmark = pytest.mark.slow

MODEL, MAIN = "tiny-llama", "main"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    make_tiny_project(root)
    snakemake(root, "--cores", "2", "all")
    return root


def test_all_results_written_with_provenance(tiny_run):
    for bench in BENCHMARKS:
        result = json.loads((tiny_run / paths.aggregate(MODEL, MAIN, bench)).read_text())
        assert result["model"] == "tiny-llama" and result["revision"] == "main"
        prov = result["provenance"]
        for key in ("data_sha256", "convention", "wneurons_version", "revision"):
            assert prov[key] is not None
        keys = set(result["conditions"])
        assert {
            "all/wasserstein/p5",
            "all/random/p5",
            "all/matched/p5",
            "g1/wasserstein/p5",
            "c2/wasserstein/p5",
        } <= keys
        rnd = result["conditions"]["all/random/p5"]
        assert rnd["n_trials"] == 2 and len(rnd["trials"]) == 2 and rnd["seeds"] == [0, 1]
        assert "matched_percent" in result["conditions"]["all/matched/p5"]
        for cond in result["conditions"].values():  # per-layer counts, count rule and cohort in every condition
            assert cond["cohort_source"] == "main" and cond["count_rule"] == "authors"
            assert set(cond["neurons_per_layer"]) == {str(layer) for layer in cond["layers"]}
    # the matched control's gap is the one ppl.json shows: the search scored the ppl job's own stream
    ppl = json.loads((tiny_run / paths.aggregate(MODEL, MAIN, "ppl")).read_text())["conditions"]
    search = json.loads((tiny_run / paths.matched_search(MODEL, MAIN, "all", "5")).read_text())
    gap = abs(ppl["all/matched/p5"]["scores"]["perplexity"] / ppl["all/wasserstein/p5"]["scores"]["perplexity"] - 1)
    assert ppl["all/matched/p5"]["matched_gap"] == pytest.approx(gap) == pytest.approx(search["relative_gap"])
    # matched: within the perplexity tolerance as this file shows it, and the search's own verdict (which also
    # needs the control's NLL increase within ablation.matched.nll_increase_tolerance of W's)
    assert ppl["all/matched/p5"]["matched_converged"] == (search["converged"] and gap <= 0.05)
    assert (tiny_run / paths.neurons(MODEL, MAIN)).stat().st_size > 0
    for fig in (
        paths.figure("figure1"),
        paths.figure("figure2a"),
        paths.figure("figure3", MODEL, MAIN),
        paths.figure("figure4", MODEL, MAIN),
    ):
        assert (tiny_run / fig).stat().st_size > 0


ITEM_COLUMNS = {
    "blimp": ["item", "paradigm", "linguistics_term", "field", "logprob_good", "logprob_bad", "correct", "tie"],
    "tse": [
        "item", "task", "family", "condition", "logprob_good", "logprob_bad", "logprob_intrusive", "correct", "tie"
    ],
    "ppl": ["window", "position", "token_id", "char_start", "char_end", "nll"],
}  # fmt: skip


def test_per_item_results_beside_every_scoring_json(tiny_run):
    import polars as pl

    from wneurons.store.io import read_parquet_metadata

    conditions = conditions_for(tiny_grid(tiny_run), MODEL, MAIN)
    assert len(conditions) == 7  # wasserstein, 2 random, matched, g1, g2, c2
    scored = [(paths.clean(MODEL, MAIN, b), paths.clean_items(MODEL, MAIN, b)) for b in BENCHMARKS]
    for c in conditions:
        scored += [(paths.ablation(MODEL, MAIN, c, b), paths.ablation_items(MODEL, MAIN, c, b)) for b in BENCHMARKS]
    every = Condition("*", "*", "*", "*")
    on_disk = [*tiny_run.glob(paths.clean(MODEL, MAIN, "*")), *tiny_run.glob(paths.ablation(MODEL, MAIN, every, "*"))]
    assert sorted(str(p.relative_to(tiny_run)) for p in on_disk) == sorted(j for j, _ in scored)
    for json_path, items_path in scored:
        result = json.loads((tiny_run / json_path).read_text())
        bench, scores = result["benchmark"], result["scores"]
        assert json_path.endswith(f"/{bench}.json")
        items_path = tiny_run / items_path
        items = pl.read_parquet(items_path)
        assert items.columns == ITEM_COLUMNS[bench], items_path
        meta = read_parquet_metadata(items_path)
        # The tiny tokenizer adds no special tokens: `authors` prepends nothing; the family comes from the model.
        assert meta["convention"] == result["provenance"]["convention"] == scores["convention"] == "authors"
        assert meta["bos_prepended"] is False and scores["bos_prepended"] is False
        assert meta["family"] == "llama" and meta["data_sha256"] == result["provenance"]["data_sha256"]
        if bench == "ppl":
            assert items.height == scores["n_tokens"] and scores["window_bos"] is False
            assert abs(items["nll"].cast(pl.Float64).mean() - scores["mean_nll"]) < 1e-5
        else:
            assert items.height == scores.get("n_pairs", scores.get("n_items"))
            assert abs(items["correct"].mean() - scores["overall"]) < 1e-12
            assert items["tie"].sum() == scores["n_ties"]


def test_nothing_left_to_do_after_a_complete_run(tiny_run):
    assert dry_run_jobs(tiny_run) == {}


def test_paired_tables_claims_table_explorer_and_report(tiny_run):
    import polars as pl

    # The paired drop of W vs clean is the difference of the two per-item files' accuracies.
    clean = pl.read_parquet(tiny_run / paths.clean_items(MODEL, MAIN, "blimp"))
    w_condition = Condition("all", "wasserstein", "5", 0)
    w = pl.read_parquet(tiny_run / paths.ablation_items(MODEL, MAIN, w_condition, "blimp"))
    paired = pl.read_parquet(tiny_run / paths.paired(MODEL, MAIN, "blimp"))
    row = paired.filter(
        (pl.col("reference") == "clean") & (pl.col("condition") == "all/wasserstein/p5") & (pl.col("group") == "all")
    ).row(0, named=True)
    assert row["drop"] == pytest.approx(clean["correct"].mean() - w["correct"].mean())
    vs_random = paired.filter((pl.col("reference") == "all/random/p5") & (pl.col("group") == "all"))
    assert sorted(vs_random["trial"]) == ["pooled", "t0", "t1"]
    # The perplexity ratio over windows reproduces ppl.json's two perplexities.
    ppl = json.loads((tiny_run / paths.aggregate(MODEL, MAIN, "ppl")).read_text())
    ratio = ppl["conditions"]["all/wasserstein/p5"]["scores"]["perplexity"] / ppl["clean"]["perplexity"]
    ppl_paired = pl.read_parquet(tiny_run / paths.paired(MODEL, MAIN, "ppl"))
    w_ppl = ppl_paired.filter((pl.col("reference") == "clean") & (pl.col("condition") == "all/wasserstein/p5"))
    assert w_ppl["ratio"][0] == pytest.approx(ratio, rel=1e-4)
    # Every claim has a row; the run's own model is checked where the claim applies to it.
    claims = json.loads((tiny_run / paths.replication_json()).read_text())["claims"]
    assert {r["id"] for r in claims} == {f"C{i}" for i in range(1, 31)}
    ours = {r["id"]: r for r in claims if r["model"] == "tiny-llama (not in paper)"}
    assert ours["C1"]["verdict"] != "not run" and ours["C11"]["verdict"] == "not run"  # C11 is about 1%: not run
    assert "| C27 |" in (tiny_run / paths.replication_md()).read_text()
    # The explorer: one page per listed neuron (top 5 of each of 4 layers) and the one-file bundle.
    pages = sorted(p.name for p in (tiny_run / paths.explorer(MODEL, MAIN)).glob("*.html"))
    assert len(pages) == 4 * 5 + 1 and "index.html" in pages
    assert (tiny_run / paths.explorer_bundle(MODEL, MAIN)).stat().st_size > 0
    page = (tiny_run / paths.explorer(MODEL, MAIN) / pages[0]).read_text()
    assert page.count("<tr class='gate-negative'>") == 2  # a gated MLP: its four gate x up sign cases
    # The single-file report with the claims table and the explorer in it.
    snakemake(tiny_run, "--report", paths.report())
    report = (tiny_run / paths.report()).read_text()
    assert "replication.html" in report and "explorer.html" in report


def _edit_config(root, edit):
    path = root / "config.yaml"
    config = yaml.safe_load(path.read_text())
    original = path.read_text()
    edit(config)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return original


def test_adding_a_percent_runs_only_the_new_conditions(tiny_run):
    original = _edit_config(tiny_run, lambda c: c["ablation"]["percents"].append(10))
    try:
        jobs = dry_run_jobs(tiny_run)
    finally:
        (tiny_run / "config.yaml").write_text(original)
    # new: wasserstein + 2 random + matched, on 3 benchmarks; one search; re-aggregation and figures
    assert jobs["score_ablation"] == 4 * 3
    assert jobs["matched_search"] == 1
    for rule in ("collect_activations", "neuron_stats", "score_clean", "fetch_data"):
        assert rule not in jobs


def test_changing_md_pairs_recomputes_the_statistics_of_that_revision(tiny_run):
    original = _edit_config(tiny_run, lambda c: c["neurons"].update(md_pairs=8))
    try:
        jobs = dry_run_jobs(tiny_run)
    finally:
        (tiny_run / "config.yaml").write_text(original)
    assert jobs.get("neuron_stats") == 1
    # the shards were deleted after the statistics (neurons.keep_shards: false), so they are collected again
    assert jobs.get("collect_activations") == 1


def test_shards_are_deleted_after_statistics_and_nothing_reruns(tiny_run):
    assert not (tiny_run / paths.shards(MODEL, MAIN)).exists()  # temp(): gone once read
    kept = tiny_run / paths.kept_shards(MODEL, MAIN)  # Figure 1's hard links
    assert (kept / "index.json").is_file() and len(list(kept.glob("*.npy"))) == 2 * 4
    assert dry_run_jobs(tiny_run) == {}


# A model with checkpoints names every revision by its step (training dynamics need the step of each), the final
# one included: the same weights as `main`, under the name a checkpoint suite would give them.
FINAL_STEP = "step2"


def _with_checkpoint(selection):
    def edit(config):
        config["models"]["tiny-llama"] |= {
            "final_revision": FINAL_STEP,
            "checkpoints": ["step1"],
            "checkpoint_ablations": True,
        }
        config["ablation"] |= {"checkpoint_percents": [5], "checkpoint_selection": selection}

    return edit


def test_checkpoint_ablations_use_the_final_revisions_neurons(tiny_run):
    target = paths.ablation(MODEL, "step1", Condition("all", "wasserstein", "5", 0), "blimp")
    original = _edit_config(tiny_run, _with_checkpoint("final"))
    try:
        # no collection at step1: the final revision's table (collected for it, once)
        assert dry_run_jobs(tiny_run, target) == {"collect_activations": 1, "neuron_stats": 1, "score_ablation": 1}
        snakemake(tiny_run, "--cores", "2", target)
        _edit_config(tiny_run, _with_checkpoint("own"))
        other = target.replace("blimp", "tse")
        assert dry_run_jobs(tiny_run, other) == {"collect_activations": 1, "neuron_stats": 1, "score_ablation": 1}
    finally:
        (tiny_run / "config.yaml").write_text(original)
    final_table = tiny_run / paths.neurons(MODEL, FINAL_STEP)
    assert not (tiny_run / paths.neurons(MODEL, "step1")).exists()
    result = json.loads((tiny_run / target).read_text())
    assert result["condition"]["cohort_source"] == FINAL_STEP
    assert result["provenance"]["neurons_sha256"] == hashlib.sha256(final_table.read_bytes()).hexdigest()
    expected = select_neurons(pl.read_parquet(final_table), "wasserstein", 5, list(range(4)))
    assert result["condition"]["neurons"] == {str(k): v.tolist() for k, v in expected.items()}


def _single_layer_jsons(layers: range) -> dict[str, str]:
    """Scored JSON of each single-layer scope (``l1`` = layer index 0) and benchmark -> its scope."""
    return {
        paths.ablation(MODEL, MAIN, Condition(f"l{k + 1}", "wasserstein", "5", 0), b): f"l{k + 1}"
        for k in layers
        for b in BENCHMARKS
    }


def _single_layer_outputs(root, layers):
    """The single-layer ablation JSONs (of any of the model's 4 layers) that a dry run of `all` would write."""

    def edit(config):
        config["ablation"]["single_layers"] = {"models": [MODEL], "percents": [5], "layers": layers}

    original = _edit_config(root, edit)
    try:
        out = snakemake(root, "-n", "all").stdout
    finally:
        (root / "config.yaml").write_text(original)
    outputs = {o for line in re.findall(r"output: (.+)", out) for o in line.split(", ")}
    return sorted(outputs & set(_single_layer_jsons(range(4))))


def test_single_layer_scopes_enumerate_one_job_per_layer_and_benchmark(tiny_run):
    outputs = _single_layer_outputs(tiny_run, None)
    assert outputs == sorted(_single_layer_jsons(range(4)))
    subset = _single_layer_outputs(tiny_run, [0, 2])
    scopes = _single_layer_jsons(range(4))
    assert {scopes[o] for o in subset} == {"l1", "l3"} and len(subset) == 6


def test_jobs_that_unlock_ablations_start_before_clean_scoring_ready_with_them(tmp_path):
    """On 2 cores, with the data fetched, the two-thread statistics pass and the one-thread clean scorings are ready
    together: the statistics pass starts first (its priority), not after the clean scorings left it no two cores."""
    make_tiny_project(tmp_path)
    snakemake(tmp_path, "--cores", "2", *(paths.dataset(name) for name in ("blimp", "tse", "wikitext2")))
    clean = [paths.clean(MODEL, MAIN, bench) for bench in BENCHMARKS]
    out = snakemake(tmp_path, "--cores", "2", paths.neurons(MODEL, MAIN), *clean).stderr
    started = re.findall(r"^\s*(?:local)?rule (\w+):$", out, flags=re.MULTILINE)
    assert started[:2] == ["collect_activations", "neuron_stats"], started
