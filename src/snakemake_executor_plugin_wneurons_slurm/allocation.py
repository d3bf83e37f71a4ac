"""The command an allocation of the ``wneurons-slurm`` executor runs: Snakemake's CLI, then one closing line.

    python -m snakemake_executor_plugin_wneurons_slurm.allocation <snakemake arguments>

Runs ``snakemake <arguments>`` in this process (the local executor, jobs in threads: see the package docstring)
and, however it ends, writes to stderr, i.e. the allocation's SLURM log::

    wneurons allocation 1234 (gpu-smollm2-135m-main): 6 jobs ran in process 5678, 0 failed; 1 model loads, 5 reuses

``perf/model_loads.py`` counts these lines (:func:`wneurons.lm.model_pool.count_allocations`).
"""

from __future__ import annotations

import os
import sys


def closing_line() -> str:
    """The summary of this process's jobs (:mod:`wneurons.jobs.inprocess`) and model loads (the pool's counters)."""
    from wneurons.jobs import inprocess
    from wneurons.lm.model_pool import POOL

    jobid = os.environ.get("SLURM_JOB_ID", "-")
    group = os.environ.get("WNEURONS_SLURM_GROUP", "-")  # set by the executor's job command
    return (
        f"wneurons allocation {jobid} ({group}): {inprocess.JOBS.started} jobs ran in process {os.getpid()}, "
        f"{inprocess.JOBS.failed} failed; {POOL.loads} model loads, {POOL.reuses} reuses"
    )


def main() -> None:
    from snakemake.cli import main as snakemake_main

    try:
        snakemake_main(sys.argv[1:])
    finally:
        print(closing_line(), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
