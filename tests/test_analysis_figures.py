"""Figures 3d, 5, 6a and 7 drawn from hand-made result files: what each draws is checked against its data file."""

from __future__ import annotations

import numpy as np
import polars as pl

from wneurons.jobs.figures import figure_job
from wneurons.store import io


def _composition(layers=4):
    rng = np.random.default_rng(0)
    nn = rng.random(layers) * 0.5
    pn = (1 - nn) * 0.8
    frame = {"layer": np.arange(layers), "n_neurons": np.full(layers, 7), "share_nn": nn, "share_pn": pn}
    frame |= {"share_pp": 1 - nn - pn, "null_nn": nn / 2, "base_rate_nn": nn / 3}
    frame |= {f"sem_{s}": np.full(layers, 0.01) for s in ("nn", "pn", "pp")}
    frame |= {f"null_{s}": np.full(layers, 0.3) for s in ("pn", "pp")}
    other = pl.DataFrame(frame).with_columns(percent=pl.lit(1.0), top_k=pl.lit(10, dtype=pl.Int32))
    return pl.concat([pl.DataFrame(frame).with_columns(percent=pl.lit(5.0), top_k=pl.lit(10, dtype=pl.Int32)), other])


def test_figure3d_draws_the_classes_with_enough_tokens_in_order(tmp_path):
    table = pl.DataFrame(
        {
            "upos": ["DET", "NOUN", "SPACE", "PUNCT", "INTJ"],
            "n": [200, 300, 500, 150, 3],
            "mean_shifted_dnll": [0.3, -0.1, 0.9, 0.2, 2.0],
            "sem": [0.05, 0.02, 0.01, 0.04, 1.0],
            "matched_percent": [35.0] * 5,
            "w_percent": [1.0] * 5,
        }
    )
    io.write_parquet(tmp_path / "pos.parquet", table)
    params = {"figure": {"min_tokens": 100, "label": "m"}}
    drawn = figure_job("figure3d", [tmp_path / "pos.parquet"], [tmp_path / "f3d.png"], params, {})
    assert drawn["upos"].to_list() == ["DET", "PUNCT", "NOUN"]  # SPACE listed only, INTJ too rare
    assert drawn["mean_shifted_dnll"].to_list() == [0.3, 0.2, -0.1]
    assert (tmp_path / "f3d.png").stat().st_size > 0


def test_figure6a_draws_the_configured_selection(tmp_path):
    comp = _composition()
    io.write_parquet(tmp_path / "comp.parquet", comp)
    params = {"figure": {"md_percent": 5, "top_k": 10, "label": "m"}}
    drawn = figure_job("figure6a", [tmp_path / "comp.parquet"], [tmp_path / "f6a.png"], params, {})
    assert drawn.height == 4 and drawn["percent"].unique().to_list() == [5.0]
    np.testing.assert_allclose(drawn["share_nn"] + drawn["share_pn"] + drawn["share_pp"], 1.0)
    assert (tmp_path / "f6a.png").stat().st_size > 0


def test_figure7_overlay_is_the_normalized_layer_series(tmp_path):
    comp = _composition()
    layerwise = comp.filter(pl.col("percent") == 1.0).select("layer", "share_nn", "share_pn", "share_pp")
    layerwise = layerwise.with_columns(
        err_blimp=pl.Series([0.1, 0.05, 0.0, 0.02]),
        sem_err_blimp=pl.lit(0.01),
        err_tse=pl.Series([0.2, 0.3, 0.1, 0.0]),
        sem_err_tse=pl.lit(0.01),
    )
    io.write_parquet(tmp_path / "comp.parquet", comp)
    io.write_parquet(tmp_path / "lw.parquet", layerwise)
    io.write_json(
        tmp_path / "corr.json",
        {"correlations": [{"error": "err_blimp", "share": "nn", "pearson_r": 0.5, "pearson_p": 0.1}]},
    )
    inputs = {
        "composition": tmp_path / "comp.parquet",
        "layerwise": tmp_path / "lw.parquet",
        "correlations": tmp_path / "corr.json",
    }
    params = {"md_percent": 1, "top_k": 10, "label": "m", "ablation_percent": 1}
    overlay = figure_job("figure7", inputs, [tmp_path / "f7.png"], {"figure": params}, {})
    np.testing.assert_allclose(overlay["err_blimp"], [1.0, 0.5, 0.0, 0.2])
    np.testing.assert_allclose(overlay["err_tse"], [2 / 3, 1.0, 1 / 3, 0.0])
    nn = layerwise["share_nn"].to_numpy()
    np.testing.assert_allclose(overlay["share_nn"], (nn - nn.min()) / (nn.max() - nn.min()))
    assert (tmp_path / "f7.png").stat().st_size > 0


def test_figure5_from_the_case_study_files(tmp_path):
    pairs = pl.DataFrame(
        {
            "rank": [1, 2],
            "pair": [4, 9],
            "token_i": ["for", "the"],
            "token_j": ["the", "a"],
            "upos_i": ["ADP", "DET"],
            "upos_j": ["DET", "DET"],
            "dep_i": ["prep", "det"],
            "dep_j": ["det", "det"],
            "y_i": [-0.5, -1.0],
            "y_j": [-2.0, 0.5],
            "sign": ["nn", "pn"],
            "r": [9.0, 8.0],
        }
    )
    pairs.write_csv(tmp_path / "pairs.csv")
    io.write_parquet(
        tmp_path / "all.parquet",
        pl.DataFrame({"pair": np.arange(12), "dx_norm": np.linspace(0.1, 1, 12), "dy_norm": np.linspace(0, 3, 12)}),
    )
    summary = {
        "model": "m",
        "layer": 1,
        "neuron": 7,
        "wd_rank": 1,
        "n_pairs": 12,
        "n_nn_top": 1,
        "top_k": 2,
        "robustness": {"seeds": [0, 1], "n_nn": [1, 2]},
        "histogram": {"edges": [-3, -1, 0, 1], "counts": [5, 10, 3], "n_tokens": 18, "split": "test"},
    }
    io.write_json(tmp_path / "robust.json", summary)
    inputs = {
        "pairs": tmp_path / "pairs.csv",
        "all_pairs": tmp_path / "all.parquet",
        "robustness": tmp_path / "robust.json",
    }
    highlighted = figure_job("figure5", inputs, [tmp_path / "f5.png"], {"figure": {}}, {})
    assert highlighted == [4, 9]
    assert (tmp_path / "f5.png").stat().st_size > 0
