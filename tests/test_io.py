"""Atomic outputs: complete or absent, and created with the user's umask (results readable by the group)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from wneurons.store import io


@pytest.fixture(params=[0o022, 0o027, 0o002], ids=["umask022", "umask027", "umask002"])
def umask(request):
    """Run the test under a umask (set process-wide, restored after)."""
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_files_written_atomically_get_mode_0666_less_the_umask(tmp_path, umask):
    io.write_json(tmp_path / "a" / "summary.json", {"x": 1})
    io.write_parquet(tmp_path / "table.parquet", pl.DataFrame({"x": [1, 2]}))
    with io.atomic_output(tmp_path / "rows.npy") as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.zeros(3))
    for name in ("a/summary.json", "table.parquet", "rows.npy"):
        assert _mode(tmp_path / name) == 0o666 & ~umask, name


def test_directories_written_atomically_get_mode_0777_less_the_umask(tmp_path, umask):
    with io.atomic_directory(tmp_path / "shards") as tmp:
        (tmp / "part.bin").write_bytes(b"x")
    assert _mode(tmp_path / "shards") == 0o777 & ~umask
    # Replacing an existing directory keeps the new one's mode and leaves no sibling behind.
    with io.atomic_directory(tmp_path / "shards") as tmp:
        (tmp / "other.bin").write_bytes(b"y")
    assert _mode(tmp_path / "shards") == 0o777 & ~umask
    assert [p.name for p in (tmp_path / "shards").iterdir()] == ["other.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shards"]


def test_a_failed_write_leaves_neither_the_target_nor_a_temporary(tmp_path):
    with pytest.raises(RuntimeError), io.atomic_output(tmp_path / "x.json") as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    with pytest.raises(RuntimeError), io.atomic_directory(tmp_path / "d") as tmp:
        (tmp / "half").write_text("half")
        raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []


def test_stale_temporaries_of_the_same_target_are_removed(tmp_path):
    stale = tmp_path / ".x.json.abcd1234.json.tmp"
    stale.write_text("left by a killed job")
    io.write_json(tmp_path / "x.json", [1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


def test_concurrent_writers_of_one_directory_get_distinct_temporaries(tmp_path):
    # Jobs of one process (wneurons.jobs.inprocess) write in threads: names must not collide, and no writer may
    # change the process umask under another.
    errors = []

    def write(i: int) -> None:
        try:
            for j in range(20):
                io.write_json(tmp_path / f"out{i}_{j}.json", {"i": i, "j": j})
        except Exception as err:  # noqa: BLE001 - collected and asserted below
            errors.append(err)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(list(tmp_path.glob("out*.json"))) == 80
    assert not list(tmp_path.glob(".*"))


def test_replace_directory_moves_a_sibling_over_an_existing_one(tmp_path):
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "old").write_text("old")
    (tmp_path / ".target.new").mkdir()
    (tmp_path / ".target.new" / "new").write_text("new")
    io.replace_directory(tmp_path / ".target.new", tmp_path / "target")
    assert [p.name for p in tmp_path.iterdir()] == ["target"]
    assert (tmp_path / "target" / "new").read_text() == "new"


def test_an_atomic_write_is_flushed_before_its_rename_and_the_rename_after(tmp_path, monkeypatch):
    synced, real_fsync = [], os.fsync
    monkeypatch.setattr(io.os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real_fsync(fd))
    target = tmp_path / "out" / "result.json"
    with io.atomic_output(target) as tmp:
        tmp.write_text("{}")
    assert target.read_text() == "{}"
    assert synced == [str(tmp), str(target.parent)]  # the data, then the directory entry of the rename
