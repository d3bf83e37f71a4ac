"""The inputs, params and flat resources common.smk binds to the run's config: model inputs, the ablation and
neuron jobs' inputs and params, and the memory and walltime of jobs outside the allocations."""

from pathlib import Path

import pytest
import yaml

from wneurons.experiment import ablations, allocations, grid, model_inputs, neurons, paths
from wneurons.experiment.config import validate_config

ROOT = Path(__file__).resolve().parents[1]


class Wildcards(dict):
    """A job's wildcards as Snakemake gives them: attributes, ``get``, ``keys`` and ``items``."""

    __getattr__ = dict.__getitem__


@pytest.fixture
def config(tmp_path):
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    for name in cfg["data"]:
        cfg["data"][name]["local_dir"] = str(tmp_path)
    cfg = validate_config(cfg, ROOT / "workflow/schemas/config.schema.yaml", ROOT)
    with paths.roots_of(cfg):
        yield cfg


def test_unallocated_jobs_grow_with_attempt_and_stop_at_the_site_limits(config):
    site = allocations.Site()
    assert allocations.unallocated_mem_mb(config, site, {}, 1) == 3000
    assert allocations.unallocated_mem_mb(config, site, {}, 2) == 6000
    params_b = config["models"]["llama-3.1-8b"]["params_b"]
    one = allocations.unallocated_mem_mb(config, site, {"model": "llama-3.1-8b"}, 1)
    assert one == int(3000 + 6000 * params_b)
    assert (
        allocations.unallocated_mem_mb(config, allocations.Site(max_mem_mb=4000), {"model": "llama-3.1-8b"}, 3) == 4000
    )
    assert allocations.unallocated_minutes(config, site, {}, 2) == 40
    assert allocations.unallocated_minutes(config, site, {"model": "llama-3.1-8b"}, 1) == int(20 + 15 * params_b)
    assert allocations.unallocated_minutes(config, allocations.Site(max_runtime=30), {"model": "llama-3.1-8b"}, 5) == 30


def test_a_site_max_mem_mb_below_an_allocated_jobs_need_is_one_line_naming_it(config):
    from wneurons.experiment.slurm_site import SiteLimits, limit_source

    needs = {
        (r, m): allocations.job_mem_mb(config, allocations.Site(), r, w)
        for m, spec in config["models"].items()
        for r, w in allocations.checkpoint_jobs(config, m, spec["final_revision"])
    }
    (rule, model), need = max(needs.items(), key=lambda item: item[1])
    allocations.check_job_memory(config, allocations.Site(max_mem_mb=need))  # exactly enough
    allocations.check_job_memory(config, allocations.Site())  # no limit
    with pytest.raises(ValueError, match=rf"^site: max_mem_mb {need - 1:,} MB \(site file, max_mem_mb\) is below"):
        allocations.check_job_memory(config, allocations.Site(max_mem_mb=need - 1))
    with pytest.raises(ValueError, match=rf"{rule} {model}/\S+ needs: {need:,} MB"):
        allocations.check_job_memory(
            config, allocations.Site(max_mem_mb=need - 1), limit_source("max_mem_mb", {"max_mem_mb"}, None)
        )
    limits = SiteLimits(partition="gpu", max_time_min=None, max_mem_mb=64000, gpus_per_node=4)
    assert limit_source("max_mem_mb", set(), limits).startswith("read from SLURM: partition gpu's MaxMemPerNode")
    assert limit_source("max_mem_mb", {"max_mem_mb"}, limits) == "site file, max_mem_mb"


