"""The command an allocation of the ``wneurons-slurm`` executor runs: Snakemake's CLI, then one closing line.

    python -m snakemake_executor_plugin_wneurons_slurm.allocation <snakemake arguments>

Runs ``snakemake <arguments>`` in this process (the local executor, jobs in threads: see the package docstring)
over the members that have not finished yet: on a retry, a SLURM requeue or a restart after preemption, the members
an earlier attempt finished (their records in the allocation's ledger, :mod:`wneurons.jobs.ledger`) are dropped from
``--target-jobs``, so no finished work is redone. However it ends, it writes to stderr, i.e. the allocation's SLURM
log::

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


def without_finished(argv: list[str], unfinished: list[str]) -> list[str]:
    """``argv`` with its ``--target-jobs`` values reduced to ``unfinished`` (target specs, in argv's spelling)."""
    if "--target-jobs" not in argv:
        return argv
    start = argv.index("--target-jobs") + 1
    end = next((i for i in range(start, len(argv)) if argv[i].startswith("-")), len(argv))
    keep = set(unfinished)
    return [*argv[:start], *(a for a in argv[start:end] if a in keep), *argv[end:]]


def main() -> None:
    from pathlib import Path

    from snakemake.cli import main as snakemake_main

    from wneurons.jobs import ledger

    argv = sys.argv[1:]
    manifest = os.environ.get(ledger.MANIFEST_VARIABLE)
    try:
        if manifest:
            unfinished = ledger.unfinished_members(Path(manifest))
            total = len(ledger.read_manifest(Path(manifest)))
            print(
                f"wneurons allocation: {total - len(unfinished)} of {total} members finished by earlier attempts",
                file=sys.stderr,
                flush=True,
            )
            if not unfinished:
                return
            argv = without_finished(argv, unfinished)
        snakemake_main(argv)
    finally:
        print(closing_line(), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
