"""Jobs, SLURM allocations, model loads and GPU-hours of a config's grid, from a dry run of the real DAG.

    python perf/grid_jobs.py [config/config.yaml] [--profile profiles/slurm] [--tflops 300] [--load-gbps 2]

Allocations (``--profile profiles/slurm``, with the site file of the config or of a later ``--profile``): per model
the allocations the dry run forms, and the largest walltime and memory one of them asks: the sum of its members'
runtimes (what Snakemake asks for a group whose GPU jobs run one at a time) and its largest GPU member's memory plus
its CPU members' (an upper bound of Snakemake's widest layer), against the site's limits.

Counts (from `snakemake all -n --forceall --profile <profile>`, every job of the grid):
- jobs: every job of the DAG; jobs of `localrule`s run on the submitting host and are never submitted.
- submissions through the profile: one per group job Snakemake forms (the profile's `groups` and
  `group-components`; the dry run lists each group job with its member jobs indented under it), plus one per
  other job that is not a local rule's.
- model loads: under `profiles/slurm` (the `wneurons-slurm` executor) a group job is one allocation whose jobs run
  in threads of one Snakemake process with the model pool, one GPU job at a time: one load per allocation. With the
  slurm plugin's group jobs (`--executor slurm`: every member an `srun` step, a process of its own) and without
  groups, every job of a GPU rule (`gpu=1`) loads its model. One Snakemake process over the whole grid
  (profiles/local) loads each (model, revision) once per concurrent job slot.

GPU-hours: every GPU job's forward FLOPs (2 x parameters x tokens it runs, from the config's data sizes and the
model's `params_b`; attention is left out, < 10% at these lengths for models >= 1B) at `--tflops` sustained
(default 300: ~30% of an H200's dense bf16 peak, what batched inference of short sequences reaches); and what a job
pays before its first forward: `--startup-s` of imports (default 10: measured ~10 s for torch + transformers on
the CPU machine this was written on) plus loading the bf16 weights at `--load-gbps` (default 2: a parallel file
system), once per job (a process per job: the slurm plugin's group jobs), once per allocation (profiles/slurm) or
once per checkpoint (one process, profiles/local). All are
stated assumptions, not measurements: perf/gpu_check.sh measures the real numbers on a GPU when one is available.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import NamedTuple

import yaml

from wneurons.experiment.allocations import CPU_MEMBERS, Site, tokens_of
from wneurons.experiment.config import validate_config
from wneurons.experiment.rule_files import rules_with

ROOT = Path(__file__).resolve().parents[1]


class Job(NamedTuple):
    rule: str
    group: str | None  # the group job (allocation) it is a member of
    wildcards: dict[str, str]
    resources: dict[str, str]


def dry_run(config: str, profiles: list[str], site: str | None = None) -> list[Job]:
    """Every job of ``all`` with its group job and resources, from a dry run through the profiles (which prints
    each group job with its member jobs indented under it)."""
    cmd = [sys.executable, "-m", "snakemake", "all", "-n", "--forceall", "--configfile", config]
    cmd += [arg for p in profiles for arg in ("--profile", p)]
    cmd += ["--config", f"site={site}"] if site else []
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config", nargs="?", default="config/config.yaml")
    parser.add_argument("--profile", action="append", help="a profile (repeatable); default profiles/slurm")
    parser.add_argument("--site", help="a site file (profiles/site.example/site.yaml) instead of the config's `site`")
    parser.add_argument("--tflops", type=float, default=300.0, help="sustained TFLOP/s per GPU")
    parser.add_argument("--load-gbps", type=float, default=2.0, help="GB/s a model's weights load at")
    parser.add_argument(
        "--startup-s", type=float, default=10.0, help="seconds a job's process needs before loading (imports)"
    )
    args = parser.parse_args()
    args.profile = args.profile or ["profiles/slurm"]
    schema = ROOT / "workflow/schemas/config.schema.yaml"
    config = validate_config(yaml.safe_load((ROOT / args.config).read_text()), schema)
    if args.site:
        config["site"] = args.site
    parsed = dry_run(args.config, args.profile, args.site)
    jobs = [(j.rule, j.group is not None, j.wildcards) for j in parsed]
    requests = allocation_requests(parsed)
    group_jobs = list(requests)
    gpu, local = rules_with("gpu=1,", ROOT), rules_with("localrule: True", ROOT)

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
    print(
        f"model loads: {len(group_jobs):,} through the profile (one per allocation: its GPU jobs share one process "
        f"and one loaded model); {sum(loads.values()):,} with one process per GPU job (the slurm plugin's group "
        f"jobs, or no groups); {len(checkpoints):,} (model, revision) pairs x job slots in one process over the grid"
    )

    def startup_and_load_h(model: str) -> float:
        return (args.startup_s + 2 * config["models"][model]["params_b"] * 1e9 / (args.load_gbps * 1e9)) / 3600

    hours = defaultdict(float)
    per_job = defaultdict(float)  # startup + one load, paid by every GPU job in a process of its own
    for rule, _, w in jobs:
        if rule not in gpu:
            continue
        params = config["models"][w["model"]]["params_b"] * 1e9
        hours[w["model"]] += 2 * params * tokens_of(config, rule, w) / (args.tflops * 1e12) / 3600
        per_job[w["model"]] += startup_and_load_h(w["model"])
    print(
        f"\nGPU-hours at {args.tflops:g} TFLOP/s sustained; each process {args.startup_s:g} s of startup, loads at "
        f"{args.load_gbps:g} GB/s (bf16 weights):"
    )
    header = f"{'model':<16}{'GPU jobs':>9}{'allocations':>12}{'compute h':>11}"
    print(header + f"{'startup+load per job h':>24}{'per allocation h':>18}{'once per checkpoint h':>23}")
    ckpts = Counter(m for m, _ in checkpoints)
    total_once = total_alloc = 0.0
    for model in sorted(loads):
        once = ckpts[model] * startup_and_load_h(model)
        per_alloc = allocations[model] * startup_and_load_h(model)
        total_once, total_alloc = total_once + once, total_alloc + per_alloc
        row = f"{model:<16}{loads[model]:>9,}{allocations[model]:>12,}{hours[model]:>11.1f}"
        print(row + f"{per_job[model]:>24.1f}{per_alloc:>18.2f}{once:>23.2f}")
    total = sum(hours.values())
    row = f"{'total':<16}{sum(loads.values()):>9,}{len(group_jobs):>12,}{total:>11.1f}"
    print(row + f"{sum(per_job.values()):>24.1f}{total_alloc:>18.2f}{total_once:>23.2f}")
    print_allocations(config, requests)


def print_allocations(config: dict, requests: dict[str, tuple[int, int]]) -> None:
    """Per model: allocations, the largest walltime and memory one asks, and whether all fit the site's limits."""
    site = Site.from_file(config["site"])
    limit_mem = f"{site.max_mem_mb:,} MB" if site.max_mem_mb else "no memory limit"
    where = config["site"] or "default site"
    print(f"\nAllocations against the site's limits ({where}: {site.max_runtime} min, {limit_mem}):")
    print(f"{'model':<16}{'allocations':>12}{'largest walltime min':>22}{'largest memory MB':>19}{'fit':>5}")
    by_model = defaultdict(list)
    for group, request in requests.items():
        by_model[model_of_group(group, config["models"])].append(request)
    for model, rs in sorted(by_model.items()):
        minutes, mem = max(m for m, _ in rs), max(b for _, b in rs)
        fits = minutes <= site.max_runtime and (not site.max_mem_mb or mem <= site.max_mem_mb)
        print(f"{model:<16}{len(rs):>12,}{minutes:>22,}{mem:>19,}{'yes' if fits else 'NO':>5}")


if __name__ == "__main__":
    main()
