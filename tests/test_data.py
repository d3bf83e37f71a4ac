"""Tests for wneurons.store.data: fetching with verification, the BLiMP / TSE / WikiText-2 readers, subsampling.

Synthetic fixtures are built in tmp_path; tests on the real data read the shared data folder
(``WNEURONS_SHARED_DATA`` overrides its location) and skip when it is absent.
"""

from __future__ import annotations

import json
import os
import pickle
import pickletools
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from wneurons.store.data import (
    PUBLIC_SOURCES,
    SOURCE_FILE,
    TSE_FAMILIES,
    ChecksumError,
    fetch_dataset,
    load_blimp,
    load_tse,
    load_wikitext,
    read_checksums,
    subsample_per_group,
)
from wneurons.store.io import sha256_file, sha256_files

SHARED_DATA = Path(os.environ.get("WNEURONS_SHARED_DATA", "/work/shared/data"))
CHECKSUMS = Path(__file__).resolve().parents[1] / "resources" / "checksums"
# checksum file stem -> folder of the shared data holding exactly those files
SHARED_DIRS = {
    "blimp": "blimp/data",
    "tse-pickle": "tse/pickle/EMNLP2018",
    "tse-jsonl": "tse/jsonl/EMNLP2018",
    "wikitext-2": "wikitext-2/raw",
}


def shared(relative: str) -> Path:
    """A path inside the shared data folder; skips the test when it is absent."""
    path = SHARED_DATA / relative
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    return path


# ------------------------------------------------------------------------------------------- checksums


def test_read_checksums_parses_sha256sum_format(tmp_path):
    a, b = "ab" * 32, "CD" * 32
    path = tmp_path / "x.sha256"
    path.write_text(f"{a}  a.jsonl\n\n{b} *b c.raw\n")
    assert read_checksums(path) == {"a.jsonl": a, "b c.raw": b.lower()}


@pytest.mark.parametrize(
    "bad_line",
    ["not-a-digest  a.jsonl", "ab" * 31 + "  short.jsonl", "ab" * 32 + "a.jsonl", "ab" * 32 + "  a.jsonl"],
)
def test_read_checksums_names_file_and_line_of_a_malformed_or_duplicate_entry(tmp_path, bad_line):
    path = tmp_path / "x.sha256"
    path.write_text("ab" * 32 + "  a.jsonl\n" + bad_line + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}:2")):
        read_checksums(path)


@pytest.mark.parametrize("stem", sorted(SHARED_DIRS))
def test_checksum_files_name_exactly_the_shared_files(stem):
    checksums = read_checksums(CHECKSUMS / f"{stem}.sha256")
    folder = shared(SHARED_DIRS[stem])
    suffix = Path(next(iter(checksums))).suffix
    assert set(checksums) == {p.name for p in folder.glob(f"*{suffix}")}


# ------------------------------------------------------------------------------------------------ fetch


@pytest.fixture
def source(tmp_path):
    """A flat source folder of three small files and their checksums."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "upstream"
    folder.mkdir()
    for name, size in [("a.jsonl", 1000), ("b.jsonl", 1), ("c d.raw", 70_000)]:
        (folder / name).write_bytes(rng.bytes(size))
    return folder, {p.name: sha256_file(p) for p in folder.iterdir()}


def make_zip(folder: Path, names: list[str], path: Path, extra: dict[str, bytes] | None = None) -> Path:
    """A zip shaped like the WikiText-2 one: members under a top folder, a folder entry, ``extra`` members."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("top/", b"")
        for name in names:
            zf.write(folder / name, f"top/{name}")
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return path


def source_kwargs(kind: str, folder: Path, checksums: dict[str, str], tmp_path: Path) -> dict:
    """fetch_dataset keyword arguments that read ``folder`` as a local dir, URL template or zip archive."""
    if kind == "local":
        return {"local_dir": str(folder), "url": None}
    if kind == "template":
        return {"local_dir": None, "url": folder.as_uri() + "/{file}"}
    archive = make_zip(folder, sorted(checksums), tmp_path / "archive.zip")
    return {"local_dir": None, "url": archive.as_uri(), "archive_sha256": sha256_file(archive)}


def assert_fetched(dest: Path, folder: Path, checksums: dict[str, str], record: dict, source: str) -> None:
    assert sorted(p.name for p in dest.iterdir()) == sorted([*checksums, SOURCE_FILE])
    for name in checksums:
        assert (dest / name).read_bytes() == (folder / name).read_bytes()
    assert record == {
        "source": source,
        "files": checksums,
        "sha256": sha256_files([folder / name for name in checksums]),
    }
    assert json.loads((dest / SOURCE_FILE).read_text()) == record


