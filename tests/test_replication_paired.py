"""The paired job on hand-made per-item files of the contract's columns (clean, W, 3 random trials, matched)."""

import numpy as np
import polars as pl
import pytest

from wneurons.core.uncertainty import mcnemar_exact, paired_perplexity_ratio, window_nll_sums
from wneurons.jobs.report import paired_job

N = 120
TERMS = np.array(["binding", "ellipsis", "island_effects"])[np.arange(N) % 3]
PARADIGMS = np.array([f"p{i}" for i in range(6)])[np.arange(N) % 6]


def blimp_items(correct: np.ndarray) -> pl.DataFrame:
    lp = np.linspace(-30, -10, N)
    return pl.DataFrame(
        {
            "item": np.arange(N),
            "paradigm": PARADIGMS,
            "linguistics_term": TERMS,
            "field": "syntax",
            "logprob_good": lp,
            "logprob_bad": lp - np.where(correct, 1.0, -1.0),
            "correct": correct,
            "tie": np.zeros(N, dtype=bool),
        }
    )


def write_conditions(tmp_path, frames: dict[tuple, pl.DataFrame]):
    paths, conditions = [], []
    for (selector, trial), frame in frames.items():
        path = tmp_path / f"{selector}{trial}.items.parquet"
        frame.write_parquet(path)
        paths.append(str(path))
        conditions.append({"scope": "all", "selector": selector, "percent": "1", "trial": trial})
    return paths, conditions


def test_paired_job_makes_every_comparison_and_pools_random_trials(tmp_path):
    rng = np.random.default_rng(0)
    clean = rng.random(N) < 0.85
    w = clean & (rng.random(N) < 0.6)
    randoms = [clean ^ (rng.random(N) < 0.05) for _ in range(3)]
    matched = clean & (rng.random(N) < 0.9)
    frames = {("wasserstein", 0): blimp_items(w), ("matched", 0): blimp_items(matched)}
    frames |= {("random", t): blimp_items(r) for t, r in enumerate(randoms)}
    paths, conditions = write_conditions(tmp_path, frames)
    clean_path = tmp_path / "clean.items.parquet"
    blimp_items(clean).write_parquet(clean_path)
    out = tmp_path / "paired" / "blimp.parquet"
    table = paired_job("blimp", str(clean_path), paths, conditions, str(out), resamples=300, seed=0)
    assert out.is_file()

    overall = table.filter(pl.col("group_kind") == "overall")
    pairs = set(zip(overall["reference"], overall["condition"], overall["trial"], strict=True))
    assert ("clean", "all/wasserstein/p1", "t0") in pairs
    assert ("all/matched/p1", "all/wasserstein/p1", "t0") in pairs
    assert {("all/random/p1", "all/wasserstein/p1", t) for t in ("pooled", "t0", "t1", "t2")} <= pairs
    assert {("clean", "all/random/p1", t) for t in ("pooled", "t0", "t1", "t2")} <= pairs

    def row(reference, trial, kind="overall", group="all"):
        r = table.filter(
            (pl.col("reference") == reference)
            & (pl.col("condition") == "all/wasserstein/p1")
            & (pl.col("trial") == trial)
            & (pl.col("group_kind") == kind)
            & (pl.col("group") == group)
        )
        assert r.height == 1
        return r.row(0, named=True)

    vs_clean = row("clean", "t0")
    assert vs_clean["drop"] == pytest.approx(clean.mean() - w.mean())
    assert vs_clean["p_value"] == pytest.approx(mcnemar_exact(clean, w).p_value)
    pooled = row("all/random/p1", "pooled")
    assert pooled["acc_reference"] == pytest.approx(np.mean(randoms))
    assert pooled["drop"] == pytest.approx(np.mean(randoms) - w.mean())
    trial1 = row("all/random/p1", "t1")
    assert trial1["p_value"] == pytest.approx(mcnemar_exact(randoms[1], w).p_value)
    ellipsis = row("clean", "t0", "linguistics_term", "ellipsis")
    mask = TERMS == "ellipsis"
    assert ellipsis["n"] == mask.sum()
    assert ellipsis["drop"] == pytest.approx(clean[mask].mean() - w[mask].mean())
    assert table.filter(pl.col("group_kind") == "paradigm")["group"].n_unique() == 6


