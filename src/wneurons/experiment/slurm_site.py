"""What a SLURM site says about itself, read rather than assumed, and what its job states and refusals mean.

The planner sizes allocations to the site's walltime and memory limits (:mod:`wneurons.experiment.allocations`).
With ``site_limits: slurm`` (profiles/slurm sets it) those limits are read from the controller when the DAG is
built: the GPU partition's ``MaxTime`` and ``MaxMemPerNode`` (``scontrol show partition``), its nodes' memory and GPUs
(``sinfo``), and the QOS ``MaxWall`` where accounting exists (``sacctmgr``). A site file's own value wins; where it
asks more than the site allows, one line says so (the site file may know of a QOS that allows it).

The executor (``snakemake_executor_plugin_wneurons_slurm``) classifies what happens to an allocation from SLURM's
state, its pending reason and sbatch's stderr (:func:`classify_state`, :func:`classify_refusal`,
:func:`never_starts`): which events resubmit without spending a retry, which end an allocation for good with one
line, which retry as Snakemake does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

# Set in the command of every allocation of the wneurons-slurm executor (to its group's name): a run that sees it
# is the inner run of an allocation.
ALLOCATION_VARIABLE = "WNEURONS_SLURM_GROUP"


# ---------------------------------------------------------------- reading the site


class SiteQueryError(RuntimeError):
    """SLURM could not be asked, or answered something this module cannot read (one line)."""


def slurm_minutes(value: str) -> int | None:
    """Minutes of a SLURM duration (``[D-]HH:MM:SS``, ``MM:SS``, ``MM``); None for UNLIMITED / INFINITE / NONE."""
    if value.upper() in ("UNLIMITED", "INFINITE", "NONE", "") or value.startswith("("):
        return None
    days, _, clock = value.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if len(parts) == 3:
        minutes = 60 * parts[0] + parts[1] + (parts[2] > 0)
    elif len(parts) == 2:
        minutes = parts[0] + (parts[1] > 0)
    else:
        minutes = parts[0]
    return int(days or 0) * 1440 + minutes


def record(line: str) -> dict[str, str]:
    """The ``Key=Value`` fields of one line of ``scontrol show ... -o``."""
    return dict(field.split("=", 1) for field in line.split() if "=" in field)


@dataclass(frozen=True)
class SiteLimits:
    """One partition's limits as SLURM states them (None: no limit stated)."""

    partition: str
    max_time_min: int | None
    max_mem_mb: int | None  # the partition's MaxMemPerNode, or its largest node's memory, whichever is lower
    gpus_per_node: int
    qos_max_wall_min: int | None = None
    enforce_part_limits: str = "NO"

    @property
    def max_runtime(self) -> int | None:
        """The longest walltime an allocation may ask: the partition's and the QOS's, the lower one."""
        known = [m for m in (self.max_time_min, self.qos_max_wall_min) if m is not None]
        return min(known) if known else None

    def describe(self) -> str:
        time = f"MaxTime {self.max_time_min} min" if self.max_time_min else "no MaxTime"
        qos = f", QOS MaxWall {self.qos_max_wall_min} min" if self.qos_max_wall_min else ""
        mem = f", {self.max_mem_mb:,} MB per node" if self.max_mem_mb else ""
        return f"partition {self.partition}: {time}{qos}{mem}, {self.gpus_per_node} GPU(s) per node"


Run = Callable[[list[str]], str]


