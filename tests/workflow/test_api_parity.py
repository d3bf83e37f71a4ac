"""The notebook API (wneurons.api) and the workflow give the same numbers on the same items (issue 43): one run of
the tiny project's statistics, clean BLiMP / TSE and one random trial, for the tiny Llama as it is (no BOS) and a
copy whose tokenizer prepends a BOS (as Llama-3.1, Mistral, OPT, Gemma do: every activation window then starts with
one); then the API on the same model files and items. Equal: the WD table and W set, the per-item log-probs (TSE's
means per token), the accuracies, and the random control built with the run's seed with its scores."""

from __future__ import annotations

import json
import subprocess

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from tiny_project import add_model_copy, make_tiny_project, snakemake

from wneurons import api
from wneurons.experiment import paths
from wneurons.experiment.grid import Condition as GridCondition
from wneurons.store.data import wikitext_split
from wneurons.store.io import read_parquet_metadata

pytestmark = pytest.mark.slow

PLAIN, BOS = "tiny-llama", "tiny-llama-bos"
RANDOM = GridCondition("all", "random", "5", 1)  # the tiny config's second random trial at 5%
MATCHED = GridCondition("all", "matched", "5", 0)


def prepend_bos(model_dir) -> None:
    """Make the tokenizer saved in ``model_dir`` prepend its BOS, as BOS-adding tokenizers do."""
    from tokenizers.processors import TemplateProcessing
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    bos = tokenizer.bos_token
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tokenizer.bos_token_id)]
    )
    tokenizer.save_pretrained(model_dir)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The run's root and validated config: statistics and clean BLiMP / TSE of both models, one random trial and
    the matched control of the BOS model."""
    import yaml

    root = tmp_path_factory.mktemp("parity")
    config_path = make_tiny_project(root)
    config = yaml.safe_load(config_path.read_text())
    add_model_copy(root, config, BOS)
    prepend_bos(root / config["models"][BOS]["local_path"])
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    targets = [paths.neurons(m, "main") for m in (PLAIN, BOS)]
    targets += [paths.clean(m, "main", b) for m in (PLAIN, BOS) for b in ("blimp", "tse")]
    targets += [paths.ablation(BOS, "main", RANDOM, b) for b in ("blimp", "tse")]
    targets += [paths.ablation(BOS, "main", MATCHED, "blimp")]
    snakemake(root, "--cores", "2", *targets)
    return root, api.run_config(config_path)


def loaded(root, config, name):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = root / config["models"][name]["local_path"]
    return AutoModelForCausalLM.from_pretrained(where).eval(), AutoTokenizer.from_pretrained(where)


@pytest.mark.parametrize(("name", "bos"), [(PLAIN, False), (BOS, True)])
def test_wd_table_and_w_set_equal_the_runs(run, name, bos):
    root, config = run
    model, tokenizer = loaded(root, config, name)
    neurons = config["neurons"]
    settings = {k: neurons[k] for k in ("window", "max_tokens", "md_pairs", "md_tokens", "seed", "wd_method")}
    text = wikitext_split(root / paths.dataset("wikitext2"), "test")
    table = api.wd_table(model, tokenizer, text, shard_dtype=neurons["shard_dtype"], **settings)
    written = pl.read_parquet(root / paths.neurons(name, "main"))
    assert read_parquet_metadata(root / paths.neurons(name, "main"))["window_bos"] is bos  # the run's own choice
    assert_frame_equal(table, written.select(table.columns))
    percent = config["ablation"]["percents"][0]
    assert api.Condition.top_wd(table, percent) == api.Condition.of_run(config, name, written, "wasserstein", percent)
    if bos:  # the windows' BOS matters: without it the table is another one (what the API gave before)
        other = api.wd_table(model, tokenizer, text, window_bos=False, shard_dtype=neurons["shard_dtype"], **settings)
        assert not other.equals(table)


@pytest.mark.parametrize("name", [PLAIN, BOS])
@pytest.mark.parametrize("benchmark", ["blimp", "tse"])
def test_per_item_log_probs_and_accuracies_equal_the_runs(run, name, benchmark):
    root, config = run
    model, tokenizer = loaded(root, config, name)
    items = api.run_items(config, benchmark, root)
    batch = config["evaluation"]["batch_size"]
    summary, scored = api.score(model, tokenizer, benchmark, items, batch_size=batch)
    assert_frame_equal(scored, api.read_items(config, name, "main", benchmark, workdir=root))
    recorded = json.loads((root / paths.clean(name, "main", benchmark)).read_text())["scores"]
    assert summary == recorded
    good, bad = items["sentence_good"].to_list(), items["sentence_bad"].to_list()
    accuracy = api.pair_accuracy(model, tokenizer, good, bad, benchmark=benchmark, batch_size=batch)
    assert accuracy == recorded["overall"]


def test_the_random_control_with_the_runs_seed_scores_as_the_run(run):
    root, config = run
    model, tokenizer = loaded(root, config, BOS)
    table = pl.read_parquet(root / paths.neurons(BOS, "main"))
    control = api.Condition.of_run(config, BOS, table, "random", float(RANDOM.percent), trial=RANDOM.trial)
    assert control == api.Condition.from_result(root / paths.ablation(BOS, "main", RANDOM, "blimp"))
    assert control != api.Condition.of_run(config, BOS, table, "random", float(RANDOM.percent), trial=0)
    for benchmark in ("blimp", "tse"):
        with api.applied(model, control):
            _, scored = api.score(model, tokenizer, benchmark, api.run_items(config, benchmark, root), batch_size=8)
        done = api.read_items(
            config, BOS, "main", benchmark, selector="random", percent=5, trial=RANDOM.trial, workdir=root
        )
        assert_frame_equal(scored, done)


def test_pair_accuracy_averages_tse_per_token_as_the_workflows_scorer(run):
    """The tiny TSE's good and bad sentences have equal lengths, where a sum and a mean decide alike: here the bad
    ones are made longer, so that summing (what pair_accuracy did for TSE) would call nearly every pair right."""
    root, config = run
    model, tokenizer = loaded(root, config, PLAIN)
    items = api.run_items(config, "tse", root).with_columns(pl.col("sentence_bad") + " that the farmer likes")
    good, bad = items["sentence_good"].to_list(), items["sentence_bad"].to_list()
    summary, _ = api.score(model, tokenizer, "tse", items)
    assert api.pair_accuracy(model, tokenizer, good, bad, benchmark="tse") == summary["overall"]
    assert api.pair_accuracy(model, tokenizer, good, bad, benchmark="blimp") != summary["overall"]


def test_the_matched_control_is_the_runs(run):
    """The search on the BOS model (whose perplexity windows start with a BOS) finds the run's m% and neurons."""
    root, config = run
    model, tokenizer = loaded(root, config, BOS)
    table = pl.read_parquet(root / paths.neurons(BOS, "main"))
    control, record = api.matched_control(model, tokenizer, config, BOS, table, float(MATCHED.percent), workdir=root)
    searched = json.loads((root / paths.matched_search(BOS, "main", "all", MATCHED.percent)).read_text())
    assert (record["percent"], record["converged"]) == (searched["percent"], searched["converged"])
    assert record["relative_gap"] == searched["relative_gap"]
    assert control == api.Condition.from_result(root / paths.ablation(BOS, "main", MATCHED, "blimp"))


