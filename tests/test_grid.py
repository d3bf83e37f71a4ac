"""The experiment grid: scopes, groups, the condition list per checkpoint, cohorts, collected layers, disk."""

from pathlib import Path

import pytest
import yaml

from wneurons.experiment.config import validate_config
from wneurons.experiment.grid import (
    BENCHMARKS,
    cohort_revision,
    collected_layers,
    conditions_for,
    format_percent,
    layer_groups,
    layers_for_scope,
    shard_bytes,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def config(tmp_path):
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    for name in cfg["data"]:
        cfg["data"][name]["local_dir"] = str(tmp_path)
    return validate_config(cfg, ROOT / "workflow/schemas/config.schema.yaml", ROOT)


def test_layer_groups_cover_every_layer_once():
    for n, size in [(30, 4), (24, 4), (6, 4), (32, 8), (5, 5), (30, [2, 4]), (7, [3, 1, 2]), (4, [6])]:
        groups = layer_groups(n, size)
        assert [x for g in groups for x in g] == list(range(n))
    assert layer_groups(10, 4) == layer_groups(10, [4]) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert layer_groups(10, [2, 4]) == [[0, 1], [2, 3, 4, 5], [6, 7, 8, 9]]
    assert layer_groups(9, [1, 2, 3]) == [[0], [1, 2], [3, 4, 5], [6, 7, 8]]
    with pytest.raises(ValueError, match="sizes"):
        layer_groups(4, [])


def test_scopes(config):
    assert layers_for_scope(config, "llama-3.1-8b", "all") == list(range(32))
    assert layers_for_scope(config, "llama-3.1-8b", "g2") == [4, 5, 6, 7]
    assert layers_for_scope(config, "llama-3.1-8b", "c2") == list(range(8))
    assert layers_for_scope(config, "llama-3.1-8b", "l1") == [0]  # 1-based in paths
    assert layers_for_scope(config, "llama-3.1-8b", "l32") == [31]
    for bad in ("g0", "g9", "x1", "c", "allx", "l0", "l33", "l"):
        with pytest.raises(ValueError, match="scope"):
            layers_for_scope(config, "llama-3.1-8b", bad)
    config["ablation"]["layer_groups"]["size"] = [2, 6]
    assert layers_for_scope(config, "llama-3.1-8b", "g2") == list(range(2, 8))
    assert layers_for_scope(config, "llama-3.1-8b", "g6") == list(range(26, 32))


def test_conditions_final_checkpoint_and_relu(config):
    final = conditions_for(config, "llama-3.1-8b", "main")
    percents = {format_percent(p) for p in config["ablation"]["percents"]}
    assert {c.percent for c in final if c.scope == "all"} == percents
    n_random = config["ablation"]["random_trials"]
    assert sum(c.selector == "random" for c in final) == n_random * len(percents)
    # 8 groups of 4 layers: g1..g8 and c2..c8; and the paper's Fig. 7b-d: every layer alone at 1%
    assert {c.scope for c in final if c.scope[0] in "gc"} == {f"g{k}" for k in range(1, 9)} | {
        f"c{k}" for k in range(2, 9)
    }
    single = [c for c in final if c.scope[0] == "l"]
    assert sorted(int(c.scope[1:]) for c in single) == list(range(1, 33))
    assert {(c.selector, c.percent, c.trial) for c in single} == {("wasserstein", "1", 0)}
    assert len(set(final)) == len(final)
    assert not any(c.scope[0] == "l" for c in conditions_for(config, "mistral-7b-v0.3", "main"))
    ckpt = conditions_for(config, "pythia-1.4b", "step50000")
    assert {c.percent for c in ckpt} == {format_percent(p) for p in config["ablation"]["checkpoint_percents"]}
    assert {c.scope for c in ckpt} == {"all"}
    assert conditions_for(config, "pythia-70m", "step50000") == []  # no checkpoint_ablations
    assert conditions_for(config, "opt-1.3b", "main") == []  # ReLU: ablate false


def test_single_layer_subset(config):
    config["ablation"]["single_layers"] |= {"layers": [0, 5], "percents": [1, 2]}
    single = {(c.scope, c.percent) for c in conditions_for(config, "llama-3.1-8b", "main") if c.scope[0] == "l"}
    assert single == {("l1", "1"), ("l6", "1"), ("l1", "2"), ("l6", "2")}


def test_adding_a_percent_only_adds_conditions(config):
    before = set(conditions_for(config, "qwen3-8b-base", "main"))
    config["ablation"]["percents"].append(10)
    after = set(conditions_for(config, "qwen3-8b-base", "main"))
    assert before < after
    assert {c.percent for c in after - before} == {"10"}


def test_checkpoint_cohort_and_collected_layers(config):
    assert cohort_revision(config, "pythia-1.4b", "step512") == "step143000"
    assert cohort_revision(config, "pythia-1.4b", "step143000") == "step143000"
    config["ablation"]["checkpoint_selection"] = "own"
    assert cohort_revision(config, "pythia-1.4b", "step512") == "step512"
    # the paper config: checkpoints collect layer index 1 only, except pythia-1.4b (cohort WD over all layers)
    assert collected_layers(config, "pythia-70m", "step512") == [1]
    assert collected_layers(config, "pythia-70m", "step143000") is None
    assert collected_layers(config, "pythia-1.4b", "step512") is None


def test_shard_bytes_is_layers_times_width_times_tokens(config):
    # Pythia-12B: 36 layers x 20480 neurons x 304,128 tokens (148 windows of 2048) x 2 bytes + MD inputs
    tokens = 305_000 // 2048 * 2048
    y = 36 * 20480 * tokens * 2
    assert shard_bytes(config, "pythia-12b", None) == y + 36 * 2000 * 5120 * 4
    assert shard_bytes(config, "pythia-12b", [1]) == (y + 36 * 2000 * 5120 * 4) // 36


def test_every_benchmark_of_the_grid_has_a_scorer():
    from wneurons.lm.benchmarks import BENCHMARKS as SCORED

    assert set(SCORED) == set(BENCHMARKS)
