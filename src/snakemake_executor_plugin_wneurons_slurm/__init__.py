"""Snakemake executor plugin ``wneurons-slurm``: the slurm executor, except for what runs inside an allocation.

``snakemake --executor wneurons-slurm`` (``profiles/slurm``) submits jobs exactly as ``--executor slurm`` does
(snakemake-executor-plugin-slurm >= 2.8: sbatch, status checks, retries, cancellation, the same settings under
the ``--wneurons-slurm-`` prefix), and the profile's ``groups`` make one group job, i.e. one allocation, per
(model, revision). What differs is the command an allocation runs. The slurm plugin runs
``python -m snakemake --executor slurm-jobstep --jobs 1`` there, which starts every member job as an ``srun`` step
of its own: one process, one ``import torch`` and one model load per job. This plugin runs instead ONE Snakemake
with the local executor and ``--force-use-threads`` over all of the group's target jobs, with ``--cores`` = the
allocation's CPUs and ``--resources gpu=`` its GPUs, so the jobs run in threads of one process and borrow their
model from :mod:`wneurons.lm.model_pool`: one load per concurrent job slot, as under ``profiles/local``.
docs/design.md ("SLURM: one allocation per checkpoint") says why and what the outer run still knows.

The inner run is started through :mod:`snakemake_executor_plugin_wneurons_slurm.allocation`, which prints one line
at the end of the allocation's log (``.snakemake/slurm_logs/group_<group>/<jobid>.log``) with the jobs it ran and
the model loads they paid; ``perf/model_loads.py`` reads those lines.
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from snakemake_executor_plugin_slurm import Executor as SlurmExecutor
from snakemake_executor_plugin_slurm import ExecutorSettings as SlurmExecutorSettings
from snakemake_executor_plugin_slurm import common_settings as slurm_common_settings
from snakemake_interface_common.exceptions import WorkflowError
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface
from snakemake_interface_executor_plugins.utils import format_cli_arg, join_cli_args

# The module the allocation's command runs instead of `snakemake`: Snakemake's own CLI plus the closing line.
ALLOCATION_MODULE = f"{__name__}.allocation"
# Environment variable that carries the group's name (e.g. gpu-smollm2-135m-main) into the allocation.
GROUP_VARIABLE = "WNEURONS_SLURM_GROUP"

# The same settings as the slurm plugin's; Snakemake prefixes them with this plugin's name on the command line
# (`--wneurons-slurm-init-seconds-before-status-checks`, ...) and in profiles.
ExecutorSettings = SlurmExecutorSettings
common_settings = slurm_common_settings


def gpus_of(job: JobExecutorInterface) -> int:
    """GPUs the job's allocation gets: its ``gpu`` resource (the plugin submits ``--gpus=<gpu>``), 0 if none."""
    return int(job.resources.get("gpu", 0) or 0)


_JOB_BLOCK = re.compile(r"^(?:local)?rule \w+:\n(.*?)(?=^\S|\Z)", flags=re.MULTILINE | re.DOTALL)


def finished_outputs(allocation_log: str) -> set[str]:
    """Outputs of the jobs the inner Snakemake of an allocation finished, read from its log (each job's block with
    its `output:` and `jobid:` lines, then `Finished jobid: <id>` once it is done)."""
    outputs = {}
    for block in _JOB_BLOCK.finditer(allocation_log):
        jobid = re.search(r"^\s+jobid: (\d+)$", block[1], flags=re.MULTILINE)
        files = re.search(r"^\s+output: (.*)$", block[1], flags=re.MULTILINE)
        if jobid and files:
            outputs[jobid[1]] = files[1].split(", ")
    done = re.findall(r"^Finished jobid: (\d+) ", allocation_log, flags=re.MULTILINE)
    return {f for j in done for f in outputs.get(j, [])}