def test_a_hub_models_input_is_its_staged_manifest_and_a_local_model_has_none(config):
    staging = config["hub"]["staging_dir"]
    assert model_inputs.model_dir(config, {}, staging, "pythia-70m", "step16") == paths.staged_manifest(
        "pythia-70m", "step16", staging
    )
    spec = model_inputs.loader_spec(config, {}, staging, "pythia-70m", "step16")
    assert spec["revision"] == "step16" and spec["hub_id"] == "EleutherAI/pythia-70m"
    assert spec["staged"] == paths.staged_dir("pythia-70m", "step16", staging)
    assert model_inputs.hub_source(config, Wildcards(model="pythia-70m", revision="step16")) == {
        "repo_id": "EleutherAI/pythia-70m",
        "revision": "step16",
    }

    local = config["models"]["pythia-70m"] | {"local_path": "/models/p70m"}
    del local["hub_id"]
    config["models"]["local-70m"] = local
    assert model_inputs.model_dir(config, {}, staging, "local-70m", "main") == []
    assert model_inputs.loader_spec(config, {}, staging, "local-70m", "main")["local_path"] == "/models/p70m"
    with pytest.raises(ValueError, match="models.local-70m has no hub_id"):
        model_inputs.hub_source(config, Wildcards(model="local-70m", revision="main"))
    suites = {"local-70m": {"step1": "/suite/step1"}}
    config["models"]["local-70m"]["checkpoint_suite"] = {"train": False, "path": "/suite"}
    assert model_inputs.model_dir(config, suites, staging, "local-70m", "step1") == "/suite"
    assert model_inputs.loader_spec(config, suites, staging, "local-70m", "step1")["local_path"] == "/suite/step1"


def _ablation(selector: str, **more) -> Wildcards:
    fields = dict(model="llama-3.1-8b", revision="main", scope="all", selector=selector, percent="1", trial="2")
    return Wildcards(fields | {"benchmark": "blimp"} | more)


def test_only_the_matched_control_waits_for_its_search_and_the_model_only_when_it_has_one(config):
    random = ablations.ablation_inputs(config, _ablation("random"), [])
    assert set(random) == {"data", "neurons"}
    matched = ablations.ablation_inputs(config, _ablation("matched"), "model.json")
    assert matched["model"] == "model.json"
    assert matched["search"] == paths.matched_search("llama-3.1-8b", "main", "all", "1")
    search = ablations.matched_search_inputs(config, _ablation("matched"), [])
    assert search["target"] == paths.ablation(
        "llama-3.1-8b", "main", grid.Condition("all", "wasserstein", "1", 0), "ppl"
    )


def test_a_conditions_params_keep_their_keys_in_order_with_the_cohort_last(config):
    spec = ablations.condition_spec(config, _ablation("wasserstein"))
    assert list(spec) == [
        "selector", "percent", "scope", "layers", "trial", "seed", "mode",
        "cohort_source", "cohort_selection", "count_rule",
    ]  # fmt: skip
    assert spec["percent"] == 1.0 and spec["trial"] == 2 and spec["seed"] == grid.trial_seed(config, 2)
    assert spec["layers"] == list(range(32)) and spec["cohort_selection"] == "final"
    assert list(ablations.search_spec(config, _ablation("matched")))[-3:] == [
        "cohort_source", "cohort_selection", "count_rule",
    ]  # fmt: skip


def test_statistics_in_scratch_read_the_model_and_record_the_collections_params(config):
    w = Wildcards(model="llama-3.1-8b", revision="main")
    assert neurons.neuron_stats_inputs(config, w, False, "model.json") == {
        "shards": paths.shards("llama-3.1-8b", "main")
    }
    assert neurons.neuron_stats_inputs(config, w, True, "model.json") == {
        "wikitext": paths.dataset("wikitext2"),
        "model": "model.json",
    }
    assert "collect" not in neurons.stats_params(config, w, False)
    assert neurons.stats_params(config, w, True)["collect"] == neurons.collect_params(config, w)
    layers = grid.collected_layers(config, "llama-3.1-8b", "main")
    assert neurons.collect_disk_mb(config, w) == 1024 + grid.shard_bytes(config, "llama-3.1-8b", layers) // 2**20
