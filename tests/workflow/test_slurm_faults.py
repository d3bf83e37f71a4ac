"""The faults a real SLURM site produces, injected into runs of the tiny project through `profiles/slurm` on the
localhost cluster of `.ci/slurm/up.sh` (configured like a site: finite MaxTime, EnforcePartLimits=ALL, preemptible
partitions; the limits are read from the cluster, `site_limits=slurm`). Each run ends with results identical to a
local run, and every job of the checkpoint finished exactly once across all attempts, counted from the allocations'
logs.

Faults: a member that fails on its first attempt (the profile's default retries) while the main Snakemake is
stopped until SLURM forgets a finished allocation (MinJobAge); an allocation killed by its time limit (resubmitted
with the walltime its ledger measured, no retry spent); five preemptions of one checkpoint (PreemptMode=CANCEL; no
retry spent, memory not raised); the controller away when the first allocation is submitted (a transient sbatch
refusal, submitted again); the node set DOWN while an allocation runs (NODE_FAIL: no retry spent); the main
Snakemake killed (kill -9) and restarted while its allocations run. Plus: the limit read from SLURM splits the
checkpoint and no allocation asks more than the partition's MaxTime; one that would (a site file that overstates the
partition's MaxTime, or its MaxMemPerNode) ends the run in one line naming the request, the limit and the key, under
EnforcePartLimits=ALL (sbatch refuses) and NO (SLURM's default: it would stay PENDING forever). (No QOS limit: the
CI cluster has no accounting daemon, so no QOS can be defined.)
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from slurm_cluster import (
    PARTITION,
    active_jobs,
    allocation_logs,
    finish,
    finished_jobs,
    finished_over,
    partition_setting,
    partition_value,
    run_slurm,
    running_allocation,
    scontrol,
    slurm_setting,
    wait_for,
)
from tiny_project import REPO, make_tiny_project, snakemake

from wneurons.experiment import paths
from wneurons.lm.model_pool import count_allocations
from wneurons.report.compare import compare_result_trees

MODEL, REVISION = "tiny-llama", "main"
GPU_RULES = {"collect_activations", "neuron_stats", "score_clean", "score_ablation", "matched_search"}

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def targets() -> list[str]:
    return [paths.neurons(MODEL, REVISION)] + [paths.aggregate(MODEL, REVISION, b) for b in ("blimp", "tse", "ppl")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, Counter]:
    """The local run's results, and the checkpoint's allocated jobs (rule, wildcards) from a dry run."""
    root = tmp_path_factory.mktemp("faults-reference")
    make_tiny_project(root)
    snakemake(root, "--cores", "2", *targets())
    return root / "results"


@pytest.fixture
def project(tmp_path) -> Path:
    root = tmp_path / "project"
    make_tiny_project(root)
    return root


def site_file(root: Path, partition: str) -> Path:
    """profiles/slurm-ci's site with the GPU allocations in ``partition``."""
    text = (REPO / "profiles/slurm-ci/site.yaml").read_text() + f"\ngpu_partition: {partition}\n"
    path = root / f"site-{partition}.yaml"
    path.write_text(text)
    return path


def start(root: Path, *args: str, env: dict | None = None, delay: float | None = None):
    """The run in the background; ``delay``: seconds every job waits first (WNEURONS_INJECT_DELAY), so that a fault
    strikes while an allocation of this tiny project still runs, until :func:`stop_delays`."""
    env = os.environ if env is None else env
    if delay:
        env = env | {"WNEURONS_INJECT_DELAY": f"{delay}:{root / 'delays-off'}"}
    return run_slurm(root, *targets(), *args, env=env)  # --config takes every value after it: targets first


def stop_delays(root: Path) -> None:
    """Jobs that start from now on run at full speed (the fault has been injected)."""
    (root / "delays-off").touch()


def finished_in_running_allocation(root: Path, at_least: int):
    """A condition: some allocation of the checkpoint runs now and its log shows ``at_least`` finished jobs."""

    def check() -> bool:
        jobid = running_allocation(root, MODEL, REVISION)
        if jobid is None:
            return False
        logs = [log for log in allocation_logs(root, MODEL, REVISION) if log.stem == jobid]
        return bool(logs) and sum(finished_jobs(logs[0]).values()) >= at_least

    return check


def assert_complete_and_once(root: Path, reference: Path, out: str) -> Counter:
    """Results equal the local run's; every allocated job finished exactly once over every allocation log."""
    logs = allocation_logs(root, MODEL, REVISION)
    done = finished_over(logs)
    assert done, out[-4000:]
    twice = {job: n for job, n in done.items() if n > 1}
    assert not twice, f"jobs finished more than once: {twice}"
    assert {rule for rule, _ in done} == GPU_RULES
    assert compare_result_trees(reference, root / "results") == []
    assert all(s["loads"] <= 1 for s in count_allocations(logs))
    return done