def _run(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        raise SiteQueryError(f"`{' '.join(cmd)}` could not run: {err}") from None
    if out.returncode != 0:
        reason = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise SiteQueryError(f"`{' '.join(cmd)}` failed (rc {out.returncode}): {reason}")
    return out.stdout


def read_limits(partition: str | None = None, qos: str | None = None, run: Run = _run) -> SiteLimits:
    """The limits of ``partition`` (None: the cluster's default partition) and of ``qos`` where accounting answers."""
    lines = [record(line) for line in run(["scontrol", "show", "partition", "-o"]).splitlines() if line.strip()]
    if partition is None:
        chosen = [p for p in lines if p.get("Default") == "YES"]
        if not chosen:
            raise SiteQueryError("no default partition (scontrol show partition): set gpu_partition in the site file")
    else:
        chosen = [p for p in lines if p.get("PartitionName") == partition]
        if not chosen:
            names = ", ".join(p.get("PartitionName", "?") for p in lines)
            raise SiteQueryError(f"partition {partition!r} not found (scontrol show partition: {names})")
    part = chosen[0]
    name = part["PartitionName"]
    mem_per_node = part.get("MaxMemPerNode", "UNLIMITED")
    nodes = [line.split("|") for line in run(["sinfo", "-h", "-p", name, "-o", "%m|%G"]).splitlines() if "|" in line]
    node_mem = max((int(m.rstrip("+")) for m, _ in nodes if m.rstrip("+").isdigit()), default=None)
    gpus = max((gres_gpus(g) for _, g in nodes), default=0)
    limits = [m for m in (node_mem, int(mem_per_node) if mem_per_node.isdigit() else None) if m is not None]
    settings = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition("=") for line in run(["scontrol", "show", "config"]).splitlines())
    )
    return SiteLimits(
        partition=name,
        max_time_min=slurm_minutes(part.get("MaxTime", "UNLIMITED")),
        max_mem_mb=min(limits) if limits else None,
        gpus_per_node=gpus,
        qos_max_wall_min=qos_max_wall(qos or part.get("QoS"), run),
        enforce_part_limits=settings.get("EnforcePartLimits", "NO"),
    )


def gres_gpus(gres: str) -> int:
    """GPUs in a node's GRES string (``gpu:2``, ``gpu:h100:4(S:0-1)``, ``(null)``)."""
    return sum(int(m) for m in re.findall(r"gpu(?::[\w-]+)?:(\d+)", gres))


def qos_max_wall(qos: str | None, run: Run) -> int | None:
    """The QOS's MaxWall in minutes; None without a QOS, without accounting (sacctmgr fails) or without a limit."""
    if not qos or qos.upper() in ("N/A", "NONE"):
        return None
    try:
        out = run(["sacctmgr", "-nP", "show", "qos", qos, "format=MaxWall"])
    except SiteQueryError:
        return None  # no accounting daemon: no QOS limits to read (the partition's still hold)
    values = [slurm_minutes(v.strip()) for v in out.splitlines() if v.strip()]
    return next((v for v in values if v is not None), None)


def given_keys(site_file: str | None) -> set[str]:
    """The keys a site file sets (its values win over what SLURM says)."""
    if site_file is None:
        return set()
    import yaml

    return set((yaml.safe_load(Path(site_file).read_text()) or {}).keys())


def with_limits(site, given: set[str], limits: SiteLimits, site_file: str | None) -> tuple[object, list[str]]:
    """``site`` (a :class:`wneurons.experiment.allocations.Site`) with SLURM's limits where the site file is silent,
    and the lines to print: what was read, and one per disagreement (a site file value above the site's limit)."""
    where = site_file or "no site file"
    notes = [f"site_limits: read {limits.describe()} (EnforcePartLimits={limits.enforce_part_limits})"]
    values: dict[str, int] = {}
    for key, slurm_value, unit in (("max_runtime", limits.max_runtime, "min"), ("max_mem_mb", limits.max_mem_mb, "MB")):
        if slurm_value is None:
            continue
        if key not in given or getattr(site, key) is None:
            values[key] = slurm_value
        elif getattr(site, key) > slurm_value:
            notes.append(
                f"site_limits: {where} sets {key} {getattr(site, key)} {unit}, above what partition "
                f"{limits.partition} allows ({slurm_value} {unit}); the site file wins: an allocation asking more "
                "is refused or never starts, unless its QOS allows it"
            )
    return replace(site, **values), notes


# What SLURM states for each limit of the site file, in the words of the errors that name a limit's source.
READ_FROM = {"max_runtime": "MaxTime / its QOS's MaxWall", "max_mem_mb": "MaxMemPerNode / its largest node's memory"}


