"""Meeting the Hugging Face hub: staged, pinned and verified downloads, a preflight, pruning, the integrity gate.

Jobs never talk to the hub. Each hub (model, revision) is first *staged* where the internet is (a local rule on
the submit host): :func:`stage` fetches exactly what a model load and a weight read need into a directory of its
own, pinned to the commit the revision resolved to and verified file by file against the hub's metadata, and
writes :data:`MANIFEST` there last. Jobs then load that directory with the hub turned off
(:func:`wneurons.lm.models.load_staged`: no network at all) and record the commit.

- :func:`preflight`, before any job is submitted: one line per problem (gated, missing revision, no such repo,
  hub unreachable), in seconds: short timeouts and no retry loop (the library's own retries take 48 s when the
  hub is unreachable). The token is sent to the hub only, never printed.
- what a staged directory holds and how it is read, verified and pruned is :mod:`wneurons.store.staged`.
- :func:`staged_integrity`, the training-dynamics gate over staged manifests: two revisions with identical
  weights (or a step equal to the final revision, e.g. ``main``) is an error naming both, or, with
  ``mode="drop"``, a recorded drop.

This module lives in ``lm/`` rather than ``store/``: it is the model runtime's client of the hub (which files a
transformers load reads, gated repos and tokens, ``huggingface_hub``'s HTTP errors), and ``store/`` stays free of
network clients. The files it writes go through :mod:`wneurons.store.io` (atomic, the user's umask).

The sha256 recorded for every file: the hub's LFS metadata gives it for LFS files (weights); plain git files
(config, tokenizer) carry only their git blob id, so those are verified against the blob id and their sha256 is
computed here.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.metadata
import json
import logging
import os
import re
import shutil
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from wneurons import __version__
from wneurons.store import io
from wneurons.store.checkpoints import STEP_REVISION
from wneurons.store.staged import MANIFEST, MANIFEST_FORMAT, StagingError, read_manifest

__all__ = [
    "CONFIG_FILES",
    "PREFLIGHT_TIMEOUT",
    "TOKENIZER_FILES",
    "HubRevision",
    "preflight",
    "stage",
    "staged_integrity",
    "turn_off_hub",
    "weight_files",
]

log = logging.getLogger(__name__)

# What a model load reads besides its weights (each fetched when the revision has it; config.json is required).
CONFIG_FILES = ("config.json", "generation_config.json")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
)
# Weight layouts in the order transformers prefers them: (shard index, single file).
WEIGHT_LAYOUTS = (
    ("model.safetensors.index.json", "model.safetensors"),
    ("pytorch_model.bin.index.json", "pytorch_model.bin"),
)
# Seconds per preflight request (connect, then read): the hub answers metadata in well under one.
PREFLIGHT_TIMEOUT = 5.0
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class HubRevision(NamedTuple):
    """One hub (model, revision) of a run: the config's model name, its hub id, the revision (branch, tag or
    commit sha)."""

    model: str
    repo_id: str
    revision: str


def turn_off_hub() -> None:
    """Turn the hub off for this process and its children (``HF_HUB_OFFLINE=1``): huggingface_hub and transformers
    then never open a connection. Read when huggingface_hub is first imported, so call it before: the workflow does
    in every job process on a compute node, where everything a job reads is staged."""
    os.environ["HF_HUB_OFFLINE"] = "1"


# ---------------------------------------------------------------- what a revision's load needs
def weight_files(names: Collection[str], read_index: Callable[[str], Mapping]) -> list[str]:
    """The weight files a transformers load reads among a revision's files ``names``: safetensors where the
    revision has them, else PyTorch ``.bin``; for a sharded checkpoint its index (first) and the shards it names.
    ``read_index(name)`` returns that index file's parsed JSON (called only for a sharded layout)."""
    for index, single in WEIGHT_LAYOUTS:
        if index in names:
            shards = sorted(set(read_index(index)["weight_map"].values()))
            missing = [s for s in shards if s not in names]
            if missing:
                raise StagingError(f"{index} names shards the revision does not have: {', '.join(missing)}")
            return [index, *shards]
        if single in names:
            return [single]
    layouts = ", ".join(name for layout in WEIGHT_LAYOUTS for name in layout)
    raise StagingError(f"no weights: the revision has none of {layouts}")


