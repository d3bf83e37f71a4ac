"""Jobs of ``workflow/rules/neurons.smk``: every layer's pre-activations over WikiText-2 test cached as shards,
kept as hard links where a later job reads them, and reduced to the per-neuron statistics table (WD, sign split,
moments, MD); with ``neurons.scratch_dir``, collected in node-local scratch and reduced by one job."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl

from wneurons.jobs.base import configured_model, model_provenance, runtime_provenance, window_bos_of
from wneurons.store import io

log = logging.getLogger("wneurons")


def collect_activations_job(spec: dict, wikitext_dir: str, out_dir: str, params: dict) -> dict:
    """Run the model over WikiText-2 test and cache every layer's pre-activations as shards in ``out_dir``;
    ``params["shard_io"]``: how they are written (``neurons.shard_io``; the shard store decides what "auto" means).
    Each window starts with a BOS when the model entry's ``window_bos`` (or its family's default) says so;
    index.json records the choice, its reason, the family, and the precision and device the model ran in
    (``params["dtype"]``: ``neurons.dtype``)."""
    from wneurons.lm.activations import collect_activation_shards
    from wneurons.store.data import wikitext_split

    with configured_model(spec, params["dtype"]) as (model, tokenizer):
        window_bos, reason = window_bos_of(spec, model, tokenizer)
        text = wikitext_split(wikitext_dir, "test")
        return collect_activation_shards(
            model,
            tokenizer,
            text,
            out_dir,
            layers=params.get("layers"),
            window=params["window"],
            max_tokens=params["max_tokens"],
            md_tokens=params["md_tokens"],
            seed=params["seed"],
            dtype=params["shard_dtype"],
            io=params["shard_io"],
            model_name=spec["name"],
            window_bos=window_bos,
            record={"family": model.config.model_type, "window_bos_reason": reason} | runtime_provenance(model),
        )


def keep_activations_job(shard_dir: str, out_dir: str) -> None:
    """Hard-link every file of a revision's shards into ``out_dir``, so that a job reading them after the
    statistics (Figure 1) still finds them once the temporary shards are deleted; no bytes are copied, unless
    ``neurons.kept_activations_dir`` is on another file system than ``neurons.activations_dir`` (then copied)."""
    copied = 0
    with io.atomic_directory(out_dir) as tmp:
        for path in sorted(Path(shard_dir).iterdir()):
            try:
                os.link(path, tmp / path.name)
            except OSError as err:
                if err.errno != errno.EXDEV:
                    raise
                shutil.copy2(path, tmp / path.name)
                copied += 1
    how = f"copied ({copied} files: another file system)" if copied else "as hard links"
    log.info("kept %s %s in %s", shard_dir, how, out_dir)


SCRATCH_FOLDER = "wneurons-shards"


def scratch_shard_dir(scratch_dir: str, model: str, revision: str, workdir: str | os.PathLike = ".") -> Path:
    """Where a revision's shards go in node-local scratch: ``{scratch_dir}/wneurons-shards/{key}/{model}/{revision}``,
    ``scratch_dir`` with its environment variables expanded (an unset one is a ValueError naming the key), ``key``
    a digest of the working directory (two checkouts sharing a node's scratch never meet). The path is the same for
    every attempt, so that an attempt finds and removes what a killed one left there."""
    expanded = os.path.expandvars(scratch_dir)
    if "$" in expanded or not expanded.strip():
        raise ValueError(
            f"neurons.scratch_dir: {scratch_dir!r} names an environment variable unset on {os.uname().nodename}"
        )
    key = hashlib.sha256(os.path.realpath(workdir).encode()).hexdigest()[:12]
    return Path(expanded) / SCRATCH_FOLDER / key / model / revision


@contextlib.contextmanager
def scratch_shards(scratch_dir: str, model: str, revision: str) -> Iterator[Path]:
    """A revision's shard directory in node-local scratch (:func:`scratch_shard_dir`) for the ``with`` block, gone
    after it however the block ends. Whatever an earlier, killed attempt left there goes first: its complete shards
    (killed during the statistics) here, the temporary directory of a killed collection by the collection's own
    sweep (:func:`wneurons.store.io.sweep_stale_temporaries`); where the site wipes scratch with the allocation,
    there is nothing to find."""
    path = scratch_shard_dir(scratch_dir, model, revision)
    if path.exists():
        log.warning("removing %s, left in scratch by a killed attempt", path)
        shutil.rmtree(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        io.sweep_stale_temporaries(path)
        for folder in path.parents[:3]:  # {model}, {key}, wneurons-shards when empty (another job's are not)
            with contextlib.suppress(OSError):
                folder.rmdir()


def neuron_stats_job(
    spec: dict,
    shard_dir: str | None,
    out_path: str,
    params: dict,
    wikitext_dir: str | None = None,
    scratch_dir: str | None = None,
    parts: list[str] | None = None,
) -> pl.DataFrame:
    """WD (exact / sampled), sign split, moments and MD of every neuron, from the cached shards in ``shard_dir``.
    Without ``shard_dir`` (``params["collect"]``: the collection's params), the job collects them first, from
    ``wikitext_dir`` into node-local ``scratch_dir`` (:func:`scratch_shards`), and deletes them when done: the
    same shards and so the same table as collection and statistics run as two jobs. With ``parts`` (the planner
    split the statistics by layer range: :func:`neuron_stats_part_job`), it joins their tables instead."""
    if parts:
        return join_neuron_stats(parts, out_path)
    if shard_dir is None:
        if not scratch_dir or wikitext_dir is None or "collect" not in params:
            raise ValueError("neuron_stats: no shards given, and no scratch collection configured")
        with scratch_shards(scratch_dir, spec["name"], spec["revision"]) as scratch:
            log.info("collecting the shards in node-local scratch %s", scratch)
            collect_activations_job(spec, wikitext_dir, str(scratch), params["collect"])
            return neuron_stats_job(spec, str(scratch), out_path, params)
    return _write_statistics(spec, shard_dir, out_path, params)


# What a part's table records beyond its revision's provenance: its layers and all the revision's (for the join).
PART_KEYS = ("part_layers", "all_layers")


def neuron_stats_part_job(spec: dict, shard_dir: str, out_path: str, params: dict) -> pl.DataFrame:
    """The statistics of the layers ``params["layers"]`` only (a part of a revision's statistics, where one job
    over every layer would not fit the site's walltime limit): the same rows as the whole job's for these layers,
    and the same provenance, plus :data:`PART_KEYS` for :func:`join_neuron_stats`."""
    return _write_statistics(spec, shard_dir, out_path, params, params["layers"])


def join_neuron_stats(parts: list[str], out_path: str) -> pl.DataFrame:
    """The statistics table of a revision from its parts' (:func:`neuron_stats_part_job`, given in layer order):
    their rows one after another, their common provenance; byte for byte the table one job over every layer
    writes. A ValueError when the parts disagree on their provenance or do not cover the revision's layers once
    each, in order."""
    provs = [io.read_parquet_metadata(p) for p in parts]
    common = [{k: v for k, v in prov.items() if k not in PART_KEYS} for prov in provs]
    if any(c != common[0] for c in common):
        raise ValueError(f"join_neuron_stats: the parts' provenance differs ({', '.join(parts)})")
    covered = [layer for prov in provs for layer in prov["part_layers"]]
    if covered != provs[0]["all_layers"]:
        raise ValueError(f"join_neuron_stats: the parts cover layers {covered}, not {provs[0]['all_layers']}")
    table = pl.concat([pl.read_parquet(p) for p in parts])
    io.write_parquet(out_path, table, metadata=common[0])
    log.info("neuron statistics joined from %d parts: %d rows", len(parts), table.height)
    return table


def _write_statistics(
    spec: dict, shard_dir: str, out_path: str, params: dict, layers: list[int] | None = None
) -> pl.DataFrame:
    """The statistics table of ``layers`` (None: every layer of the shards; else a part, whose provenance adds
    :data:`PART_KEYS`) written to ``out_path`` with its provenance, its rows and seconds logged."""
    from wneurons.store.shards import ShardIndex

    start = time.perf_counter()
    shards = ShardIndex.load(shard_dir)
    table, prov = _statistics(spec, shard_dir, shards.meta, params, layers)
    if layers is not None:
        prov |= {"part_layers": list(layers), "all_layers": shards.layers}
    io.write_parquet(out_path, table, metadata=prov)
    of = "" if layers is None else f" of layers {layers}"
    log.info("neuron statistics%s: %d rows in %.1f s", of, table.height, time.perf_counter() - start)
    return table


def _statistics(
    spec: dict, shard_dir: str, shard_index: dict, params: dict, layers: list[int] | None = None
) -> tuple[pl.DataFrame, dict]:
    """The statistics table of ``layers`` (None: every layer of the shards) and its provenance (``shard_index``:
    the shards' index.json, :attr:`wneurons.store.shards.ShardIndex.meta`)."""
    from wneurons.core.stats import neuron_statistics

    table = neuron_statistics(
        shard_dir, wd_method=params["wd_method"], md_pairs=params["md_pairs"], seed=params["seed"], layers=layers
    )
    prov = io.provenance(
        **model_provenance(spec | {"family": shard_index.get("family", spec.get("family"))}),
        data="wikitext-2 test",
        window_bos=shard_index.get("window_bos"),
        window_bos_reason=shard_index.get("window_bos_reason"),
        # How the activations were computed (absent from shards collected before precisions were recorded).
        precision=shard_index.get("precision"),
        device=shard_index.get("device"),
        device_name=shard_index.get("device_name"),
        text_sha256=shard_index.get("text_sha256"),
        n_tokens=shard_index.get("n_tokens"),
        wd_method=params["wd_method"],
        md_pairs=params["md_pairs"],
        seed=params["seed"],
    )
    return table, prov
