"""Meeting the Hugging Face hub: the preflights before any job, and the switch that keeps jobs off the hub.

Jobs never talk to the hub. Each hub (model, revision) is first *staged* where the internet is (a local rule on
the submit host): :func:`wneurons.lm.hub_staging.stage` fetches exactly what a model load and a weight read need
into a directory of its own, pinned to the commit the revision resolved to and verified file by file against the
hub's metadata, and writes the manifest there last. Jobs then load that directory with the hub turned off
(:func:`turn_off_hub`; :func:`wneurons.lm.models.load_staged`: no network at all) and record the commit.

This module, before any job is submitted:

- :func:`preflight`: one line per problem (gated, missing revision, no such repo, hub unreachable), in seconds:
  short timeouts and no retry loop (the library's own retries take 48 s when the hub is unreachable). The token is
  sent to the hub only, never printed.
- :func:`staging_preflight`, also before any download: from the hub's file metadata (size and sha256 of every
  file), what each revision needs (:func:`wneurons.lm.hub_files.plan_files`: a step read only by weight rows gets
  only the shard(s) holding its layer), missing shards, revisions identical to or sharing a weight file with another
  (:func:`wneurons.lm.hub_integrity.weight_integrity`), and the bytes to stage against the free space of the staging
  directory.

Its siblings: which files a revision's jobs read, :mod:`wneurons.lm.hub_files`; downloading, verifying and the
manifest, :mod:`wneurons.lm.hub_staging`; the integrity gate over staged manifests (training dynamics),
:mod:`wneurons.lm.hub_integrity`; what a staged directory holds and how it is read, verified and pruned,
:mod:`wneurons.store.staged`.

These modules live in ``lm/`` rather than ``store/``: they are the model runtime's client of the hub (which files a
transformers load reads, gated repos and tokens, ``huggingface_hub``'s HTTP errors), and ``store/`` stays free of
network clients.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from wneurons.lm.hub_files import FilePlan, plan_files
from wneurons.lm.hub_integrity import weight_integrity
from wneurons.lm.hub_staging import expected_size, fetched_bytes
from wneurons.store.checkpoints import STEP_REVISION
from wneurons.store.io import free_bytes
from wneurons.store.staged import StagingError, weight_records

__all__ = [
    "PREFLIGHT_TIMEOUT",
    "HubRevision",
    "StageRequest",
    "free_bytes",
    "peak_bytes",
    "preflight",
    "staging_preflight",
    "turn_off_hub",
]

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
    every one can be fetched. Pass only the revisions still to stage (:func:`wneurons.store.staged.is_staged`).

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
        size = sum(expected_size(siblings[n]) or 0 for n in plan.wanted)
        needed[req.model, req.revision] = max(size - fetched_bytes(Path(req.out_dir), plan.wanted), 0)
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
