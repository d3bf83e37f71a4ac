"""The path table and the targets of `all`, over the demo and the paper's configs (pure functions, no Snakemake)."""

import inspect
import re
from pathlib import Path

import pytest
import yaml

from wneurons.experiment import grid, paths, targets
from wneurons.experiment.config import ConfigError, validate_config

ROOT = Path(__file__).resolve().parents[1]


def _config(name: str, data_dir: Path) -> dict:
    cfg = yaml.safe_load((ROOT / "config" / name).read_text())
    for spec in cfg["data"].values():
        spec["local_dir"] = str(data_dir)
    return validate_config(cfg, ROOT / "workflow/schemas/config.schema.yaml", ROOT)


@pytest.fixture
def paper(tmp_path):
    return _config("config.yaml", tmp_path)


@pytest.fixture
def demo(tmp_path):
    return _config("demo.yaml", tmp_path)


def _templates() -> dict[str, str]:
    """Every entry of the path table, called with its parameter names as Snakemake wildcards."""
    condition = grid.Condition("{scope}", "{selector}", "{percent}", "{trial}")
    out = {}
    for name, fn in inspect.getmembers(paths, inspect.isfunction):
        skipped = ("log_file", "benchmark_file", "benchmark_data", "roots", "use_roots", "roots_of")
        if fn.__module__ != paths.__name__ or name in skipped:
            continue
        required = [p.name for p in inspect.signature(fn).parameters.values() if p.default is inspect.Parameter.empty]
        args = [condition if p == "condition" else f"{{{p}}}" for p in required]
        out[name] = fn(*args)
    return out


def test_every_path_is_spelled_under_a_root_and_no_two_entries_coincide():
    table = _templates()
    assert len(set(table.values())) == len(table), "two entries give the same path"
    for name, path in table.items():
        assert path.split("/")[0] in (paths.RESULTS, paths.RESOURCES), (name, path)
    assert table["neurons"] == "results/{model}/{revision}/neurons.parquet"
    condition = "{scope}/{selector}/p{percent}/t{trial}"
    assert table["ablation"] == f"results/{{model}}/{{revision}}/ablations/{condition}/{{benchmark}}.json"
    assert table["dataset"] == "resources/data/{name}" and paths.benchmark_data("ppl") == "resources/data/wikitext2"
    assert paths.log_file("score_clean", "{model}") == "logs/score_clean/{model}.log"
    assert paths.benchmark_file("replication_table") == "benchmarks/replication_table.tsv"


def test_moving_the_results_root_moves_every_result():
    before = _templates()
    with paths.roots_of({"results_dir": "elsewhere/out"}):  # the config key results_dir
        after = _templates()
    for name, path in before.items():
        if path.startswith("results/"):
            assert after[name] == "elsewhere/out/" + path.removeprefix("results/"), name
        else:
            assert after[name] == path, name


def test_a_condition_path_round_trips_through_the_condition_key():
    c = grid.Condition("g2", "random", grid.format_percent(0.5), 3)
    path = paths.ablation("m", "main", c, "tse")
    assert path == "results/m/main/ablations/g2/random/p0.5/t3/tse.json"
    scope, selector, percent, _ = path.split("/")[4:8]
    key = grid.condition_key(scope, selector, percent[1:])
    assert grid.parse_condition_key(key) == (c.scope, c.selector, c.percent)


def test_the_snakefile_wildcards_cover_the_grid_vocabularies():
    text = (ROOT / "Snakefile").read_text()
    for wildcard, vocabulary in (("benchmark", "BENCHMARKS"), ("dataset", "DATASETS"), ("selector", "SELECTORS")):
        assert f'{wildcard}="|".join(grid.{vocabulary})' in text
    assert set(grid.DATASETS) == set(grid.BENCHMARK_DATASETS.values()) == {"blimp", "tse", "wikitext2"}
    # The capability suite reads lm-eval tasks the workflow writes or stages (paths.capability_tasks), no data set.
    assert set(grid.BENCHMARK_DATASETS) == set(grid.BENCHMARKS) - {grid.CAPABILITY}
    rules = "".join(p.read_text() for p in (ROOT / "workflow/rules").glob("*.smk"))
    assert "{fraction}" not in text + rules and re.search(r'percent="', text)


