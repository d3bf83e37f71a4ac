"""The finished members of a SLURM allocation, in files meant for machines.

An allocation of the ``wneurons-slurm`` executor runs several jobs (its members). Whatever ends it early — its time
limit, a preemption, a failed node, ``scancel``, a requeue — the members it finished must never run again. So:

- the outer Snakemake writes, before each submission, the allocation's **manifest**: every member's target spec
  (``rule:wildcard=value,...``, as Snakemake's ``--target-jobs`` spells it) and output files
  (:func:`write_manifest`);
- a member that finishes inside the allocation writes one **record**, atomically, into the ledger directory beside
  the manifest: its outputs (:func:`record_finished`, called after the job's script returned, i.e. after its
  outputs were renamed into place);
- the allocation, at every start (first attempt, retry, SLURM requeue), runs only the members without a record
  whose outputs all exist (:func:`unfinished_members`); the outer run, when an allocation fails, deletes the
  outputs of the members without one (they may be half-written) and keeps the others.

One directory per outer run (``.snakemake/wneurons-allocations/<run id>/<group>``): a new run builds a new DAG from
the files, so an old ledger can never vouch for a job the new run decided to redo.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from wneurons.store.io import write_json

# Where the manifests and ledgers live, under the working directory.
ROOT = Path(".snakemake") / "wneurons-allocations"
# The environment variable that tells a job inside an allocation where its allocation's manifest is.
MANIFEST_VARIABLE = "WNEURONS_ALLOCATION_MANIFEST"


def manifest_path(run_id: str, group: str, root: Path = ROOT) -> Path:
    return root / run_id / f"{group}.json"


def ledger_dir(manifest: Path) -> Path:
    return manifest.with_suffix("")


def write_manifest(path: Path, members: list[tuple[str, list[str], list[str]]]) -> None:
    """``members``: (target spec, outputs, the outputs among them that are temporary) of every job of the
    allocation. A temporary output (activation shards) is deleted once its readers are done, so a finished job need
    not still have it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = [{"target": t, "outputs": sorted(map(str, o)), "temporary": sorted(map(str, tmp))} for t, o, tmp in members]
    write_json(path, {"members": body})


def read_manifest(path: Path) -> list[tuple[str, list[str], list[str]]]:
    members = json.loads(Path(path).read_text())["members"]
    return [(m["target"], m["outputs"], m["temporary"]) for m in members]


def _record_name(outputs: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(map(str, outputs))).encode()).hexdigest()[:32] + ".json"


def record_finished(outputs: list[str], manifest: Path | None = None) -> Path | None:
    """Record that the job with ``outputs`` finished (inside an allocation: ``$WNEURONS_ALLOCATION_MANIFEST`` set;
    elsewhere nothing happens and None is returned)."""
    manifest = manifest or (Path(os.environ[MANIFEST_VARIABLE]) if os.environ.get(MANIFEST_VARIABLE) else None)
    if manifest is None:
        return None
    ledger = ledger_dir(manifest)
    ledger.mkdir(parents=True, exist_ok=True)
    path = ledger / _record_name(outputs)
    record = {"outputs": sorted(map(str, outputs)), "slurm_job_id": os.environ.get("SLURM_JOB_ID")}
    write_json(path, record)
    return path


def finished(outputs: list[str], manifest: Path, temporary: list[str] = ()) -> bool:
    """Whether the member with ``outputs`` has a record and every output that is not ``temporary`` still exists."""
    record = ledger_dir(manifest) / _record_name(outputs)
    return record.is_file() and all(os.path.lexists(o) for o in outputs if o not in temporary)


def unfinished_members(manifest: Path) -> list[str]:
    """Target specs of the members of the allocation that have not finished."""
    return [t for t, outputs, tmp in read_manifest(manifest) if not finished(outputs, manifest, tmp)]
