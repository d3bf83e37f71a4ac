"""The tiny project through `profiles/slurm` on a live SLURM cluster: one allocation per checkpoint, its jobs in
threads of one Snakemake process (the `wneurons-slurm` executor), killed and resumed, then grown by a percent.

Needs the localhost cluster of `.ci/slurm/up.sh` (root, Debian); skipped where `squeue` cannot reach a controller.
CI brings the cluster up in its SLURM step (`.ci/run` -> `.ci/slurm/run-demo.sh` -> `up.sh`); locally:

    bash .ci/slurm/up.sh && pytest -q tests/workflow/test_slurm_allocations.py -x; bash .ci/slurm/down.sh

One chain of runs on one project (each test continues the previous one's tree): a reference run on the local
executor; a SLURM run whose allocation is cancelled (`scancel`) after some of its jobs finished, and its rerun;
then a percent added to the config and the SLURM run again.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml
from slurm_cluster import allocation_logs as checkpoint_logs
from slurm_cluster import finish, finished_jobs, finished_over, wait_for
from slurm_cluster import run_slurm as run_profiles
from tiny_project import make_tiny_project, snakemake

from wneurons.experiment import paths
from wneurons.lm.model_pool import count_allocations
from wneurons.report.compare import compare_result_trees

MODEL, REVISION = "tiny-llama", "main"
# Rules whose jobs run inside the checkpoint's allocations (the rules' `group:`, wneurons.experiment.allocations).
GPU_RULES = {"collect_activations", "neuron_stats", "score_clean", "score_ablation", "matched_search"}

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def targets() -> list[str]:
    """The checkpoint's statistics and its aggregated scores: every GPU job of the checkpoint, no figure."""
    return [paths.neurons(MODEL, REVISION)] + [paths.aggregate(MODEL, REVISION, b) for b in ("blimp", "tse", "ppl")]


def allocation_logs(root: Path) -> list[Path]:
    return checkpoint_logs(root, MODEL, REVISION)


def run_slurm(root: Path, *args: str) -> subprocess.Popen:
    return run_profiles(root, *args, *targets())


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A tiny project with a finished local reference run under reference/ (a copy, for comparison)."""
    root = tmp_path_factory.mktemp("slurm-alloc")
    make_tiny_project(root)
    snakemake(root, "--cores", "2", *targets())
    shutil.copytree(root / "results", root.parent / f"{root.name}-reference")
    shutil.rmtree(root / "results")
    shutil.rmtree(root / "logs")
    return root


def test_killed_allocation_keeps_its_finished_jobs_and_the_rerun_runs_only_the_rest(project):
    proc = run_slurm(project, "--retries", "0")  # no resubmission: the rerun below is the retry

    def four_finished() -> bool:
        logs = allocation_logs(project)
        return bool(logs) and sum(finished_jobs(logs[-1]).values()) >= 4

    wait_for(four_finished, "four finished jobs in an allocation", proc=proc)
    killed = allocation_logs(project)[-1]
    subprocess.run(["scancel", killed.stem], check=True, timeout=30)
    rc, out = finish(proc)
    assert rc != 0, "the run went on after its allocation was cancelled"
    known = set(allocation_logs(project))
    before = finished_over(known)
    assert before and all(rule in GPU_RULES for rule, _ in before)

    rc, out = finish(run_slurm(project))
    assert rc == 0, out[-4000:]
    new = [log for log in allocation_logs(project) if log not in known]
    after = finished_over(new)
    # Each job ran exactly once over all allocations, and the rerun's allocations ran only what was missing.
    assert not set(before) & set(after) and max((before + after).values()) == 1
    assert {rule for rule, _ in before + after} == GPU_RULES
    # One process per allocation, at most one load per job slot (the allocation runs one GPU job at a time).
    summaries = count_allocations(new)
    assert sum(s["jobs"] for s in summaries) == sum(after.values())
    assert all(s["failed"] == 0 and s["loads"] <= 1 for s in summaries)
    reference = project.parent / f"{project.name}-reference"
    assert compare_result_trees(reference, project / "results") == []


def test_adding_a_percent_submits_the_checkpoint_again_for_its_new_conditions_only(project):
    config = project / "config.yaml"
    grid = yaml.safe_load(config.read_text())
    grid["ablation"]["percents"].append(10)
    config.write_text(yaml.safe_dump(grid, sort_keys=False))
    known = set(allocation_logs(project))
    rc, out = finish(run_slurm(project))
    assert rc == 0, out[-4000:]
    new = sorted(set(allocation_logs(project)) - known)
    ran = finished_over(new)
    # wasserstein + 2 random trials + matched at 10 %, on 3 benchmarks, and the matched search at 10 %
    assert Counter(rule for rule, _ in ran) == {"score_ablation": 12, "matched_search": 1}
    assert all("percent=10" in wildcards for _, wildcards in ran)
    summaries = count_allocations(new)
    assert sum(s["jobs"] for s in summaries) == 13 and all(s["loads"] == 1 for s in summaries)
