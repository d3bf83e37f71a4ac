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

import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from tiny_project import REPO, make_tiny_project, snakemake, snakemake_command

from wneurons.experiment import paths
from wneurons.lm.model_pool import count_allocations
from wneurons.report.compare import compare_result_trees

MODEL, REVISION = "tiny-llama", "main"
PROFILES = ("--profile", str(REPO / "profiles/slurm"), "--profile", str(REPO / "profiles/slurm-ci"))
TIMEOUT_S = 600
# Rules whose jobs run inside the checkpoint's allocation (profiles/slurm `groups`).
GPU_RULES = {"collect_activations", "neuron_stats", "score_clean", "score_ablation", "matched_search"}


def cluster_up() -> bool:
    if shutil.which("squeue") is None:
        return False
    return subprocess.run(["squeue", "-h"], capture_output=True, timeout=20).returncode == 0


pytestmark = [pytest.mark.slow, pytest.mark.skipif(not cluster_up(), reason="no SLURM cluster (.ci/slurm/up.sh)")]


def targets() -> list[str]:
    """The checkpoint's statistics and its aggregated scores: every GPU job of the checkpoint, no figure."""
    return [paths.neurons(MODEL, REVISION)] + [paths.aggregate(MODEL, REVISION, b) for b in ("blimp", "tse", "ppl")]


def allocation_logs(root: Path) -> list[Path]:
    """The SLURM logs of the checkpoint's allocations, oldest first (file names are SLURM job ids)."""
    logs = (root / ".snakemake/slurm_logs").glob(f"group_gpu-{MODEL}-{REVISION}_*/*.log")
    return sorted(logs, key=lambda p: int(p.stem))


def finished_jobs(log: Path) -> Counter:
    """(rule, wildcards) of every job the inner Snakemake of an allocation finished, read from its log."""
    text = log.read_text(errors="replace")
    started = {}  # jobid -> (rule, wildcards)
    for block in re.finditer(r"^localrule (\w+):\n(.*?)(?=^\S|\Z)", text, flags=re.MULTILINE | re.DOTALL):
        jobid = re.search(r"^\s+jobid: (\d+)$", block[2], flags=re.MULTILINE)
        wildcards = re.search(r"^\s+wildcards: (.*)$", block[2], flags=re.MULTILINE)
        started[jobid[1]] = (block[1], wildcards[1] if wildcards else "")
    return Counter(started[j] for j in re.findall(r"^Finished jobid: (\d+) ", text, flags=re.MULTILINE))


def run_slurm(root: Path, *args: str) -> subprocess.Popen:
    cmd = snakemake_command(root, *PROFILES, *args, *targets(), threads=False)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=TIMEOUT_S)
    return proc.returncode, out


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
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        logs = allocation_logs(project)
        if logs and sum(finished_jobs(logs[-1]).values()) >= 4:
            break
        time.sleep(0.5)
    assert proc.poll() is None, finish(proc)[1][-3000:]
    killed = allocation_logs(project)[-1]
    subprocess.run(["scancel", killed.stem], check=True, timeout=30)
    rc, out = finish(proc)
    assert rc != 0, "the run went on after its allocation was cancelled"
    before = finished_jobs(killed)
    assert before and all(rule in GPU_RULES for rule, _ in before)

    rc, out = finish(run_slurm(project))
    assert rc == 0, out[-4000:]
    rerun = allocation_logs(project)[-1]
    assert rerun != killed
    after = finished_jobs(rerun)
    # Each job ran exactly once over both allocations, and the rerun's allocation ran only what was missing.
    assert not set(before) & set(after) and max((before + after).values()) == 1
    assert {rule for rule, _ in before + after} == GPU_RULES
    # One process per allocation, one load per job slot (the allocation runs one GPU job at a time).
    (summary,) = count_allocations([rerun])
    assert summary["jobs"] == sum(after.values()) and summary["failed"] == 0 and summary["loads"] == 1
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
    (new,) = set(allocation_logs(project)) - known
    ran = finished_jobs(new)
    # wasserstein + 2 random trials + matched at 10 %, on 3 benchmarks, and the matched search at 10 %
    assert Counter(rule for rule, _ in ran) == {"score_ablation": 12, "matched_search": 1}
    assert all("percent=10" in wildcards for _, wildcards in ran)
    (summary,) = count_allocations([new])
    assert summary["jobs"] == 13 and summary["loads"] == 1
