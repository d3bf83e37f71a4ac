"""Tests for wneurons.store.data's fetching with verification: checksum files, the local / URL-template / zip
sources, and the shared data folder against resources/checksums.

Synthetic fixtures are built in tmp_path; tests on the real data read the shared data folder
(``WNEURONS_SHARED_DATA`` overrides its location; tests/shared_data.py) and skip when it is absent.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
from shared_data import shared

from wneurons.store.data import PUBLIC_SOURCES, SOURCE_FILE, ChecksumError, fetch_dataset, read_checksums
from wneurons.store.io import sha256_file, sha256_files

CHECKSUMS = Path(__file__).resolve().parents[1] / "resources" / "checksums"
# checksum file stem -> folder of the shared data holding exactly those files
SHARED_DIRS = {
    "blimp": "blimp/data",
    "tse-pickle": "tse/pickle/EMNLP2018",
    "tse-jsonl": "tse/jsonl/EMNLP2018",
    "wikitext-2": "wikitext-2/raw",
}


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
