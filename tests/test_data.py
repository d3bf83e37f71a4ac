"""Tests for wneurons.store.data's readers (BLiMP, TSE, WikiText-2) and its seeded subsampling per group.

Synthetic fixtures are built in tmp_path; tests on the real data read the shared data folder
(``WNEURONS_SHARED_DATA`` overrides its location; tests/shared_data.py) and skip when it is absent. Fetching with
verification is tests/test_data_fetch.py.
"""

from __future__ import annotations

import json
import os
import pickle
import pickletools
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from shared_data import shared

from wneurons.store.data import TSE_FAMILIES, load_blimp, load_tse, load_wikitext, subsample_per_group

# ------------------------------------------------------------------------------------------------ BLiMP


def blimp_record(uid: str, i: int, pair_key: str = "pairID") -> dict:
    return {
        "sentence_good": f"good {i}.",
        "sentence_bad": f"bad {i}.",
        "field": "syntax",
        "linguistics_term": "island_effects",
        "UID": uid,
        pair_key: str(i) if pair_key == "pairID" else i,
    }


def write_jsonl(path: Path, lines: list[dict | str]) -> Path:
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return path


def test_load_blimp_reads_github_and_hub_keys(tmp_path):
    write_jsonl(tmp_path / "wh_island.jsonl", [blimp_record("wh_island", i) for i in range(3)])
    write_jsonl(tmp_path / "adjunct_island.jsonl", [blimp_record("adjunct_island", i, "pair_id") for i in (5, 7)])
    frame = load_blimp(tmp_path)
    assert frame.schema == pl.Schema(
        {
            "paradigm": pl.String,
            "linguistics_term": pl.String,
            "field": pl.String,
            "pair_id": pl.Int64,
            "sentence_good": pl.String,
            "sentence_bad": pl.String,
        }
    )
    assert frame["paradigm"].to_list() == ["adjunct_island"] * 2 + ["wh_island"] * 3
    assert frame["pair_id"].to_list() == [5, 7, 0, 1, 2]
    assert frame["sentence_good"].to_list() == ["good 5.", "good 7.", "good 0.", "good 1.", "good 2."]
    assert load_blimp(tmp_path, ["wh_island"])["paradigm"].unique().to_list() == ["wh_island"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"UID": "wh_island", "sentence_good": ', "invalid JSON"),
        ({k: v for k, v in blimp_record("wh_island", 1).items() if k != "sentence_bad"}, "'sentence_bad'"),
        ({k: v for k, v in blimp_record("wh_island", 1).items() if k != "pairID"}, "'pairID'"),
        ({**blimp_record("wh_island", 1), "pairID": "one"}, "pairID"),
        (blimp_record("adjunct_island", 1), "UID"),
        ("[1, 2]", "JSON object"),
    ],
)
def test_load_blimp_names_file_line_and_key_of_bad_input(tmp_path, line, message):
    path = write_jsonl(tmp_path / "wh_island.jsonl", [blimp_record("wh_island", 0), line])
    with pytest.raises(ValueError, match=re.escape(f"{path}:2") + ".*" + re.escape(message)):
        load_blimp(tmp_path)


def test_load_blimp_names_missing_paradigm(tmp_path):
    write_jsonl(tmp_path / "wh_island.jsonl", [blimp_record("wh_island", 0)])
    with pytest.raises(FileNotFoundError, match="no_such_paradigm"):
        load_blimp(tmp_path, ["wh_island", "no_such_paradigm"])


def test_load_blimp_real_data():
    frame = load_blimp(shared("blimp/data"))
    # MANIFEST: 67 paradigms x 1000 pairs (pairID 0..999), 13 linguistics terms
    assert frame.height == 67_000
    per_paradigm = frame.group_by("paradigm").agg(
        n=pl.len(), lo=pl.col("pair_id").min(), hi=pl.col("pair_id").max(), ids=pl.col("pair_id").n_unique()
    )
    assert per_paradigm.height == 67
    assert per_paradigm.select(pl.col("n", "ids").unique()).rows() == [(1000, 1000)]
    assert per_paradigm.select(pl.col("lo", "hi").unique()).rows() == [(0, 999)]
    assert frame["linguistics_term"].n_unique() == 13
    assert frame.filter(pl.col("paradigm") == "principle_A_case_2")["field"].unique().to_list() == ["syntax/semantics"]
    assert frame.null_count().sum_horizontal().item() == 0


# -------------------------------------------------------------------------------------------------- TSE

