"""The checkpoint integrity gate over per-file weight digests, for training dynamics: two revisions with identical
weights (or a step equal to the final revision, e.g. ``main``), or sharing a weight file while differing elsewhere,
is an error naming them, or, with ``mode="drop"``, a recorded drop.

:func:`weight_integrity` judges digests from either source (the hub's file metadata, before any download, in
:func:`wneurons.lm.hub.staging_preflight`; or staged manifests); :func:`staged_integrity` is the gate over one
model's staged revisions that the training-dynamics job runs. No network.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from wneurons.store import io
from wneurons.store.checkpoints import STEP_REVISION, by_step, step_of
from wneurons.store.staged import read_manifest, weight_records

__all__ = ["shared_weight_files", "staged_integrity", "weight_integrity"]

log = logging.getLogger(__name__)


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
