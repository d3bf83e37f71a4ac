"""The localhost SLURM cluster of `.ci/slurm/up.sh` as the workflow tests use it: runs of the tiny project through
`profiles/slurm` + `profiles/slurm-ci`, and what its allocations' logs say they ran. (Whether it is up: the `cluster`
marker, tests/conftest.py.)

Every allocation writes its own SLURM log (`.snakemake/slurm_logs/group_<group>/<SLURM job id>.log`); the inner
Snakemake prints a `localrule <rule>:` block per member it starts and `Finished jobid: <id>` per member it finished.
Counting those over every log of a run counts each job's finished executions across all attempts.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections import Counter
from pathlib import Path

from tiny_project import REPO, snakemake_command

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