def ppl_items(nll: np.ndarray) -> pl.DataFrame:
    windows, per = nll.shape
    return pl.DataFrame(
        {
            "window": np.repeat(np.arange(windows, dtype=np.int32), per),
            "position": np.arange(windows * per, dtype=np.int64),
            "token_id": np.zeros(windows * per, dtype=np.int32),
            "char_start": np.zeros(windows * per, dtype=np.int32),
            "char_end": np.zeros(windows * per, dtype=np.int32),
            "nll": nll.reshape(-1).astype(np.float32),
        }
    )


def test_paired_job_ppl_ratio_over_windows(tmp_path):
    rng = np.random.default_rng(1)
    clean = rng.gamma(3.0, 1.0, (8, 50))
    w = clean + 0.7
    clean_path = tmp_path / "clean.items.parquet"
    ppl_items(clean).write_parquet(clean_path)
    paths, conditions = write_conditions(tmp_path, {("wasserstein", 0): ppl_items(w)})
    table = paired_job("ppl", str(clean_path), paths, conditions, str(tmp_path / "p.parquet"), resamples=200, seed=0)
    row = table.row(0, named=True)
    _, cs, counts = window_nll_sums(np.repeat(np.arange(8), 50), clean.reshape(-1).astype(np.float32))
    _, ws, _ = window_nll_sums(np.repeat(np.arange(8), 50), w.reshape(-1).astype(np.float32))
    expected = paired_perplexity_ratio(cs, ws, counts, resamples=200, seed=0)
    assert row["ratio"] == pytest.approx(expected["ratio"])
    assert row["ratio"] == pytest.approx(np.exp(0.7), rel=1e-5)
    assert row["n_windows"] == 8


def test_mismatched_items_and_missing_columns_are_named(tmp_path):
    clean_path = tmp_path / "clean.items.parquet"
    blimp_items(np.ones(N, dtype=bool)).write_parquet(clean_path)
    shifted = blimp_items(np.ones(N, dtype=bool)).with_columns(pl.col("item") + 1)
    paths, conditions = write_conditions(tmp_path, {("wasserstein", 0): shifted})
    with pytest.raises(ValueError, match="differ from the clean"):
        paired_job("blimp", str(clean_path), paths, conditions, str(tmp_path / "o.parquet"), resamples=10, seed=0)
    blimp_items(np.ones(N, dtype=bool)).drop("correct").write_parquet(paths[0])
    with pytest.raises(ValueError, match="lacks column.*correct"):
        paired_job("blimp", str(clean_path), paths, conditions, str(tmp_path / "o.parquet"), resamples=10, seed=0)


def test_pooled_rows_name_their_test_and_ci_and_groups_are_compared(tmp_path):
    rng = np.random.default_rng(3)
    clean = rng.random(N) < 0.85
    frames = {("wasserstein", 0): blimp_items(clean & (rng.random(N) < 0.6))}
    frames |= {("random", t): blimp_items(clean ^ (rng.random(N) < 0.05)) for t in range(3)}
    paths, conditions = write_conditions(tmp_path, frames)
    for g in (1, 2):  # two layer groups of W
        path = tmp_path / f"g{g}.items.parquet"
        blimp_items(clean & (rng.random(N) < 0.7 + 0.1 * g)).write_parquet(path)
        paths.append(str(path))
        conditions.append({"scope": f"g{g}", "selector": "wasserstein", "percent": "1", "trial": 0})
    clean_path = tmp_path / "clean.items.parquet"
    blimp_items(clean).write_parquet(clean_path)
    table = paired_job("blimp", str(clean_path), paths, conditions, str(tmp_path / "p.parquet"), resamples=200, seed=0)
    overall = table.filter(pl.col("group_kind") == "overall")
    pooled = overall.filter(pl.col("trial") == "pooled")
    # Both pooled comparisons (clean -> random, random -> W) resample the draws and say the test is a sign test.
    assert pooled.height == 2 and set(pooled["reference"]) == {"clean", "all/random/p1"}
    assert pooled["ci_method"].str.starts_with("two-stage").all() and pooled["test"].str.contains("sign test").all()
    single = overall.filter(pl.col("trial") == "t0")
    assert (single["test"] == "exact McNemar").all()
    g1, g2 = "g1/wasserstein/p1", "g2/wasserstein/p1"
    between = overall.filter((pl.col("reference") == g2) & (pl.col("condition") == g1))
    assert between.height == 1
    # Paradigm groups of 20 items still get a CI; none from fewer than 10 items (ci_note says why).
    assert table.filter(pl.col("group_kind") == "paradigm")["ci_note"].is_null().all()