SVA_ITEMS = {
    "sing_MS_MV": [("the author laughs", "the author laugh")],
    "plur_MS_MV": [("a b", "a c"), ("d", "e")],
}
NPI_ITEMS = {"past": [("no x ever", "the x ever", "most x ever")], "future": [("no y", "the y", "most y")]}


def write_tse_fixture(folder: Path) -> Path:
    """simple_agrmt + simple_npi_anim as upstream pickles (protocol 0, like LM_syneval) and as jsonl."""
    (folder / "pickle").mkdir(parents=True)
    for task, items in [("simple_agrmt", SVA_ITEMS), ("simple_npi_anim", NPI_ITEMS)]:
        (folder / "pickle" / f"{task}.pickle").write_bytes(pickle.dumps(items, protocol=0))
    return folder / "pickle"


def test_load_tse_maps_pairs_and_npi_triples(tmp_path):
    frame = load_tse(write_tse_fixture(tmp_path))
    assert frame.columns == [
        "task",
        "family",
        "condition",
        "idx",
        "sentence_good",
        "sentence_bad",
        "sentence_intrusive",
    ]
    assert frame["idx"].dtype == pl.Int64
    assert frame.rows() == [
        (
            "simple_agrmt",
            "subject_verb_agreement",
            "sing_MS_MV",
            0,
            "the author laughs",
            "the author laugh",
            None,
        ),
        ("simple_agrmt", "subject_verb_agreement", "plur_MS_MV", 0, "a b", "a c", None),
        ("simple_agrmt", "subject_verb_agreement", "plur_MS_MV", 1, "d", "e", None),
        ("simple_npi_anim", "negative_polarity_items", "past", 0, "no x ever", "most x ever", "the x ever"),
        ("simple_npi_anim", "negative_polarity_items", "future", 0, "no y", "most y", "the y"),
    ]


def test_load_tse_jsonl_matches_pickle_on_fixture(tmp_path):
    pickled = load_tse(write_tse_fixture(tmp_path))
    jsonl_dir = tmp_path / "jsonl"
    jsonl_dir.mkdir()
    for (task,), rows in pickled.group_by("task", maintain_order=True):
        records = [{k: v for k, v in row.items() if v is not None} for row in rows.to_dicts()]
        write_jsonl(jsonl_dir / f"{task}.jsonl", records)
    assert load_tse(jsonl_dir, "jsonl").equals(pickled)


class ShellPayload:
    """Pickles to 'call os.system(command)' on load: what a malicious pickle does."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_malicious_pickle_is_refused_without_running_it(tmp_path, protocol):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"cond": [ShellPayload(f"touch {marker}")]}, protocol=protocol)
    opcodes = {op.name for op, _, _ in pickletools.genops(payload)}
    assert opcodes & {"GLOBAL", "STACK_GLOBAL"}  # the fixture really carries a global reference
    path = tmp_path / "simple_agrmt.pickle"
    path.write_bytes(payload)
    with pytest.raises(pickle.UnpicklingError, match=re.escape(str(path)) + ".*system"):
        load_tse(tmp_path)
    assert not marker.exists()


def test_bare_global_reference_is_refused(tmp_path):
    path = tmp_path / "simple_agrmt.pickle"
    path.write_bytes(pickle.dumps(os.system, protocol=0))
    with pytest.raises(pickle.UnpicklingError, match=re.escape(str(path))):
        load_tse(tmp_path)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([("a", "b")], "expected dict"),
        ({"cond": ("a", "b")}, "not a str mapping to a list"),
        ({1: [("a", "b")]}, "not a str mapping to a list"),
        ({"cond": [["a", "b"]]}, r"cond\[0\] is not a tuple of str"),
        ({"cond": [("a", 1)]}, r"cond\[0\] is not a tuple of str"),
        ({"cond": [("a", "b", "c")]}, "has 3 sentences"),
    ],
)
def test_pickle_of_wrong_shape_is_refused(tmp_path, obj, message):
    path = tmp_path / "simple_agrmt.pickle"
    path.write_bytes(pickle.dumps(obj, protocol=0))
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*" + message):
        load_tse(tmp_path)


def test_npi_pairs_and_corrupted_pickles_are_refused(tmp_path):
    (tmp_path / "simple_npi_anim.pickle").write_bytes(pickle.dumps({"past": [("a", "b")]}, protocol=0))
    with pytest.raises(ValueError, match="has 2 sentences"):
        load_tse(tmp_path)
    data = pickle.dumps(NPI_ITEMS, protocol=0)
    (tmp_path / "simple_npi_anim.pickle").write_bytes(data[: len(data) // 2])
    with pytest.raises(pickle.UnpicklingError, match="simple_npi_anim.pickle"):
        load_tse(tmp_path)


def test_load_tse_unknown_task_and_format(tmp_path):
    (tmp_path / "made_up_task.pickle").write_bytes(pickle.dumps(SVA_ITEMS, protocol=0))
    with pytest.raises(ValueError, match="made_up_task"):
        load_tse(tmp_path)
    with pytest.raises(ValueError, match="fmt"):
        load_tse(tmp_path, "csv")


def test_load_tse_jsonl_checks_task_and_keys(tmp_path):
    good = {
        "task": "simple_agrmt",
        "family": "subject_verb_agreement",
        "condition": "c",
        "idx": 0,
        "sentence_good": "a",
        "sentence_bad": "b",
    }
    path = write_jsonl(tmp_path / "simple_agrmt.jsonl", [good, {**good, "task": "vp_coord"}])
    with pytest.raises(ValueError, match=re.escape(f"{path}:2") + ".*task"):
        load_tse(tmp_path, "jsonl")
    write_jsonl(path, [good, {k: v for k, v in good.items() if k != "idx"}])
    with pytest.raises(ValueError, match=re.escape(f"{path}:2") + ".*'idx'"):
        load_tse(tmp_path, "jsonl")


def manifest_tse_tasks() -> dict[str, tuple[str, dict[str, int]]]:
    """The MANIFEST's PER SUB-TASK table: task -> (family, {condition: items})."""
    text = shared("tse/MANIFEST.txt").read_text()
    section = text.split("PER SUB-TASK (EMNLP2018 primary)")[1].split("family totals")[0]
    rows = re.findall(r"^  (\w+)  (\w+)  \d+  [23]  (\{.*\})  \|", section, re.M)
    return {task: (family, json.loads(conditions)) for task, family, conditions in rows}