def leftovers(parent: Path) -> list[str]:
    """Hidden build / backup folders that a fetch must never leave behind."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_fetch_copies_from_local_dir_and_records_provenance(source, tmp_path):
    folder, checksums = source
    dest = tmp_path / "out" / "data"
    # A local mirror wins over the URL, which here does not even exist.
    record = fetch_dataset(dest, checksums, local_dir=str(folder), url=(tmp_path / "nowhere").as_uri() + "/{file}")
    assert_fetched(dest, folder, checksums, record, f"local:{folder.resolve()}")
    assert leftovers(dest.parent) == []


def test_fetch_downloads_each_file_from_url_template(source, tmp_path):
    folder, checksums = source
    url = folder.as_uri() + "/{file}"
    # local_dir that does not exist: fall back to the URL
    record = fetch_dataset(tmp_path / "data", checksums, local_dir=str(tmp_path / "absent"), url=url)
    assert_fetched(tmp_path / "data", folder, checksums, record, f"url:{url}")


def test_fetch_extracts_only_named_members_from_zip_archive(source, tmp_path):
    folder, checksums = source
    archive = make_zip(folder, sorted(checksums), tmp_path / "a.zip", extra={"top/wiki.train.raw": b"x"})
    url = archive.as_uri()
    record = fetch_dataset(tmp_path / "data", checksums, local_dir=None, url=url, archive_sha256=sha256_file(archive))
    assert_fetched(tmp_path / "data", folder, checksums, record, f"url:{url}")
    # without a pinned archive digest the members are still verified one by one
    fetch_dataset(tmp_path / "data2", checksums, local_dir=None, url=url)
    assert_fetched(tmp_path / "data2", folder, checksums, record, f"url:{url}")


@pytest.mark.parametrize("kind", ["local", "template", "zip"])
def test_checksum_mismatch_names_file_and_leaves_nothing(source, tmp_path, kind):
    folder, checksums = source
    wrong = {**checksums, "b.jsonl": "0" * 64}
    dest = tmp_path / "out" / "data"
    dest.parent.mkdir()
    with pytest.raises(ChecksumError) as info:
        fetch_dataset(dest, wrong, **source_kwargs(kind, folder, checksums, tmp_path))
    err = info.value
    assert isinstance(err, ValueError)
    assert (err.name, err.expected, err.actual) == ("b.jsonl", "0" * 64, checksums["b.jsonl"])
    assert all(s in str(err) for s in ("b.jsonl", "0" * 64, checksums["b.jsonl"]))
    assert not dest.exists()
    assert leftovers(dest.parent) == []


@pytest.mark.parametrize("damage", ["truncate", "flip_byte"])
@pytest.mark.parametrize("kind", ["local", "template", "zip"])
def test_truncated_or_corrupted_source_file_is_detected(source, tmp_path, kind, damage):
    folder, checksums = source
    target = folder / "c d.raw"
    data = bytearray(target.read_bytes())
    if damage == "truncate":
        del data[len(data) // 2 :]
    else:
        data[12345] ^= 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match="c d.raw"):
        fetch_dataset(tmp_path / "data", checksums, **source_kwargs(kind, folder, checksums, tmp_path))
    assert not (tmp_path / "data").exists()


def test_archive_digest_mismatch_names_the_archive(source, tmp_path):
    folder, checksums = source
    archive = make_zip(folder, sorted(checksums), tmp_path / "a.zip")
    with pytest.raises(ChecksumError, match=re.escape(archive.as_uri())):
        fetch_dataset(tmp_path / "data", checksums, local_dir=None, url=archive.as_uri(), archive_sha256="1" * 64)
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("kind", ["local", "template", "zip"])
def test_missing_file_in_source_is_named(source, tmp_path, kind):
    folder, checksums = source
    kwargs = source_kwargs(kind, folder, {k: v for k, v in checksums.items() if k != "b.jsonl"}, tmp_path)
    (folder / "b.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="b.jsonl"):
        fetch_dataset(tmp_path / "data", checksums, **kwargs)
    assert not (tmp_path / "data").exists()


def test_no_source_names_both(tmp_path):
    absent = tmp_path / "absent"
    with pytest.raises(FileNotFoundError, match=re.escape(str(absent)) + ".*url"):
        fetch_dataset(tmp_path / "data", {"a": "0" * 64}, local_dir=str(absent), url=None)


def test_url_that_is_neither_template_nor_zip_is_refused(source, tmp_path):
    folder, checksums = source
    with pytest.raises(ValueError, match="{file}"):
        fetch_dataset(tmp_path / "data", checksums, local_dir=None, url=folder.as_uri())


@pytest.mark.parametrize("name", ["../evil", "sub/a.jsonl", SOURCE_FILE, ""])
def test_checksum_names_that_are_not_plain_file_names_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match="plain file name"):
        fetch_dataset(tmp_path / "data", {name: "0" * 64}, local_dir=str(tmp_path), url=None)


def test_refetch_replaces_previous_fetch_but_never_foreign_folder(source, tmp_path):
    folder, checksums = source
    dest = tmp_path / "data"
    fetch_dataset(dest, checksums, local_dir=str(folder), url=None)
    (dest / "stale.txt").write_text("from an older fetch")
    fetch_dataset(dest, checksums, local_dir=str(folder), url=None)
    assert not (dest / "stale.txt").exists()
    assert leftovers(tmp_path) == []

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError, match=re.escape(str(foreign))):
        fetch_dataset(foreign, checksums, local_dir=str(folder), url=None)
    assert (foreign / "notes.txt").read_text() == "keep"


@pytest.mark.parametrize("stem", sorted(SHARED_DIRS))
def test_fetch_real_data_from_shared_folder(tmp_path, stem):
    checksums = read_checksums(CHECKSUMS / f"{stem}.sha256")
    folder = shared(SHARED_DIRS[stem])
    record = fetch_dataset(tmp_path / stem, checksums, local_dir=str(folder), url=None)
    assert record["files"] == checksums


def test_public_sources_pin_the_manifest_commits():
    assert set(PUBLIC_SOURCES) <= {p.stem for p in CHECKSUMS.glob("*.sha256")}
    for entry in PUBLIC_SOURCES.values():
        assert "{file}" in entry["url"] or (entry["url"].endswith(".zip") and entry["archive_sha256"])
    for stem, manifest in [("blimp", "blimp"), ("tse-pickle", "tse")]:
        text = shared(f"{manifest}/MANIFEST.txt").read_text()
        commit = re.search(r"^SOURCE COMMIT: ([0-9a-f]{40})", text, re.M).group(1)
        assert f"/{commit}/" in PUBLIC_SOURCES[stem]["url"]
    text = shared("wikitext-2/MANIFEST.txt").read_text()
    assert f"archive sha256 {PUBLIC_SOURCES['wikitext-2']['archive_sha256']}" in text


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
