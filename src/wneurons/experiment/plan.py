"""What a config's grid costs before it runs: jobs, SLURM allocations, model loads, GPU-hours (from a dry run of the
real DAG) and the disk its activation shards take. ``wneurons plan`` prints both; perf/grid_jobs.py and
perf/disk_grid.py print one each (their docstrings state the assumptions).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import NamedTuple

import yaml

from wneurons.experiment import slurm_site
from wneurons.experiment.allocations import (
    BYTES_PER_PARAM,
    CPU_MEMBERS,
    LOAD_GBPS,
    STARTUP_S,
    SUSTAINED_TFLOPS,
    Planner,
    Site,
    job_estimate_minutes,
    member_load_minutes,
    precision_of,
    site_path,
)
from wneurons.experiment.config import validate_config
from wneurons.experiment.grid import WIKITEXT2_TEST_TOKENS, collected_layers, neurons_per_layer_of, shard_bytes
from wneurons.experiment.rule_files import rules_with
from wneurons.experiment.workload import capability_docs

__all__ = [
    "Job",
    "PlanError",
    "allocation_requests",
    "dry_run",
    "failure_line",
    "model_of_group",
    "print_allocations",
    "print_disk",
    "print_grid",
    "add_grid_arguments",
]


class PlanError(ValueError):
    """The grid cannot be planned; the message is one line that says why (a key, a profile, Snakemake's error)."""


# What a dry run prints on stderr before it fails, never the failure: Snakemake's profile line, the site's notes.
_PREAMBLE = ("Using profile ", "site_limits: ")
# The head of Snakemake's own error report on stdout: `WorkflowError:`, `KeyError in file "…", line 2:`.
_ERROR_HEAD = re.compile(r"^[A-Z]\w*(Error|Exception)\b.*:$")


def failure_line(stdout: str, stderr: str, returncode: int) -> str:
    """The one line that says why a dry run failed. The workflow's own refusals (a config key, the site's limits:
    ``sys.exit(line)``) are stderr's last line; Snakemake 9 logs its own errors to stdout, leaving on stderr only
    its preamble (:data:`_PREAMBLE`): then its error's head and first line of message (``MissingRuleException: No
    rule to produce …``), without the traceback."""
    err = [line.strip() for line in stderr.splitlines() if line.strip() and not line.startswith(_PREAMBLE)]
    if err:
        return err[-1]
    out = [line.rstrip() for line in stdout.splitlines() if line.strip()]
    for i, line in enumerate(out):
        if _ERROR_HEAD.match(line):
            message = next((m.strip() for m in out[i + 1 :] if not m.lstrip().startswith("File ")), "")
            return f"{line} {message}".strip()
    return f"snakemake failed ({returncode}): {out[-1].strip() if out else 'no output'}"


class Job(NamedTuple):
    rule: str
    group: str | None  # the group job (allocation) it is a member of
    wildcards: dict[str, str]
    resources: dict[str, str]


def dry_run(
    config: str,
    profiles: list[str],
    site: str | None = None,
    root: str | Path = ".",
    site_limits: str | None = None,
    targets: tuple[str, ...] = ("all",),
    env: dict[str, str] | None = None,
) -> list[Job]:
    """Every job of ``targets`` (default ``all``) with its group job and resources, from a dry run through the
    profiles (which prints each group job with its member jobs indented under it), run in ``root`` (the
    repository: its Snakefile). ``site`` / ``site_limits`` given: passed with ``--config``, which replaces the
    profiles' ``config`` lists (Snakemake), so a caller that gives one restates the other (:func:`print_grid`
    gives both). ``env``: set for the dry run on top of this process's environment (the site's limits read
    already: :func:`planned_site`)."""
    cmd = [sys.executable, "-m", "snakemake", *targets, "-n", "--forceall", "--configfile", config]
    cmd += [arg for p in profiles for arg in ("--profile", p)]
    overrides = ([f"site_limits={site_limits}"] if site_limits else []) + ([f"site={site}"] if site else [])
    cmd += ["--config", *overrides] if overrides else []
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=os.environ | env if env else None)
    if proc.returncode != 0:
        raise PlanError(failure_line(proc.stdout, proc.stderr, proc.returncode))
    out = proc.stdout
    jobs, group, current = [], None, None
    for line in out.splitlines():
        if g := re.search(r"Group job (\S+) \(jobs", line):
            group = g.group(1)
            continue
        if m := re.match(r"^(\s*)(?:local)?rule (\w+):$", line):
            current = Job(m.group(2), group if m.group(1) else None, {}, {})
            jobs.append(current)
        elif current is not None and line.strip().startswith(("wildcards: ", "resources: ")):
            key, _, values = line.strip().partition(": ")
            getattr(current, key).update(kv.split("=", 1) for kv in values.split(", "))
    return jobs


