"""The sign-case job and the explorer page on the tiny project's Llama, jobs called directly (no Snakemake): the
table covers exactly the explorer's neurons over the shards' tokens (its gate- counts are the shards' negative
counts), and each neuron page shows the four cases; a family without a gate gets an empty table and no model."""

from __future__ import annotations

import polars as pl
import pytest
from tiny_project import make_tiny_project

from wneurons.jobs.neurons import collect_activations_job, neuron_stats_job
from wneurons.jobs.report import explorer_job, sign_cases_job
from wneurons.store import io
from wneurons.store.shards import ShardIndex

EXPLORER = {"neurons_per_layer": 2, "layers": None, "bins": 20, "contexts": 3, "context_tokens": 2, "top_pairs": 2}
COLLECT = {"window": 32, "max_tokens": 256, "dtype": "fp32", "shard_dtype": "float32", "md_tokens": 32, "seed": 0}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("signs")
    make_tiny_project(root)
    spec = {"name": "tiny-llama", "family": "llama", "num_layers": 4, "window_bos": True, "revision": "main",
            "local_path": str(root / "model")}  # fmt: skip
    wikitext, shards, neurons = str(root / "src/wikitext2"), str(root / "shards"), str(root / "neurons.parquet")
    collect_activations_job(spec, wikitext, shards, COLLECT | {"shard_io": "buffered"})
    neuron_stats_job(spec, shards, neurons, {"wd_method": "exact", "md_pairs": 8, "seed": 0})
    return root, spec, wikitext, shards, neurons


def test_the_table_is_the_explorers_neurons_over_the_shards_tokens(tiny):
    root, spec, wikitext, shards, neurons = tiny
    out = root / "sign_cases.parquet"
    table = sign_cases_job(spec, shards, neurons, wikitext, str(out), EXPLORER, clamped_percents=[5.0],
                           extra_neurons=[(3, 40)])  # fmt: skip
    assert pl.read_parquet(out).equals(table) and io.read_parquet_metadata(str(out))["gated"] is True
    site = root / "explorer"
    explorer_job(spec, shards, neurons, wikitext, str(site), EXPLORER, clamped_percents=[5.0],
                 extra_neurons=[(3, 40)], sign_cases_path=str(out))  # fmt: skip
    pages = sorted(p.stem for p in site.glob("L*_N*.html"))
    listed = {tuple(map(int, p[1:].split("_N"))) for p in pages}
    assert set(table.select("layer", "neuron").unique().iter_rows()) == listed and (3, 40) in listed
    shard = ShardIndex.load(shards)
    for (layer, neuron), rows in table.partition_by("layer", "neuron", as_dict=True).items():
        assert rows["count"].sum() == shard.n_tokens
        y = shard.y_neurons(layer, neuron, neuron + 1)[0]  # the same gate values as collection (float32, same BOS)
        assert rows.filter(gate_sign="-")["count"].sum() == int((y < 0).sum())
    page = (site / f"{pages[0]}.html").read_text()
    assert page.count("<tr class='gate-negative'>") == 2 and "table class='sign-cases'" in page
    assert "gate-negative-share" in page and "not a gated MLP" not in page


def test_a_family_without_a_gate_gets_an_empty_table_without_a_model(tiny):
    root, spec, wikitext, shards, neurons = tiny
    stats = pl.read_parquet(neurons)
    neox = root / "neox.parquet"
    io.write_parquet(str(neox), stats, metadata=io.read_parquet_metadata(neurons) | {"family": "gpt_neox"})
    no_model = spec | {"local_path": str(root / "nowhere"), "family": None}
    table = sign_cases_job(no_model, shards, str(neox), wikitext, str(root / "neox_cases.parquet"), EXPLORER)
    assert table.height == 0 and io.read_parquet_metadata(str(root / "neox_cases.parquet"))["gated"] is False
    assert {"case", "count", "mean_abs_product", "top_positions", "top_tokens"} <= set(table.columns)