def test_load_tse_real_counts_match_manifest():
    frame = load_tse(shared("tse/pickle/EMNLP2018"))
    # MANIFEST headline: 22 sub-tasks, 163124 items (tuples)
    assert frame["task"].n_unique() == 22
    assert frame.height == 163_124
    expected = manifest_tse_tasks()
    assert len(expected) == 22
    assert {t: f for t, (f, _) in expected.items()} == TSE_FAMILIES
    counts = frame.group_by("task", "family", "condition").len()
    got = {(t, f, c): n for t, f, c, n in counts.rows()}
    assert got == {(t, f, c): n for t, (f, conds) in expected.items() for c, n in conds.items()}
    npi = pl.col("family") == "negative_polarity_items"
    assert frame.filter(npi)["sentence_intrusive"].null_count() == 0
    assert frame.filter(~npi)["sentence_intrusive"].null_count() == frame.filter(~npi).height
    # idx numbers items within each condition from 0
    assert frame.group_by("task", "condition").agg(ok=pl.col("idx") == pl.int_range(pl.len()))["ok"].explode().all()


def test_load_tse_pickle_and_jsonl_identical_on_real_data():
    pickled = load_tse(shared("tse/pickle/EMNLP2018"), "pickle")
    derived = load_tse(shared("tse/jsonl/EMNLP2018"), "jsonl")
    assert pickled.equals(derived)


# ------------------------------------------------------------------------------------------- WikiText-2


def test_load_wikitext_builds_hub_rows(tmp_path):
    path = tmp_path / "wiki.test.raw"
    path.write_text(" \n = Title = \n \n Body , text . \n \n")
    # rows: "", " = Title = \n", "", " Body , text . \n", ""  joined by "\n\n"
    assert load_wikitext(path) == "\n\n = Title = \n\n\n\n\n Body , text . \n\n\n"


def test_load_wikitext_real_test_split():
    text = load_wikitext(shared("wikitext-2/raw/wiki.test.raw"))
    # MANIFEST: 4358 lines, 2891 non-blank. Each non-blank row keeps its "\n"; 4357 "\n\n" separators.
    assert text.count("\n") == 2891 + 2 * (4358 - 1)
    assert text.startswith("\n\n = Robert Boulter = \n\n\n\n\n Robert Boulter is")
    assert " \n" not in text.replace(" \n\n", "")  # blank " " lines became "" rows


# ------------------------------------------------------------------------------------------- subsampling


def grouped_frame(sizes: dict[str, int]) -> pl.DataFrame:
    """Groups of the given sizes, interleaved so that order preservation is visible; ``row`` = position."""
    labels = [g for g, n in sizes.items() for _ in range(n)]
    order = np.random.default_rng(123).permutation(len(labels))
    return pl.DataFrame({"group": [labels[i] for i in order]}).with_row_index("row")


