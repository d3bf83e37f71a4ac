"""Before any job: do the activation shards this run collects fit where they go (review N9)?

A collection writes its revision's shards (up to ~450 GB for pythia-12b) under ``neurons.activations_dir``; one
that does not fit fails with ENOSPC after hours, and breaks the results, ledger and Snakemake metadata that share
the file system. The run's ``activations_mb`` resource (profiles/slurm) caps the shards held at once; here both the
largest collection and that cap are held against the free space of the directory the shards go to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from wneurons.store.io import existing_ancestor, free_bytes

MB = 2**20


def shard_space_problems(
    collections: Iterable[tuple[str, str, int]],
    budget_mb: int | None,
    *,
    disk_free: Callable[[str | Path], int] = free_bytes,
) -> list[str]:
    """One line per problem, naming the key that fixes it. ``collections``: (label, shard directory, MB it writes)
    of every collection the run will start; ``budget_mb``: the run's ``activations_mb`` resource (None: unbounded,
    every collection may run at once)."""
    by_dir: dict[Path, list[tuple[str, int]]] = {}
    for label, directory, mb in collections:
        by_dir.setdefault(existing_ancestor(directory), []).append((label, mb))
    problems = []
    for root, jobs in sorted(by_dir.items()):
        free_mb = disk_free(root) // MB
        label, largest = max(jobs, key=lambda j: j[1])
        if largest > free_mb:
            problems.append(
                f"neurons.activations_dir: {label} writes {_gb(largest)} of shards under {root}, which has "
                f"{_gb(free_mb)} free: free space there or point neurons.activations_dir (or neurons.scratch_dir) "
                "elsewhere"
            )
            continue
        total = sum(mb for _, mb in jobs)
        at_once = total if budget_mb is None else min(budget_mb, total)
        if at_once > free_mb:
            problems.append(
                f"activations_mb: {len(jobs)} collections may hold {_gb(at_once)} of shards at once under {root}, "
                f"which has {_gb(free_mb)} free: set the resource activations_mb (profile `resources`) to at most "
                f"{free_mb} or free space there"
            )
    return problems


def _gb(mb: int) -> str:
    return f"{mb / 1024:,.1f} GB" if mb >= 1024 else f"{mb:,} MB"