def test_model_lists_of_the_paper_grid(paper):
    assert targets.revisions(paper, "pythia-1.4b")[0] == targets.final_revision(paper, "pythia-1.4b") == "step143000"
    pairs = targets.model_revisions(paper)
    assert len(pairs) == len(set(pairs)) == sum(len(targets.revisions(paper, m)) for m in paper["models"])
    assert set(targets.training_models(paper)) == {m for m, s in paper["models"].items() if s["checkpoints"]}
    assert targets.ablation_models(paper) == targets.pair_models(paper) == ["pythia-1.4b"]
    steps = [int(r.removeprefix("step")) for r in targets.dynamics_revisions(paper, "pythia-1.4b")]
    assert steps == sorted(steps) and steps[-1] == 143000
    assert targets.ablation_revisions(paper, "pythia-1.4b")[-1] == "step143000"
    assert targets.figure1_models(paper) == [paper["figures"]["figure1"]["model"], "opt-1.3b"]
    assert targets.analysis_models(paper) == ["pythia-1.4b", "llama-3.1-8b"]


def test_all_targets_of_the_paper_grid(paper):
    every = targets.all_targets(paper)
    assert len(every) == len(set(every))
    pruned = targets.prune_targets(paper)  # last: markers beside the staged hub revisions
    assert pruned and every[-len(pruned) :] == pruned and all(t.startswith(paths.STAGED + "/") for t in pruned)
    every = every[: -len(pruned)]
    assert all(t.startswith(paths.RESULTS + "/") for t in every)
    for model, revision in targets.model_revisions(paper):
        assert paths.neurons(model, revision) in every
        assert {paths.aggregate(model, revision, b) for b in grid.benchmarks_at(paper, model, revision)} <= set(every)
    # Figure 3 per model with ablations (final revision), Figure 4 where layer groups or single layers exist.
    ablated = [m for m, s in paper["models"].items() if s["ablate"]]
    figure3 = [t for t in every if t.startswith(f"{paths.FIGURES}/figure3/")]
    assert sorted(figure3) == sorted(paths.figure("figure3", m, targets.final_revision(paper, m)) for m in ablated)
    assert paths.figure("figure6cd", "pythia-1.4b") in every and paths.figure("figure6b", "pythia-1.4b") in every
    assert {
        paths.figure("figure2b"),
        paths.figure("figure2c"),
        paths.figure("figure2d"),
        paths.figure("figure7"),
        paths.figure("figure3d"),
    } <= set(every)
    assert paths.replication_md() in every and paths.report() not in every  # the report is built after the DAG
    assert every[-len(targets.analysis_targets(paper)) :] == targets.analysis_targets(paper)


def test_all_targets_of_the_demo(demo):
    every = targets.all_targets(demo)
    assert len(every) == len(set(every))
    final = {m: targets.final_revision(demo, m) for m in demo["models"]}
    assert paths.explorer("smollm2-135m", final["smollm2-135m"]) in every
    assert paths.figure("figure6cd", "neox-mini") in every and paths.figure("figure2c") in every
    assert sum(t.endswith("/neurons.parquet") for t in every) == len(targets.model_revisions(demo))
    # the claims table reads the neuron tables and every analysis file the config produces, once each
    claims = targets.claim_inputs(demo)
    assert len(claims) == len(set(claims)) and paths.neurons("neox-mini", final["neox-mini"]) in claims
    produced = targets.produced_analysis_files(demo, "neox-mini")
    assert {"emergence", "cosine_drift", "ablation_vs_wd"} <= set(produced)
    files = targets.claim_files(demo, "neox-mini")
    assert {files[k] for k in produced} <= set(claims)


def test_a_figure7_model_without_single_layers_is_a_config_error(demo):
    demo["figures"]["figure7"]["model"] = "neox-mini"
    demo["ablation"]["single_layers"]["models"] = []
    with pytest.raises(ConfigError, match="figures.figure7.model 'neox-mini' has no single-layer ablations"):
        targets.all_targets(demo)