def test_member_failing_once_is_retried_alone_in_allocations_that_fit_the_site(project, reference):
    """A member fails once; the allocations are planned from the limits read from SLURM (the CI site file states
    none). And the main Snakemake is stopped (SIGSTOP: a suspended login session) while its first allocation runs,
    until SLURM has forgotten that allocation (MinJobAge 5 s here, 600 on this cluster otherwise): after SIGCONT the
    job, no longer listed, is judged by its allocation's ledger instead of being counted as running forever."""
    marker = project / "fault-once"
    env = os.environ | {"WNEURONS_INJECT_FAULT": f"score.py:tse:{marker}"}
    with slurm_setting("MinJobAge", "5"):
        proc = start(project, "--verbose", env=env)
        wait_for(lambda: running_allocation(project, MODEL, REVISION), "a running allocation", proc=proc)
        jobid = running_allocation(project, MODEL, REVISION)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: not listed(jobid), f"SLURM to forget allocation {jobid}", timeout=300)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        rc, out = finish(proc)
    assert rc == 0, out[-4000:]
    assert re.search(rf"SLURM job {jobid} is no longer listed|\(SLURM job {jobid}\): SLURM no longer lists", out)
    assert marker.exists(), "the fault was never injected"
    done = assert_complete_and_once(project, reference, out)
    # The site's limit split the checkpoint (the CI site's 15 minutes cannot hold its ~20 one-minute jobs), and no
    # allocation asked more than the partition's MaxTime.
    groups = {log.parent.name.split("_")[1] for log in allocation_logs(project, MODEL, REVISION)}
    assert len(groups) >= 2, groups
    asked = sbatch_minutes(out)
    assert asked and max(asked) <= max_time_minutes(), (asked, max_time_minutes())
    summaries = count_allocations(allocation_logs(project, MODEL, REVISION))
    assert sum(s["failed"] for s in summaries) == 1  # one failed member, the others went on (--keep-going)
    assert sum(done.values()) == sum(s["jobs"] - s["failed"] for s in summaries)


def test_allocation_killed_by_its_time_limit(project, reference):
    """Its time limit cut to 1 minute once 3 members finished: TIMEOUT, and the unfinished members resubmitted."""
    proc = start(project, delay=12)  # the first allocation's 8 jobs take over 90 s
    wait_for(finished_in_running_allocation(project, 3), "3 jobs finished in a running allocation", proc=proc)
    jobid = running_allocation(project, MODEL, REVISION)
    # Past its elapsed time: SLURM ends it with TIMEOUT at its next time-limit check (every 30 s at most).
    scontrol("update", f"JobId={jobid}", "TimeLimit=1")
    wait_for(lambda: running_allocation(project, MODEL, REVISION) != jobid, "the time limit to end the allocation")
    stop_delays(project)
    rc, out = finish(proc)
    assert rc == 0, out[-4000:]
    # Resubmitted without a retry, asking the walltime the finished members measured (they took the whole minute).
    grown = re.search(rf"\(SLURM job {jobid}\) TIMEOUT after (\d+) min: .* walltime \d+ -> (\d+) min", out)
    assert grown, out[-4000:]
    assert "Trying to restart job" not in out
    assert_complete_and_once(project, reference, out)


