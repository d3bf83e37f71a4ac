"""The experiment grid: scopes, groups and the condition list per checkpoint."""

from pathlib import Path

import pytest
import yaml

from wneurons.config import validate_config
from wneurons.grid import BENCHMARKS, conditions_for, format_fraction, layer_groups, layers_for_scope

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def config(tmp_path):
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    for name in cfg["data"]:
        cfg["data"][name]["local_dir"] = str(tmp_path)
    return validate_config(cfg, ROOT / "workflow/schemas/config.schema.yaml", ROOT)


def test_layer_groups_cover_every_layer_once():
    for n, size in [(30, 4), (24, 4), (6, 4), (32, 8), (5, 5)]:
        groups = layer_groups(n, size)
        assert [x for g in groups for x in g] == list(range(n))
        assert all(len(g) == size for g in groups[:-1])


def test_scopes(config):
    assert layers_for_scope(config, "llama-3.1-8b", "all") == list(range(32))
    assert layers_for_scope(config, "llama-3.1-8b", "g2") == [4, 5, 6, 7]
    assert layers_for_scope(config, "llama-3.1-8b", "c2") == list(range(8))
    for bad in ("g0", "g9", "x1", "c", "allx"):
        with pytest.raises(ValueError, match="scope"):
            layers_for_scope(config, "llama-3.1-8b", bad)


def test_conditions_final_checkpoint_and_relu(config):
    final = conditions_for(config, "llama-3.1-8b", "main")
    fractions = {format_fraction(p) for p in config["ablation"]["fractions"]}
    assert {c.fraction for c in final if c.scope == "all"} == fractions
    n_random = config["ablation"]["random_trials"]
    assert sum(c.selector == "random" for c in final) == n_random * len(fractions)
    # 8 groups of 4 layers: g1..g8 and c2..c8
    assert {c.scope for c in final if c.scope != "all"} == {f"g{k}" for k in range(1, 9)} | {
        f"c{k}" for k in range(2, 9)
    }
    assert len(set(final)) == len(final)
    ckpt = conditions_for(config, "pythia-1.4b", "step50000")
    assert {c.fraction for c in ckpt} == {format_fraction(p) for p in config["ablation"]["checkpoint_fractions"]}
    assert conditions_for(config, "pythia-70m", "step50000") == []  # no checkpoint_ablations
    assert conditions_for(config, "opt-1.3b", "main") == []  # ReLU: ablate false


def test_adding_a_fraction_only_adds_conditions(config):
    before = set(conditions_for(config, "qwen3-8b-base", "main"))
    config["ablation"]["fractions"].append(10)
    after = set(conditions_for(config, "qwen3-8b-base", "main"))
    assert before < after
    assert {c.fraction for c in after - before} == {"10"}


def test_every_benchmark_of_the_grid_has_a_scorer():
    from wneurons.jobs import BENCHMARKS as SCORED

    assert set(SCORED) == set(BENCHMARKS)