def limit_source(key: str, given: set[str], limits: SiteLimits | None) -> str:
    """Where the planner's ``key`` (max_runtime, max_mem_mb) comes from, in the words of the error that names it:
    the site file, what SLURM stated (``limits``, read under ``site_limits: slurm``), or the default."""
    if key in given:
        return f"site file, {key}"
    if limits is not None and getattr(limits, key) is not None:
        return f"read from SLURM: partition {limits.partition}'s {READ_FROM[key]}"
    return f"the default; set {key} in a site file"


# Why the last :func:`site_from_slurm` of this process could not read the site (None: it could, or never tried).
UNREAD = "site_limits: slurm: "
READ_ERROR: str | None = None
# What it read (the executor names these limits when an allocation cannot start), and the walltime limit the plan
# used (the site file's or SLURM's): a TIMEOUT's resubmission never asks more.
LIMITS: SiteLimits | None = None
MAX_RUNTIME: int | None = None


def site_from_slurm(
    site, site_file: str | None, given: set[str] | None = None, run: Run = _run
) -> tuple[object, list[str]]:
    """``site`` with the limits SLURM states for its GPU partition and QOS (:func:`with_limits`) and the lines to
    print. Where SLURM cannot be asked, ``site`` unchanged, a line that says so, and :data:`READ_ERROR` set: a dry run
    still plans (with the site file or the defaults), the executor refuses to submit. ``given``: the site file's
    keys (:func:`given_keys`), where the caller has read them already."""
    global READ_ERROR, LIMITS, MAX_RUNTIME
    try:
        LIMITS = handed_limits(site.gpu_partition, site.gpu_qos, run)
    except SiteQueryError as err:
        READ_ERROR, LIMITS = f"{UNREAD}{err}", None
        where = site_file or "the defaults"
        return site, [f"{READ_ERROR}; planned with {where} ({site.max_runtime} min per allocation) instead"]
    READ_ERROR = None
    site, notes = with_limits(site, given_keys(site_file) if given is None else given, LIMITS, site_file)
    MAX_RUNTIME = site.max_runtime
    return site, notes


# `wneurons plan` reads the site, then runs a dry run whose Snakefile would read it again: what it read goes to the
# dry run in this variable (JSON: the SiteLimits' fields, or {"error": why SLURM could not be asked}), so that one
# command asks the controller once (:func:`handed_on`, :func:`handed_limits`).
READ_VARIABLE = "WNEURONS_SITE_LIMITS_READ"


def handed_on() -> dict[str, str]:
    """The environment under which a dry run this process starts uses its last :func:`site_from_slurm` (of the same
    site file) instead of asking SLURM again; {} where it has read nothing."""
    if LIMITS is not None:
        return {READ_VARIABLE: json.dumps(asdict(LIMITS))}
    if READ_ERROR is not None:
        return {READ_VARIABLE: json.dumps({"error": READ_ERROR.removeprefix(UNREAD)})}
    return {}


def handed_limits(partition: str | None, qos: str | None, run: Run = _run) -> SiteLimits:
    """The limits the process that started this one read (:data:`READ_VARIABLE`), else :func:`read_limits`; a
    SiteQueryError where that process could not read them."""
    handed = os.environ.get(READ_VARIABLE)
    if handed is None:
        return read_limits(partition, qos, run)
    value = json.loads(handed)
    if "error" in value:
        raise SiteQueryError(value["error"])
    return SiteLimits(**value)


# ---------------------------------------------------------------- what SLURM's answers mean

# Pending reasons that cannot clear while the job waits: the request exceeds a per-job limit, or names something
# the site does not have. (Group limits like AssocGrpCpuLimit clear as other jobs end; ReqNodeNotAvail as nodes
# return: those are waited for.)
NEVER_START = {
    "PartitionTimeLimit",
    "PartitionNodeLimit",
    "PartitionConfig",
    "MaxMemPerLimit",
    "BadConstraints",
    "InvalidAccount",
    "InvalidQOS",
    "AccountNotAllowed",
    "QOSNotAllowed",
    "QOSMinGRES",
    "QOSMinCpuNotSatisfied",
    "QOSMinMemory",
}


def never_starts(reason: str) -> bool:
    """True for a PENDING reason that no wait can clear (:data:`NEVER_START`, and every per-job QOS or association
    maximum: ``QOSMaxWallDurationPerJobLimit``, ``AssocMaxMemPerJob``, ...)."""
    reason = reason.strip()
    per_job = reason.startswith(("QOSMax", "AssocMax")) and "PerJob" in reason
    return reason in NEVER_START or per_job


