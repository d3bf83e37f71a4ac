"""What every job module shares: a job's log file, the configured model (loaded once per process and lent between
jobs), its tokenizer alone, the window-BOS choice, and the model and data provenance every result records.

A hub model's loader spec names its staged directory (``staged``, wneurons.lm.hub_staging.stage): jobs read only that
directory, never the hub, and record the commit the revision resolved to."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from wneurons.experiment.config import model_source
from wneurons.store import io
from wneurons.store.data import SOURCE_FILE

log = logging.getLogger("wneurons")

HUB = "hub_id"  # the one model source whose loader spec carries a revision; the other is a local directory
STAGED = "staged"  # a hub model's loader spec: the directory its revision was staged in (wneurons.lm.hub_staging.stage)


@contextlib.contextmanager
def logged_to(path: str | os.PathLike | None, threads: int | None = None) -> Iterator[None]:
    """Send this job's log lines (and, in a process of its own, stderr) to ``path``; run it with torch's thread
    count at the job's threads. Jobs that share a process (:mod:`wneurons.jobs.inprocess`) each log their own thread's
    records only."""
    from wneurons.jobs.inprocess import in_main_thread, torch_threads

    with torch_threads(int(threads)) if threads else contextlib.nullcontext():
        if path is None:
            yield
            return
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        own_process = in_main_thread()
        with open(path, "w", buffering=1) as fh:
            handler = logging.StreamHandler(fh)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            thread = threading.get_ident()
            handler.addFilter(lambda record: record.thread == thread)
            root = logging.getLogger()
            root.addHandler(handler)
            if root.level > logging.INFO or root.level == logging.NOTSET:
                root.setLevel(logging.INFO)
            if own_process:
                old_stderr, sys.stderr = sys.stderr, fh
            try:
                yield
            except BaseException:
                log.exception("job failed")
                raise
            finally:
                if own_process:
                    sys.stderr = old_stderr
                root.removeHandler(handler)


def model_location(spec: dict) -> tuple[str, str, str | None]:
    """Where a loader spec's model is: ``(source key, hub id or local directory, hub revision or None)``; the
    source key is the one of :data:`wneurons.experiment.config.MODEL_SOURCES` the spec gives."""
    source = model_source(spec)
    return source, spec[source], spec["revision"] if source == HUB else None


def staged_manifest_of(spec: dict, weights: bool = True) -> dict | None:
    """The manifest of a hub model's staged revision after checking that it stages this spec's hub id and revision
    and that its files are there (``weights`` False: tokenizer and config only, the weights may be pruned); None for
    a spec without a staged directory (local models)."""
    from wneurons.store.staged import StagingError, verify_staged

    if STAGED not in spec:
        return None
    manifest = verify_staged(spec[STAGED], weights=weights)
    _, location, revision = model_location(spec)
    if (manifest["repo_id"], manifest["revision"]) != (location, revision):
        raise StagingError(
            f"{spec[STAGED]} stages {manifest['repo_id']}@{manifest['revision']}, not models.{spec['name']} "
            f"({location}@{revision}): remove it and stage again"
        )
    return manifest


def load_configured_model(spec: dict, dtype: str, device: str | None = None):
    """Load the model of a config entry (its staged hub revision, or a local directory) onto ``device`` (default
    :func:`wneurons.lm.models.job_device`) in the precision ``dtype`` names, and check its layer count and, where
    the entry names one, its family against the loaded model's. A staged revision is read with the hub turned off
    (:func:`wneurons.lm.models.load_staged`). The model carries ``wneurons_runtime`` (precision, device, device
    name) for :func:`model_provenance`."""
    from wneurons.lm.models import device_name, job_device, load_model, load_staged, resolve_precision
    from wneurons.lm.registry import check_family, preactivation_modules

    precision = resolve_precision(dtype)
    device = device or job_device()
    if staged_manifest_of(spec) is not None:
        model, tokenizer, _ = load_staged(spec[STAGED], dtype=precision.name, device=device)
    else:
        source, location, revision = model_location(spec)
        where = {source: location} | ({"revision": revision} if revision is not None else {})
        model, tokenizer = load_model(**where, dtype=precision.name, device=device)
    check_family(spec.get("family"), model, f"models.{spec['name']}.family")
    n_layers = len(preactivation_modules(model))
    if n_layers != spec["num_layers"]:
        raise ValueError(
            f"models.{spec['name']}.num_layers is {spec['num_layers']} but the loaded model has {n_layers} layers"
        )
    model.wneurons_runtime = {"precision": precision.name, "device": str(device), "device_name": device_name(device)}
    return model, tokenizer


@contextlib.contextmanager
def configured_model(spec: dict, dtype: str) -> Iterator[tuple[Any, Any]]:
    """``(model, tokenizer)`` of a config entry for the length of a job, in the precision ``dtype`` names
    (:data:`wneurons.lm.models.PRECISIONS`), on a device of its own while it runs
    (:func:`wneurons.lm.models.device_slot`: with N GPUs, concurrent jobs get ``cuda:0`` .. ``cuda:N-1``; a job
    given a GPU that CUDA cannot use fails here, before any load), with TF32 on or off for its matmuls
    (:func:`wneurons.lm.models.matmul_precision`). Loaded once per process and lent to the next job of the same
    model, precision and device from :data:`wneurons.lm.model_pool.POOL` (see :mod:`wneurons.jobs.inprocess`)."""
    from wneurons.lm.model_pool import POOL
    from wneurons.lm.models import device_slot, matmul_precision, resolve_precision

    precision = resolve_precision(dtype)
    with device_slot() as device, matmul_precision(precision, device):
        key = (spec["name"], model_location(spec)[1], spec["revision"], precision.name, device)
        with POOL.checkout(key, lambda: load_configured_model(spec, precision.name, device)) as loaded:
            yield loaded


def runtime_provenance(model) -> dict:
    """The precision the model runs in, its device and the device's name ("cpu" or the GPU's), as loaded by
    :func:`load_configured_model`; empty for a model loaded otherwise."""
    return dict(getattr(model, "wneurons_runtime", {}))


def configured_tokenizer(spec: dict):
    """The tokenizer alone of a config entry (no model loaded); a staged revision's from its files, which pruning
    leaves."""
    from wneurons.lm.models import load_tokenizer

    if staged_manifest_of(spec, weights=False) is not None:
        return load_tokenizer(spec[STAGED], local_files_only=True)
    _, location, revision = model_location(spec)
    return load_tokenizer(location, revision)


def window_bos_of(spec: dict, model, tokenizer) -> tuple[bool, str]:
    """Whether every activation / perplexity window gets a BOS: the config entry's ``window_bos``, or (null) the
    family's default from the registry; and why."""
    from wneurons.lm.models import tokenizer_adds_bos
    from wneurons.lm.registry import family_spec, resolve_window_bos

    return resolve_window_bos(spec.get("window_bos"), family_spec(model), tokenizer_adds_bos(tokenizer))


