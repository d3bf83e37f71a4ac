"""Figures 3d, 5, 6a and 7 drawn from hand-made result files: what each draws is checked against its data file."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

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


# ---------------------------------------------------------------- Fig. 3c and the capability figure: paired drops
W, RANDOM, MATCHED = "all/wasserstein/p1", "all/random/p1", "all/matched/p1"


def _items(benchmark: str, correct: np.ndarray) -> pl.DataFrame:
    n = correct.size
    frame = {"item": np.arange(n), "correct": correct.astype(bool)}
    if benchmark == "blimp":
        frame |= {"paradigm": ["p"] * n, "linguistics_term": ["t"] * n}
    elif benchmark == "tse":
        frame |= {"task": ["k"] * n, "family": ["f"] * n}
    else:
        frame |= {"task": ["c"] * n}
    return pl.DataFrame(frame)


def _paired_and_aggregate(benchmark: str, rng, n: int = 300, w_cost: float = 0.15, m_cost: float = 0.02):
    """A paired table from the real paired_comparisons over synthetic per-item outcomes (W one trial, random two
    trials, matched one trial) and the aggregate the figures read beside it."""
    from wneurons.report.replication import paired_comparisons

    clean = rng.random(n) < 0.8
    flip = lambda p: clean & ~(rng.random(n) < p)  # noqa: E731
    outcomes = {W: {0: flip(w_cost)}, RANDOM: {0: flip(0.01), 1: flip(0.01)}, MATCHED: {0: flip(m_cost)}}
    tables = {k: {t: _items(benchmark, c) for t, c in trials.items()} for k, trials in outcomes.items()}
    paired = paired_comparisons(benchmark, _items(benchmark, clean), tables, resamples=200, seed=0)
    conditions = {k: {"percent": 1.0, "scores": {"overall": float(np.mean([c.mean() for c in trials.values()]))}}
                  for k, trials in outcomes.items()}  # fmt: skip
    aggregate = {"model": "m", "revision": "main", "clean": {"overall": float(clean.mean())}, "conditions": conditions}
    return paired, aggregate


def test_figure3c_draws_the_paired_drops_with_their_cis(tmp_path):
    rng = np.random.default_rng(1)
    files = {}
    for bench in ("blimp", "tse"):
        paired, aggregate = _paired_and_aggregate(bench, rng)
        io.write_parquet(tmp_path / f"paired_{bench}.parquet", paired)
        io.write_json(tmp_path / f"{bench}.json", aggregate)
        files |= {bench: tmp_path / f"{bench}.json", f"paired_{bench}": tmp_path / f"paired_{bench}.parquet"}
    ppl = {"model": "m", "revision": "main", "clean": {"perplexity": 20.0}, "conditions": {
        W: {"percent": 1.0, "scores": {"perplexity": 40.0}}, RANDOM: {"percent": 1.0, "scores": {"perplexity": 21.0},
        "sem": {"perplexity": 0.2}}, MATCHED: {"percent": 1.0, "scores": {"perplexity": 39.0}, "matched_percent": 30.0,
        "matched_converged": True}}}  # fmt: skip
    io.write_json(tmp_path / "ppl.json", ppl)
    files["ppl"] = tmp_path / "ppl.json"
    rows = figure_job("figure3", files, [tmp_path / "f3.png"], {"figure": {}}, {"model": "m", "revision": "main"})
    assert (tmp_path / "f3.png").read_bytes()[:4] == b"\x89PNG"
    drawn = {(r.benchmark, r.reference, r.condition): r for r in rows}
    # every comparison C11 decides on, per benchmark: three vs clean, W vs both controls
    assert set(drawn) == {(b, ref, cond) for b in ("blimp", "tse") for ref, cond in
                          [("clean", W), ("clean", RANDOM), ("clean", MATCHED), (RANDOM, W), (MATCHED, W)]}  # fmt: skip
    for (bench, ref, cond), r in drawn.items():
        table = pl.read_parquet(tmp_path / f"paired_{bench}.parquet").filter(
            (pl.col("reference") == ref) & (pl.col("condition") == cond) & (pl.col("group_kind") == "overall")
        )
        trial = "pooled" if RANDOM in (ref, cond) else "t0"
        expect = table.filter(pl.col("trial") == trial).row(0, named=True)
        assert (r.drop, r.ci_lo, r.ci_hi) == pytest.approx((100 * expect["drop"], 100 * expect["ci_lo"],
                                                            100 * expect["ci_hi"]))  # fmt: skip
        assert r.ci_lo < r.drop < r.ci_hi  # a real interval, not a zero-width bar
    assert drawn["blimp", "clean", RANDOM].trials == 2  # random trials pooled (two-stage), not one draw
    assert drawn["blimp", "clean", W].ci_lo > 0  # W's drop of ~12 points is resolved at n = 300


def test_capability_figure_bars_carry_paired_cis(tmp_path):
    rng = np.random.default_rng(2)
    files, tables = {}, {}
    for bench, w_cost, m_cost in (("blimp", 0.15, 0.02), ("tse", 0.15, 0.02), ("capability", 0.02, 0.2)):
        paired, aggregate = _paired_and_aggregate(bench, rng, w_cost=w_cost, m_cost=m_cost)
        if bench == "capability":
            aggregate["clean"]["tasks"] = {"c": {"metrics": {"acc": aggregate["clean"]["overall"]}}}
        io.write_parquet(tmp_path / f"paired_{bench}.parquet", paired)
        io.write_json(tmp_path / f"{bench}.json", aggregate)
        files |= {bench: tmp_path / f"{bench}.json", f"paired_{bench}": tmp_path / f"paired_{bench}.parquet"}
        tables[bench] = paired
    rows = dict(
        figure_job("capability_figure", files, [tmp_path / "c.png"], {"figure": {}}, {"model": "m", "revision": "r"})
    )
    assert list(rows) == [W, RANDOM, MATCHED]
    for key, by_bench in rows.items():
        for bench, d in by_bench.items():
            assert d.ci_hi - d.ci_lo > 0, (key, bench)  # W and matched too: one trial, exact paired interval
    assert rows[W]["blimp"].drop > rows[MATCHED]["blimp"].drop  # the dissociation the synthetic data carries
    assert rows[MATCHED]["capability"].drop > rows[W]["capability"].drop
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