@pytest.mark.parametrize("n", [0, 1, 5, 40, 1000])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_subsample_takes_min_n_size_rows_per_group_in_original_order(n, seed):
    sizes = {"a": 40, "b": 7, "c": 1, "d": 120}
    frame = grouped_frame(sizes)
    sample = subsample_per_group(frame, "group", n, seed)
    assert sample.columns == frame.columns
    got = dict(sample.group_by("group").len().rows())
    assert {g: got.get(g, 0) for g in sizes} == {g: min(n, s) for g, s in sizes.items()}
    rows = sample["row"].to_numpy()
    assert np.all(np.diff(rows) > 0)  # original order, no duplicates
    assert sample.equals(frame[rows.tolist()])  # rows are unchanged copies


def test_subsample_is_seeded_and_none_is_identity():
    frame = grouped_frame({"a": 50, "b": 50})
    assert subsample_per_group(frame, "group", None, 0) is frame
    first = subsample_per_group(frame, "group", 5, 7)
    assert first.equals(subsample_per_group(frame, "group", 5, 7))
    assert not first.equals(subsample_per_group(frame, "group", 5, 8))


@pytest.mark.parametrize("seed", [0, 3])
def test_subsample_offset_continues_the_seeded_order(seed):
    # An offset of k takes the ranks after the first k: disjoint from the first k, and together they are the
    # first k + n (a confirmatory run on unseen items; group b runs out of rows after 7).
    frame = grouped_frame({"a": 40, "b": 7, "c": 120})
    first = subsample_per_group(frame, "group", 5, seed)
    after = subsample_per_group(frame, "group", 11, seed, offset=5)
    assert set(first["row"]).isdisjoint(after["row"])
    assert (
        sorted(first["row"].to_list() + after["row"].to_list())
        == subsample_per_group(frame, "group", 16, seed)["row"].to_list()
    )
    assert dict(after.group_by("group").len().rows()) == {"a": 11, "b": 2, "c": 11}
    rest = subsample_per_group(frame, "group", None, seed, offset=5)
    assert sorted(first["row"].to_list() + rest["row"].to_list()) == frame["row"].to_list()
    assert subsample_per_group(frame, "group", 3, seed, offset=200).height == 0


@pytest.mark.parametrize("offset", [-1, 1.5, True, None])
def test_subsample_rejects_a_bad_offset(offset):
    with pytest.raises(ValueError, match="offset must be a non-negative int"):
        subsample_per_group(grouped_frame({"a": 3}), "group", 2, 0, offset=offset)


def test_subsample_is_identical_in_a_fresh_interpreter():
    # A fresh process with another hash seed must draw the same rows (no dependence on set/dict order).
    code = (
        "import numpy as np, polars as pl\n"
        "from wneurons.store.data import subsample_per_group\n"
        "labels = [g for g in 'xyz' for _ in range(30)]\n"
        "f = pl.DataFrame({'group': labels}).with_row_index('row')\n"
        "print(subsample_per_group(f, 'group', 4, 2024)['row'].to_list())\n"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    ]
    assert runs[0] == runs[1]
    frame = pl.DataFrame({"group": [g for g in "xyz" for _ in range(30)]}).with_row_index("row")
    assert json.loads(runs[0]) == subsample_per_group(frame, "group", 4, 2024)["row"].to_list()


def test_subsample_is_uniform_within_a_group():
    # Each of 10 rows should be kept with probability 3/10; 1000 seeds give sd ~0.0145 per row.
    frame = grouped_frame({"a": 10, "b": 4})
    hits = np.zeros(frame.height)
    seeds = range(1000)
    for seed in seeds:
        hits[subsample_per_group(frame, "group", 3, seed)["row"].to_numpy()] += 1
    freq = hits / len(seeds)
    is_a = (frame["group"] == "a").to_numpy()
    assert np.all(np.abs(freq[is_a] - 0.3) < 0.06)
    assert np.all(np.abs(freq[~is_a] - 0.75) < 0.07)
    assert hits[is_a].sum() == hits[~is_a].sum() == 3 * len(seeds)  # exactly 3 per group every time


def test_subsample_rejects_bad_arguments():
    frame = grouped_frame({"a": 3})
    with pytest.raises(ValueError, match="'nope'"):
        subsample_per_group(frame, "nope", 1, 0)
    for n in (-1, 1.5, True):
        with pytest.raises(ValueError, match="n must be"):
            subsample_per_group(frame, "group", n, 0)
