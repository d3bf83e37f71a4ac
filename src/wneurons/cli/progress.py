"""``wneurons status``: how far a config's run is. Done and left per rule from two Snakemake dry runs (every job of
the DAG with ``-F``; the jobs still to run without), running from Snakemake's own markers (its locks: the outputs a
run holds; its incomplete markers: outputs being written, or left by a killed job), and for SLURM the ledgers of
the ``wneurons-slurm`` allocations (:mod:`wneurons.jobs.ledger`) of the newest run. Several configs can run in one
working directory (a results_dir each): markers, locks and ledgers count for a config only where they name files
under its own roots (:func:`own_roots`), so one config's status does not show another's run."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
from pathlib import Path

from wneurons.experiment.paths import Roots
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


def own_roots(roots: Roots) -> tuple[str, ...]:
    """The folders that hold the files a config's run writes, the shared resources aside: its results (with its
    logs and benchmark tables) and its two activation roots."""
    return tuple(
        dict.fromkeys((roots.results, roots.logs, roots.benchmarks, roots.activations, roots.kept_activations))
    )


def is_own(path: str, own: tuple[str, ...]) -> bool:
    """Whether ``path`` (as Snakemake writes it: relative to the working directory) lies in one of ``own``."""
    return any(Roots.lies_in(path, root) for root in own)


def snakemake_activity(workdir: Path, own: tuple[str, ...]) -> tuple[str, list[str]]:
    """Who holds ``workdir`` now, by Snakemake's output locks: "this" (a run whose outputs lie under ``own``),
    "other" (only runs of other configs), or "none"; and this config's outputs marked incomplete (being written
    by a running job while it runs; else left by a killed one, rerun by ``--rerun-incomplete``)."""
    locks = workdir / SNAKEMAKE_DIR / "locks"
    holders = "none"
    for lock in sorted(locks.glob("*.output.lock")) if locks.is_dir() else []:
        with contextlib.suppress(OSError):  # a lock the run removes while we read it
            if any(is_own(line, own) for line in lock.read_text().splitlines() if line):
                holders = "this"
                break
            holders = "other"
    base = workdir / SNAKEMAKE_DIR / "incomplete"
    markers = [p for p in base.rglob("*") if p.is_file() and p.name != "migration_underway"] if base.is_dir() else []
    outputs = []
    for marker in markers:
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            outputs.append(_decoded(marker, base))
    return holders, sorted(path for path in outputs if is_own(path, own))


def allocation_ledgers(workdir: Path, own: tuple[str, ...]) -> tuple[str, list[tuple[str, int, int]]] | None:
    """The SLURM allocations (``.snakemake/wneurons-allocations/<run id>``) of this config's newest run, the newest
    with a member whose outputs lie under ``own``: its id and, per allocation (group), its members and how many
    of them finished (a ledger record and their outputs present); None if no run of it wrote any."""
    root = workdir / ledger.ROOT
    runs = [d for d in root.iterdir() if d.is_dir()] if root.is_dir() else []
    with contextlib.chdir(workdir):  # the manifests name outputs relative to the working directory
        for run in sorted(runs, key=lambda d: d.stat().st_mtime, reverse=True):
            manifests = [(m, ledger.read_manifest(m)) for m in sorted((ledger.ROOT / run.name).glob("*.json"))]
            members = [member for _, group in manifests for member in group]
            if any(is_own(str(path), own) for _, outputs, _ in members for path in outputs):
                # Only this run's outputs are looked for: another config's runs cost a manifest read, not a stat.
                return run.name, [
                    (m.stem, len(group), sum(ledger.finished(outputs, m, tmp) for _, outputs, tmp in group))
                    for m, group in manifests
                ]
    return None


def status_lines(total: dict[str, int], left: dict[str, int], workdir: Path, roots: Roots, shown: int = 5) -> list[str]:
    """The report: done / left per rule (rules with every job done last), running jobs' outputs, allocations: of
    the config whose files lie under ``roots``."""
    done = {rule: n - left.get(rule, 0) for rule, n in total.items()}
    n_total, n_left = sum(total.values()), sum(left.values())
    own = own_roots(roots)
    holders, incomplete = snakemake_activity(workdir, own)
    lines = [f"{n_total - n_left} of {n_total} jobs done, {n_left} left"]
    width = max((len(rule) for rule in total), default=4)
    lines.append(f"  {'rule':<{width}}  {'done':>6}  {'left':>6}")
    order = sorted(total, key=lambda rule: (left.get(rule, 0) == 0, list(total).index(rule)))
    lines += [f"  {rule:<{width}}  {done[rule]:>6}  {left.get(rule, 0):>6}" for rule in order]
    other = "; a run of another config holds this directory" if holders == "other" else ""
    if holders == "this":
        lines.append(
            f"running: a Snakemake run of this config holds {workdir}; {len(incomplete)} outputs being written"
        )
    elif incomplete:
        lines.append(
            f"running: none; {len(incomplete)} outputs left incomplete by a stopped run (rerun: they redo){other}"
        )
    elif other:
        lines.append(f"running: none of this config{other}")
    else:
        lines.append("running: none (no Snakemake run holds this directory)")
    lines += [f"  {path}" for path in incomplete[:shown]]
    if len(incomplete) > shown:
        lines.append(f"  ... and {len(incomplete) - shown} more")
    allocations = allocation_ledgers(workdir, own)
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
