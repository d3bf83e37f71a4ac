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

import getpass
import math
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

import snakemake_executor_plugin_slurm as slurm_plugin
from snakemake.io import is_flagged
from snakemake_executor_plugin_slurm import Executor as SlurmExecutor
from snakemake_executor_plugin_slurm import common_settings as slurm_common_settings
from snakemake_interface_common.exceptions import WorkflowError
from snakemake_interface_executor_plugins.jobs import JobExecutorInterface
from snakemake_interface_executor_plugins.utils import encode_target_jobs_cli_args, format_cli_arg, join_cli_args

from wneurons.experiment import slurm_site
from wneurons.jobs import ledger

from .settings import ExecutorSettings  # noqa: F401 (Snakemake reads it from this module)

# The module the allocation's command runs instead of `snakemake`: Snakemake's own CLI plus the closing line.
ALLOCATION_MODULE = f"{__name__}.allocation"
# Environment variable that carries the group's name (e.g. gpu-smollm2-135m-main-a0) into the allocation.
GROUP_VARIABLE = slurm_site.ALLOCATION_VARIABLE
# Never sent to SLURM: sbatch runs with these removed from its environment, so `--export=ALL` cannot carry a hub
# token into the job's environment or slurmctld's job record (compute jobs read staged files only).
SECRET_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_TOKEN")
# SLURM states of an allocation that an earlier run may still be using (squeue's long names).
# Seconds a failed allocation's processes get to end before its ledger is read (above any site's KillWait, 30 s
# by default): report_job_error waits for them.
GONE_TIMEOUT_S = 300
ACTIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED", "STAGE_OUT"}


# The same settings as the slurm plugin's; Snakemake prefixes them with this plugin's name on the command line
# (`--wneurons-slurm-init-seconds-before-status-checks`, ...) and in profiles. The site's limits are not settings
# of the executor but a file of the config (`site`: wneurons.experiment.allocations.Site), because the DAG's
# allocations are planned from them, also in a dry run, where no executor settings exist.
common_settings = slurm_common_settings


def gpus_of(job: JobExecutorInterface) -> int:
    """GPUs the job's allocation gets: its ``gpu`` resource (the plugin submits ``--gpus=<gpu>``), 0 if none."""
    return int(job.resources.get("gpu", 0) or 0)


def member_entry(member: JobExecutorInterface) -> tuple[str, list[str], list[str]]:
    """A member of an allocation as its manifest records it: target spec, outputs, temporary outputs."""
    outputs = [str(f) for f in member.output]
    temporary = [str(f) for f in member.output if is_flagged(f, "temp")]
    return encode_target_jobs_cli_args(member.get_target_spec())[0], outputs, temporary


def members_of(job: JobExecutorInterface) -> list[JobExecutorInterface]:
    """The jobs an allocation runs: a group job's members, or the job itself."""
    return list(job.jobs) if job.is_group() else [job]


def member_finished(member: JobExecutorInterface, manifest: Path) -> bool:
    """Whether the allocation's ledger records ``member`` as finished (and its kept outputs still exist)."""
    _, outputs, temporary = member_entry(member)
    return ledger.finished(outputs, manifest, temporary)


def unfinished_members(job: JobExecutorInterface, manifest: Path) -> list[JobExecutorInterface]:
    return [m for m in members_of(job) if not member_finished(m, manifest)]


def unfinished(job: JobExecutorInterface, manifest: Path) -> list[tuple[str, list[str], list[str]]]:
    """The manifest entries (:func:`member_entry`) of the members of ``job`` without a record in the ledger."""
    return [member_entry(m) for m in unfinished_members(job, manifest)]


def remove_outputs(entries: list[tuple[str, list[str], list[str]]], log, jobid) -> list[str]:
    """Delete the outputs of the unfinished members ``entries`` of the failed job ``jobid``, and return them.

    Why: when an allocation fails or is cancelled, core Snakemake deletes the outputs of EVERY member of the group
    (each "might be corrupted"), finished conditions included, unless ``keep-incomplete`` is set, and with it
    deletes nothing. profiles/slurm sets ``keep-incomplete`` and this executor deletes what core Snakemake would
    delete for each unfinished job on its own, so the retry (or a later run) redoes exactly those."""
    removed = []
    for f in (Path(o) for _, outputs, _ in entries for o in outputs):
        if f.is_dir() and not f.is_symlink():
            shutil.rmtree(f)
        elif f.exists() or f.is_symlink():
            f.unlink()
        else:
            continue
        removed.append(str(f))
    if removed:
        log.info(f"Removing output files of the unfinished jobs of failed job {jobid}: {', '.join(removed)}")
    return removed


