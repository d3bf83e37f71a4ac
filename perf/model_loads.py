"""Model loads a finished run really paid, read from its logs: loads, reuses from the per-process pool
(:mod:`wneurons.lm.model_pool`) and loading processes per (model, source, revision, dtype, device), and, for a
SLURM run, what each allocation ran and loaded.

    python perf/model_loads.py logs/                                # after `make demo` (one process)
    python perf/model_loads.py logs/ .snakemake/slurm_logs/         # after a run through profiles/slurm
    python perf/model_loads.py logs/ --json loads.json
    python perf/model_loads.py logs/ .snakemake/slurm_logs/ --max-loads-per-allocation 1   # fail above 1

Job logs (`logs/`) hold one line per model checkout (loaded, or reused from the pool); allocation logs
(`.snakemake/slurm_logs/`, kept by profiles/slurm) end with the allocation's closing line (jobs it ran, loads it
paid: snakemake_executor_plugin_wneurons_slurm.allocation). `max/process` is the most loads one process paid for
a model: with jobs in threads of one process that is the number of its jobs that ran on the model at once.
Compare with `perf/grid_jobs.py`, which counts what a dry run would load.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from wneurons.lm.model_pool import count_allocations, count_loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log_dirs", type=Path, nargs="+", help="folders searched recursively for *.log")
    parser.add_argument("--json", type=Path, default=None, help="also write the counts here")
    parser.add_argument(
        "--max-loads-per-allocation",
        type=int,
        default=None,
        help="exit with an error if an allocation paid more loads than this (its concurrent job slots)",
    )
    args = parser.parse_args()
    files = sorted(f for d in args.log_dirs for f in d.rglob("*.log"))
    if not files:
        raise SystemExit(f"no *.log under {', '.join(map(str, args.log_dirs))}")
    counts = count_loads(files)
    if not counts:
        raise SystemExit("no job log records a model load or reuse")
    width = max((len(k) for k in counts), default=10)
    print(f"{'model key':<{width}}  {'loads':>6}  {'reuses':>6}  {'processes':>9}  {'max/process':>11}")
    for key, row in sorted(counts.items()):
        line = f"{key:<{width}}  {row['loads']:>6}  {row['reuses']:>6}  {row['processes']:>9}"
        print(f"{line}  {row['max_per_process']:>11}")
    loads = sum(r["loads"] for r in counts.values())
    uses = loads + sum(r["reuses"] for r in counts.values())
    print(f"total: {uses} model checkouts by jobs, {loads} loads ({len(counts)} distinct models), {len(files)} logs")

    allocations = count_allocations(files)
    if allocations:
        print(f"\n{'SLURM allocation':<16}  {'group':<40}  {'jobs':>5}  {'failed':>6}  {'loads':>5}  {'reuses':>6}")
        for a in allocations:
            line = f"{a['jobid']:<16}  {a['group']:<40}  {a['jobs']:>5}  {a['failed']:>6}"
            print(f"{line}  {a['loads']:>5}  {a['reuses']:>6}")
        jobs = sum(a["jobs"] for a in allocations)
        paid = sum(a["loads"] for a in allocations)
        print(f"allocations: {len(allocations)}, {jobs} jobs, {paid} loads")
    if args.json:
        args.json.write_text(json.dumps({"models": counts, "allocations": allocations}, indent=1) + "\n")
    if args.max_loads_per_allocation is not None:
        over = [a for a in allocations if a["loads"] > args.max_loads_per_allocation]
        if not allocations or over:
            raise SystemExit(
                f"allocations paying more than {args.max_loads_per_allocation} loads: {over or 'no allocation log'}"
            )


if __name__ == "__main__":
    main()