# ---------------------------------------------------------------- the CLI beside lm_eval's, on the same run
def test_export_samples_in_lm_evals_shape_read_back_equal_the_items(run, tmp_path, capsys):
    """`wneurons export-samples` writes one lm-eval --log_samples JSONL per task and condition; read back, the counts
    and log-likelihoods are the items parquet's, and each line has exactly lm-eval's keys."""
    from wneurons import cli
    from wneurons.report.samples import TASK_COLUMN, read_samples

    root, config = run
    out = tmp_path / "samples"
    assert cli.main(["export-samples", str(root / "results"), str(out), "-d", str(root)]) == 0
    conditions = [(PLAIN, None), (BOS, None), (BOS, RANDOM)]
    for name, condition in conditions:
        for benchmark in ("blimp", "tse"):
            selector = {} if condition is None else {"selector": "random", "percent": 5, "trial": RANDOM.trial}
            items = api.read_items(config, name, "main", benchmark, workdir=root, **selector)
            folder = paths.clean_items(name, "main", benchmark) if condition is None else None
            folder = folder or paths.ablation_items(name, "main", condition, benchmark)
            folder = out / (root / folder).parent.relative_to(root / "results")
            for (task,), group in items.group_by(TASK_COLUMN[benchmark], maintain_order=True):
                samples = read_samples(folder / f"samples_{benchmark}_{task}.jsonl")
                assert samples.height == group.height > 0
                assert samples["logprob_good"].to_list() == group["logprob_good"].to_list()
                assert samples["logprob_bad"].to_list() == group["logprob_bad"].to_list()
                assert samples["acc"].to_list() == group["correct"].cast(pl.Float64).to_list()
    line = json.loads((next(out.rglob("samples_blimp_*.jsonl"))).read_text().splitlines()[0])
    lm_eval_keys = {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "filter", "metrics"}
    assert set(line) == lm_eval_keys | {"doc_hash", "prompt_hash", "target_hash", "acc"}
    assert line["arguments"]["gen_args_0"] == {"arg_0": "", "arg_1": " " + line["doc"]["sentence_good"]}
    # clean (2 models) and random: 2 BLiMP paradigms and 2 TSE tasks each; matched: BLiMP only
    assert "wrote 14 lm-eval sample files" in capsys.readouterr().out
    assert cli.main(["export-samples", str(root / "nowhere"), str(out)]) == 2