def model_of_group(group: str, models: dict) -> str:
    """The model of a group job named ``gpu-{model}-{revision}-...``: the longest model name the name starts with
    (model names contain dashes)."""
    return max((m for m in models if group.startswith(f"gpu-{m}-")), key=len)


def allocation_requests(jobs: list[Job]) -> dict[str, tuple[int, int]]:
    """(walltime minutes, memory MB) each group job asks, bounded from above: the sum of its members' runtimes, and
    its largest GPU member's memory plus its CPU members' (which run beside it)."""
    members = defaultdict(list)
    for job in jobs:
        if job.group:
            members[job.group].append(job)
    requests = {}
    for group, js in members.items():
        minutes = sum(int(j.resources["runtime"]) for j in js)
        gpu = max((int(j.resources["mem_mb"]) for j in js if j.rule not in CPU_MEMBERS), default=0)
        cpu = sum(int(j.resources["mem_mb"]) for j in js if j.rule in CPU_MEMBERS)
        requests[group] = (minutes, gpu + cpu)
    return requests


def print_grid(args: argparse.Namespace, root: Path) -> None:
    """Print the jobs, submissions, model loads, GPU-hours and allocations of ``args.config``'s grid (``args``:
    config, profile (a list), site, tflops, load_gbps, startup_s; perf/grid_jobs.py's options), dry-run in ``root``."""
    schema = root / "workflow/schemas/config.schema.yaml"
    config = validate_config(yaml.safe_load((root / args.config).read_text()), schema, root)
    config["site"] = site_of(config, args.profile, args.site, root)
    limits = getattr(args, "site_limits", None) or profile_setting(args.profile, "site_limits", root)
    config["site_limits"] = limits or config["site_limits"]
    site, handed = planned_site(config, root)
    parsed = dry_run(args.config, args.profile, config["site"], root, config["site_limits"], env=handed)
    jobs = [(j.rule, j.group is not None, j.wildcards) for j in parsed]
    requests = allocation_requests(parsed)
    group_jobs = list(requests)
    gpu, local = rules_with("gpu=1,", root), rules_with("localrule: True", root)

    local_jobs = sum(r in local for r, _, _ in jobs)
    ungrouped = sum(not grouped and r not in local for r, grouped, _ in jobs)
    loads = Counter(w["model"] for r, _, w in jobs if r in gpu)
    checkpoints = {(w["model"], w["revision"]) for r, _, w in jobs if r in gpu}
    print(f"config: {args.config}; profiles: {', '.join(args.profile)}")
    print(f"jobs: {len(jobs):,} ({local_jobs:,} local rules' jobs); jobs of GPU rules: {sum(loads.values()):,}")
    print(f"SLURM submissions without groups and local rules: {len(jobs) - 1:,} (every job but `all`)")
    with_groups = len(group_jobs) + ungrouped
    print(
        f"SLURM submissions through the profile: {with_groups:,} ({len(group_jobs):,} group jobs + {ungrouped:,} "
        f"other jobs) = {(len(jobs) - 1) / with_groups:.1f}x fewer"
    )
    allocations = Counter(model_of_group(g, config["models"]) for g in group_jobs)
    # An allocation of weight rows or statistics parts only runs no GPU rule and loads no model (review 1.3).
    loading = {j.group for j in parsed if j.group is not None and j.rule in gpu}
    print(
        f"model loads: {len(loading):,} through the profile (one per allocation with a GPU job: its GPU jobs share "
        f"one process and one loaded model; the other {len(group_jobs) - len(loading):,} allocations load none); "
        f"{sum(loads.values()):,} with one process per GPU job (the slurm plugin's group jobs, or no groups); "
        f"{len(checkpoints):,} (model, revision) pairs x job slots in one process over the grid"
    )

    # The planner's own rates (review 1.6: one rate per precision for the grid, its allocations and the docs): each
    # job's compute at the site's tflops, else the stated rate of its rule's precision; --tflops replaces both.
    load_bytes = max((BYTES_PER_PARAM[precision_of(config, r)] for r in gpu), default=4)
    startup_s = STARTUP_S if args.startup_s is None else args.startup_s
    load_gbps = LOAD_GBPS if args.load_gbps is None else args.load_gbps
    rate = args.tflops * 1e12 if args.tflops else None

    def startup_and_load_h(model: str) -> float:
        return (startup_s + load_bytes * config["models"][model]["params_b"] / load_gbps) / 3600

    hours = defaultdict(float)
    per_job = defaultdict(float)  # startup + one load, paid by every GPU job in a process of its own
    precisions = Counter()
    for rule, _, w in jobs:
        if rule not in gpu:
            continue
        hours[w["model"]] += job_estimate_minutes(config, site, rule, w, root, rate) / 60
        per_job[w["model"]] += startup_and_load_h(w["model"])
        precisions[precision_of(config, rule)] += 1
    at = ", ".join(f"{p} {site.tflops or SUSTAINED_TFLOPS[p]:g}" for p in sorted(precisions))
    where = "the site file's tflops" if site.tflops else "the planner's stated rate of its precision"
    print(
        f"\nGPU-hours, each GPU job at {f'{args.tflops:g} (--tflops)' if rate else f'{where} ({at})'} TFLOP/s "
        f"sustained; each process {startup_s:g} s of startup, loads {load_bytes}-byte weights at {load_gbps:g} GB/s:"
    )
    header = f"{'model':<16}{'GPU jobs':>9}{'allocations':>12}{'compute h':>11}"
    print(header + f"{'startup+load per job h':>24}{'per loading allocation h':>26}{'once per checkpoint h':>23}")
    ckpts = Counter(m for m, _ in checkpoints)
    loading_allocations = Counter(model_of_group(g, config["models"]) for g in loading)
    total_once = total_alloc = 0.0
    for model in sorted(loads):
        once = ckpts[model] * startup_and_load_h(model)
        per_alloc = loading_allocations[model] * startup_and_load_h(model)
        total_once, total_alloc = total_once + once, total_alloc + per_alloc
        row = f"{model:<16}{loads[model]:>9,}{allocations[model]:>12,}{hours[model]:>11.1f}"
        print(row + f"{per_job[model]:>24.1f}{per_alloc:>26.2f}{once:>23.2f}")
    total = sum(hours.values())
    row = f"{'total':<16}{sum(loads.values()):>9,}{len(group_jobs):>12,}{total:>11.1f}"
    print(row + f"{sum(per_job.values()):>24.1f}{total_alloc:>26.2f}{total_once:>23.2f}")
    print_allocations(config, site, requests)
    print_requests_against_use(config, site, parsed, requests, root)


