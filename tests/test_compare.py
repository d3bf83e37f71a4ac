"""wneurons.report.compare: result trees equal, different, or one a subset of the other."""

import json

from wneurons.report.compare import compare_result_trees


def _tree(root, files):
    for rel, obj in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(obj))
    return root


def test_volatile_fields_ignored_and_real_differences_named(tmp_path):
    a = _tree(tmp_path / "a", {"m/x.json": {"acc": 0.5, "seconds": 1}, "m/y.json": {"acc": 0.7}})
    b = _tree(tmp_path / "b", {"m/x.json": {"acc": 0.5, "seconds": 9}, "m/y.json": {"acc": 0.6}})
    assert compare_result_trees(a, b) == ["differs: m/y.json"]


def test_subset_allows_missing_files_in_b_only(tmp_path):
    a = _tree(tmp_path / "a", {"m/x.json": {"acc": 0.5}, "m/y.json": {"acc": 0.7}})
    b = _tree(tmp_path / "b", {"m/x.json": {"acc": 0.5}})
    assert compare_result_trees(a, b) == [f"only in {a}: m/y.json"]
    assert compare_result_trees(a, b, subset=True) == []
    # a file of b that a lacks, or that differs, still fails
    _tree(b, {"m/z.json": {"acc": 0.1}, "m/x.json": {"acc": 0.4}})
    assert compare_result_trees(a, b, subset=True) == [f"only in {b}: m/z.json", "differs: m/x.json"]