def test_status_counts_done_and_left_as_snakemake_and_list_counts_the_same_scoring_jobs(run):
    """status: done + left = every job of the DAG, and the scores done are the score files the fixture's run wrote;
    list's scoring jobs (from the grid functions) equal the DAG's."""
    from tiny_project import snakemake_command

    from wneurons.cli import listing, progress

    root, config = run
    cmd = snakemake_command(root)
    total = progress.dry_run(cmd, root, force_all=True)
    left = progress.dry_run(cmd, root, force_all=False)
    written = [p for p in (root / "results").rglob("*.json") if p.name != "search.json"]
    assert total["score_clean"] - left["score_clean"] == sum(p.parent.name == "clean" for p in written) == 5
    assert total["score_ablation"] - left["score_ablation"] == sum("ablations" in p.parts for p in written) > 0
    jobs = listing.scoring_jobs(config)
    assert (jobs["clean"], jobs["ablated"], jobs["matched searches"]) == (
        total["score_clean"],
        total["score_ablation"],
        total["matched_search"],
    )
    lines = progress.status_lines(total, left, root, paths.Roots.of(config))
    done = sum(total.values()) - sum(left.values())
    assert lines[0] == f"{done} of {sum(total.values())} jobs done, {sum(left.values())} left"
    assert "running: none (no Snakemake run holds this directory)" in lines


def test_run_limit_caps_the_benchmarks_into_a_results_dir_of_its_own(run):
    """--limit 2: the overrides file merged over the config gives 2 BLiMP pairs per paradigm in results-limit2/."""
    from tiny_project import snakemake_command

    from wneurons.cli.listing import write_limit_file

    root, config = run
    path, line = write_limit_file(config, 2, root)
    assert "evaluation.blimp_pairs_per_paradigm null -> 2" in line and "results in results-limit2/" in line
    target = "results-limit2/tiny-llama/main/clean/blimp.json"
    cmd = snakemake_command(root, "--configfile", str(root / "config.yaml"), str(path), "--cores", "2", target)
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    items = pl.read_parquet(root / "results-limit2/tiny-llama/main/clean/blimp.items.parquet")
    assert items.height == 4 and items["paradigm"].n_unique() == 2  # 2 pairs x 2 paradigms, not 12 x 2
