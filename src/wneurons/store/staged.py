"""A staged hub revision on disk: its manifest (:data:`MANIFEST`, written last by
:func:`wneurons.lm.hub_staging.stage`, so a directory with one is complete), how it is read and verified before a
load, and how its weights are pruned once every job reading them has finished (the manifest stays: its digests still
feed the integrity gate). No network: staging itself, which talks to the hub, is :mod:`wneurons.lm.hub_staging`.

A staged file is checked against the manifest's sha256 before a job reads it (:func:`verify_staged`), hashed once
per change: staging records each file's size and modification time with its digest, and a file still at those (or
at the values of its last check in this process) is not reread. A file edited in place gets a new modification time
and is hashed; one changed with its time put back (``touch -r``, a restore that keeps times) is not seen."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from wneurons.store import io

log = logging.getLogger(__name__)

MANIFEST = "STAGED.json"
MANIFEST_FORMAT = 2  # 2: per-file weight records, staged_for, files' mtime_ns


class StagingError(RuntimeError):
    """A revision cannot be staged as asked, a staged file differs from the hub's metadata, or a staged directory
    is missing, incomplete or pruned."""


def read_manifest(staged_dir: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a staged directory; a StagingError saying how to stage it when there is none."""
    path = Path(staged_dir) / MANIFEST
    if not path.is_file():
        raise StagingError(f"{staged_dir} is not staged (no {MANIFEST}): stage it first, where the hub is reachable")
    return io.read_json(path)


def is_staged(staged_dir: str | os.PathLike, repo_id: str, revision: str) -> bool:
    """Whether ``staged_dir`` holds a staging of ``repo_id`` at ``revision`` (pruned or not)."""
    path = Path(staged_dir) / MANIFEST
    if not path.is_file():
        return False
    manifest = io.read_json(path)
    return manifest.get("repo_id") == repo_id and manifest.get("revision") == revision


# (path, size, mtime_ns) -> sha256 of the files this process has hashed: each is hashed once per change.
_HASHED: dict[tuple[str, int, int], str] = {}


def staged_sha256(path: Path, record: dict[str, Any]) -> str:
    """The sha256 of a staged file: the manifest's ``record`` when the file still has the size and modification
    time staging recorded, else this process's earlier hash of it at its current size and time, else hashed now."""
    st = path.stat()
    if (st.st_size, st.st_mtime_ns) == (record["size"], record.get("mtime_ns")):
        return record["sha256"]
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASHED:
        _HASHED[key] = io.sha256_file(path)
    return _HASHED[key]


def verify_staged(staged_dir: str | os.PathLike, *, weights: bool = True) -> dict[str, Any]:
    """The manifest of a staged directory after checking that every file it lists is there with its recorded
    size and sha256 (:func:`staged_sha256`: hashed only when its size or modification time changed since it was
    last verified). ``weights`` False: the weight files may have been pruned. A StagingError in one line naming the
    file, the hub id and revision when one differs."""
    manifest = read_manifest(staged_dir)
    where = f"{manifest['repo_id']}@{manifest['revision']}"
    if manifest["pruned"] and weights:
        raise StagingError(f"{staged_dir} ({where}): its weights were pruned; stage it again to read them")
    pruned = set(manifest["pruned_files"]) if manifest["pruned"] else set()
    for name, record in manifest["files"].items():
        if name in pruned:
            continue
        path = Path(staged_dir) / name
        if not path.is_file() or path.stat().st_size != record["size"]:
            raise StagingError(f"{path} ({where}) is missing or not {record['size']} bytes; stage it again")
        sha256 = staged_sha256(path, record)
        if sha256 != record["sha256"]:
            raise StagingError(
                f"{path} ({where}) changed on disk since it was staged: sha256 {sha256[:12]}, the manifest's "
                f"{record['sha256'][:12]}; remove {staged_dir} and stage it again"
            )
    return manifest


def weight_records(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{tensor file: {size, sha256}}`` of every tensor file of a staged revision's weight layout, fetched or not
    (a format-1 manifest staged them all: its file records)."""
    if "weights" in manifest:
        return manifest["weights"]
    return {
        n: {"size": manifest["files"][n]["size"], "sha256": manifest["files"][n]["sha256"]}
        for n in manifest["weight_files"]
    }


def staged_provenance(staged_dir: str | os.PathLike) -> dict[str, Any]:
    """What a result records about a staged model: hub id, revision, the commit it resolved to, weight digest."""
    manifest = read_manifest(staged_dir)
    return {
        "hub_id": manifest["repo_id"],
        "revision": manifest["revision"],
        "commit": manifest["commit"],
        "weights_sha256": manifest["weights_sha256"],
    }


def prune(staged_dir: str | os.PathLike, out_path: str | os.PathLike | None = None) -> dict[str, Any]:
    """Remove a staged revision's weight files (the shard index too); the manifest stays, says ``pruned`` and
    keeps every digest. Idempotent. Returns the updated manifest, with ``pruned_bytes``; ``out_path``: where to
    record what was removed (the workflow's marker: hub id, revision, commit, files, bytes).

    The manifest's and the directory's modification times are left as they were: Snakemake reruns the jobs
    whose inputs are newer than their outputs, and those jobs are exactly the ones that can no longer run."""
    directory = Path(staged_dir)
    manifest = read_manifest(directory)
    times = {p: p.stat() for p in (directory / MANIFEST, directory)}
    removed = [n for n in manifest["files"] if n in manifest["weight_files"] or n.endswith(".index.json")]
    if not manifest["pruned"]:
        manifest = {**manifest, "pruned": True, "pruned_files": removed}
        manifest["pruned_bytes"] = sum(manifest["files"][n]["size"] for n in removed)
        io.write_json(directory / MANIFEST, manifest)  # first: killed halfway, the directory already says pruned
    for name in manifest["pruned_files"]:
        (directory / name).unlink(missing_ok=True)
    for path, st in times.items():
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    log.info(
        "pruned %s@%s: %d files, %d bytes",
        manifest["repo_id"],
        manifest["revision"],
        len(manifest["pruned_files"]),
        manifest["pruned_bytes"],
    )
    if out_path is not None:
        keys = ("repo_id", "revision", "commit", "pruned_files", "pruned_bytes")
        io.write_json(out_path, {k: manifest[k] for k in keys} | {"staged_dir": str(directory)})
    return manifest


def staging_dir_problem(staging_dir: str | os.PathLike) -> str | None:
    """One line when ``hub.staging_dir`` cannot hold staged revisions (it, or the nearest existing folder above
    it, is not a directory, or cannot be written); None when it can."""
    path = Path(staging_dir)
    for existing in (path, *path.absolute().parents):
        if not existing.exists():
            continue
        if not existing.is_dir():
            what = "is" if existing == path else f"is under {existing}, which is"
            return f"hub.staging_dir {staging_dir} {what} a file, not a directory: point it at a directory"
        if not os.access(existing, os.W_OK | os.X_OK):
            return f"hub.staging_dir {staging_dir}: {existing} is not writable by this user"
        return None
    return None
