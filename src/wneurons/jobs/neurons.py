"""Jobs of ``workflow/rules/neurons.smk``: every layer's pre-activations over WikiText-2 test cached as shards,
kept as hard links where a later job reads them, and reduced to the per-neuron statistics table (WD, sign split,
moments, MD)."""

from __future__ import annotations

import logging
import os
import time
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
    statistics (Figure 1) still finds them once the temporary shards are deleted; no bytes are copied."""
    with io.atomic_directory(out_dir) as tmp:
        for path in sorted(Path(shard_dir).iterdir()):
            os.link(path, tmp / path.name)
    log.info("kept %s as hard links in %s", shard_dir, out_dir)


def neuron_stats_job(spec: dict, shard_dir: str, out_path: str, params: dict) -> pl.DataFrame:
    """WD (exact / sampled), sign split, moments and MD of every neuron, from the cached shards."""
    from wneurons.core.stats import neuron_statistics
    from wneurons.store.shards import ShardIndex

    start = time.perf_counter()
    table = neuron_statistics(
        shard_dir, wd_method=params["wd_method"], md_pairs=params["md_pairs"], seed=params["seed"]
    )
    shard_index = ShardIndex.load(shard_dir).meta
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
    io.write_parquet(out_path, table, metadata=prov)
    log.info("neuron statistics: %d rows in %.1f s", table.height, time.perf_counter() - start)
    return table