def preempt() -> str:
    """A job of the higher-priority partition that needs the whole node: it preempts every allocation running there
    and ends a few seconds later. Its SLURM job id."""
    return subprocess.run(
        ["sbatch", "--parsable", "-o", "/dev/null", "-p", f"{PARTITION}-urgent", "--exclusive", "-t", "1"]
        + ["--wrap", "sleep 3"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.strip()


def test_preempted_allocation_five_times(project, reference, times=5):
    """Preempted five times in a row (PreemptMode=CANCEL; each time the allocation that runs then): each
    preemption resubmits the unfinished members at the same request, without spending one of the profile's retries
    and without raising memory; every job finishes exactly once. (The default partition's PreemptMode=REQUEUE ends
    in the same PREEMPTED state, as the profile submits --no-requeue; not run again here, for CI's time.)"""
    partition = f"{PARTITION}-cancel"
    # A --config on the command line replaces the profiles' `config` lists: site_limits is restated.
    site = f"site={site_file(project, partition)}"
    proc = start(project, "--config", "site_limits=slurm", site, delay=4)  # not --verbose: its output fills the pipe
    urgent, preempted = [], []
    for _ in range(times):
        wait_for(
            lambda: running_allocation(project, MODEL, REVISION) not in (None, *preempted),
            "a running allocation not yet preempted",
            proc=proc,
        )
        time.sleep(2)  # into its work
        preempted.append(running_allocation(project, MODEL, REVISION))
        urgent.append(preempt())
        wait_for(lambda: running_allocation(project, MODEL, REVISION) != preempted[-1], "the preemption", proc=proc)
    stop_delays(project)
    try:
        rc, out = finish(proc)
    finally:
        subprocess.run(["scancel", *urgent], timeout=30)
    assert rc == 0, out[-4000:]
    events = re.findall(r"\(SLURM job (\d+)\) PREEMPTED \(site event \d+\).* at the same request \((.*)\)$", out, re.M)
    assert set(preempted) <= {jobid for jobid, _ in events}, (preempted, events, out[-3000:])
    # No retry spent, and memory not raised: each resubmission asked what the first attempt asked.
    assert "Trying to restart job" not in out
    assert all(request.endswith("retries untouched, attempt 1") for _, request in events), events
    first = re.search(r"sbatch .* -t (\d+) --mem (\d+) ", out)
    assert all(request.startswith(f"{first[1]} min, {int(first[2]):,} MB") for _, request in events) if first else True
    assert_complete_and_once(project, reference, out)


def test_controller_away_at_submission_then_node_set_down(project, reference):
    """The controller is away when the run submits its first allocation (stopped, started again once sbatch was
    refused): the refusal is transient, submitted again after a back-off, no retry spent. Later the node is set
    DOWN under a running allocation: NODE_FAIL, its unfinished members resubmitted, no retry spent."""
    node = socket.gethostname().split(".")[0]
    # While the controller is away its limits cannot be read: the CI site's limit comes from the site file here.
    site = project / "site-15.yaml"
    site.write_text((REPO / "profiles/slurm-ci/site.yaml").read_text() + f"\nmax_runtime: {max_time_minutes()}\n")
    scontrol("shutdown", "slurmctld")
    try:
        proc = start(project, "--config", "site_limits=none", f"site={site}", delay=4)
        wait_for(lambda: "refused for now" in proc.output.read_text(), "sbatch refused while away", proc=proc)
    finally:
        start_controller()
    wait_for(finished_in_running_allocation(project, 3), "3 jobs finished in a running allocation", proc=proc)
    scontrol("update", f"NodeName={node}", "State=DOWN", "Reason=fault-test")  # SLURM kills its jobs: NODE_FAIL
    time.sleep(5)
    # The CI cluster's ReturnToService=2 brings a responding node back by itself (a real site's admin resumes it).
    if node_state(node).startswith(("down", "drain")):
        scontrol("update", f"NodeName={node}", "State=RESUME")
    stop_delays(project)
    rc, out = finish(proc)
    assert rc == 0, out[-4000:]
    assert re.search(r"sbatch of \S+ refused for now \(.*Unable to contact slurm controller", out), out[-4000:]
    assert re.search(r"\) NODE_FAIL \(site event \d+\).* retries untouched, attempt 1\)", out), out[-4000:]
    assert "Trying to restart job" not in out
    assert_complete_and_once(project, reference, out)


def start_controller() -> None:
    """Start slurmctld again (as .ci/slurm/up.sh does: it forks into the background) and wait until it answers."""
    if subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=30).stdout.count("UP"):
        return
    subprocess.run(["slurmctld"], check=True, timeout=30)
    wait_for(lambda: "UP" in subprocess.run(["scontrol", "ping"], capture_output=True, text=True).stdout, "slurmctld")


def test_main_snakemake_killed_and_restarted_while_allocations_run(project, reference):
    proc = start(project, delay=4)
    wait_for(finished_in_running_allocation(project, 2), "2 jobs finished in a running allocation", proc=proc)
    os.kill(proc.pid, signal.SIGKILL)  # the login session lost: the allocation runs on
    proc.communicate(timeout=60)
    assert active_jobs(project)
    # As the README says after a kill -9 of Snakemake: unlock with the same arguments, then start again. A restart
    # while the earlier run's allocation still runs refuses, in one line, instead of starting a second copy.
    rc, out = finish(start(project, "--unlock"))
    assert rc == 0, out[-3000:]
    rc, out = finish(start(project))
    assert rc != 0
    assert "allocation(s) of an earlier run" in out, out[-3000:]
    stop_delays(project)
    wait_for(lambda: not active_jobs(project), "the earlier run's allocations to end")
    rc, out = finish(start(project))
    assert rc == 0, out[-4000:]
    assert_complete_and_once(project, reference, out)


def listed(jobid: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", jobid, "-o", "%T"], capture_output=True, text=True, timeout=30)
    return out.returncode == 0 and bool(out.stdout.strip())


# Per limit: what the site file overstates, the partition's own limit (set for the test where up.sh sets none), what
# SLURM says of the request (EnforcePartLimits NO: its PENDING reason; ALL: sbatch's refusal), how the line states
# the limit, and the site file's key that fixes it.
OVER_LIMITS = {
    "time": (
        "max_runtime: 600",
        None,
        {"NO": "SLURM holds it PENDING (PartitionTimeLimit)", "ALL": "Requested time limit is invalid"},
        r"asks (\d+) min and [\d,]+ MB; the site: partition ci: MaxTime (15) min",
        "max_runtime",
    ),
    "memory": (
        "max_mem_mb: 64000",
        ("MaxMemPerNode", "1500"),
        {"NO": "SLURM holds it PENDING (MaxMemPerLimit)", "ALL": "Memory required by task is not available"},
        r"asks \d+ min and ([\d,]+) MB; the site: partition ci: MaxTime 15 min, (1,500) MB per node",
        "max_mem_mb",
    ),
}


@pytest.mark.parametrize("limit", OVER_LIMITS)
@pytest.mark.parametrize("enforce", ["ALL", "NO"])
def test_allocation_over_the_partition_limit_ends_in_one_line(project, enforce, limit):
    """A site file that overstates a limit of the partition and wins over what SLURM states: 10 h where the
    partition allows 15 min, or 64 GB where it allows 1,500 MB per node (MaxMemPerNode). Under ALL sbatch refuses
    the allocation, under NO (SLURM's default) it is accepted and never starts. Either way the run ends in seconds
    with one line naming what was asked, the limit and the key, and the refusal is not retried (the same request
    cannot pass). (A QOS limit cannot be set on this cluster: it has no accounting daemon, and sacctmgr refuses
    without one; tests/test_slurm_site.py reads a QOS MaxWall from a stated sacctmgr answer.)"""
    stated, partition_limit, said, asked_and_limit, key = OVER_LIMITS[limit]
    site = project / "site-over.yaml"
    site.write_text(f"{stated}\ntflops: 0.1\n")
    # NO is SLURM's default: an over-limit allocation is accepted and stays PENDING forever. The partition's own
    # limit is set after the reconfigure (which restores slurm.conf's partitions) and undone before the next one.
    with slurm_setting("EnforcePartLimits", enforce):
        with partition_setting(*partition_limit) if partition_limit else contextlib.nullcontext():
            start_s = time.monotonic()
            rc, out = finish(start(project, "--config", "site_limits=slurm", f"site={site}"))
            took = time.monotonic() - start_s
    assert rc != 0
    lines = [line for line in out.splitlines() if "can never start" in line]
    assert lines, out[-3000:]
    assert said[enforce] in lines[0] and ("sbatch refuses it (" in lines[0]) == (enforce == "ALL"), lines[0]
    numbers = re.search(asked_and_limit, lines[0])
    assert numbers, lines[0]
    asked, allowed = (int(n.replace(",", "")) for n in numbers.groups())
    assert asked > allowed, lines[0]
    assert f"lower `{key}` in the site file (config key `site`)" in lines[0], lines[0]
    # The disagreement was said before anything was submitted, and the refusal was not retried.
    assert re.search(rf"sets {key} \d+ \w+, above what partition ci allows \({allowed} ", out), out[-3000:]
    assert "Trying to restart job" not in out, out[-3000:]
    # In seconds, not a hang: startup, one submission and (under NO) two status checks 3 s apart.
    assert took < 120, took
    print(
        f"{limit} over the limit, EnforcePartLimits={enforce}: the run ended {took:.0f} s after its start: {lines[0]}"
    )


def node_state(node: str) -> str:
    out = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-p", PARTITION, "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip()


def max_time_minutes() -> int:
    """The partition's MaxTime ([D-]HH:MM:SS) in minutes."""
    value = partition_value("MaxTime")
    days, _, clock = value.rpartition("-")
    h, m, _ = (int(x) for x in clock.split(":"))
    return int(days or 0) * 1440 + 60 * h + m


def sbatch_minutes(out: str) -> list[int]:
    """The walltime (-t) of every sbatch call a --verbose run logged."""
    return [int(m) for m in re.findall(r"sbatch call: .*? -t '?(\d+)'?", out)]


def test_the_ci_cluster_is_configured_like_a_site():
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    assert "EnforcePartLimits       = ALL" in config
    assert partition_value("MaxTime") not in ("UNLIMITED", "INFINITE") and max_time_minutes() <= 60
    assert shutil.which("sbatch")