def remove_unfinished_outputs(job: JobExecutorInterface, allocation_log: Path | None, log) -> list[str]:
    """Delete the outputs of every member of the failed ``job`` (a group job or a single job) that its allocation
    did not finish (its log says which it did), and return them.

    Why: when an allocation fails or is cancelled, core Snakemake deletes the outputs of EVERY member of the group
    (each "might be corrupted"), finished conditions included, unless ``keep-incomplete`` is set, and with it
    deletes nothing. profiles/slurm sets ``keep-incomplete`` and this executor deletes what core Snakemake would
    delete for each failed job on its own, so a killed allocation leaves its finished conditions and the rerun
    redoes exactly the others. (Snakemake's incomplete markers cannot tell: the outer run may set them after the
    allocation started and finished its first jobs.)"""
    text = allocation_log.read_text(errors="replace") if allocation_log and allocation_log.exists() else ""
    finished = finished_outputs(text)
    removed = []
    for member in job.jobs if job.is_group() else [job]:
        if all(str(f) in finished for f in member.output):
            continue
        for f in map(Path, member.output):
            if f.is_dir() and not f.is_symlink():
                shutil.rmtree(f)
            elif f.exists() or f.is_symlink():
                f.unlink()
            else:
                continue
            removed.append(str(f))
    if removed:
        log.info(f"Removing output files of the unfinished jobs of failed job {job.jobid}: {', '.join(removed)}")
    return removed


class Executor(SlurmExecutor):
    def report_job_error(self, job_info, msg=None, **kwargs) -> None:
        allocation_log = (job_info.aux or {}).get("slurm_logfile")
        remove_unfinished_outputs(job_info.job, Path(allocation_log) if allocation_log else None, self.logger)
        super().report_job_error(job_info, msg, **kwargs)

    def additional_general_args(self) -> str:
        # The slurm plugin's "--executor slurm-jobstep --jobs 1" (one srun step per member) is replaced by the local
        # executor: the members run in this one process. `--executor local` is explicit so that a default profile
        # ($SNAKEMAKE_PROFILE) naming this executor cannot make the allocation submit jobs of its own.
        return "--executor local"

    def get_job_args(self, job: JobExecutorInterface, **kwargs) -> str:
        """Snakemake's arguments for the job (``--target-jobs`` with every member of a group, ``--allowed-rules``
        with their rules only, ...) with the allocation's cores, its GPUs as the ``gpu`` resource, and threads."""
        args = super().get_job_args(job, **kwargs)
        extra = [
            # The allocation's CPUs (sbatch --cpus-per-task = the job's threads), not the node's: a later --cores
            # wins over the `--cores all` of the arguments above.
            format_cli_arg("--cores", max(1, int(job.threads))),
            # Snakemake adds this only for single jobs (it wants separate processes for a group's members).
            format_cli_arg("--force-use-threads", job.is_group()),
            # At most as many GPU jobs at once as the allocation has GPUs: each is one job slot, one model load.
            format_cli_arg("--resources", [f"gpu={gpus_of(job)}"], skip=not gpus_of(job)),
        ]
        return join_cli_args([args, *extra])

    def get_job_exec_prefix(self, job: JobExecutorInterface) -> str:
        # Names the allocation in its closing line (a SLURM job's comment is not in its environment).
        prefix = super().get_job_exec_prefix(job)
        export = f"export {GROUP_VARIABLE}={shlex.quote(job.name)}"
        return f"{prefix} && {export}" if prefix else export

    def format_job_exec(self, job: JobExecutorInterface) -> str:
        """The slurm plugin's command for the job, with ``python -m snakemake`` replaced by the allocation module."""
        command = super().format_job_exec(job)
        python = self.get_python_executable()
        snakemake, allocation = f"{python} -m snakemake ", f"{python} -m {ALLOCATION_MODULE} "
        if snakemake not in command:
            raise WorkflowError(f"wneurons-slurm: no `{snakemake}` in the job's command {command!r}")
        return command.replace(snakemake, allocation, 1)
