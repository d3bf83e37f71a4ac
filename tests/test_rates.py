"""Measured rates (experiment/rates.py): read from a run's benchmark tables and results' provenance, and planned
from by a site that names them (experiment/allocations.py, Site.rates)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from wneurons.experiment import allocations, paths, rates, workload
from wneurons.experiment.allocations import Planner, Site, checkpoint_jobs, job_work, precision_of, stated_rate
from wneurons.experiment.config import validate_config

REPO = Path(__file__).resolve().parents[1]
H100 = "NVIDIA H100 80GB HBM3"
SMOL = {"model": "smollm2-135m", "revision": "main"}
MINI = {"model": "neox-mini", "revision": "step320"}


@pytest.fixture(scope="module")
def config() -> dict:
    return validate_config(
        yaml.safe_load((REPO / "config/demo.yaml").read_text()), REPO / "workflow/schemas/config.schema.yaml"
    )


def finished_job(config: dict, run: Path, rule: str, w: dict, times_stated: float, device: str | None) -> float:
    """Write the benchmark table (and, with a ``device``, the result's provenance) of a job that ran at
    ``times_stated`` x the stated rate; returns its seconds."""
    seconds = job_work(config, rule, w) / (times_stated * stated_rate(config, Site(), rule))
    with paths.roots_of(config | {"results_dir": str(run)}):
        table = Path(paths.benchmark_file(rule, "/".join(w.values())))
        if device is not None:
            result = paths.clean(w["model"], w["revision"], w["benchmark"])
            Path(result).parent.mkdir(parents=True, exist_ok=True)
            prov = {"precision": precision_of(config, rule), "device_name": device, "seconds": seconds}
            Path(result).write_text(json.dumps({"provenance": prov}))
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(f"s\th:m:s\tmax_rss\n{seconds!r}\t0:00:01\t100.0\n")
    return seconds


@pytest.fixture
def measured_run(config: dict, tmp_path: Path) -> Path:
    """A partly finished run on an H100: smollm2's clean BLiMP at half the stated rate, neox-mini's at 4x, and
    neox-mini's collection at 3x (its table names no device: its checkpoint's scoring does)."""
    run = tmp_path / "run"
    finished_job(config, run, "score_clean", SMOL | {"benchmark": "blimp"}, 0.5, H100)
    finished_job(config, run, "score_clean", MINI | {"benchmark": "blimp"}, 4.0, H100)
    finished_job(config, run, "collect_activations", MINI, 3.0, None)
    finished_job(config, run, "aggregate_scores", SMOL | {"benchmark": "blimp"}, 1.0, None)  # runs no model
    finished_job(config, run, "weight_rows", MINI | {"revision": "step0"}, 1.0, None)  # a device unknown
    return run


def test_every_planned_rule_has_a_benchmark_template_that_parses_back(config):
    templates = rates.benchmark_templates()
    planned = {
        rule for m in config["models"] for rule, _ in checkpoint_jobs(config, m, config["models"][m]["final_revision"])
    }
    assert planned <= set(templates)
    relative = "score_ablation/smollm2-135m/main/l1/wasserstein/p0.5/t0/blimp"
    assert rates.parse_benchmark_path(relative, templates) == (
        "score_ablation",
        SMOL | {"scope": "l1", "selector": "wasserstein", "percent": "0.5", "trial": "0", "benchmark": "blimp"},
    )
    assert rates.parse_benchmark_path("aggregate_scores/smollm2-135m/main/blimp", templates) is None


def test_rates_are_the_planners_work_over_the_measured_seconds(config, measured_run):
    content = rates.measure(config, measured_run)
    entries = {(e["rule"], e["device"]): e for e in content["rates"]}
    assert set(entries) == {("score_clean", H100), ("collect_activations", H100), ("weight_rows", "unknown")}
    stated = {r: stated_rate(config, Site(), r) / 1e12 for r in ("score_clean", "collect_activations")}
    clean = entries["score_clean", H100]
    assert clean["precision"] == precision_of(config, "score_clean") and clean["unit"] == "TFLOP/s"
    assert clean["models"]["smollm2-135m"]["rate"] == pytest.approx(0.5 * stated["score_clean"], rel=1e-4)
    assert clean["models"]["neox-mini"]["rate"] == pytest.approx(4 * stated["score_clean"], rel=1e-4)
    assert clean["median"] == pytest.approx(2.25 * stated["score_clean"], rel=1e-4)
    blimp = SMOL | {"benchmark": "blimp"}
    seconds = job_work(config, "score_clean", blimp) / (0.5 * stated["score_clean"] * 1e12)
    tokens = workload.tokens_of(config, "score_clean", blimp)
    assert clean["models"]["smollm2-135m"]["tokens_per_s"] == pytest.approx(tokens / seconds, rel=1e-4)
    assert entries["collect_activations", H100]["median"] == pytest.approx(3 * stated["collect_activations"], rel=1e-4)


def test_a_site_with_rates_plans_measured_jobs_in_proportion_and_says_which(config, measured_run, tmp_path):
    out = tmp_path / "rates.json"
    rates.write_rates(out, rates.measure(config, measured_run))
    site_file = tmp_path / "site.yaml"
    site_file.write_text(f"rates: {out}\ngpu_model: h100\n")
    with_rates, without = Planner(config, Site.from_file(str(site_file))), Planner(config, Site())
    blimp, collect = ("score_clean", SMOL | {"benchmark": "blimp"}), ("collect_activations", SMOL)
    measured, source = with_rates.estimate(*blimp)
    assert source == "measured" and measured == pytest.approx(2 * without.estimate(*blimp)[0])  # half the rate
    median, source = with_rates.estimate(*collect)  # smollm2's collection unmeasured: the rule's median, 3x
    assert source == "measured, rule median" and median == pytest.approx(without.estimate(*collect)[0] / 3)
    assert with_rates.estimate("score_clean", SMOL | {"benchmark": "ppl"})[1] == "measured"  # its model's rate
    assert with_rates.estimate("neuron_stats", SMOL)[1] == "stated"
    with_rates.plan("smollm2-135m", "main")
    n_jobs = len(checkpoint_jobs(config, "smollm2-135m", "main"))
    assert sum(with_rates.sources.values()) == n_jobs and set(with_rates.sources) == {
        "measured",
        "measured, rule median",
        "stated",
    }
    without.plan("smollm2-135m", "main")
    assert without.sources == {"stated": n_jobs}
    only_gpu = Planner(config, Site(rates=str(out)))  # no gpu_model: the one GPU measured, the unknown aside
    assert only_gpu.estimate(*blimp) == (pytest.approx(measured), "measured")
    a100 = Planner(config, Site(rates=str(out), gpu_model="a100"))  # measured on another GPU: not used
    assert a100.estimate(*blimp) == without.estimate(*blimp) == (pytest.approx(measured / 2), "stated")


def test_a_missing_rates_file_is_one_error_naming_it(config, tmp_path):
    with pytest.raises(ValueError, match="rates file .*nowhere.json"):
        Planner(config, Site(rates=str(tmp_path / "nowhere.json")))


def test_statistics_split_by_layer_range_are_measured_by_their_parts_not_the_join(config, tmp_path):
    """A revision's statistics run in parts (the planner's split by layer range): each part is measured as the
    statistics over its layers, and neuron_stats, which only joined them, is not measured at all."""
    run = tmp_path / "run"
    for layers in allocations.layer_ranges(allocations.revision_layers(config, "smollm2-135m", "main"), 2):
        finished_job(config, run, allocations.STATS_PART, SMOL | {"layers": layers}, 2.0, None)
    finished_job(config, run, "neuron_stats", SMOL, 1000.0, None)  # seconds of joining: no statistics' rate
    (entry,) = rates.measure(config, run)["rates"]
    assert entry["rule"] == "neuron_stats" and entry["models"]["smollm2-135m"]["jobs"] == 2
    assert entry["median"] == pytest.approx(2 * stated_rate(config, Site(), "neuron_stats") / rates.UNITS["B/s"])
