"""Sizing a run from its paired tables (wneurons.report.power)."""

import math
import re

import numpy as np
import polars as pl
import pytest
from scipy import stats

from wneurons.core.uncertainty import mcnemar_exact, mcnemar_exact_power, mcnemar_items, paired_accuracy_difference
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


def test_mcnemar_sample_size_and_exact_power_against_a_simulation():
    """The normal-approximation n (Connor 1987) is its formula; the exact test's power at an n is what simulated
    runs of that n decided by `mcnemar_exact` give; at a large n the two ways agree within a few percent."""
    p_d, d, alpha = 0.1, 0.04, 0.05
    z_a, z_b = stats.norm.ppf(1 - alpha / 2), stats.norm.ppf(0.8)
    formula = (z_a * math.sqrt(p_d) + z_b * math.sqrt(p_d - d**2)) ** 2 / d**2
    assert mcnemar_items(p_d, d, alpha=alpha) == math.ceil(formula)
    n, runs, rng = 500, 4000, np.random.default_rng(0)
    # Each pair: discordant with p_d, then against the reference with (p_d + d) / 2, for it (p_d - d) / 2.
    outcome = rng.choice(3, size=(runs, n), p=[1 - p_d, (p_d + d) / 2, (p_d - d) / 2])
    ref, cond = outcome != 2, outcome != 1  # 1: only the reference right; 2: only the condition right
    decided = np.mean([mcnemar_exact(r, c).p_value < alpha for r, c in zip(ref, cond, strict=True)])
    assert mcnemar_exact_power(n, p_d, d, alpha=alpha) == pytest.approx(decided, abs=0.025)
    large = mcnemar_items(0.11, 0.0055, alpha=0.01)
    assert mcnemar_exact_power(large, 0.11, 0.0055, alpha=0.01) == pytest.approx(0.8, abs=0.02)
    with pytest.raises(ValueError, match="needs 0 < |difference| <= discordance"):
        mcnemar_items(0.01, 0.02, alpha=0.01)


def test_cli_sizes_from_discordant_pairs_without_a_table(capsys):
    assert main(["--discordant", "14", "--pairs", "402", "--step", "67"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].endswith(f"{mcnemar_items(14 / 402, 0.01, alpha=0.01):,} pairs")
    exact = int(re.search(r"exact McNemar test: ([\d,]+) pairs", lines[2])[1].replace(",", ""))
    assert exact % 67 == 0 and mcnemar_exact_power(exact, 14 / 402, 0.01, alpha=0.01) >= 0.8
    assert mcnemar_exact_power(exact - 67, 14 / 402, 0.01, alpha=0.01) < 0.8
    assert main(["--discordant", "500", "--pairs", "402"]) == 2
    assert capsys.readouterr().err.startswith("power: --discordant 500 --pairs 402: needs")