# Job states -> what the executor does. RESUBMIT: the site took the allocation away (preemption, a node that failed
# or never booted): its unfinished members are submitted again at the same request, no retry spent. GROW: it hit its
# walltime: resubmitted with a walltime grown from what it finished, no retry spent. STOP: a user or admin cancelled
# it: not resubmitted. RETRY: a failure of the allocation itself: Snakemake's retries (memory grows with the attempt).
RESUBMIT, GROW, STOP, RETRY = "resubmit", "grow", "stop", "retry"
RESUBMIT_STATES = ("PREEMPTED", "NODE_FAIL", "BOOT_FAIL")


def classify_state(state: str, cancelled_by_us: bool) -> str | None:
    """What a terminal SLURM state calls for (None: not terminal, or a success)."""
    state = state.split()[0] if state else ""
    if state in RESUBMIT_STATES:
        return RESUBMIT
    if state == "CANCELLED":
        return RETRY if cancelled_by_us else STOP
    if state == "TIMEOUT":
        return GROW
    if state in ("FAILED", "OUT_OF_MEMORY", "DEADLINE"):
        return RETRY
    return None


# sbatch refusals: a limit (retrying the same request cannot help) or the controller being busy or away (it can).
LIMIT_REFUSALS = (
    "Requested time limit is invalid",
    "Memory required by task is not available",
    "Requested node configuration is not available",
    "Invalid account",
    "Invalid qos",
    "Invalid partition",
    "Job violates accounting/QOS policy",
    "Invalid generic resource",
)
TRANSIENT_REFUSALS = (
    "Socket timed out",
    "Unable to contact slurm controller",
    "Slurm temporarily unable to accept job",
    "Resource temporarily unavailable",
    "Connection refused",
    "MaxSubmit",
    "QOSMaxSubmitJobPerUserLimit",
    "AssocMaxSubmitJobLimit",
)
LIMIT, TRANSIENT = "limit", "transient"


def classify_refusal(stderr: str) -> str | None:
    """LIMIT, TRANSIENT or None (a refusal this module does not know: Snakemake's retries decide) for sbatch's
    error output."""
    if any(s.lower() in stderr.lower() for s in TRANSIENT_REFUSALS):
        return TRANSIENT
    if any(s.lower() in stderr.lower() for s in LIMIT_REFUSALS):
        return LIMIT
    return None


def limit_keys(why: str) -> str:
    """The site file's key(s) that bound what SLURM's pending reason or refusal ``why`` says was exceeded: a time
    (``PartitionTimeLimit``, ``QOSMaxWallDurationPerJobLimit``, "Requested time limit is invalid") is
    ``max_runtime``, memory (``MaxMemPerLimit``, ``AssocMaxMemPerJob``, "Memory required by task is not available")
    ``max_mem_mb``; a reason that names neither (a node count, a constraint) either."""
    words = why.lower()
    keys = [
        key
        for key, said in (("max_runtime", ("time", "wall")), ("max_mem_mb", ("mem",)))
        if any(w in words for w in said)
    ]
    return " / ".join(f"`{key}`" for key in keys or ("max_runtime", "max_mem_mb"))


def request_line(name: str, jobid: str | None, asked_min: int, asked_mb: int, why: str, limits: SiteLimits | None):
    """The one line that ends an allocation that can never start: what it asked, the limit, the key that fixes it
    (:func:`limit_keys`)."""
    limit = f"; the site: {limits.describe()}" if limits else ""
    job = f" (SLURM job {jobid})" if jobid else ""
    keys = limit_keys(why)
    return (
        f"wneurons-slurm: allocation {name}{job} can never start: {why}. It asks {asked_min} min and {asked_mb:,} MB"
        f"{limit}. Fix: lower {keys} in the site file (config key `site`), or leave it out of the file to plan from "
        "what SLURM states (config key `site_limits: slurm`), or name a partition or QOS that allows the request "
        "(`gpu_partition`, `gpu_qos`)"
    )
