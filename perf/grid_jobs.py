"""Jobs, SLURM allocations, model loads and GPU-hours of a config's grid, from a dry run of the real DAG.

    python perf/grid_jobs.py [config/config.yaml] [--profile profiles/slurm] [--site-limits none] [--tflops T]

Allocations (``--profile profiles/slurm``, with the site file of the config or of a later ``--profile``): per model
the allocations the dry run forms, and the largest walltime and memory one of them asks: the sum of its members'
runtimes (what Snakemake asks for a group whose GPU jobs run one at a time) and its largest GPU member's memory plus
its CPU members' (an upper bound of Snakemake's widest layer), against the site's limits.

Counts (from `snakemake all -n --forceall --profile <profile>`, every job of the grid):
- jobs: every job of the DAG; jobs of `localrule`s run on the submitting host and are never submitted.
- submissions through the profile: one per group job Snakemake forms (the rules' `group:`, i.e. the allocations of
  wneurons.experiment.allocations, and the profile's `group-components`; the dry run lists each group job with its
  member jobs indented under it), plus one per other job that is not a local rule's.
- model loads: under `profiles/slurm` (the `wneurons-slurm` executor) a group job is one allocation whose jobs run
  in threads of one Snakemake process with the model pool, one GPU job at a time: one load per allocation. With the
  slurm plugin's group jobs (`--executor slurm`: every member an `srun` step, a process of its own) and without
  groups, every job of a GPU rule (`gpu=1`) loads its model. One Snakemake process over the whole grid
  (profiles/local) loads each (model, revision) once per concurrent job slot.

GPU-hours: every GPU job's forward FLOPs (2 x parameters x tokens it runs, from the config's data sizes and the
model's `params_b`; attention is left out, < 10% at these lengths for models >= 1B) at the rate the allocations are
sized with (wneurons.experiment.allocations: the site file's `tflops`, else the stated sustained rate of the job's
precision, `SUSTAINED_TFLOPS`; `--tflops` replaces it); and what a job pays before its first forward: the planner's
startup (`STARTUP_S`) plus loading its weights at their precision's bytes at `LOAD_GBPS` (`--startup-s`,
`--load-gbps` replace them), once per job (a process per job: the slurm plugin's group jobs), once per allocation
(profiles/slurm) or once per checkpoint (one process, profiles/local). All are stated assumptions, not
measurements: perf/gpu_check.sh measures the real numbers on a GPU when one is available.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from wneurons.experiment import plan

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config", nargs="?", default="config/config.yaml")
    plan.add_grid_arguments(parser)
    args = parser.parse_args()
    args.profile = args.profile or ["profiles/slurm"]
    plan.print_grid(args, ROOT)


if __name__ == "__main__":
    main()
