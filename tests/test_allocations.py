"""The planner's asks against its own estimates (one margin and one load per allocation, no rounding per job), the
capability suite's sizes, and the capability jobs packed apart (experiment/allocations.py)."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
import yaml

from wneurons.experiment import allocations, paths, workload
from wneurons.experiment.allocations import Planner, Site, allocation_ask, checkpoint_jobs, is_capability, job_key, pack
from wneurons.experiment.config import validate_config
from wneurons.store import lmeval_tasks

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow/schemas/config.schema.yaml"


def config_of(name: str) -> dict:
    return validate_config(yaml.safe_load((REPO / "config" / name).read_text()), SCHEMA)


def checkpoints(config: dict) -> list[tuple[str, str]]:
    return [
        (model, revision)
        for model, spec in config["models"].items()
        for revision in sorted({spec["final_revision"], *spec["checkpoints"], *spec["weight_checkpoints"]})
    ]


def test_pack_asks_one_margin_one_load_and_no_rounding_per_job():
    """A synthetic checkpoint of many jobs of seconds to hours: every allocation within the limit, its members ask
    exactly its ask (the sum, the largest once more, the load, rounded up once), and nothing is lost to rounding."""
    rng = random.Random(0)
    estimates = [rng.choice([0.02, 0.3, 4.0, 40.0]) * rng.random() for _ in range(400)]
    apart = [k >= 300 for k in range(400)]
    load, limit, margin = 3.5, 240, 2.0
    indices, asked = pack(estimates, load, limit, margin, apart)
    allocations_ = sorted(set(indices))
    assert allocations_ == list(range(len(allocations_))) and indices == sorted(indices)
    for k in allocations_:
        members = [e for e, i in zip(estimates, indices, strict=True) if i == k]
        total = sum(a for a, i in zip(asked, indices, strict=True) if i == k)
        assert total == allocation_ask(members, load, margin) <= limit
        assert total < sum(members) + (margin - 1) * max(members) + load + 1
    assert indices[299] < indices[300]  # a change of `apart` starts a new allocation


@pytest.mark.parametrize("limit", [240, 1440])
def test_the_grid_asks_at_most_one_and_a_half_times_what_the_planner_expects(limit):
    """Requested / expected GPU-hours of the paper grid (expected: the estimates without margin plus one load per
    allocation), on the default site and one of 4 h, where every checkpoint plans (N6: the statistics longer than
    4 h split by layer range)."""
    config = config_of("config.yaml")
    planner = Planner(config, Site(max_runtime=limit), root=REPO / "tests")  # no staged suite there
    asked = expected = 0.0
    for model, revision in checkpoints(config):
        per_allocation = planner.allocation_minutes(model, revision)
        assert all(a <= limit for a, _ in per_allocation)
        asked += sum(a for a, _ in per_allocation)
        expected += sum(e for _, e in per_allocation)
    assert 1 <= asked / expected <= 1.5


def test_statistics_longer_than_the_limit_split_into_the_fewest_layer_ranges_that_fit():
    """On a 4 h site the paper grid's longest statistics (pythia-12b's 36 layers, ~8 h) split into the fewest
    contiguous layer ranges whose largest fits one allocation alone, one fewer would not; every part is planned
    within the limit before neuron_stats, which only joins them; statistics that fit (pythia-70m's, and all of
    them on the default 24 h site) stay one job."""
    config = config_of("config.yaml")
    site = Site(max_runtime=240)
    planner = Planner(config, site, root=REPO / "tests")
    model, revision = "pythia-12b", config["models"]["pythia-12b"]["final_revision"]
    base = {"model": model, "revision": revision}
    whole = allocations.job_estimate_minutes(config, site, "neuron_stats", base)  # at the stated rate, as planned
    load = allocations.member_load_minutes(config, allocations.STATS_PART, model)  # alone: no model to load
    assert allocation_ask([whole], load, site.margin) > site.max_runtime
    parts = planner.stats_parts(model, revision)
    assert parts == ["0-11", "12-23", "24-35"]
    covered = [layer for r in parts for layer in allocations.layers_in_range(list(range(36)), r)]
    assert covered == list(range(36))
    estimates = [planner.estimate(allocations.STATS_PART, base | {"layers": r})[0] for r in parts]
    assert sum(estimates) == pytest.approx(whole)
    assert all(allocation_ask([e], load, site.margin) <= site.max_runtime for e in estimates)
    assert allocation_ask([whole * 18 / 36], load, site.margin) > site.max_runtime  # two parts would not fit
    assert planner.estimate("neuron_stats", base)[0] < 1  # the join: seconds
    plan = planner.plan(model, revision)
    order = [job_key(allocations.STATS_PART, base | {"layers": r}) for r in parts] + [job_key("neuron_stats", base)]
    assert [plan[k][0] for k in order] == sorted(plan[k][0] for k in order)
    assert all(a <= site.max_runtime for a, _ in planner.allocation_minutes(model, revision))
    assert planner.stats_parts("pythia-70m", config["models"]["pythia-70m"]["final_revision"]) is None
    default = Planner(config, Site(), root=REPO / "tests")
    assert not any(default.stats_parts(m, r) for m, r in checkpoints(config))


@pytest.mark.parametrize("limit", [240, 1440])
def test_an_allocation_without_a_model_job_pays_the_startup_not_a_load(limit):
    """The statistics (and their parts) and the weight rows read files and load no model: an allocation of only such
    members asks their estimates, the margin and the startup; one with a job that runs the model also its load. Both
    kinds occur in the paper grid (weight-rows-only checkpoints; on a 4 h site, allocations of a statistics part)."""
    config = config_of("config.yaml")
    planner = Planner(config, Site(max_runtime=limit), root=REPO / "tests")
    startup, kinds = allocations.STARTUP_S / 60, Counter()
    for model, revision in checkpoints(config):
        plan = planner.plan(model, revision)
        members: dict[int, list[tuple[str, float]]] = {}
        for (rule, w), (k, _) in plan.items():
            members.setdefault(k, []).append((rule, planner.estimate(rule, dict(w))[0]))
        load = allocations.allocation_load_minutes(config, model)
        assert load > startup  # the model's weights: the two differ, the test can tell them apart
        for k, (asked, expected) in enumerate(planner.allocation_minutes(model, revision)):
            runs_model = any(rule not in allocations.CPU_MEMBERS for rule, _ in members[k])
            paid = load if runs_model else startup
            estimates = [e for _, e in members[k]]
            assert expected == pytest.approx(sum(estimates) + paid), (model, revision, k)
            assert asked == allocation_ask(estimates, paid, planner.site.margin), (model, revision, k)
            kinds[runs_model, tuple(sorted({rule for rule, _ in members[k]}))] += 1
    assert (False, ("weight_rows",)) in kinds
    assert (False, (allocations.STATS_PART,)) in kinds or limit == 1440


def test_statistics_whose_single_layer_does_not_fit_are_refused_naming_the_job():
    config = config_of("config.yaml")
    # GPU jobs take no time; one layer of the statistics, ~14 min, x the margin of 40 does not fit 4 h
    planner = Planner(config, Site(max_runtime=240, tflops=1e6, margin=40), root=REPO / "tests")
    model, revision = "pythia-12b", config["models"]["pythia-12b"]["final_revision"]
    assert planner.stats_parts(model, revision) is None
    with pytest.raises(allocations.AllocationTooLong, match="^neuron_stats pythia-12b/step143000 needs"):
        planner.plan(model, revision)


def test_layer_ranges_are_contiguous_the_larger_first_and_named_by_their_ends():
    assert allocations.layer_ranges(list(range(10)), 3) == ["0-3", "4-6", "7-9"]
    assert allocations.layer_ranges([2, 5, 9, 11], 2) == ["2-5", "9-11"]
    assert allocations.layers_in_range([2, 5, 9, 11], "2-5") == [2, 5]


def test_capability_sizes_come_from_the_staged_suite_else_the_stated_counts(tmp_path):
    capability = {"source": "hub", "tasks": ["arc_easy", "hellaswag", "unknown_task"], "limits": {"hellaswag": 2000}}
    docs, source = workload.capability_docs(capability, tmp_path)
    assert docs == {"arc_easy": 2376, "hellaswag": 2000, "unknown_task": workload.CAPABILITY_DOCS_PER_TASK}
    assert "stated" in source and "bound" in source and "staged" not in source
    staged = tmp_path / paths.capability_tasks("hub")
    staged.mkdir(parents=True)
    record = {"tasks": {t: {"n_eval_docs": n} for t, n in [("arc_easy", 2000), ("hellaswag", 1500)]}}
    (staged / lmeval_tasks.STAGED_FILE).write_text(json.dumps(record))
    docs, source = workload.capability_docs(capability, tmp_path)
    assert docs["arc_easy"] == 2000 and docs["hellaswag"] == 1500  # the limit caps only what is larger
    assert "bound" in source and "staged" in source and "stated" not in source
    tokens = workload.capability_tokens({"capability": capability}, tmp_path)
    per_doc = workload.CAPABILITY_TOKENS_PER_TASK_DOC
    expected = 2000 * per_doc["arc_easy"] + 1500 * per_doc["hellaswag"] + 10_000 * workload.CAPABILITY_TOKENS_PER_DOC
    assert tokens == expected


def test_the_paper_suite_is_sized_from_its_documents_not_the_bound():
    config = config_of("config.yaml")
    docs, _ = workload.capability_docs(config["evaluation"]["capability"], REPO / "tests")
    assert sum(docs.values()) == 2376 + 1838 + 2000 + 1267 + 5153  # HellaSwag at its limit


@pytest.mark.parametrize(("config_name", "limit"), [("config.yaml", 1440), ("config.yaml", 240), ("demo.yaml", 15)])
def test_no_allocation_mixes_capability_jobs_with_others_and_they_come_last(config_name, limit):
    """A failing capability member fails only capability jobs: no collection, statistics, search or other
    benchmark shares its allocation, and every capability allocation comes after the others (nothing reads them)."""
    config = config_of(config_name)
    planner = Planner(config, Site(max_runtime=limit, tflops=0.1 if config_name == "demo.yaml" else None))
    seen = 0
    for model, revision in checkpoints(config):
        try:
            plan = planner.plan(model, revision)
        except allocations.AllocationTooLong:
            continue
        kinds: dict[int, set[bool]] = {}
        for rule, w in checkpoint_jobs(config, model, revision):
            kinds.setdefault(plan[job_key(rule, w)][0], set()).add(is_capability(rule, w))
        assert all(len(k) == 1 for k in kinds.values()), (model, revision, kinds)
        capability = [i for i, k in kinds.items() if True in k]
        others = [i for i, k in kinds.items() if False in k]
        if capability and others:
            seen += 1
            assert min(capability) > max(others)
    assert seen
