"""The pair sample's file format (paper §5-7): a directory per (model, revision) holding, for every layer, the
projection inputs x [P, d_in] and raw outputs y [P, K] at P sampled token positions (float32 ``.npy``), the token
table of those positions (``tokens.parquet``) and ``index.json`` (split, seed, layers, provenance).

Written by :func:`wneurons.jobs.analyses.pair_sample_job`; read by the pair signs, the case study and the
neuron explorer.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from wneurons.store import io

log = logging.getLogger("wneurons")

SAMPLE_INDEX = "index.json"
SAMPLE_TOKENS = "tokens.parquet"


def sample_x_file(layer: int) -> str:
    """The file of one layer's projection inputs x."""
    return f"layer{layer:03d}.x.npy"


def sample_y_file(layer: int) -> str:
    """The file of one layer's raw projection outputs y."""
    return f"layer{layer:03d}.y.npy"


def save_sample_layer(sample_dir: str | os.PathLike, layer: int, x: np.ndarray, y: np.ndarray) -> None:
    """Write one layer's ``x`` and ``y`` into ``sample_dir`` (a directory being built atomically)."""
    np.save(Path(sample_dir) / sample_x_file(layer), x)
    np.save(Path(sample_dir) / sample_y_file(layer), y)


def load_sample_layer(sample_dir: str | os.PathLike, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of one layer of a pair sample."""
    return io.load_npy(Path(sample_dir) / sample_x_file(layer)), io.load_npy(Path(sample_dir) / sample_y_file(layer))


def read_sample_index(sample_dir: str | os.PathLike) -> dict[str, Any]:
    """The sample's ``index.json``: source, split, seed, pairing, window, layers, provenance."""
    return io.read_json(Path(sample_dir) / SAMPLE_INDEX)


def sample_tokens(sample_dir: str | os.PathLike, tags_path: str | None = None) -> tuple[pl.DataFrame, dict]:
    """The pair sample's token table with ``upos`` / ``dep`` columns, and the sample's ``index.json``.

    POS of the sampled tokens: the validation tags, matched on the character span and token id (positions may
    differ by the special tokens a scoring convention adds); the first token of a perplexity window is not
    scored, hence not tagged, and a test-split sample has no tags: "n/a".
    """
    tokens = pl.read_parquet(Path(sample_dir) / SAMPLE_TOKENS)
    meta = read_sample_index(sample_dir)
    if meta["split"] == "validation" and tags_path:
        keys = ["char_start", "char_end", "token_id"]
        tags = pl.read_parquet(tags_path, columns=[*keys, "upos", "dep"]).unique(subset=keys)
        tokens = tokens.join(tags, on=keys, how="left").sort("row")
        log.info("pair sample: %d of %d sampled tokens tagged", tokens["upos"].is_not_null().sum(), tokens.height)
        return tokens.with_columns(pl.col("upos").fill_null("n/a"), pl.col("dep").fill_null("n/a")), meta
    return tokens.with_columns(upos=pl.lit("n/a"), dep=pl.lit("n/a")), meta