def _tensor_files(names: Iterable[str]) -> list[str]:
    """The files holding tensors (not the shard index), sorted: what the weight digest covers."""
    return sorted(n for n in names if n.endswith((".safetensors", ".bin")))


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
def _work_dir(out: Path) -> Path:
    """Where :func:`stage` downloads before the rename: a hidden sibling, kept when a download fails so that the
    next attempt fetches only the files still missing."""
    return out.parent / f".{out.name}.staging"


def stage(
    repo_id: str,
    revision: str,
    out_dir: str | os.PathLike,
    *,
    token: str | bool | None = None,
    files: Sequence[str] | None = None,
    endpoint: str | None = None,
) -> dict[str, Any]:
    """Stage ``repo_id`` at ``revision`` into ``out_dir``; returns the manifest written there as :data:`MANIFEST`.

    ``files``: the repository files to fetch; by default what a model load needs (:data:`CONFIG_FILES` and
    :data:`TOKENIZER_FILES` the revision has, and its :func:`weight_files`). The revision is resolved once to its
    commit and every file is fetched at that commit. Each file is checked against the hub's metadata (size, LFS
    sha256 or git blob id) and recorded with its sha256. The download goes to a hidden sibling of ``out_dir``,
    which becomes ``out_dir`` only once every file is verified and the manifest written, so a failure leaves
    nothing that looks staged (the sibling stays, and the next call fetches only what it lacks). Files and
    directories get the user's umask. ``token``: as ``huggingface_hub`` takes it (None: ``HF_TOKEN`` or the
    stored login); it is sent to the hub and never written. ``endpoint``: None for ``HF_ENDPOINT`` (default
    https://huggingface.co).
    """
    from huggingface_hub import HfApi, constants, hf_hub_download

    out = Path(out_dir)
    where = f"{repo_id}@{revision}"
    info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, files_metadata=True, token=token)
    commit = info.sha
    siblings = {s.rfilename: s for s in info.siblings or ()}
    work = _work_dir(out)
    work.mkdir(parents=True, exist_ok=True)

    def fetch(name: str) -> Path:
        path = hf_hub_download(repo_id, name, revision=commit, local_dir=work, token=token, endpoint=endpoint)
        return Path(path)

    if files is None:
        if "config.json" not in siblings:
            raise StagingError(f"{where}: the revision has no config.json")
        present = [n for n in (*CONFIG_FILES, *TOKENIZER_FILES) if n in siblings]
        wanted = present + weight_files(siblings, lambda name: json.loads(fetch(name).read_text()))
    else:
        wanted = list(dict.fromkeys(files))
        missing = [n for n in wanted if n not in siblings]
        if missing:
            raise StagingError(f"{where} (commit {commit}) has no {', '.join(missing)}")
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
    weights = _tensor_files(wanted)
    manifest = {
        "format": MANIFEST_FORMAT,
        "repo_id": repo_id,
        "revision": revision,
        "commit": commit,
        "endpoint": (endpoint or constants.ENDPOINT).rstrip("/"),
        "files": records,
        "weight_files": weights,
        "weights_sha256": _weights_digest(records, weights),
        "weights_bytes": sum(records[n]["size"] for n in weights),
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


# ---------------------------------------------------------------- the integrity gate
def staged_integrity(
    staged: Mapping[str, str | os.PathLike],
    final_revision: str,
    mode: str = "error",
    out_path: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """The checkpoint integrity gate over one model's staged revisions (``{revision: staged dir}``, pruned ones
    included): revisions with identical weight digests, or one equal to ``final_revision``, raise
    :class:`~wneurons.core.dynamics.CheckpointIntegrityError` naming them (``mode="error"``), or are dropped
    (``mode="drop"``: the final revision, else the earliest step, of each group is kept). Returns (and writes to
    ``out_path`` when given) ``{"hashes", "commits", "problems", "dropped", "mode"}``."""
    from wneurons.core.dynamics import CheckpointIntegrityError, integrity_drops, integrity_problems

    if mode not in ("error", "drop"):
        raise ValueError(f"integrity mode {mode!r}: expected error or drop")
    manifests = {revision: read_manifest(d) for revision, d in staged.items()}
    hashes = {revision: m["weights_sha256"] for revision, m in manifests.items()}
    problems = integrity_problems(hashes, final_revision)
    if problems and mode == "error":
        raise CheckpointIntegrityError("checkpoint integrity: " + "; ".join(problems))
    dropped = integrity_drops(hashes, final_revision) if problems else []
    if dropped:
        log.warning("checkpoint integrity: dropping %s (%s)", ", ".join(dropped), "; ".join(problems))
    out = {
        "hashes": hashes,
        "commits": {revision: m["commit"] for revision, m in manifests.items()},
        "problems": problems,
        "dropped": dropped,
        "mode": mode,
    }
    if out_path is not None:
        io.write_json(out_path, out)
    return out


# ---------------------------------------------------------------- preflight
def _transport_errors() -> tuple[type[BaseException], ...]:
    """Exceptions meaning no HTTP answer came back (refused, reset, timed out, offline mode), for whichever HTTP
    library the installed huggingface_hub uses."""
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]  # OfflineModeIsEnabled is a ConnectionError
    for module, name in (("httpx2", "TransportError"), ("httpx", "TransportError"), ("requests", "RequestException")):
        try:
            errors.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(errors)


def _nearest(revision: str, names: Collection[str]) -> list[str]:
    """Revisions near ``revision`` among ``names``: for ``step<N>``, the closest ``step`` branches below and
    above N; otherwise the closest spellings."""
    match = STEP_REVISION.match(revision)
    steps = sorted((int(m.group(1)), n) for n in names if (m := STEP_REVISION.match(n)))
    if match and steps:
        n = int(match.group(1))
        below = [name for step, name in steps if step < n][-1:]
        above = [name for step, name in steps if step > n][:1]
        return below + above
    return difflib.get_close_matches(revision, sorted(names), n=3, cutoff=0.5)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def preflight(
    models: Iterable[HubRevision | tuple[str, str, str]],
    *,
    token: str | bool | None = None,
    endpoint: str | None = None,
    timeout: float = PREFLIGHT_TIMEOUT,
) -> list[str]:
    """One line per problem that would stop staging ``models`` ((model, hub id, revision) triples); empty when
    every one can be fetched. Pass only the revisions still to stage (:func:`is_staged`).

    Per repository: its refs (every revision that is a branch or tag must be one; a commit sha is asked for
    directly) and the HEAD of ``config.json`` at one existing revision, with ``token``, which tells a gated or
    private repository. Problems: a gated repo (naming its page, ``HF_TOKEN`` and the login command), a missing
    revision (naming the nearest ones), no such repository, the hub unreachable (one line naming the host and how
    to stage elsewhere; nothing more is asked), an error answer. Each request has ``timeout`` seconds and none is
    retried. No line contains the token.
    """
    from huggingface_hub import constants

    endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
    by_repo: dict[str, dict[str, list[str]]] = {}  # repo -> model -> revisions, in the order given
    for model, repo_id, revision in models:
        revisions = by_repo.setdefault(repo_id, {}).setdefault(model, [])
        if revision not in revisions:
            revisions.append(revision)
    if not by_repo:
        return []
    if constants.is_offline_mode():
        n = sum(len(r) for m in by_repo.values() for r in m.values())
        return [
            f"HF_HUB_OFFLINE is set, so the hub cannot be asked about {_plural(n, 'unstaged model revision')} "
            f"({_listing(by_repo)}): stage them with the hub reachable, or unset HF_HUB_OFFLINE"
        ]
    problems: list[str] = []
    transport = _transport_errors()
    repos = list(by_repo)
    for i, repo_id in enumerate(repos):
        try:
            problems += _check_repo(repo_id, by_repo[repo_id], token, endpoint, timeout)
        except transport as err:
            rest = {r: by_repo[r] for r in repos[i:]}
            n = sum(len(r) for m in rest.values() for r in m.values())
            host = urlsplit(endpoint).netloc or endpoint
            problems.append(
                f"hub {host} unreachable from this machine ({type(err).__name__}): could not check "
                f"{_plural(n, 'model revision')} ({_listing(rest)}). Stage them on a machine that reaches {host} "
                "(the login node, where jobs are submitted) and copy the staged directories here, or set HF_ENDPOINT "
                "to a reachable mirror"
            )
            break
    return problems


def _listing(by_repo: Mapping[str, Mapping[str, list[str]]]) -> str:
    return ", ".join(f"{model}@{'/'.join(revs)}" for models in by_repo.values() for model, revs in models.items())


def _check_repo(
    repo_id: str, models: Mapping[str, list[str]], token: str | bool | None, endpoint: str, timeout: float
) -> list[str]:
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
        build_hf_headers,
        get_session,
        hf_raise_for_status,
    )

    page = f"{endpoint}/{repo_id}"
    names = ", ".join(models)
    headers = build_hf_headers(token=token)
    given = token not in (None, False) or headers.get("authorization") is not None
    try:
        response = get_session().get(f"{endpoint}/api/models/{repo_id}/refs", headers=headers, timeout=timeout)
        hf_raise_for_status(response)
    except GatedRepoError:
        refs = None  # the HEAD below says what the user must do
    except RepositoryNotFoundError:
        private = "with the token given" if given else "without a token (set HF_TOKEN if it is private)"
        return [f"{names}: no repository {repo_id} at {endpoint}, or it is private and not readable {private}"]
    except HfHubHTTPError as err:
        return [f"{names}: {endpoint} answered {_status(err)} for the refs of {repo_id}; retry later"]
    else:
        body = response.json()
        refs = {r["name"] for kind in ("branches", "tags") for r in body.get(kind, ())}

    problems: list[str] = []
    existing: str | None = None
    for model, revisions in models.items():
        for revision in revisions:
            if refs is None:
                existing = existing or revision
                continue
            if revision in refs:
                existing = existing or revision
                continue
            if _COMMIT.match(revision):
                try:
                    HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, timeout=timeout, token=token)
                    existing = existing or revision
                    continue
                except RevisionNotFoundError:
                    pass
            near = _nearest(revision, refs)
            hint = f"nearest: {', '.join(near)}" if near else f"it has {_plural(len(refs), 'branch or tag')}"
            problems.append(f"{model}: {repo_id} has no revision {revision} ({hint}; see {page}/tree/main)")
    if existing is None:
        return problems
    try:
        url = hf_hub_url(repo_id, "config.json", revision=existing, endpoint=endpoint)
        get_hf_file_metadata(url, token=token, timeout=timeout, endpoint=endpoint, retry_on_errors=False)
    except GatedRepoError:
        why = "the token given has no access yet" if given else "no token was given"
        problems.append(
            f"{names}: {repo_id} is gated and {why}: accept its terms at {page} (logged in), then give your token "
            "as HF_TOKEN or run `hf auth login` (formerly `huggingface-cli login`) before staging"
        )
    except RevisionNotFoundError:
        problems.append(f"{names}: {repo_id} has no revision {existing} (see {page}/tree/main)")
    except RepositoryNotFoundError:
        private = "with the token given" if given else "without a token (set HF_TOKEN)"
        problems.append(f"{names}: {repo_id} is private or missing: not readable {private}")
    except EntryNotFoundError:
        problems.append(f"{names}: {repo_id}@{existing} has no config.json, so transformers cannot load it")
    except HfHubHTTPError as err:
        problems.append(f"{names}: {endpoint} answered {_status(err)} for {repo_id}@{existing}; retry later")
    return problems


def _status(err: Any) -> str:
    response = getattr(err, "response", None)
    return str(getattr(response, "status_code", "an error"))
