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
- :func:`staging_preflight`, also before any job and any download: from the hub's file metadata (size and sha256
  of every file), what each revision needs (:func:`plan_files`: a step read only by weight rows gets only the
  shard(s) holding its layer), missing shards, revisions identical to or sharing a weight file with another
  (:func:`weight_integrity`), and the bytes to stage against the free space of the staging directory.
- :func:`staged_integrity`, the training-dynamics gate over staged manifests, file by file: two revisions with
  identical weights (or a step equal to the final revision, e.g. ``main``), or sharing a weight file, is an error
  naming them, or, with ``mode="drop"``, a recorded drop.

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
from wneurons.store.checkpoints import STEP_REVISION, by_step, step_of
from wneurons.store.staged import MANIFEST, MANIFEST_FORMAT, StagingError, read_manifest, weight_records

__all__ = [
    "CONFIG_FILES",
    "PREFLIGHT_TIMEOUT",
    "TOKENIZER_FILES",
    "FilePlan",
    "HubRevision",
    "StageRequest",
    "layer_tensors",
    "plan_files",
    "preflight",
    "stage",
    "staged_integrity",
    "staging_preflight",
    "turn_off_hub",
    "weight_files",
    "weight_integrity",
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


# ---------------------------------------------------------------- what a revision's jobs need
def _layout(names: Collection[str], read_index: Callable[[str], Mapping]) -> tuple[str | None, list[str], dict]:
    """The weight layout a transformers load reads among ``names``: (shard index or None, tensor files, the
    index's weight map or {}). Safetensors where the revision has a complete layout of them, else PyTorch ``.bin``:
    a safetensors index naming shards the revision lacks falls back to a complete ``.bin`` layout."""
    broken = []
    for index, single in WEIGHT_LAYOUTS:
        if index in names:
            weight_map = dict(read_index(index)["weight_map"])
            shards = sorted(set(weight_map.values()))
            missing = [s for s in shards if s not in names]
            if not missing:
                return index, shards, weight_map
            broken.append(f"{index} names shards the revision does not have: {', '.join(missing)}")
        elif single in names:
            return None, [single], {}
    if broken:
        raise StagingError("; ".join(broken))
    layouts = ", ".join(name for layout in WEIGHT_LAYOUTS for name in layout)
    raise StagingError(f"no weights: the revision has none of {layouts}")


def weight_files(names: Collection[str], read_index: Callable[[str], Mapping]) -> list[str]:
    """The weight files a transformers load reads among a revision's files ``names``: safetensors where the
    revision has a complete set of them, else PyTorch ``.bin``; for a sharded checkpoint its index (first) and the
    shards it names. ``read_index(name)`` returns that index file's parsed JSON (called only for a sharded layout)."""
    index, shards, _ = _layout(names, read_index)
    return [index, *shards] if index else shards


def layer_tensors(family: str, layers: Iterable[int]) -> list[str]:
    """State-dict names a weight-rows job reads for ``layers`` of a model family (its pre-nonlinearity projection
    weight, under each of the family's layer paths): :func:`wneurons.store.checkpoints.weight_tensor_name`."""
    from wneurons.lm.registry import family_spec
    from wneurons.store.checkpoints import weight_tensor_name

    spec = family_spec(family)
    return [weight_tensor_name(path, spec.projection, layer) for layer in layers for path in spec.layers_paths]


class FilePlan(NamedTuple):
    """What staging one revision fetches: ``wanted`` (repository files, in order), ``weight_files`` (every tensor
    file of the revision's weight layout, fetched or not: what its weight digest covers) and ``tensors`` (for a
    revision read only by weight rows: the tensors read; None when a job loads the whole model)."""

    wanted: list[str]
    weight_files: list[str]
    tensors: list[str] | None


def plan_files(
    names: Collection[str],
    read_json: Callable[[str], Mapping],
    *,
    layers: Sequence[int] | None = None,
    family: str | None = None,
) -> FilePlan:
    """The files to stage among a revision's ``names``: with ``layers`` None, what a model load reads (config,
    tokenizer and every weight file); with ``layers``, what a weight-rows job reads (the config, the shard index
    and only the shard(s) holding those layers' tensors; a single-file checkpoint is fetched whole). ``family``:
    the model family (None: the revision's config.json names it). ``read_json(name)`` parses one small repository
    file (the index, config.json), fetched when needed. A StagingError when the revision lacks config.json or a
    complete weight layout, or its index has none of the tensors read."""
    if "config.json" not in names:
        raise StagingError("the revision has no config.json")
    index, shards, weight_map = _layout(names, read_json)
    if layers is None:
        present = [n for n in (*CONFIG_FILES, *TOKENIZER_FILES) if n in names]
        return FilePlan(present + ([index] if index else []) + shards, shards, None)
    tensors = layer_tensors(family or read_json("config.json")["model_type"], layers)
    if index is None:
        chosen = shards
    else:
        chosen = sorted({weight_map[t] for t in tensors if t in weight_map})
        if not chosen:
            raise StagingError(f"{index} has none of the tensors weight rows read ({', '.join(tensors)})")
    present = [n for n in CONFIG_FILES if n in names]
    return FilePlan(present + ([index] if index else []) + chosen, shards, tensors)


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
PARTIAL = ".partial"  # in the work directory: files being downloaded, kept across processes to resume


def _work_dir(out: Path) -> Path:
    """Where :func:`stage` downloads before the rename: a hidden sibling, kept when a download fails so that the
    next attempt fetches only the files still missing and resumes a file cut mid-way."""
    return out.parent / f".{out.name}.staging"


def _expected_size(sibling: Any) -> int | None:
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
    expected = _expected_size(sibling)
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

    What is fetched (:func:`plan_files`): ``files`` when given; else, with ``layers`` None, what a model load needs
    (:data:`CONFIG_FILES` and :data:`TOKENIZER_FILES` the revision has, and its :func:`weight_files`); with
    ``layers`` (a revision read only by weight rows), the config, the shard index and only the shard(s) holding
    those layers of ``family`` (None: the revision's config names it). The manifest's weight digest covers every
    tensor file of the revision, fetched or not (unfetched ones by the hub's LFS sha256), so revisions compare
    alike however much of them was staged; ``staged_for`` says which.

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
    work = _work_dir(out)
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
        weights, tensors = _tensor_files(wanted), None
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


# ---------------------------------------------------------------- the integrity gate
def _revision_order(revisions: Iterable[str]) -> list[str]:
    revisions = list(revisions)
    return by_step(revisions) if all(STEP_REVISION.match(r) for r in revisions) else sorted(revisions)


def shared_weight_files(weights: Mapping[str, Mapping[str, str]]) -> list[tuple[list[str], list[str], str]]:
    """Weight files that two or more revisions hold byte for byte while their weights as a whole differ (a shard of
    one revision uploaded in place of another's: EleutherAI/pythia#206). ``weights``: revision -> {tensor file:
    sha256}. Returns ``(revisions, files, sha256 of the first file)`` per group of revisions sharing files, revisions
    in step order; revisions identical as a whole are :func:`wneurons.core.dynamics.integrity_problems`' case."""
    digests = {r: tuple(sorted(files.items())) for r, files in weights.items()}
    holders: dict[str, set[str]] = {}
    names: dict[str, set[str]] = {}
    for revision, files in weights.items():
        for name, sha256 in files.items():
            holders.setdefault(sha256, set()).add(revision)
            names.setdefault(sha256, set()).add(name)
    groups: dict[tuple[str, ...], list[str]] = {}
    for sha256, revisions in holders.items():
        if len(revisions) > 1 and len({digests[r] for r in revisions}) > 1:
            groups.setdefault(tuple(_revision_order(revisions)), []).append(sha256)
    return [
        (list(revisions), sorted({n for sha in shas for n in names[sha]}), sorted(shas)[0])
        for revisions, shas in groups.items()
    ]


def _keep_of(revisions: Sequence[str], final_revision: str) -> str:
    return final_revision if final_revision in revisions else min(revisions, key=step_of)


def weight_integrity(
    model: str, weights: Mapping[str, Mapping[str, str]], final_revision: str, mode: str
) -> tuple[list[str], list[str]]:
    """The integrity gate over per-file weight digests (revision -> {tensor file: sha256}, from the hub's
    metadata or staged manifests): one line per problem, naming the model, the revisions and the files, and the
    revisions ``training.integrity: drop`` removes (of each group, all but the final revision when the group has
    it, else all but the earliest step). Problems: revisions with identical weights (one of them the final
    revision, or not), and revisions sharing a weight file while differing elsewhere. Returns (lines, dropped)."""
    if mode not in ("error", "drop"):
        raise ValueError(f"integrity mode {mode!r}: expected error or drop")
    groups: dict[tuple, list[str]] = {}
    for revision, files in weights.items():
        groups.setdefault(tuple(sorted(files.items())), []).append(revision)
    found: list[tuple[list[str], str]] = []
    for files, members in groups.items():
        if len(members) > 1:
            members = _revision_order(members)
            what = "equal the final revision" if final_revision in members else "have identical weights"
            names = ", ".join(n for n, _ in files)
            found.append((members, f"checkpoints {', '.join(members)} {what} ({names}; sha256 {files[0][1][:12]})"))
    for members, names, sha256 in shared_weight_files(weights):
        final = " (the final revision)" if final_revision in members else ""
        found.append(
            (
                members,
                f"checkpoints {', '.join(members)}{final} share {', '.join(names)} (sha256 {sha256[:12]}) "
                "while their other weights differ: one was uploaded in place of the other's",
            )
        )
    dropped: list[str] = []
    lines = []
    for members, what in found:
        keep = _keep_of(members, final_revision)
        drop = [m for m in members if m != keep]
        dropped += drop
        if mode == "error":
            tail = f"training.integrity: error stops the run (drop would keep {keep}, drop {', '.join(drop)})"
        else:
            tail = f"training.integrity: drop keeps {keep} and drops {', '.join(drop)}, on record"
        lines.append(f"{model}: {what}; {tail}")
    return lines, _revision_order(set(dropped))


def staged_integrity(
    staged: Mapping[str, str | os.PathLike],
    final_revision: str,
    mode: str = "error",
    out_path: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """The checkpoint integrity gate over one model's staged revisions (``{revision: staged dir}``, pruned ones
    included), file by file (:func:`weight_integrity`): revisions with identical weight digests, one equal to
    ``final_revision``, or revisions sharing a weight file raise
    :class:`~wneurons.core.dynamics.CheckpointIntegrityError` naming them (``mode="error"``), or are dropped
    (``mode="drop"``: the final revision, else the earliest step, of each group is kept). Returns (and writes to
    ``out_path`` when given) ``{"hashes", "commits", "problems", "dropped", "mode"}``."""
    from wneurons.core.dynamics import CheckpointIntegrityError

    if mode not in ("error", "drop"):
        raise ValueError(f"integrity mode {mode!r}: expected error or drop")
    manifests = {revision: read_manifest(d) for revision, d in staged.items()}
    hashes = {revision: m["weights_sha256"] for revision, m in manifests.items()}
    files = {r: {n: w["sha256"] for n, w in weight_records(m).items()} for r, m in manifests.items()}
    model = next(iter(manifests.values()))["repo_id"] if manifests else ""
    lines, dropped = weight_integrity(model, files, final_revision, mode)
    problems = [line.removeprefix(f"{model}: ") for line in lines]
    if problems and mode == "error":
        raise CheckpointIntegrityError("checkpoint integrity: " + "; ".join(problems))
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


# ---------------------------------------------------------------- preflight from the hub's file metadata
class StageRequest(NamedTuple):
    """One revision to stage: the config's model name, hub id, revision, the directory it is staged into, and
    what its jobs read (``layers`` None: a model load; else weight rows of those layers of ``family``)."""

    model: str
    repo_id: str
    revision: str
    out_dir: str
    layers: tuple[int, ...] | None = None
    family: str | None = None


def _fetched_bytes(out_dir: Path, names: Iterable[str]) -> int:
    """Bytes of ``names`` already in a revision's work directory (whole files and kept partial ones)."""
    work = _work_dir(out_dir)
    total = 0
    for name in names:
        for path in (work / name, work / PARTIAL / f"{name}.part"):
            if path.is_file():
                total += path.stat().st_size
    return total


def free_bytes(directory: str | os.PathLike) -> int:
    """Free bytes on the file system that holds (or will hold) ``directory``: its nearest existing ancestor's."""
    path = Path(directory).absolute()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB" if n >= 1e8 else f"{n:,} bytes"


def staging_preflight(
    requests: Iterable[StageRequest],
    staging_dir: str | os.PathLike,
    *,
    staged: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    finals: Mapping[str, str] | None = None,
    mode: str = "error",
    token: str | bool | None = None,
    endpoint: str | None = None,
    timeout: float = PREFLIGHT_TIMEOUT,
    disk_free: Callable[[str | os.PathLike], int] = free_bytes,
    pruned: Mapping[str, Collection[str]] | None = None,
    stage_ahead: int | None = None,
) -> tuple[list[str], list[str], dict[tuple[str, str], int]]:
    """Before any download or job, from the hub's file metadata (``model_info(files_metadata=True)``: size and
    sha256 of every file, no file content but each sharded revision's index and, without a family, its config):

    - per revision: what staging will fetch (:func:`plan_files`), so a layout with missing shards or no config is
      named now;
    - per model, the weight files' sha256 of these revisions and of those already staged (``staged``: model ->
      revision -> manifest) compared (:func:`weight_integrity`, ``finals``: model -> final revision): a revision
      identical to another or to the final one, or sharing a weight file with another, is one line with the
      ``training.integrity`` choice ``mode``;
    - the bytes the revisions need (less what earlier attempts fetched) against the free space on ``staging_dir``
      (``disk_free``): one line when they do not fit; with ``stage_ahead`` (hub.stage_ahead), the most they hold
      at once (:func:`peak_bytes`, ``pruned``: model -> the revisions pruned once read).

    Returns ``(problems, notes, bytes per (model, revision))``: problems stop the run (integrity lines when
    ``mode`` is ``error``), notes are integrity lines under ``drop`` (the gate drops and records those revisions
    once they are staged). Requests go out 8 at a time, each with ``timeout`` seconds and no retry."""
    from concurrent.futures import ThreadPoolExecutor

    from huggingface_hub import HfApi, hf_hub_url
    from huggingface_hub.utils import HfHubHTTPError, build_hf_headers, get_session, hf_raise_for_status

    requests = list(requests)
    api = HfApi(endpoint=endpoint)

    def ask(req: StageRequest) -> tuple[FilePlan, Mapping[str, Any]] | str:
        where = f"{req.model}@{req.revision}"
        try:
            info = api.model_info(req.repo_id, revision=req.revision, files_metadata=True, timeout=timeout, token=token)
            siblings = {s.rfilename: s for s in info.siblings or ()}

            def read_json(name: str) -> Mapping:
                url = hf_hub_url(req.repo_id, name, revision=info.sha, endpoint=endpoint)
                response = get_session().get(url, headers=build_hf_headers(token=token), timeout=timeout)
                hf_raise_for_status(response)
                return response.json()

            return plan_files(siblings, read_json, layers=req.layers, family=req.family), siblings
        except StagingError as err:
            return f"{where} ({req.repo_id}): {err}"
        except HfHubHTTPError as err:
            return f"{where}: the hub answered {_status(err)} for {req.repo_id}@{req.revision}'s file metadata"
        except _transport_errors() as err:
            return f"{where}: no answer from the hub for {req.repo_id}@{req.revision} ({type(err).__name__})"

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(ask, requests))
    problems = [a for a in answers if isinstance(a, str)]
    weights: dict[str, dict[str, dict[str, str]]] = {}
    for model, manifests in (staged or {}).items():
        for revision, manifest in manifests.items():
            weights.setdefault(model, {})[revision] = {n: w["sha256"] for n, w in weight_records(manifest).items()}
    needed: dict[tuple[str, str], int] = {}
    for req, answer in zip(requests, answers, strict=True):
        if isinstance(answer, str):
            continue
        plan, siblings = answer
        digest = {n: s.lfs.sha256 if s.lfs is not None else f"git:{s.blob_id}" for n, s in siblings.items()}
        weights.setdefault(req.model, {})[req.revision] = {n: digest[n] for n in plan.weight_files}
        size = sum(_expected_size(siblings[n]) or 0 for n in plan.wanted)
        needed[req.model, req.revision] = max(size - _fetched_bytes(Path(req.out_dir), plan.wanted), 0)
    notes: list[str] = []
    for model, files in weights.items():
        if len(files) > 1:
            lines, _ = weight_integrity(model, files, (finals or {}).get(model, ""), mode)
            (problems if mode == "error" else notes).extend(lines)
    total = peak_bytes(needed, pruned or {}, stage_ahead)
    free = disk_free(staging_dir)
    if total > free:
        at_once = "" if stage_ahead is None else f" at most {stage_ahead + 1} pruned ones of a model at once,"
        problems.append(
            f"hub.staging_dir {staging_dir}: the {_plural(len(needed), 'revision')} to stage need{at_once} "
            f"{_gb(total)}, {_gb(free)} are free there: free space, point hub.staging_dir at a larger file system, "
            "or lower hub.stage_ahead"
        )
    return problems, notes, needed


def peak_bytes(
    needed: Mapping[tuple[str, str], int], pruned: Mapping[str, Collection[str]], stage_ahead: int | None
) -> int:
    """The most bytes ``needed`` ((model, revision) -> bytes) holds on disk at once: all of it without a bound
    (``stage_ahead`` None); else per model its kept revisions (not in ``pruned[model]``) and the ``stage_ahead`` + 1
    largest pruned ones (hub.stage_ahead: each of that many lanes holds one staged, unpruned revision at a time)."""
    if stage_ahead is None:
        return sum(needed.values())
    total = 0
    for model in {m for m, _ in needed}:
        sizes = {r: n for (m, r), n in needed.items() if m == model}
        gone = set(pruned.get(model, ()))
        total += sum(n for r, n in sizes.items() if r not in gone)
        total += sum(sorted((n for r, n in sizes.items() if r in gone), reverse=True)[: stage_ahead + 1])
    return total
