"""Atomic result files, checksums and provenance.

Every file this package writes goes through :func:`atomic_output`: the content is written to a temporary file
in the same directory and renamed over the target only once complete, so a job killed mid-write never leaves a
file that looks finished (Snakemake would otherwise take it as done on resume). Files and directories are
created with the user's umask (``tempfile.mkstemp`` / ``mkdtemp`` would give 0600 / 0700, and collaborators in a
shared project directory could not read the results).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import platform
import re
import secrets
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wneurons import __version__

log = logging.getLogger(__name__)


def _new_temporary(parent: Path, prefix: str, suffix: str, *, directory: bool = False) -> Path:
    """A new, uniquely named empty file (or directory) in ``parent``, created as ``open`` and ``mkdir`` create
    them: mode 0666 (0777) less the umask. Creating it with that mode, rather than reading the umask, is what
    keeps this thread-safe (``os.umask`` sets the process-wide mask to read it)."""
    for _ in range(100):
        candidate = parent / f"{prefix}{secrets.token_hex(4)}{suffix}"
        try:
            if directory:
                candidate.mkdir(mode=0o777)
            else:
                os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"no unused temporary name {prefix}*{suffix} in {parent}")


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` if the block succeeds, else delete it.

    The temporary file exists (empty) when the block starts, with the user's umask applied to mode 0666; writers
    that open it for writing keep that mode."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A job killed mid-write (kill -9, OOM) leaves its temporary file behind; only one job ever writes a given
    # output, so earlier leftovers of this very target are stale and can go.
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    tmp_path = _new_temporary(path.parent, f".{path.name}.", suffix + ".tmp")
    try:
        yield tmp_path
        _fsync(tmp_path)
        os.replace(tmp_path, path)
        _fsync(path.parent)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise


def _fsync(path: Path) -> None:
    """Flush a file's data (before its rename) or a directory's entries (after it) to the disk: on a node that
    crashes after the rename, a file that looks finished would otherwise be empty or missing (a shared file
    system's client may hold both in its cache)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_directory(source: str | os.PathLike, path: str | os.PathLike) -> None:
    """Rename the directory ``source`` to ``path``, replacing what is there (a directory cannot be renamed over
    a non-empty one: the old one is moved aside first, then removed). ``source`` must be on ``path``'s file
    system, e.g. a sibling."""
    source, path = Path(source), Path(path)
    if path.exists():
        old = _new_temporary(path.parent, f".{path.name}.", ".old", directory=True)
        os.replace(path, old / path.name)
        os.replace(source, path)
        shutil.rmtree(old)
    else:
        os.replace(source, path)


def sweep_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Remove the temporary siblings (``.{name}.<8 hex>.tmp``) that earlier writers of ``path`` left behind when
    they were killed (SIGKILL, a time limit, a lost node: no cleanup runs), up to an activation collection's size
    each; returns what was removed. Called as a new write of ``path`` starts: one job writes an output at a time,
    so any such sibling is stale."""
    path = Path(path)
    stale = re.compile(rf"^\.{re.escape(path.name)}\.[0-9a-f]{{8}}\.tmp$")
    if not path.parent.is_dir():
        return []
    removed = [p for p in path.parent.iterdir() if stale.match(p.name)]
    for p in removed:
        log.warning("removing %s, left by a killed writer of %s", p, path)
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return removed


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary sibling directory of ``path``; on success it replaces ``path``, else it is removed.

    The directory counterpart of :func:`atomic_output` (activation shards, converted models, fetched data sets);
    the directory has mode 0777 less the user's umask.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_temporaries(path)
    tmp = _new_temporary(path.parent, f".{path.name}.", ".tmp", directory=True)
    try:
        yield tmp
        replace_directory(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _json_default(obj: Any) -> Any:
    # numpy / torch scalars and paths appear in results; make them plain JSON.
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON, atomically. NaN is refused: a NaN score is a bug, not a result."""
    with atomic_output(path, ".json") as tmp:
        tmp.write_text(json.dumps(obj, indent=2, default=_json_default, allow_nan=False) + "\n")


# np.load parses an .npy header with ast.literal_eval, and two threads doing that at once failed here on CPython
# 3.11.7 with "SystemError: AST constructor recursion depth mismatch" (the AST recursion counter, cf.
# python/cpython#106905; once in a full test run, in the statistics' reader threads). Jobs and reader threads share
# a process, so every .npy is opened through this lock (a header is a few hundred bytes; reads stay parallel).
_NPY_HEADERS = threading.Lock()


def load_npy(path: str | os.PathLike, mmap_mode: str | None = None) -> Any:
    """``np.load`` of one .npy file, its header parsed under a process-wide lock (see above)."""
    import numpy as np

    with _NPY_HEADERS:
        return np.load(path, mmap_mode=mmap_mode)


def read_json(path: str | os.PathLike) -> Any:
    with open(path) as fh:
        return json.load(fh)


def write_parquet(path: str | os.PathLike, frame: Any, metadata: dict[str, Any] | None = None) -> None:
    """Write a polars DataFrame to parquet atomically; ``metadata`` (e.g. provenance) goes into the file footer."""
    import pyarrow.parquet as pq

    table = frame.to_arrow()
    if metadata:
        existing = table.schema.metadata or {}
        extra = {b"wneurons": json.dumps(metadata, default=_json_default).encode()}
        table = table.replace_schema_metadata({**existing, **extra})
    with atomic_output(path, ".parquet") as tmp:
        pq.write_table(table, tmp)


def read_parquet_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The provenance dict stored by :func:`write_parquet` (empty if none)."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(b"wneurons")
    return json.loads(raw) if raw else {}


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_files(paths: list[str | os.PathLike]) -> str:
    """One digest over several files (sorted by name): the checksum of a data set made of many files."""
    digest = hashlib.sha256()
    for p in sorted(paths, key=lambda q: Path(q).name):
        digest.update(Path(p).name.encode())
        digest.update(sha256_file(p).encode())
    return digest.hexdigest()


def provenance(**fields: Any) -> dict[str, Any]:
    """The provenance block every result records: the caller's fields plus package and library versions and the
    torch thread count of the calling thread (the job's: float32 reductions split by it, so two results computed
    at different counts may differ in their last bits, which a search on them can amplify: issue 44)."""
    import torch
    import transformers

    return {
        **fields,
        "torch_threads": torch.get_num_threads(),
        "wneurons_version": __version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "python_version": platform.python_version(),
    }


def existing_ancestor(directory: str | os.PathLike) -> Path:
    """``directory`` if it exists, else its nearest existing ancestor: where a directory not yet created will live."""
    path = Path(directory).absolute()
    while not path.exists():
        path = path.parent
    return path


def free_bytes(directory: str | os.PathLike) -> int:
    """Free bytes on the file system that holds (or will hold) ``directory``."""
    return shutil.disk_usage(existing_ancestor(directory)).free
