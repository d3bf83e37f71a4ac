"""hub.stage_ahead (the order and waits of staging) and the explorers' default models, over the paper's config
(pure functions, no Snakemake; the Snakefile's side: tests/workflow/test_hub_stage_ahead.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from wneurons.experiment import targets
from wneurons.experiment.config import ConfigError, validate_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"


@pytest.fixture
def paper(tmp_path) -> dict:
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    for spec in cfg["data"].values():
        spec["local_dir"] = str(tmp_path)
    return validate_config(cfg, SCHEMA, ROOT)


def hub(cfg: dict, **settings) -> dict:
    out = copy.deepcopy(cfg)
    out["hub"] |= settings
    return out


def test_the_final_revision_is_kept_out_of_the_order_or_first_in_it(paper):
    order = targets.staging_order(paper, "pythia-12b")
    assert "step143000" not in order and len(order) == 25  # 26 staged revisions, the final one kept
    assert order[:4] == ["step0", "step16", "step128", "step512"] and order[-1] == "step140000"
    assert targets.staging_order(hub(paper, prune="all"), "pythia-12b")[:2] == ["step143000", "step0"]
    assert targets.staging_order(hub(paper, prune="none"), "pythia-12b") == []


@pytest.mark.parametrize("ahead", [0, 1, 2, 4, 30])
def test_a_model_is_staged_in_stage_ahead_plus_one_lanes_of_one_revision_at_a_time(paper, ahead):
    cfg = hub(paper, stage_ahead=ahead)
    for model in targets.hub_models(cfg):
        order = targets.staging_order(cfg, model)
        waits = {r: targets.staging_waits_for(cfg, model, r) for r in targets.hub_revisions(cfg, model)}
        # Staged at once: the kept revisions and the first ahead + 1 of the order.
        assert [r for r in order if waits[r] is None] == order[: ahead + 1]
        assert all(waits[r] is None for r in targets.hub_revisions(cfg, model) if r not in order)
        # Each revision waits for the one ahead + 1 places before it, and is waited for by at most one: at most
        # ahead + 1 chains, each holding one staged, unpruned revision at a time.
        for i, r in enumerate(order[ahead + 1 :], start=ahead + 1):
            assert waits[r] == order[i - ahead - 1]
        waited = [w for w in waits.values() if w is not None]
        assert len(waited) == len(set(waited))


def test_no_bound_stages_everything_at_once(paper):
    cfg = hub(paper, stage_ahead=None)
    assert all(
        targets.staging_waits_for(cfg, m, r) is None
        for m in targets.hub_models(cfg)
        for r in targets.hub_revisions(cfg, m)
    )


def test_file_targets_order_only_the_revisions_they_name(paper):
    """A target of one checkpoint never waits for revisions nobody asked for; a target of several checkpoints (a
    figure) or a rule name keeps the whole grid's lanes."""
    cfg = hub(paper, stage_ahead=0)
    late = targets.staging_order(cfg, "pythia-1.4b")[5]
    assert targets.staging_waits_for(cfg, "pythia-1.4b", late) is not None  # the grid's lanes: it waits
    scope = targets.staging_scope(cfg, [f"results/pythia-1.4b/{late}/blimp.json"])
    assert scope == {"pythia-1.4b": {late}}
    assert targets.staging_waits_for(cfg, "pythia-1.4b", late, scope) is None
    two = targets.staging_order(cfg, "pythia-1.4b")[4:6]
    scope = targets.staging_scope(cfg, [f"./results/pythia-1.4b/{r}/neurons.parquet" for r in two])
    assert targets.staging_waits_for(cfg, "pythia-1.4b", two[1], scope) == two[0]  # the bound among the named
    for unscoped in ([], ["all"], ["results/figures/figure2b.pdf"], [f"results/pythia-1.4b/{late}", "all"]):
        assert targets.staging_scope(cfg, unscoped) is None


@pytest.mark.parametrize("value", [-1, "two", 1.5])
def test_a_bad_stage_ahead_is_one_line_naming_key_and_value(paper, value):
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg["data"] = paper["data"]
    cfg["hub"]["stage_ahead"] = value
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, SCHEMA, ROOT)
    assert "hub.stage_ahead" in str(err.value) and str(value) in str(err.value) and "\n" not in str(err.value)


def test_explorers_default_to_the_models_of_figures_1_and_5(paper):
    assert targets.explorer_models(paper) == ["pythia-1.4b"]  # Figure 1's and Figure 5's model; not OPT's contrast
    cfg = copy.deepcopy(paper)
    cfg["figures"]["figure1"]["model"] = None
    cfg["figures"]["figure5"]["model"] = "pythia-12b"
    assert targets.explorer_models(cfg) == ["pythia-70m", "pythia-12b"]  # Figure 1 without a model: the first
    cfg["report"]["explorer"]["models"] = []
    assert targets.explorer_models(cfg) == []


def test_the_preflight_checks_free_space_against_the_bounded_peak():
    from wneurons.lm.hub import peak_bytes

    needed = {("m", "final"): 10, ("m", "a"): 5, ("m", "b"): 7, ("m", "c"): 3, ("n", "x"): 4}
    pruned = {"m": ["a", "b", "c"], "n": ["x"]}
    assert peak_bytes(needed, pruned, None) == 29  # everything at once
    assert peak_bytes(needed, pruned, 0) == 10 + 7 + 4  # kept + the largest pruned one, per model
    assert peak_bytes(needed, pruned, 1) == 10 + 7 + 5 + 4
    assert peak_bytes(needed, pruned, 9) == 29
