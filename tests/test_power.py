"""Sizing a run from its paired tables (wneurons.report.power)."""

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from wneurons.core.uncertainty import paired_accuracy_difference
from wneurons.report.power import main, power_rows


def _table(tmp_path, trials: int = 1):
    rng = np.random.default_rng(2)
    ref = rng.random(3000) < 0.75
    cond = np.where(rng.random(3000) < 0.06, ~ref, ref) & (rng.random(3000) > 0.01)
    other = np.stack([np.where(rng.random(3000) < 0.04, ~ref, ref) for _ in range(trials)])
    rows = [
        {"reference": "clean", "condition": "all/wasserstein/p1", "trial": "t0", "group_kind": "overall",
         "group": "all", **paired_accuracy_difference(ref, cond, seed=0)},
        {"reference": "all/random/p1", "condition": "all/wasserstein/p1", "trial": "pooled", "group_kind": "overall",
         "group": "all", **paired_accuracy_difference(other, cond, seed=0)},
        {"reference": "clean", "condition": "all/wasserstein/p1", "trial": "t0", "group_kind": "field",
         "group": "syntax", **paired_accuracy_difference(ref[:500], cond[:500], seed=0)},
    ]  # fmt: skip
    path = tmp_path / "blimp.parquet"
    pl.DataFrame(rows).drop("ci_note").write_parquet(path)
    return path, ref, cond


def test_detectable_difference_is_z_standard_errors_of_the_mcnemar_spread(tmp_path):
    path, ref, cond = _table(tmp_path, trials=3)
    rows = power_rows(pl.read_parquet(path), difference=0.01, alpha=0.01)
    assert [r["group"] for r in rows] == ["all", "all"]  # overall rows only by default
    clean = rows[0]
    d = ref.mean() - cond.mean()
    p_d = float((ref != cond).mean())
    z = stats.norm.ppf(0.995) + stats.norm.ppf(0.8)
    assert clean["discordance"] == pytest.approx(p_d)
    assert clean["detectable_at_n"] == pytest.approx(z * math.sqrt((p_d - d**2) / ref.size), rel=0.1)
    assert clean["items_needed"] == pytest.approx(z**2 * (p_d - 1e-4) / 1e-4, rel=0.2)
    assert not clean["lower_bound"] and rows[1]["lower_bound"]  # the pooled random row: draw variance in its CI


def test_cli_prints_a_table_and_names_a_bad_file(tmp_path, capsys):
    path, _, _ = _table(tmp_path)
    assert main([str(path), "--reference", "clean", "--all-groups"]) == 0
    out = capsys.readouterr().out
    assert out.count("| clean → all/wasserstein/p1 |") == 2 and "n for 1 pt" in out and "≥" not in out
    assert main([str(tmp_path / "none.parquet")]) == 2
    pl.DataFrame({"x": [1]}).write_parquet(tmp_path / "x.parquet")
    assert main([str(tmp_path / "x.parquet")]) == 2
    assert "is not a paired table (lacks ci_hi" in capsys.readouterr().err
