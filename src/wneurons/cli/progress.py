"""``wneurons status``: how far a config's run is. Done and left per rule from two Snakemake dry runs (every job of
the DAG with ``-F``; the jobs still to run without), running from Snakemake's own markers (its locks: a run holds
the directory; its incomplete markers: outputs being written, or left by a killed job), and for SLURM the ledgers of
the ``wneurons-slurm`` allocations (:mod:`wneurons.jobs.ledger`) of the newest run."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
from pathlib import Path

from wneurons.jobs import ledger

SNAKEMAKE_DIR = Path(".snakemake")


def job_stats(output: str) -> dict[str, int]:
    """Rule -> jobs of the first ``Job stats`` table of a Snakemake dry run (``total`` left out); empty when
    there is none (nothing to be done)."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Job stats:"), None)
    counts: dict[str, int] = {}
    if start is None:
        return counts
    for line in lines[start + 3 :]:  # the title, the header, the rule under it
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        if parts[0] != "total":
            counts[parts[0]] = int(parts[1])
    return counts


def dry_run(cmd: list[str], root: Path, force_all: bool) -> dict[str, int]:
    """The jobs per rule a dry run of ``cmd`` (a snakemake command line) lists; a CalledProcessError if it fails."""
    extra = ["-n", *(["-F"] if force_all else []), "--quiet", "rules"]  # --quiet takes a list: last
    proc = subprocess.run([*cmd, *extra], cwd=root, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
    return job_stats(proc.stdout)


def _decoded(path: Path, base: Path) -> str:
    """The output path an incomplete marker names (urlsafe base64, split in ``@``-prefixed folders when long)."""
    parts = [p.removeprefix("@") for p in path.relative_to(base).parts]
    return base64.urlsafe_b64decode("".join(parts)).decode()


def snakemake_activity(workdir: Path) -> tuple[bool, list[str]]:
    """Whether a Snakemake run holds ``workdir`` now (its lock files), and the outputs marked incomplete (being
    written by a running job while it does; else left by a killed one, rerun by ``--rerun-incomplete``)."""
    locks = workdir / SNAKEMAKE_DIR / "locks"
    active = locks.is_dir() and any(locks.glob("*.lock"))
    base = workdir / SNAKEMAKE_DIR / "incomplete"
    markers = [p for p in base.rglob("*") if p.is_file() and p.name != "migration_underway"] if base.is_dir() else []
    outputs = []
    for marker in markers:
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            outputs.append(_decoded(marker, base))
    return active, sorted(outputs)


def allocation_ledgers(workdir: Path) -> tuple[str, list[tuple[str, int, int]]] | None:
    """The newest run's SLURM allocations (``.snakemake/wneurons-allocations/<run id>``): its id and, per allocation
    (group), its members and how many of them finished (a ledger record and their outputs present); None if no
    run wrote any."""
    root = workdir / ledger.ROOT
    runs = [d for d in root.iterdir() if d.is_dir()] if root.is_dir() else []
    if not runs:
        return None
    newest = max(runs, key=lambda d: d.stat().st_mtime)
    groups = []
    with contextlib.chdir(workdir):  # the manifests name outputs relative to the working directory
        for manifest in sorted((ledger.ROOT / newest.name).glob("*.json")):
            members = ledger.read_manifest(manifest)
            done = sum(ledger.finished(outputs, manifest, tmp) for _, outputs, tmp in members)
            groups.append((manifest.stem, len(members), done))
    return newest.name, groups


def status_lines(total: dict[str, int], left: dict[str, int], workdir: Path, shown: int = 5) -> list[str]:
    """The report: done / left per rule (rules with every job done last), running jobs' outputs, allocations."""
    done = {rule: n - left.get(rule, 0) for rule, n in total.items()}
    n_total, n_left = sum(total.values()), sum(left.values())
    active, incomplete = snakemake_activity(workdir)
    lines = [f"{n_total - n_left} of {n_total} jobs done, {n_left} left"]
    width = max((len(rule) for rule in total), default=4)
    lines.append(f"  {'rule':<{width}}  {'done':>6}  {'left':>6}")
    order = sorted(total, key=lambda rule: (left.get(rule, 0) == 0, list(total).index(rule)))
    lines += [f"  {rule:<{width}}  {done[rule]:>6}  {left.get(rule, 0):>6}" for rule in order]
    if active:
        lines.append(f"running: a Snakemake run holds {workdir}; {len(incomplete)} outputs being written")
    elif incomplete:
        lines.append(f"running: none; {len(incomplete)} outputs left incomplete by a stopped run (rerun: they redo)")
    else:
        lines.append("running: none (no Snakemake run holds this directory)")
    lines += [f"  {path}" for path in incomplete[:shown]]
    if len(incomplete) > shown:
        lines.append(f"  ... and {len(incomplete) - shown} more")
    allocations = allocation_ledgers(workdir)
    if allocations is not None:
        run_id, groups = allocations
        members, finished = sum(g[1] for g in groups), sum(g[2] for g in groups)
        lines.append(
            f"SLURM allocations of run {run_id}: {len(groups)}, {finished} of {members} member jobs finished "
            f"(their ledgers)"
        )
        lines += [f"  {group}: {d} of {n} finished" for group, n, d in groups if d < n]
    return lines


def working_directory(root: Path, directory: str | os.PathLike | None) -> Path:
    return Path(directory).resolve() if directory else root