def model_provenance(spec: dict, model=None) -> dict:
    """Model name, family (the loaded model's ``model_type`` when given the model, else the entry's), revision,
    source; given the model, the precision it ran in and its device (:func:`runtime_provenance`); for a staged hub
    revision the commit it resolved to and its weight digest (from the manifest, which pruning keeps); the
    conversion record of converted models (their directory's ``SOURCE.json``)."""
    from wneurons.store.staged import staged_provenance

    source, location, _ = model_location(spec)
    family = model.config.model_type if model is not None else spec.get("family")
    prov = {"model": spec["name"], "family": family, "revision": spec["revision"], "source": location}
    if model is not None:
        prov |= runtime_provenance(model)
    if STAGED in spec:
        staged = staged_provenance(spec[STAGED])
        prov |= {"commit": staged["commit"], "weights_sha256": staged["weights_sha256"]}
    source_json = Path(location) / SOURCE_FILE
    if source != HUB and source_json.is_file():
        prov["model_source"] = io.read_json(source_json)
    return prov


def data_provenance(data_dir: str) -> dict:
    """The checksum and origin of a verified data directory (its ``SOURCE.json``)."""
    source = io.read_json(Path(data_dir) / SOURCE_FILE)
    return {"data_sha256": source["sha256"], "data_source": source["source"]}