class EarlierAllocation(NamedTuple):
    """A SLURM job of an earlier wneurons-slurm run of this directory that may still run."""

    jobid: str
    state: str  # squeue's long name: PENDING, RUNNING, ...
    comment: str  # rule_<group>: the allocation it is

    def __str__(self) -> str:
        return f"{self.jobid} ({self.state}, {self.comment})"


def earlier_allocations(workdir: str, user: str | None = None) -> list[EarlierAllocation]:
    """This user's SLURM jobs that a wneurons-slurm run of ``workdir`` submitted (comment ``rule_...``) and that may
    still run; [] when squeue cannot be asked."""
    fmt = "%i|%T|%Z|%k"
    cmd = ["squeue", "-h", "-u", user or getpass.getuser(), "-o", fmt]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.splitlines():
        jobid, state, where, comment = (line.split("|", 3) + ["", "", ""])[:4]
        if state in ACTIVE_STATES and comment.startswith("rule_") and os.path.realpath(where) == workdir:
            found.append(EarlierAllocation(jobid, state, comment))
    return found


def wait_until_gone(jobid: str, timeout: float = GONE_TIMEOUT_S, poll: float = 1.0) -> bool:
    """Wait until SLURM no longer has ``jobid`` running or completing. A time limit, a cancel or a preemption makes
    the job's state terminal at once, while its processes get SIGTERM and KillWait seconds to end; a member that
    finishes in them writes its outputs and its ledger record. Read before that, the ledger would call it
    unfinished and its outputs would be deleted (seen: a member finished 6 s after its allocation's TIMEOUT, then
    ran again). This rests on the site killing every process of the job before it leaves squeue (proctrack/cgroup
    or pgid: .ci/slurm/up.sh); under proctrack/linuxproc a process that outlives its batch script escapes, and the
    job is gone while it still runs. True once gone; False when squeue cannot say or ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            out = subprocess.run(["squeue", "-h", "-j", jobid, "-o", "%T"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return False
        if out.returncode != 0:  # "Invalid job id specified": past MinJobAge, long gone
            return "Invalid job id" in out.stderr
        if not ACTIVE_STATES & set(out.stdout.split()):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)


def planned_minutes(member) -> int:
    """The whole minutes the planner gave a member of an allocation (its ``runtime`` resource; 0 if none)."""
    return int(member.resources.get("runtime", 0) or 0)


def left_minutes(runtimes: list[int], asked: int, planned_done: int, finished: int) -> float:
    """Minutes the unfinished members of a timed-out allocation need at the pace its attempt measured: a member's
    planned minutes (``runtimes``) x the attempt's walltime ``asked`` over the planned minutes of the ``finished``
    members it ran (``planned_done``). A member planned at seconds asks 0 whole minutes (allocations.spread puts the
    rounding and the load on the first), which carries no estimate: it counts as the attempt's walltime over its
    finished members. (Scaled by planned minutes alone, such members asked less than the attempt that ran out of
    time: on a CPU cluster at the stated GPU rates, 3 -> 1 min, then 2 -> 1, never converging.)"""
    per_minute, per_member = asked / max(planned_done, 1), asked / finished
    return sum(r * per_minute if r > 0 else per_member for r in runtimes)


# Set in a submitted job's aux once it was reported finished or failed (check_active_jobs keeps the others).
REPORTED = "wneurons_reported"
# Minutes an allocation whose members ask 0 minutes asks (imports and the model's load; a TIMEOUT grows it).
MIN_WALLTIME = 5
# Snakemake job id -> walltime (minutes) its next submission asks instead of its planned one: set after a TIMEOUT
# from the progress its ledger measured (Executor.timed_out).
WALLTIME = {}


def _without_secrets(get_submit_command):
    """The slurm plugin's sbatch command builder, with the command run under ``env -u`` of every secret, and the
    walltime of a job that timed out replaced by the one :data:`WALLTIME` holds for it."""

    def build(job, *args, **kwargs) -> str:
        call = get_submit_command(job, *args, **kwargs)
        if job.jobid in WALLTIME:
            call = re.sub(r"(?<= )-t '?\d+'?(?= )", f"-t {WALLTIME[job.jobid]}", call, count=1)
        elif call.startswith("sbatch ") and not re.search(r" -t '?\d", call):
            # Members of seconds ask 0 minutes (allocations.spread); left alone after a restart, their allocation
            # would be submitted without a walltime, i.e. with the partition's default, whatever that is.
            call = call.replace("sbatch ", f"sbatch -t {MIN_WALLTIME} ", 1)
        unset = " ".join(f"-u {v}" for v in SECRET_VARIABLES)
        return f"env {unset} {call}" if call.startswith("sbatch ") else call

    build.wneurons = True
    return build


# The states Executor.site_event always handles itself (the plugin must never act on them: classify_state's
# RESUBMIT and GROW).
HANDLED_FIRST = (*slurm_site.RESUBMIT_STATES, "TIMEOUT")


def _site_events_left_to_executor(query_job_status):
    """The slurm plugin's status query with the states :meth:`Executor.check_active_jobs` handles before the plugin
    (preemption, node and boot failures, time limits: :data:`HANDLED_FIRST`) reported as still running. The plugin
    would treat PREEMPTED as running forever (with PreemptMode=CANCEL it never changes again) and NODE_FAIL or
    TIMEOUT as a failure that spends a retry; a state that turns between this executor's own query and the plugin's
    is handled at the next check."""

    async def query(command: str, logger):
        statuses, duration = await query_job_status(command, logger)
        for jobid, state in (statuses or {}).items():
            if state and state.split()[0] in HANDLED_FIRST:
                statuses[jobid] = "RUNNING"
        return statuses, duration

    query.wneurons = True
    return query


def site_states(run_uuid: str) -> dict[str, tuple[str, str]] | None:
    """jobid -> (state, pending reason) of this run's SLURM jobs (squeue; the jobs it still lists); None when squeue
    cannot be asked."""
    cmd = ["squeue", "-h", "--states=all", "--name", run_uuid, "-o", "%i|%T|%r"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    rows = (line.split("|", 2) for line in out.stdout.splitlines() if line.count("|") >= 2)
    return {jobid.strip(): (state.strip(), reason.strip()) for jobid, state, reason in rows}


# The two seams in the slurm plugin (pinned >=2.8,<2.9 in pyproject.toml; tests/test_slurm_executor.py checks
# they are still where this module expects them).
if not getattr(slurm_plugin.get_submit_command, "wneurons", False):
    slurm_plugin.get_submit_command = _without_secrets(slurm_plugin.get_submit_command)
if not getattr(slurm_plugin.query_job_status, "wneurons", False):
    slurm_plugin.query_job_status = _site_events_left_to_executor(slurm_plugin.query_job_status)

# Resubmissions of one allocation after the site took it away (preemption, NODE_FAIL, BOOT_FAIL) and of one sbatch
# after a transient refusal, before the executor gives up on it. These spend none of Snakemake's retries.
MAX_RESUBMISSIONS = 20
# Seconds between sbatch attempts after a transient refusal (controller restarting, MaxSubmit): doubled each time.
SUBMIT_BACKOFF_S = (5, 10, 20, 40, 60, 120, 240)
# Status checks in a row that must give a job a pending reason no wait clears before it is ended.
NEVER_START_CHECKS = 2
# Status checks in a row that must miss a job never seen in squeue before it counts as gone.
MISSES_BEFORE_GONE = 3


def mark_reported(job_info) -> None:
    """Mark a submitted job as reported finished or failed (its ``aux`` is None when sbatch refused it)."""
    job_info.aux = job_info.aux if job_info.aux is not None else {}
    job_info.aux[REPORTED] = True


class Executor(SlurmExecutor):
    def __post_init__(self, test_mode: bool = False) -> None:
        super().__post_init__(test_mode=test_mode)
        self._seen: set[str] = set()  # SLURM job ids squeue has listed
        self._misses: dict[str, int] = {}  # never listed yet: status checks that missed it
        self._never_start: dict[str, int] = {}  # SLURM job id -> checks in a row it was held for good
        self._ours: set[str] = set()  # job ids this executor cancelled itself
        self._resubmitted: dict[int, int] = {}  # Snakemake job id -> resubmissions spent on site events
        self._for_good: set[int] = set()  # Snakemake job ids ended without a retry (handle_job_error)
        self._left_at_submit: dict[int, list] = {}  # Snakemake job id -> its members unfinished at its submission
        self._idle_timeouts: dict[int, int] = {}  # Snakemake job id -> TIMEOUTs that finished no member
        # The plan was made without the site's limits (`site_limits: slurm`, but SLURM did not answer when the DAG
        # was built): submitting it could ask what the site refuses or never starts.
        if slurm_site.READ_ERROR and not test_mode:
            raise WorkflowError(f"{slurm_site.READ_ERROR}: nothing submitted (the plan needs the site's limits)")
        # A restart of the main process must not start a second copy of allocations an earlier run (killed, or its
        # login session lost) left running: both would write the same files. Its DAG was built from the files as
        # they were before those allocations end, so waiting here would not help: stop, in one line.
        workdir = os.path.realpath(self.workflow.workdir_init)
        running = [] if test_mode else earlier_allocations(workdir)
        # Those still PENDING never started (the profile submits --no-requeue): nothing of theirs runs, so they are
        # cancelled, and this run submits their members again. Only running ones stop the restart.
        pending = [a for a in running if a.state == "PENDING"]
        if pending:
            subprocess.run(["scancel", *(a.jobid for a in pending)], capture_output=True, timeout=60)
            self.logger.warning(
                f"wneurons-slurm: cancelled {len(pending)} PENDING allocation(s) of an earlier run of {workdir} "
                f"(never started; this run submits their members): {'; '.join(map(str, pending[:5]))}"
            )
            running = [a for a in running if a.state != "PENDING"]
        if running:
            raise WorkflowError(
                f"wneurons-slurm: {len(running)} allocation(s) of an earlier run of {workdir} may still run: "
                f"{'; '.join(map(str, running[:5]))}{' ...' if len(running) > 5 else ''}. Wait for them to end "
                "(squeue --me) or scancel them, then start again: their finished members are kept."
            )

    async def check_active_jobs(self, active_jobs):
        """The slurm plugin's status check, after this executor's own reading of the site's events
        (:meth:`site_event`), with the plugin's growing wait between checks capped by the setting
        ``max_seconds_between_status_checks``."""
        states = site_states(self.run_uuid) if active_jobs else None
        left = [j for j in active_jobs if states is None or not self.site_event(j, states)]
        seen = set()
        async for job in super().check_active_jobs(left):
            seen.add(id(job))  # the plugin yields the very objects it was given
            yield job
        # The plugin drops every job when its status query fails (sacct without accounting, which it falls back to
        # where MinJobAge is below 3 x the init seconds): such a job would be lost, and the run would wait forever.
        # Whatever it neither reported nor kept is still active.
        for job in left:
            if id(job) not in seen and not (job.aux or {}).get(REPORTED):
                yield job
        cap = self.workflow.executor_settings.max_seconds_between_status_checks
        if cap and self.next_seconds_between_status_checks > cap:
            self.next_seconds_between_status_checks = cap

    def site_event(self, job_info, states: dict[str, tuple[str, str]]) -> bool:
        """Handle what the site did to one allocation, from squeue's state and reason; True if handled here (the
        job is resubmitted, ended or judged, and not passed on to the slurm plugin's check)."""
        jobid = str(job_info.external_jobid)
        if jobid not in states:
            return self.judge_missing(job_info)
        self._seen.add(jobid)
        self._misses.pop(jobid, None)
        state, reason = states[jobid]
        # A reason that no wait clears, seen at NEVER_START_CHECKS checks in a row: right after a submission or a
        # reconfigure SLURM may give one that the next scheduling pass replaces (seen: PartitionConfig, then
        # PartitionTimeLimit).
        never = state == "PENDING" and slurm_site.never_starts(reason)
        self._never_start[jobid] = self._never_start.get(jobid, 0) + 1 if never else 0
        if self._never_start[jobid] >= NEVER_START_CHECKS:
            self.end_for_good(job_info, self.request_line(job_info, f"SLURM holds it PENDING ({reason})"), cancel=True)
            return True
        kind = slurm_site.classify_state(state, cancelled_by_us=jobid in self._ours)
        if kind == slurm_site.GROW:
            self.timed_out(job_info)
            return True
        if kind == slurm_site.RESUBMIT:
            self.resubmit(job_info, state)
            return True
        if kind == slurm_site.STOP:
            self.end_for_good(
                job_info,
                f"wneurons-slurm: allocation {job_info.job.name} (SLURM job {jobid}) was cancelled (scancel by a user "
                "or an admin): not resubmitted; its finished members are kept, a new run submits the rest",
            )
            return True
        return False

    def judge_missing(self, job_info) -> bool:
        """A job squeue no longer lists (purged after the site's MinJobAge, e.g. while this run was stopped) or has
        never listed: judged by its allocation's ledger once it was seen before or missed
        :data:`MISSES_BEFORE_GONE` checks in a row, never counted as running forever."""
        jobid = str(job_info.external_jobid)
        self._misses[jobid] = self._misses.get(jobid, 0) + 1
        if jobid not in self._seen and self._misses[jobid] < MISSES_BEFORE_GONE:
            return False
        left, total = unfinished(job_info.job, self.manifest_of(job_info.job)), len(members_of(job_info.job))
        if not left:
            self.logger.info(f"wneurons-slurm: SLURM job {jobid} is no longer listed; its ledger: all {total} done")
            self.report_job_success(job_info)
        else:
            self.report_job_error(
                job_info, msg=f"SLURM no longer lists the job (past MinJobAge); its ledger: {len(left)} unfinished"
            )
        return True

    @staticmethod
    def asked(job) -> tuple[int, int]:
        """(walltime minutes, memory MB) the job's allocation asks."""
        return int(job.resources.get("runtime", 0) or 0), int(job.resources.get("mem_mb", 0) or 0)

    def request(self, job) -> str:
        minutes, mem = self.asked(job)
        return f"{minutes} min, {mem:,} MB"

    def request_line(self, job_info, why: str) -> str:
        minutes, mem = self.asked(job_info.job)
        return slurm_site.request_line(job_info.job.name, job_info.external_jobid, minutes, mem, why, slurm_site.LIMITS)

    def end_for_good(self, job_info, line: str, cancel: bool = False) -> None:
        """Fail the allocation without a retry: retrying the same request, or what a user cancelled, cannot help
        (:meth:`handle_job_error`)."""
        if cancel and job_info.external_jobid:
            self._ours.add(str(job_info.external_jobid))
            subprocess.run(["scancel", str(job_info.external_jobid)], capture_output=True, timeout=60)
        self.logger.error(line)
        self._for_good.add(job_info.job.jobid)
        self.report_job_error(job_info, msg=line)

    def handle_job_error(self, job) -> None:
        """Called by Snakemake's scheduler on a failed job just before it decides on a retry (``restart_times >
        attempt - 1``, its _handle_error): a job ended for good gets its attempt set past the last one. Set here,
        not when the failure is reported: the attempt's setter drops the job's computed resources, and the report
        path still reads them (seen: a run that hung after a refusal). ``_attempt`` directly, for the same reason."""
        super().handle_job_error(job)
        if job.jobid in self._for_good:
            job._attempt = job.restart_times + 1
            for member in getattr(job, "jobs", ()):
                member._attempt = job._attempt

    def resubmit(self, job_info, state: str) -> None:
        """The site took the allocation away (preempted, its node failed or never booted): its unfinished members
        are submitted again at the same request, without spending a retry or raising memory."""
        job, jobid = job_info.job, str(job_info.external_jobid)
        count = self._resubmitted[job.jobid] = self._resubmitted.get(job.jobid, 0) + 1
        if count > MAX_RESUBMISSIONS:
            line = f"wneurons-slurm: allocation {job.name} taken away by the site {count - 1} times (now {state})"
            self.end_for_good(job_info, line + ": given up; a new run resubmits what is left")
            return
        left, total = self.settle(job_info), len(members_of(job))
        self.logger.warning(
            f"wneurons-slurm: allocation {job.name} (SLURM job {jobid}) {state} (site event {count}): "
            f"{total - len(left)} of {total} members finished and are kept; the other {len(left)} are resubmitted "
            f"at the same request ({self.request(job)}; retries untouched, attempt {job.attempt})"
        )
        remove_outputs([member_entry(m) for m in left], self.logger, job.jobid)
        self.run_job(job)

    def timed_out(self, job_info) -> None:
        """The allocation hit its walltime: its estimate was too short. It is resubmitted without spending a retry,
        asking for its unfinished members' planned minutes scaled by what this attempt measured (its walltime over
        the planned minutes of the members it finished, x 1.25), at most the site's limit; an unfinished member that
        asks 0 whole minutes counts as this attempt's walltime over the members it finished (:func:`left_minutes`).
        An attempt that finished nothing doubles the walltime, and a second one stops in one line naming the
        estimate's keys."""
        job, jobid = job_info.job, str(job_info.external_jobid)
        left = self.settle(job_info)
        before = self._left_at_submit.get(job.jobid, members_of(job))
        done = [m for m in before if m not in left]
        asked = WALLTIME.get(job.jobid) or self.asked(job)[0]
        runtimes_left = [planned_minutes(m) for m in left]
        planned_done, planned_left = sum(planned_minutes(m) for m in done), sum(runtimes_left)
        cap = slurm_site.MAX_RUNTIME
        if not done:
            self._idle_timeouts[job.jobid] = self._idle_timeouts.get(job.jobid, 0) + 1
            if self._idle_timeouts[job.jobid] >= 2:
                self.end_for_good(
                    job_info,
                    f"wneurons-slurm: allocation {job.name} (SLURM job {jobid}) timed out twice without finishing "
                    f"a member (last asked {asked} min): its jobs run far slower than planned. Lower the site file's "
                    "`tflops` (the throughput the plan assumes) or raise its `margin`, then start again",
                )
                return
            new = 2 * asked
        else:
            new = math.ceil(left_minutes(runtimes_left, asked, planned_done, len(done)) * 1.25)
        new = max(1, min(new, cap) if cap else new)
        WALLTIME[job.jobid] = new
        entries = [member_entry(m) for m in left]
        self.logger.warning(
            f"wneurons-slurm: allocation {job.name} (SLURM job {jobid}) TIMEOUT after {asked} min: {len(done)} "
            f"members finished in it (planned {planned_done} min), {len(left)} left (planned {planned_left} min); "
            f"resubmitted with walltime {asked} -> {new} min (retries untouched{', site limit' if new == cap else ''})"
        )
        remove_outputs(entries, self.logger, job.jobid)
        self.run_job(job)

    def _report_job_error_threadsafe(self, job_info, msg: str) -> None:
        """An sbatch refusal (the slurm plugin reports it here, from the submitting thread): a transient one is tried
        again with back-off without spending a retry; a limit is ended for good with one line naming the request,
        the limit and the key; any other goes to Snakemake's retries."""
        refusal = slurm_site.classify_refusal(msg) if job_info.external_jobid is None else None
        job = job_info.job
        if refusal == slurm_site.TRANSIENT:
            count = self._resubmitted[job.jobid] = self._resubmitted.get(job.jobid, 0) + 1
            if count <= MAX_RESUBMISSIONS:
                wait = SUBMIT_BACKOFF_S[min(count, len(SUBMIT_BACKOFF_S)) - 1]
                self.logger.warning(
                    f"wneurons-slurm: sbatch of {job.name} refused for now ({msg.splitlines()[0][:200]}): "
                    f"submitted again in {wait} s (retries untouched)"
                )
                time.sleep(wait)
                self.run_job(job)
                return
        if refusal == slurm_site.LIMIT:
            refused = next((line.strip() for line in msg.splitlines() if "error" in line.lower()), msg.splitlines()[0])
            line = self.request_line(job_info, f"sbatch refuses it ({refused[:200]})")
            self.logger.error(line)
            self._for_good.add(job.jobid)
            msg = line
        super()._report_job_error_threadsafe(job_info, msg)

    def report_job_success(self, job_info) -> None:
        mark_reported(job_info)
        super().report_job_success(job_info)

    def report_job_error(self, job_info, msg=None, **kwargs) -> None:
        mark_reported(job_info)
        job = job_info.job
        left, total = [member_entry(m) for m in self.settle(job_info)], len(members_of(job))
        # One line with the checkpoint, the cause and what is kept: Snakemake's own error lists every member.
        cause = (msg or "failed").splitlines()[0]
        self.logger.warning(
            f"wneurons-slurm: allocation {job.name} (SLURM job {job_info.external_jobid}): {cause} "
            f"{total - len(left)} of {total} members finished and are kept; a retry runs the other {len(left)}"
        )
        remove_outputs(left, self.logger, job.jobid)
        super().report_job_error(job_info, msg, **kwargs)

    def settle(self, job_info) -> list[JobExecutorInterface]:
        """The allocation's unfinished members by its ledger, once SLURM no longer lists it (so no member still
        writes): what a resubmission, a grown walltime or a retry runs again. No SLURM job id: sbatch refused the
        submission, nothing ran and nothing is waited for."""
        jobid = job_info.external_jobid
        if jobid and not wait_until_gone(str(jobid)):
            self.logger.warning(
                f"wneurons-slurm: SLURM job {jobid} still listed after {GONE_TIMEOUT_S} s; "
                "its members are judged by the ledger as it is now"
            )
        return unfinished_members(job_info.job, self.manifest_of(job_info.job))

    def manifest_of(self, job: JobExecutorInterface) -> Path:
        return Path(self.workflow.workdir_init) / ledger.manifest_path(self.run_uuid, job.name)

    def additional_general_args(self) -> str:
        # The slurm plugin's "--executor slurm-jobstep --jobs 1" (one srun step per member) is replaced by the local
        # executor: the members run in this one process. `--executor local` is explicit so that a default profile
        # ($SNAKEMAKE_PROFILE) naming this executor cannot make the allocation submit jobs of its own.
        # --keep-going: one failed member does not stop the others (the outer run resubmits only what failed).
        return "--executor local --keep-going"

    def get_job_args(self, job: JobExecutorInterface, **kwargs) -> str:
        """Snakemake's arguments for the job (``--target-jobs`` with every member of a group, ``--allowed-rules``
        with their rules only, ...) with the allocation's cores, its GPUs as the ``gpu`` resource, and threads.
        Writes the allocation's manifest (:mod:`wneurons.jobs.ledger`), which the allocation reads to skip members
        an earlier attempt finished."""
        ledger.write_manifest(self.manifest_of(job), [member_entry(m) for m in members_of(job)])
        self._left_at_submit[job.jobid] = unfinished_members(job, self.manifest_of(job))
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
        # Names the allocation in its closing line (a SLURM job's comment is not in its environment) and tells it
        # where its manifest is; the secrets are unset again in case the site's sbatch exports a login environment.
        prefix = super().get_job_exec_prefix(job)
        exports = [
            f"export {GROUP_VARIABLE}={shlex.quote(job.name)}",
            f"export {ledger.MANIFEST_VARIABLE}={shlex.quote(str(self.manifest_of(job)))}",
            f"unset {' '.join(SECRET_VARIABLES)}",
        ]
        return " && ".join([prefix, *exports] if prefix else exports)

    def format_job_exec(self, job: JobExecutorInterface) -> str:
        """The slurm plugin's command for the job, with ``python -m snakemake`` replaced by the allocation module."""
        command = super().format_job_exec(job)
        python = self.get_python_executable()
        snakemake, allocation = f"{python} -m snakemake ", f"{python} -m {ALLOCATION_MODULE} "
        if snakemake not in command:
            raise WorkflowError(f"wneurons-slurm: no `{snakemake}` in the job's command {command!r}")
        return command.replace(snakemake, allocation, 1)
