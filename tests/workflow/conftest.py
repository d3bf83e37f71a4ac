"""Shared by the workflow tests."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def stand_in_gpus_run_on_the_cpu():
    """The localhost SLURM cluster's GPUs are stand-ins (/dev/null: .ci/slurm/up.sh), so a workflow run through it
    gives its GPU jobs CUDA_VISIBLE_DEVICES without CUDA; they run on the CPU on purpose (sbatch --export=ALL carries
    this into the allocations). Outside SLURM no job is given a GPU and the setting changes nothing. Session-scoped,
    so that module-scoped runs (test_hub_workflow's) have it too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WNEURONS_DEVICE", "cpu")
        yield
