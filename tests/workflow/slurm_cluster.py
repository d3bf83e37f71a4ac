"""The localhost SLURM cluster of `.ci/slurm/up.sh` as the workflow tests use it: runs of the tiny project through
`profiles/slurm` + `profiles/slurm-ci`, and what its allocations' logs say they ran. (Whether it is up: the `cluster`
marker, tests/conftest.py.)

Every allocation writes its own SLURM log (`.snakemake/slurm_logs/group_<group>/<SLURM job id>.log`); the inner
Snakemake prints a `localrule <rule>:` block per member it starts and `Finished jobid: <id>` per member it finished.
Counting those over every log of a run counts each job's finished executions across all attempts.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

from tiny_project import REPO, snakemake_command

# The CI cluster's default partition (.ci/slurm/up.sh, SLURM_CI_PARTITION; profiles/slurm-ci names it).
PARTITION = os.environ.get("SLURM_CI_PARTITION", "ci")
PROFILES = ("--profile", str(REPO / "profiles/slurm"), "--profile", str(REPO / "profiles/slurm-ci"))
TIMEOUT_S = 600


def allocation_logs(root: Path, model: str, revision: str) -> list[Path]:
    """The SLURM logs of a checkpoint's allocations (every attempt of each), oldest first (names are job ids)."""
    logs = (root / ".snakemake/slurm_logs").glob(f"group_gpu-{model}-{revision}-*/*.log")
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


def finished_over(logs: list[Path]) -> Counter:
    return sum((finished_jobs(log) for log in logs), Counter())


def run_slurm(root: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    """The tiny project's run through the SLURM profiles, in the background (its output in the file
    ``proc.output``, read by :func:`finish`: a pipe that nobody reads while a test waits for a fault fills up with a
    --verbose run's output and blocks Snakemake). The CI cluster's GPUs are stand-ins (/dev/null): its jobs run on
    the CPU, on purpose (WNEURONS_DEVICE=cpu, which sbatch --export=ALL carries into the allocation; without it a
    GPU job that cannot use CUDA fails; tests/conftest.py sets it for the whole test session)."""
    env = (os.environ if env is None else env) | {"WNEURONS_DEVICE": "cpu"}
    cmd = snakemake_command(root, *PROFILES, *args, threads=False)
    output = root / f".slurm-run-{time.monotonic_ns()}.log"
    with open(output, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    proc.output = output
    return proc


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    """Wait for the run (at most TIMEOUT_S) and return its exit code and output."""
    proc.wait(timeout=TIMEOUT_S)
    return proc.returncode, proc.output.read_text(errors="replace")


def wait_for(condition, what: str, timeout: float = TIMEOUT_S, proc: subprocess.Popen | None = None) -> None:
    """Poll ``condition`` twice a second until it holds; fail naming ``what`` (and the run's output if it ended)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended while waiting for {what}:\n{finish(proc)[1][-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def running_allocation(root: Path, model: str, revision: str) -> str | None:
    """The SLURM job id of the checkpoint's allocation that is RUNNING now, if any."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "RUNNING", "-o", "%i|%k|%Z"], capture_output=True, text=True, timeout=30
    ).stdout
    for line in out.splitlines():
        jobid, comment, workdir = line.split("|", 2)
        if comment.startswith(f"rule_gpu-{model}-{revision}-") and Path(workdir).resolve() == root.resolve():
            return jobid
    return None


def active_jobs(root: Path) -> list[str]:
    """SLURM job ids of runs of ``root`` still pending or running."""
    out = subprocess.run(["squeue", "-h", "-o", "%i|%Z"], capture_output=True, text=True, timeout=30).stdout
    return [line.split("|")[0] for line in out.splitlines() if Path(line.split("|", 1)[1]).resolve() == root.resolve()]


def scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, timeout=30, capture_output=True)


@contextlib.contextmanager
def slurm_setting(key: str, value: str):
    """The CI cluster with ``<key>=<value>`` in its slurm.conf (``scontrol reconfigure``, which also restores the
    partitions as slurm.conf states them), restored after."""
    conf = Path(os.environ.get("SLURM_CI_DIR", "/tmp/wneurons-slurm")) / "etc/slurm.conf"
    before = conf.read_text()
    assert re.search(rf"(?m)^{key}=", before), f"no {key} in {conf}"
    conf.write_text(re.sub(rf"(?m)^{key}=\w+$", f"{key}={value}", before))
    try:
        scontrol("reconfigure")
        yield
    finally:
        conf.write_text(before)
        scontrol("reconfigure")


@contextlib.contextmanager
def partition_setting(key: str, value: str):
    """The CI cluster's partition with ``<key>=<value>`` (``scontrol update``: until the next reconfigure, so inside
    any :func:`slurm_setting`), restored after."""
    before = partition_value(key)
    # scontrol shows an unset MaxMemPerNode as UNLIMITED but takes only a number back: 0 is SLURM's "unlimited".
    before = "0" if (key, before) == ("MaxMemPerNode", "UNLIMITED") else before
    scontrol("update", f"PartitionName={PARTITION}", f"{key}={value}")
    try:
        yield
    finally:
        scontrol("update", f"PartitionName={PARTITION}", f"{key}={before}")


def partition_value(key: str) -> str:
    """``key``'s value in ``scontrol show partition`` of the CI cluster's partition."""
    out = subprocess.run(["scontrol", "show", "partition", PARTITION], capture_output=True, text=True, timeout=30)
    for field in out.stdout.split():
        if field.startswith(f"{key}="):
            return field.split("=", 1)[1]
    raise AssertionError(f"no {key} in scontrol show partition {PARTITION}")


def time_limits(jobids: list[str]) -> dict[str, int]:
    """{SLURM job id: its time limit in minutes} of jobs squeue still lists (finished ones for MinJobAge)."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", ",".join(jobids), "-o", "%i|%l"], capture_output=True, text=True, timeout=30
    ).stdout
    limits = {}
    for line in out.splitlines():
        jobid, limit = line.split("|")
        days, _, clock = limit.rpartition("-")
        h, m, sec = ([0, 0, 0] + [int(x) for x in clock.split(":")])[-3:]
        limits[jobid] = int(days or 0) * 1440 + 60 * h + m + (sec > 0)
    return limits