def add_grid_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of :func:`print_grid` (``wneurons plan`` and perf/grid_jobs.py): profiles, site, its limits and
    the GPU-hour table's rates (default: the planner's)."""
    parser.add_argument("--profile", action="append", help="a Snakemake profile (repeatable; default profiles/slurm)")
    parser.add_argument("--site", help="a site file (profiles/site.example/site.yaml) instead of the config's `site`")
    parser.add_argument(
        "--site-limits",
        choices=["slurm", "none"],
        help="plan within the limits SLURM states (slurm) or the site file's / the defaults only (none); "
        "default: the profiles' `site_limits` (profiles/slurm: slurm)",
    )
    rates = ", ".join(f"{p} {t:g}" for p, t in SUSTAINED_TFLOPS.items())
    parser.add_argument(
        "--tflops",
        type=float,
        help=f"sustained TFLOP/s per GPU job for the GPU-hour table (default: the site's tflops, else the planner's "
        f"rate of each job's precision: {rates})",
    )
    parser.add_argument("--load-gbps", type=float, help=f"GB/s a model's weights load at (default {LOAD_GBPS:g})")
    parser.add_argument(
        "--startup-s", type=float, help=f"seconds a job's process needs before loading (default {STARTUP_S:g})"
    )


def print_requests_against_use(
    config: dict, site: Site, jobs: list[Job], requests: dict[str, tuple[int, int]], root: Path
) -> None:
    """Print the GPU-hours the allocations ask (their members' runtimes) against those the planner expects them to
    use (its members' estimates at the site's rates, without the margin, plus what it pays once before its work:
    its model's load, or the startup alone where it runs no model), and where the capability suite's sizes come
    from."""
    planner = Planner(config, site, root=root)  # the Snakefile's estimates: measured rates where the site has them
    expected, paid = defaultdict(float), defaultdict(float)
    for job in jobs:
        if job.group in requests:
            minutes, source = planner.estimate(job.rule, job.wildcards)
            expected[job.group] += minutes
            planner.sources[source] += 1
            load = member_load_minutes(config, job.rule, model_of_group(job.group, config["models"]))
            paid[job.group] = max(paid[job.group], load)
    for group in requests:
        expected[group] += paid[group]
    asked_h, expected_h = sum(m for m, _ in requests.values()) / 60, sum(expected.values()) / 60
    ratio = asked_h / expected_h if expected_h else float("nan")
    print(
        f"\nRequested / expected GPU-hours of the allocations: {asked_h:,.0f} / {expected_h:,.0f} = {ratio:.2f} "
        f"(expected: the planner's estimates at the site's rates, no margin, one load per allocation, the startup "
        f"alone where it runs no model; margin "
        f"{site.margin:g} once per allocation)"
    )
    _, source = capability_docs(config["evaluation"]["capability"], root)
    print(f"capability suite's documents: {source}")
    rates = ", ".join(f"{n:,} {where}" for where, n in sorted(planner.sources.items()))
    print(f"rates of the allocated jobs: {rates} ({site.rates or 'no rates file in the site file: stated rates'})")


def site_of(config: dict, profiles: list[str], site: str | None, root: Path) -> str | None:
    """The site file a dry run through ``profiles`` plans with: ``site`` if given (``--site``), else the last
    ``site=`` of the profiles' ``config`` lists (a later profile wins, as in Snakemake), else the config's."""
    return site or profile_setting(profiles, "site", root) or config["site"]


def profile_setting(profiles: list[str], key: str, root: Path) -> str | None:
    """The last ``key=value`` of the profiles' ``config`` lists (a later profile's list replaces an earlier one's,
    as in Snakemake), or None."""
    for profile in reversed(profiles):
        if not (root / profile / "config.yaml").is_file():
            raise PlanError(f"--profile {profile}: no such profile ({root / profile / 'config.yaml'} is missing)")
        settings = yaml.safe_load((root / profile / "config.yaml").read_text()) or {}
        if "config" in settings:
            named = [c.split("=", 1)[1] for c in settings["config"] or [] if c.startswith(f"{key}=")]
            return named[-1] if named else None
    return None


def planned_site(config: dict, root: Path) -> tuple[Site, dict[str, str]]:
    """The site a dry run plans with: the site file, with the limits SLURM states where the file is silent under
    ``site_limits: slurm`` (the Snakefile's reading; its lines printed here), and the environment that hands what
    was read to that dry run (:func:`slurm_site.handed_on`), whose Snakefile then does not ask SLURM again."""
    site_file = site_path(config["site"], root)
    site = Site.from_file(site_file)
    if config["site_limits"] != "slurm":
        return site, {}
    site, notes = slurm_site.site_from_slurm(site, site_file)
    print("\n".join(notes))
    return site, slurm_site.handed_on()


def print_allocations(config: dict, site: Site, requests: dict[str, tuple[int, int]]) -> None:
    """Per model: allocations, the largest walltime and memory one asks, and whether all fit the site's limits."""
    limit_mem = f"{site.max_mem_mb:,} MB" if site.max_mem_mb else "no memory limit"
    where = f"{config['site'] or 'no site file'}, site_limits {config['site_limits']}"
    print(f"\nAllocations against the site's limits ({where}: {site.max_runtime} min, {limit_mem}):")
    print(f"{'model':<16}{'allocations':>12}{'largest walltime min':>22}{'largest memory MB':>19}{'fit':>5}")
    by_model = defaultdict(list)
    for group, request in requests.items():
        by_model[model_of_group(group, config["models"])].append(request)
    for model, rs in sorted(by_model.items()):
        minutes, mem = max(m for m, _ in rs), max(b for _, b in rs)
        fits = minutes <= site.max_runtime and (not site.max_mem_mb or mem <= site.max_mem_mb)
        print(f"{model:<16}{len(rs):>12,}{minutes:>22,}{mem:>19,}{'yes' if fits else 'NO':>5}")


def print_disk(path: str | Path, root: Path) -> None:
    """Print the activation-shard disk of the config at ``path``: per model the bytes per revision, written in
    total and left at the end, and the peak with 1, 4 and 16 revisions in flight (perf/disk_grid.py)."""
    config = yaml.safe_load(Path(path).read_text())
    for spec in config["data"].values():  # the data need not be present to size the grid
        spec["local_dir"] = str(root)
    validate_config(config, root / "workflow/schemas/config.schema.yaml", root)
    tb = 1e12
    tokens = WIKITEXT2_TEST_TOKENS if config["neurons"]["max_tokens"] is None else config["neurons"]["max_tokens"]
    tokens -= tokens % config["neurons"]["window"]
    fig = config["figures"]["figure1"]
    kept_models = [m for m in (fig["model"] or next(iter(config["models"])), fig["contrast"]) if m]
    total_before = total_after = kept = 0
    sizes = []  # bytes of every revision's shards after neurons.layers, except those kept
    print(f"tokens per revision: {tokens:,}; bytes per value: 2 (float16)")
    print(f"{'model':<16}{'L':>4}{'d_ff':>7}{'revs':>6}{'per rev (GB)':>14}{'before (TB)':>13}{'after (TB)':>12}")
    for model, spec in config["models"].items():
        revisions = [spec["final_revision"], *spec["checkpoints"]]
        full = shard_bytes(config, model, None)
        before = full * len(revisions)
        per_revision = [shard_bytes(config, model, collected_layers(config, model, r)) for r in revisions]
        after = sum(per_revision)
        total_before += before
        total_after += after
        if model in kept_models:
            kept += per_revision[0]
            per_revision = per_revision[1:]
        sizes += per_revision
        d_ff = neurons_per_layer_of(config, model)
        print(
            f"{model:<16}{spec['num_layers']:>4}{d_ff:>7}{len(revisions):>6}{full / 1e9:>14.1f}"
            f"{before / tb:>13.2f}{after / tb:>12.2f}"
        )
    print(f"total written: before {total_before / tb:.2f} TB, after {total_after / tb:.2f} TB")
    print(f"left on disk at the end: before {total_before / tb:.2f} TB, after {kept / tb:.3f} TB ({kept_models})")
    sizes.sort(reverse=True)
    for jobs in (1, 4, 16):
        # at most `jobs` revisions hold shards at once (collecting, or waiting for their statistics): the largest
        print(f"peak after, {jobs:>2} revisions in flight: <= {(kept + sum(sizes[:jobs])) / tb:.2f} TB")
