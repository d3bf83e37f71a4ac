"""The confirmatory run's verdict (wneurons.report.pair_verdict): C11's part rule on two per-item files."""

import json

import numpy as np
import polars as pl
import pytest

from wneurons.report.claims.run import FAILS, HOLDS, NO_DATA
from wneurons.report.pair_verdict import main, pair_verdict


def _items(path, correct, items=None):
    n = len(correct)
    pl.DataFrame(
        {
            "item": items if items is not None else list(range(n)),
            "paradigm": ["p"] * n,
            "linguistics_term": ["t"] * n,
            "correct": np.asarray(correct, dtype=bool),
        }
    ).write_parquet(path)
    return path


def _pair(tmp_path, only_matched, only_w, agree=4000):
    """Matched right and W wrong on ``only_matched`` items, the reverse on ``only_w``, both right elsewhere."""
    matched = [True] * only_matched + [False] * only_w + [True] * agree
    w = [False] * only_matched + [True] * only_w + [True] * agree
    return _items(tmp_path / "m.parquet", matched), _items(tmp_path / "w.parquet", w)


def test_a_clear_difference_holds_and_a_null_one_is_equivalent(tmp_path):
    ref, cond = _pair(tmp_path, 300, 150)
    assert pair_verdict(ref, cond, resamples=200)["verdict"] == HOLDS
    ref, cond = _pair(tmp_path, 200, 200, agree=40000)
    out = pair_verdict(ref, cond, resamples=200)
    assert out["verdict"] == FAILS and out["equivalent"]


def test_a_straddling_difference_is_not_enough_data(tmp_path):
    ref, cond = _pair(tmp_path, 224, 203, agree=3392)  # the decisive run's unseen pairs: +0.55, p = 0.33
    out = pair_verdict(ref, cond, resamples=200)
    assert out["verdict"] == NO_DATA and out["row"]["n"] == 3819


def test_the_match_guard_reads_the_search(tmp_path):
    ref, cond = _pair(tmp_path, 300, 150)
    search = {"percent": 12.0, "converged": True, "relative_gap": 0.01, "tolerance": 0.05}
    nothing = {**search, "perplexity": 10.0, "target_perplexity": 9.0, "clean_perplexity": 9.5}
    assert pair_verdict(ref, cond, search=nothing, resamples=200)["verdict"] == NO_DATA
    weaker = {**search, "perplexity": 9.0, "target_perplexity": 10.0, "clean_perplexity": 8.0}
    assert pair_verdict(ref, cond, search=weaker, resamples=200)["match"]["state"] == "weaker"
    matched = {**weaker, "perplexity": 10.1, "nll_increase_ratio": 0.97}
    out = pair_verdict(ref, cond, search=matched, resamples=200)
    assert out["match"]["state"] == "matched" and out["verdict"] == HOLDS


def test_other_items_or_a_missing_file_are_refused(tmp_path, capsys):
    ref = _items(tmp_path / "m.parquet", [True, False, True])
    cond = _items(tmp_path / "w.parquet", [True, True, True], items=[0, 1, 5])
    with pytest.raises(ValueError, match="different blimp items"):
        pair_verdict(ref, cond)
    assert main([str(ref), str(tmp_path / "absent.parquet")]) == 2
    assert "absent.parquet does not exist" in capsys.readouterr().err


def test_cli_writes_the_verdict(tmp_path, capsys):
    ref, cond = _pair(tmp_path, 300, 150)
    assert main([str(ref), str(cond), "--out", str(tmp_path / "v.json")]) == 0
    assert "verdict: holds" in capsys.readouterr().out
    assert json.loads((tmp_path / "v.json").read_text())["verdict"] == HOLDS
