"""The ``wneurons-slurm`` executor's settings: the slurm plugin's, plus the cap on the wait between status checks.

No ``from __future__ import annotations`` here: Snakemake builds each setting's command-line option from the
dataclass field's type, which must be the type itself, not its name as a string.
"""

from dataclasses import dataclass, field

from snakemake_executor_plugin_slurm import ExecutorSettings as SlurmExecutorSettings


@dataclass
class ExecutorSettings(SlurmExecutorSettings):
    max_seconds_between_status_checks: int = field(
        default=180,
        metadata={
            "help": "The longest wait, in seconds, between two status checks of the submitted jobs. The slurm "
            "plugin adds 10 s to the wait after every check that finds no job finished, up to 180 s; a site's "
            "MinJobAge must stay above it (squeue forgets a finished job after MinJobAge). A cluster whose "
            "allocations last minutes (the CI cluster) sets it low, so that a finished allocation is seen soon.",
        },
    )
