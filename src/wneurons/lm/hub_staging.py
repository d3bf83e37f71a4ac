"""Staging one hub revision: every file fetched at the commit its revision resolved to, resumably, verified
against the hub's metadata, and the manifest written last (:func:`stage`).

Runs where the internet is (a local rule on the submit host); jobs then load the staged directory with the hub
turned off (:func:`wneurons.lm.models.load_staged`). Which files are fetched is
:func:`wneurons.lm.hub_files.plan_files`; what a staged directory holds and how it is read, verified and pruned is
:mod:`wneurons.store.staged`. The files it writes go through :mod:`wneurons.store.io` (atomic, the user's umask).

The sha256 recorded for every file: the hub's LFS metadata gives it for LFS files (weights); plain git files
(config, tokenizer) carry only their git blob id, so those are verified against the blob id and their sha256 is
computed here.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import shutil
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from wneurons import __version__
from wneurons.lm.hub_files import plan_files, tensor_files
from wneurons.store import io
from wneurons.store.staged import MANIFEST, MANIFEST_FORMAT, StagingError

__all__ = ["PARTIAL", "expected_size", "fetched_bytes", "stage", "work_dir"]

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- verifying a downloaded file
def _weights_digest(files: Mapping[str, Mapping[str, Any]], names: Iterable[str]) -> str:
    # store.io.sha256_files' recipe (by name: the name, then the file's hex sha256), from recorded digests, so the
    # digest of a pruned revision is still known.
    digest = hashlib.sha256()
    for name in sorted(names, key=lambda n: Path(n).name):
        digest.update(Path(name).name.encode())
        digest.update(files[name]["sha256"].encode())
    return digest.hexdigest()


def _git_blob_id(path: Path) -> str:
    digest = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _verified(path: Path, name: str, sibling: Any, where: str) -> dict[str, Any]:
    """The record of a downloaded file after checking it against the hub's metadata ``sibling`` (size, and LFS
    sha256 or git blob id); a StagingError naming the file when it differs."""
    size = path.stat().st_size
    expected = sibling.lfs.size if sibling.lfs is not None else sibling.size
    if expected is not None and size != expected:
        raise StagingError(f"{where}: {name} has {size} bytes, the hub says {expected}")
    sha256 = io.sha256_file(path)
    if sibling.lfs is not None:
        if sha256 != sibling.lfs.sha256:
            raise StagingError(f"{where}: {name} sha256 {sha256[:12]} differs from the hub's {sibling.lfs.sha256[:12]}")
        return {"size": size, "sha256": sha256, "lfs": True}
    if not sibling.blob_id:
        raise StagingError(f"{where}: the hub gives neither an LFS sha256 nor a git blob id for {name}")
    blob = _git_blob_id(path)
    if blob != sibling.blob_id:
        raise StagingError(f"{where}: {name} git blob {blob[:12]} differs from the hub's {sibling.blob_id[:12]}")
    return {"size": size, "sha256": sha256, "lfs": False, "git_blob_id": blob}


# ---------------------------------------------------------------- staging
PARTIAL = ".partial"  # in the work directory: files being downloaded, kept across processes to resume


def work_dir(out: Path) -> Path:
    """Where :func:`stage` downloads before the rename: a hidden sibling, kept when a download fails so that the
    next attempt fetches only the files still missing and resumes a file cut mid-way."""
    return out.parent / f".{out.name}.staging"


def expected_size(sibling: Any) -> int | None:
    return sibling.lfs.size if sibling.lfs is not None else sibling.size


def _download(repo_id: str, name: str, commit: str, work: Path, sibling: Any, token, endpoint: str | None) -> Path:
    """Fetch one file of ``repo_id`` at ``commit`` to ``work/name``; returns that path. A file already there with
    the hub's size is kept (staging verifies it next). Bytes go to ``work/.partial/{name}.part`` first, which
    outlives the process: a later call (after a dropped connection, a kill, a reboot) asks for the rest with an
    HTTP Range request and appends (huggingface_hub's own downloader resumes only inside one process and deletes
    its partial file). The whole file's sha256 is checked by the caller."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    dest = work / name
    expected = expected_size(sibling)
    if dest.is_file() and dest.stat().st_size == expected:
        return dest
    part = work / PARTIAL / f"{name}.part"
    part.parent.mkdir(parents=True, exist_ok=True)
    url = hf_hub_url(repo_id, name, revision=commit, endpoint=endpoint)
    location = get_hf_file_metadata(url, token=token, endpoint=endpoint).location
    headers = build_hf_headers(token=token)
    headers["Accept-Encoding"] = "identity"  # sizes and byte offsets of the file itself
    if urlsplit(location).netloc != urlsplit(url).netloc:
        headers.pop("authorization", None)  # LFS bytes come from another origin (a CDN): the token stays home
    with open(part, "ab") as fh:
        done = fh.tell()
        if expected is not None and done > expected:
            fh.truncate(0)
            done = 0
        if done:
            log.info("%s: resuming at byte %d of %s", name, done, expected)
        http_get(location, fh, resume_size=done, headers=headers, expected_size=expected, displayed_filename=name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(part, dest)
    return dest


def stage(
    repo_id: str,
    revision: str,
    out_dir: str | os.PathLike,
    *,
    token: str | bool | None = None,
    files: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
    family: str | None = None,
    endpoint: str | None = None,
) -> dict[str, Any]:
    """Stage ``repo_id`` at ``revision`` into ``out_dir``; returns the manifest written there as :data:`MANIFEST`.

    What is fetched (:func:`~wneurons.lm.hub_files.plan_files`): ``files`` when given; else, with ``layers`` None,
    what a model load needs (:data:`~wneurons.lm.hub_files.CONFIG_FILES` and
    :data:`~wneurons.lm.hub_files.TOKENIZER_FILES` the revision has, and its
    :func:`~wneurons.lm.hub_files.weight_files`); with ``layers`` (a revision read only by weight rows), the config,
    the shard index and only the shard(s) holding those layers of ``family`` (None: the revision's config names it).
    The manifest's weight digest covers every tensor file of the revision, fetched or not (unfetched ones by the
    hub's LFS sha256), so revisions compare alike however much of them was staged; ``staged_for`` says which.

    The revision is resolved once to its commit and every file is fetched at that commit. Each file is checked
    against the hub's metadata (size, LFS sha256 or git blob id) and recorded with its sha256, size and
    modification time. The download goes to a hidden sibling of ``out_dir``, which becomes ``out_dir`` only once
    every file is verified and the manifest written, so a failure leaves nothing that looks staged (the sibling
    stays: the next call fetches only what it lacks and resumes a file cut mid-way, :func:`_download`). Files and
    directories get the user's umask. ``token``: as ``huggingface_hub`` takes it (None: ``HF_TOKEN`` or the
    stored login); it is sent to the hub and never written. ``endpoint``: None for ``HF_ENDPOINT`` (default
    https://huggingface.co).
    """
    from huggingface_hub import HfApi, constants

    out = Path(out_dir)
    where = f"{repo_id}@{revision}"
    info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, files_metadata=True, token=token)
    commit = info.sha
    siblings = {s.rfilename: s for s in info.siblings or ()}
    work = work_dir(out)
    work.mkdir(parents=True, exist_ok=True)

    def fetch(name: str) -> Path:
        return _download(repo_id, name, commit, work, siblings[name], token, endpoint)

    if files is None:
        try:
            plan = plan_files(siblings, lambda name: json.loads(fetch(name).read_text()), layers=layers, family=family)
        except StagingError as err:
            raise StagingError(f"{where}: {err}") from None
        # A tensor file the hub gives no sha256 for (not in LFS) cannot be compared unfetched: fetch it.
        unknown = [n for n in plan.weight_files if n not in plan.wanted and siblings[n].lfs is None]
        wanted, weights, tensors = plan.wanted + unknown, plan.weight_files, plan.tensors
    else:
        wanted = list(dict.fromkeys(files))
        missing = [n for n in wanted if n not in siblings]
        if missing:
            raise StagingError(f"{where} (commit {commit}) has no {', '.join(missing)}")
        weights, tensors = tensor_files(wanted), None
    log.info("staging %s (commit %s): %d files into %s", where, commit, len(wanted), out)
    records = {}
    for name in wanted:
        path = fetch(name)
        try:
            records[name] = _verified(path, name, siblings[name], where)
        except StagingError:
            path.unlink()  # else the next attempt would take the bad file as already downloaded
            raise
    _keep_only(work, wanted)
    for name, record in records.items():  # after the last write: what verify_staged trusts without rehashing
        record["mtime_ns"] = (work / name).stat().st_mtime_ns
    weight_records = {
        n: {"size": records[n]["size"], "sha256": records[n]["sha256"]}
        if n in records
        else {"size": siblings[n].lfs.size, "sha256": siblings[n].lfs.sha256}
        for n in weights
    }
    staged_for: Any = "model"
    if tensors is not None:
        staged_for = {"layers": list(layers or ()), "tensors": tensors, "files": [n for n in weights if n in records]}
    manifest = {
        "format": MANIFEST_FORMAT,
        "repo_id": repo_id,
        "revision": revision,
        "commit": commit,
        "endpoint": (endpoint or constants.ENDPOINT).rstrip("/"),
        "files": records,
        "weight_files": weights,
        "weights": weight_records,
        "weights_sha256": _weights_digest(weight_records, weights),
        "weights_bytes": sum(r["size"] for r in weight_records.values()),
        "staged_bytes": sum(r["size"] for r in records.values()),
        "staged_for": staged_for,
        "pruned": False,
        "wneurons_version": __version__,
        "huggingface_hub_version": importlib.metadata.version("huggingface_hub"),
    }
    io.write_json(work / MANIFEST, manifest)  # last: a directory with a manifest is complete
    io.replace_directory(work, out)
    return manifest


def _keep_only(directory: Path, names: Collection[str]) -> None:
    """Remove from ``directory`` everything but the files ``names`` (the library's download bookkeeping, and
    files of an earlier attempt at another commit), and directories left empty."""
    keep = {directory / n for n in names}
    shutil.rmtree(directory / ".cache", ignore_errors=True)
    for path in sorted(directory.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir() and not path.is_symlink():
            if not any(path.iterdir()):
                path.rmdir()
        elif path not in keep:
            path.unlink()


def fetched_bytes(out_dir: Path, names: Iterable[str]) -> int:
    """Bytes of ``names`` already in a revision's work directory (whole files and kept partial ones)."""
    work = work_dir(out_dir)
    total = 0
    for name in names:
        for path in (work / name, work / PARTIAL / f"{name}.part"):
            if path.is_file():
                total += path.stat().st_size
    return total
