"""The tiny project through `profiles/slurm` on a live SLURM cluster: one allocation per checkpoint, its jobs in
threads of one Snakemake process (the `wneurons-slurm` executor), killed and resumed, then grown by a percent.

Needs the localhost cluster of `.ci/slurm/up.sh` (root, Debian); skipped where `squeue` cannot reach a controller.
CI brings the cluster up in its SLURM step (`.ci/run` -> `.ci/slurm/run-demo.sh` -> `up.sh`); locally:

    bash .ci/slurm/up.sh && pytest -q tests/workflow/test_slurm_allocations.py -x; bash .ci/slurm/down.sh

One chain of runs on one project (each test continues the previous one's tree): a reference run on the local
executor; a SLURM run whose allocation is cancelled (`scancel`) after some of its jobs finished, and its rerun;
then a percent added to the config and the SLURM run again.

These runs are issue 42's site without a site file: the partition's MaxTime 30 min and SLURM's default
`EnforcePartLimits=NO` (set for this module, restored after), under which an allocation over the limit is accepted
and never starts; no site file, so the planner plans at its default rates within the limit it reads from SLURM
(`site_limits=slurm`). The runs finish, every allocation asks at most 30 minutes, and the demo's config plans within
it (`wneurons plan`). (The demo itself is not run here: `make demo-slurm`, a step of `.ci/run`, runs it through
SLURM on this site, 12-17 min on the CI machine, its first SmolLM2 allocation timed out once and grown; the tiny
project's jobs take seconds.)
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from slurm_cluster import allocation_logs as checkpoint_logs
from slurm_cluster import (
    finish,
    finished_jobs,
    finished_over,
    partition_setting,
    slurm_setting,
    time_limits,
    wait_for,
)
from slurm_cluster import run_slurm as run_profiles
from tiny_project import REPO, make_tiny_project, snakemake

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


# Issue 42's site (the module's docstring): MaxTime 30 min, EnforcePartLimits=NO.
MAX_TIME = 30


def run_slurm(root: Path, *args: str) -> subprocess.Popen:
    """The run with no site file: a --config on the command line replaces the profiles' `config` lists (profiles/
    slurm-ci's names its site file), so only `site_limits=slurm` is left. Last: --config takes every value after it."""
    return run_profiles(root, *targets(), *args, "--config", "site_limits=slurm")


@pytest.fixture(scope="module", autouse=True)
def site_without_a_site_file():
    """The CI cluster as issue 42's site for this module's runs (slurm.conf first: its reconfigure resets the
    partition's MaxTime)."""
    with slurm_setting("EnforcePartLimits", "NO"), partition_setting("MaxTime", str(MAX_TIME)):
        yield


def read_site(root: Path, out: str) -> None:
    """The run planned from the limits SLURM states for issue 42's site, and every allocation of the checkpoint
    asked SLURM at most its MaxTime (squeue still lists them: MinJobAge)."""
    read = re.search(r"site_limits: read partition \S+: MaxTime (\d+) min, .*\(EnforcePartLimits=(\w+)\)", out)
    assert read and read.groups() == (str(MAX_TIME), "NO"), out[-3000:]
    limits = time_limits([log.stem for log in allocation_logs(root)])
    assert limits and max(limits.values()) <= MAX_TIME, limits


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
    read_site(project, out)
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
    read_site(project, out)
    new = sorted(set(allocation_logs(project)) - known)
    ran = finished_over(new)
    # wasserstein + 2 random trials + matched at 10 %, on 3 benchmarks, and the matched search at 10 %
    assert Counter(rule for rule, _ in ran) == {"score_ablation": 12, "matched_search": 1}
    assert all("percent=10" in wildcards for _, wildcards in ran)
    summaries = count_allocations(new)
    assert sum(s["jobs"] for s in summaries) == 13 and all(s["loads"] == 1 for s in summaries)


def test_the_demo_plans_within_the_limit_read_from_slurm():
    """`wneurons plan` of the demo's config through `profiles/slurm` alone (no site file; `site_limits=slurm`):
    every allocation within the 30 minutes it reads."""
    proc = subprocess.run(
        [sys.executable, "-m", "wneurons.cli", "plan", "config/demo.yaml", "--no-disk"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    header = re.search(r"Allocations against the site's limits \((.*?), site_limits (\w+): (\d+) min", proc.stdout)
    assert header and header.groups() == ("no site file", "slurm", str(MAX_TIME)), proc.stdout
    rows = re.findall(r"^(\S+) +(\d+) +(\d+) +[\d,]+ +(yes|NO)$", proc.stdout.split(header[0])[1], re.M)
    demo = yaml.safe_load((REPO / "config/demo.yaml").read_text())
    assert {model for model, *_ in rows} == set(demo["models"]), proc.stdout
    assert all(int(largest) <= MAX_TIME and fit == "yes" for _, _, largest, fit in rows), rows
