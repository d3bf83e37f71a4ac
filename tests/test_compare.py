"""wneurons.report.compare: result trees equal, different, or one a subset of the other; last-bit float
differences within a stated tolerance; provenance reported apart from results."""

import json

import numpy as np
import polars as pl
import pytest

from wneurons.report.compare import DEFAULT_RTOL, compare_result_trees, compare_trees, is_provenance, main


def _tree(root, files):
    for rel, obj in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(obj, pl.DataFrame):
            obj.write_parquet(path)
        else:
            path.write_text(json.dumps(obj))
    return root


def test_volatile_fields_ignored_and_real_differences_named(tmp_path):
    a = _tree(tmp_path / "a", {"m/x.json": {"acc": 0.5, "seconds": 1}, "m/y.json": {"acc": 0.7}})
    b = _tree(tmp_path / "b", {"m/x.json": {"acc": 0.5, "seconds": 9}, "m/y.json": {"acc": 0.6}})
    assert compare_result_trees(a, b) == ["differs: m/y.json: acc: 0.7 vs 0.6"]


def test_subset_allows_missing_files_in_b_only(tmp_path):
    a = _tree(tmp_path / "a", {"m/x.json": {"acc": 0.5}, "m/y.json": {"acc": 0.7}})
    b = _tree(tmp_path / "b", {"m/x.json": {"acc": 0.5}})
    assert compare_result_trees(a, b) == [f"only in {a}: m/y.json"]
    assert compare_result_trees(a, b, subset=True) == []
    # a file of b that a lacks, or that differs, still fails
    _tree(b, {"m/z.json": {"acc": 0.1}, "m/x.json": {"acc": 0.4}})
    assert compare_result_trees(a, b, subset=True) == [f"only in {b}: m/z.json", "differs: m/x.json: acc: 0.5 vs 0.4"]


def _last_bits(values: np.ndarray, ulps: int) -> np.ndarray:
    return values * (1 + ulps * np.finfo(np.float64).eps)


def test_last_bit_differences_pass_within_the_tolerance_and_fail_when_exact(tmp_path):
    rng = np.random.default_rng(0)
    wd = rng.random(50)
    # an excess kurtosis that cancels to near zero: its rounding noise is relative to the column, not to itself
    kurtosis = np.r_[rng.standard_normal(49), 1e-9]
    table = pl.DataFrame({"layer": np.zeros(50, np.int32), "wd": wd, "kurtosis": kurtosis})
    noisy = table.with_columns(
        wd=pl.Series(_last_bits(wd, 3)), kurtosis=pl.Series(np.r_[kurtosis[:-1], kurtosis[-1] + 1e-15])
    )
    a = _tree(tmp_path / "a", {"m/neurons.parquet": table, "m/s.json": {"r": [0.25, 1e-9, 3.0], "acc": 0.5}})
    b = _tree(
        tmp_path / "b",
        {"m/neurons.parquet": noisy, "m/s.json": {"r": [0.25, 1e-9 + 1e-17, 3.0 * (1 + 2e-16)], "acc": 0.5}},
    )
    comparison = compare_trees(a, b)
    assert comparison.results == [] and comparison.provenance == []
    assert [line.split(":")[1].strip() for line in comparison.within_tolerance] == ["m/neurons.parquet", "m/s.json"]
    exact = compare_result_trees(a, b, rtol=0)
    assert exact[0].startswith("differs: m/neurons.parquet: column wd: 50 values beyond rtol 0")
    assert "column kurtosis: 1 values" in exact[0] and exact[1].startswith("differs: m/s.json: r[1]")
    # beyond the tolerance, or a changed integer / string, is a result difference whatever the tolerance
    far = table.with_columns(wd=pl.Series(wd * (1 + 1e-9)), layer=pl.Series(np.ones(50, np.int32)))
    _tree(b, {"m/neurons.parquet": far, "m/s.json": {"r": [0.25, 1e-9, 3.0], "acc": 0.5, "extra": "x"}})
    lines = compare_result_trees(a, b, rtol=1e-6)
    assert lines == ["differs: m/neurons.parquet: column layer", "differs: m/s.json: extra: only in b"]
    assert "column wd: 50 values beyond rtol 1e-12" in compare_result_trees(a, b)[0]


def test_provenance_is_reported_apart_and_does_not_fail(tmp_path, capsys):
    def result(version, sha, acc):
        return {
            "acc": acc,
            "neurons_sha256": sha,
            "provenance": {"model": "m", "wneurons_version": version, "torch_version": "2"},
            "conditions": [{"seconds": 1.0 + acc, "trial": 0}],
        }

    a = _tree(tmp_path / "a", {"m/x.json": result("0.1", "aa", 0.5)})
    b = _tree(tmp_path / "b", {"m/x.json": result("0.2", "bb", 0.5)})
    comparison = compare_trees(a, b)
    assert comparison.results == []
    assert comparison.provenance == ["provenance: m/x.json: neurons_sha256, provenance"]
    assert main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "provenance: m/x.json" in out and "identical results (1 with provenance differences" in out
    _tree(b, {"m/x.json": result("0.2", "bb", 0.25)})
    assert main([str(a), str(b), "--rtol", "0"]) == 1
    out = capsys.readouterr().out
    assert "differs: m/x.json: acc: 0.5 vs 0.25" in out and "1 result differences" in out


def test_which_fields_are_provenance():
    for key in ("provenance", "neurons_sha256", "torch_version", "seconds", "seconds_in_hooks", "data_source"):
        assert is_provenance(key), key
    for key in ("wd", "acc", "percent", "version_of_claim", "n_tokens", "sha"):
        assert not is_provenance(key), key
    assert DEFAULT_RTOL == 1e-12
    with pytest.raises(ValueError, match="rtol"):
        compare_trees(".", ".", rtol=-1)
