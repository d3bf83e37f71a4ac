"""Staging at cluster scale against the hub-compatible server on 127.0.0.1 (tests/hub_server.py, real HTTP): a
revision read only by weight rows fetches only the shard holding its layer; the preflight reads the hub's per-file
sha256 before any download (a substituted shard, a duplicate of the final revision, missing shards, too little free
space); a staged file changed on disk stops the next reader; a download killed mid-file resumes with a Range
request. Loopback only: nothing here reaches out."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hub_server import HubServer, pointed_at, save_tiny_revision

from wneurons.core.dynamics import CheckpointIntegrityError
from wneurons.lm import hub
from wneurons.lm.hub_integrity import staged_integrity
from wneurons.lm.hub_staging import stage
from wneurons.lm.models import load_staged
from wneurons.store import io, staged
from wneurons.store.checkpoints import read_weight_rows
from wneurons.store.staged import StagingError, staging_dir_problem, verify_staged

LAYER = 1  # training.cohorts.layer's default: the layer weight rows read
TENSOR = f"gpt_neox.layers.{LAYER}.mlp.dense_h_to_4h.weight"
SHARD_1, SHARD_2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
INDEX = "model.safetensors.index.json"


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """Sharded tiny gpt_neox revisions (2 shards; layer 1 in the second), by seed name."""
    root = tmp_path_factory.mktemp("saved")
    return {f"seed{s}": _files(save_tiny_revision(root / f"seed{s}", s, "sharded")) for s in (0, 1, 2)}


@pytest.fixture
def server(saved, tmp_path, monkeypatch):
    main = saved["seed2"]
    substituted = {**saved["seed1"], SHARD_1: main[SHARD_1]}  # EleutherAI/pythia#206: the final model's first shard
    broken = {n: d for n, d in saved["seed1"].items() if n != SHARD_2}  # the index names a shard that is not there
    with HubServer() as srv, pointed_at(srv, monkeypatch, tmp_path / "hf-home"):
        for repo, revisions in {
            "tiny/sharded": {"step0": saved["seed0"], "step1000": saved["seed1"], "main": main},
            "tiny/substituted": {"step0": saved["seed0"], "step1000": substituted, "main": main},
            "tiny/duplicate": {"step0": saved["seed0"], "step1000": main, "main": main},  # EleutherAI/pythia#205
            "tiny/missing-shard": {"step1000": broken, "main": main},
        }.items():
            for branch, files in revisions.items():
                srv.add_revision(repo, branch, files)
        yield srv


def _request(repo: str, revision: str, root: Path, layers=None) -> hub.StageRequest:
    model = repo.split("/")[1]
    return hub.StageRequest(model, repo, revision, str(root / model / revision), layers, "gpt_neox" if layers else None)


def _content_gets(server: HubServer, start: int = 0) -> list[str]:
    """Files whose content was downloaded (the CDN's LFS answers; plain files from the hub), from request ``start``."""
    return [p.split("file=")[1] for s, p, n in server.sent[start:] if s == "cdn" and n] + [
        p.rsplit("/", 1)[1] for s, p, n in server.sent[start:] if s == "hub" and n
    ]


# ---------------------------------------------------------------- fetch only what is read
def test_a_weight_rows_only_revision_downloads_only_the_shard_holding_its_layer(server, tmp_path):
    full = stage("tiny/sharded", "step1000", tmp_path / "full")
    full_bytes = server.bytes_sent()
    start = len(server.sent)
    part = stage("tiny/sharded", "step1000", tmp_path / "rows", layers=[LAYER], family="gpt_neox")
    rows_bytes = server.bytes_sent() - sum(n for _, _, n in server.sent[:start])
    index = json.loads(server.file("tiny/sharded", "step1000", INDEX))
    assert index["weight_map"][TENSOR] == SHARD_2
    # Downloaded: the config files, the index and the shard holding layer 1; not the other shard, nor the tokenizer.
    assert sorted(_content_gets(server, start)) == sorted(["config.json", "generation_config.json", INDEX, SHARD_2])
    assert sorted(part["files"]) == sorted(["config.json", "generation_config.json", INDEX, SHARD_2])
    shard_sizes = {n: len(server.file("tiny/sharded", "step1000", n)) for n in (SHARD_1, SHARD_2)}
    assert rows_bytes < full_bytes - shard_sizes[SHARD_1]
    print(f"\nbytes downloaded for step1000: all files {full_bytes:,}, weight rows only {rows_bytes:,}")
    # The manifest still describes the whole revision (its digest from the hub's metadata) and what was staged.
    assert part["weights_sha256"] == full["weights_sha256"] and part["weight_files"] == [SHARD_1, SHARD_2]
    assert part["staged_for"] == {"layers": [LAYER], "tensors": [TENSOR], "files": [SHARD_2]}
    assert part["staged_bytes"] < part["weights_bytes"] == sum(shard_sizes.values())
    # What weight rows read from it is what they read from the full staging.
    name, rows = read_weight_rows(tmp_path / "rows", [TENSOR])
    assert name == TENSOR and np.array_equal(rows, read_weight_rows(tmp_path / "full", [TENSOR])[1])
    assert verify_staged(tmp_path / "rows")["revision"] == "step1000"
    # Pruning removes what was staged; a model load of a weight-rows-only staging fails rather than half-loads.
    with pytest.raises(OSError, match=SHARD_1):
        load_staged(tmp_path / "rows")
    assert staged.prune(tmp_path / "rows")["pruned_files"] == [INDEX, SHARD_2]


def test_without_a_family_the_revisions_config_names_it(server, tmp_path):
    manifest = stage("tiny/sharded", "main", tmp_path / "rows", layers=[0])
    assert manifest["staged_for"]["files"] == [SHARD_1]  # layer 0 is in the first shard


# ---------------------------------------------------------------- preflight from the hub's file metadata
def test_the_preflight_names_a_substituted_shard_before_any_download(server, tmp_path):
    requests = [
        _request("tiny/substituted", r, tmp_path, [LAYER] if r == "step0" else None)
        for r in ("step0", "step1000", "main")
    ]
    problems, notes, needed = hub.staging_preflight(requests, tmp_path, finals={"substituted": "main"})
    assert notes == [] and len(problems) == 1, problems
    assert problems[0].startswith(
        f"substituted: checkpoints main, step1000 (the final revision) share {SHARD_1} (sha256 "
    )
    assert "training.integrity: error stops the run (drop would keep main, drop step1000)" in problems[0]
    assert server.bytes_sent(SHARD_1) == server.bytes_sent(SHARD_2) == 0  # nothing but the indexes was fetched
    assert _content_gets(server) == [INDEX] * 3
    sizes = {
        n: len(d)
        for n, d in server.repos["tiny/substituted"].commits[server.repos["tiny/substituted"].branches["main"]].items()
    }
    assert needed["substituted", "main"] == sum(sizes.values())
    assert needed["substituted", "step0"] < needed["substituted", "main"]  # weight rows only: one shard

    problems, notes, _ = hub.staging_preflight(requests, tmp_path, finals={"substituted": "main"}, mode="drop")
    assert problems == [] and len(notes) == 1 and notes[0].endswith("drop keeps main and drops step1000, on record")


def test_the_preflight_compares_with_revisions_already_staged(server, tmp_path):
    manifest = stage("tiny/duplicate", "main", tmp_path / "duplicate" / "main")
    requests = [
        _request("tiny/duplicate", "step1000", tmp_path, [LAYER]),
        _request("tiny/duplicate", "step0", tmp_path),
    ]
    problems, _, _ = hub.staging_preflight(
        requests, tmp_path, staged={"duplicate": {"main": manifest}}, finals={"duplicate": "main"}
    )
    assert len(problems) == 1 and problems[0].startswith(
        f"duplicate: checkpoints main, step1000 equal the final revision ({SHARD_1}, {SHARD_2}; sha256"
    ), problems


def test_the_preflight_names_missing_shards_and_a_staging_dir_too_small(server, tmp_path):
    requests = [_request("tiny/missing-shard", "step1000", tmp_path), _request("tiny/sharded", "main", tmp_path)]
    problems, _, needed = hub.staging_preflight(requests, tmp_path, disk_free=lambda d: 1000)
    assert len(problems) == 2, problems
    assert problems[0] == (
        f"missing-shard@step1000 (tiny/missing-shard): {INDEX} names shards the revision does not have: {SHARD_2}"
    )
    need = needed["sharded", "main"]
    assert problems[1].startswith(
        f"hub.staging_dir {tmp_path}: the 1 revision to stage need {need:,} bytes, 1,000 bytes"
    )
    assert server.bytes_sent(SHARD_1) == 0
    assert hub.free_bytes(tmp_path / "not" / "yet") == hub.free_bytes(tmp_path) > 0


def test_the_gate_on_staged_manifests_sees_a_substituted_shard_too(server, tmp_path):
    dirs = {r: tmp_path / r for r in ("step0", "step1000", "main")}
    stage("tiny/substituted", "step0", dirs["step0"])
    stage("tiny/substituted", "step1000", dirs["step1000"], layers=[LAYER], family="gpt_neox")  # shard 2 only
    stage("tiny/substituted", "main", dirs["main"])
    with pytest.raises(CheckpointIntegrityError, match=f"checkpoints main, step1000 .* share {SHARD_1}"):
        staged_integrity(dirs, "main")
    assert staged_integrity(dirs, "main", mode="drop")["dropped"] == ["step1000"]


def test_a_staging_dir_that_is_a_file_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    assert staging_dir_problem(tmp_path / "file") == (
        f"hub.staging_dir {tmp_path / 'file'} is a file, not a directory: point it at a directory"
    )
    assert "is under" in staging_dir_problem(tmp_path / "file" / "hub")
    assert staging_dir_problem(tmp_path / "new" / "hub") is None


# ---------------------------------------------------------------- a staged file changed on disk
def test_a_bit_flipped_in_a_staged_file_stops_the_next_reader_hashed_once_per_change(server, tmp_path, monkeypatch):
    out = tmp_path / "sharded" / "main"
    stage("tiny/sharded", "main", out)
    hashed = []
    real = io.sha256_file
    monkeypatch.setattr(io, "sha256_file", lambda path: hashed.append(Path(path).name) or real(path))
    load_staged(out)
    assert hashed == []  # as staging left them: the digests staging computed stand
    with open(out / SHARD_2, "r+b") as fh:  # one bit, same size
        fh.seek(4000)
        byte = fh.read(1)[0]
        fh.seek(4000)
        fh.write(bytes([byte ^ 0x01]))
    for _ in range(2):
        with pytest.raises(StagingError) as err:
            load_staged(out)
        assert str(err.value).startswith(f"{out / SHARD_2} (tiny/sharded@main) changed on disk since it was staged")
        assert "\n" not in str(err.value)
    assert hashed == [SHARD_2]  # once for this change, not once per reader
    with open(out / SHARD_2, "r+b") as fh:  # put back: the new modification time is hashed once more, and passes
        fh.seek(4000)
        fh.write(bytes([byte]))
    load_staged(out)
    load_staged(out)
    assert hashed == [SHARD_2, SHARD_2]


# ---------------------------------------------------------------- resuming inside a file across processes
def test_staging_killed_mid_file_resumes_with_a_range_request_and_verifies(server, tmp_path):
    out = tmp_path / "staged"
    part = tmp_path / ".staged.staging" / ".partial" / f"{SHARD_1}.part"
    server.throttle = 0.05  # 4 KiB per 50 ms: the 100 KB shard takes over a second
    code = (  # written to disk in 4 KiB chunks (the library's are 10 MB), so the kill lands mid-file
        "from huggingface_hub import constants; constants.DOWNLOAD_CHUNK_SIZE = 4096\n"
        f"from wneurons.lm.hub_staging import stage; stage('tiny/sharded', 'main', {str(out)!r})"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=os.environ.copy(), stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (part.is_file() and part.stat().st_size >= 16384) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = part.stat().st_size
    size = len(server.file("tiny/sharded", "main", SHARD_1))
    assert 16384 <= kept < size and not out.exists()

    server.throttle = None
    start = len(server.requests)
    manifest = stage("tiny/sharded", "main", out)
    ranges = [(p.split("file=")[1], r) for s, m, p, r in server.requests[start:] if s == "cdn" and m == "GET"]
    assert ranges[0] == (SHARD_1, f"bytes={kept}-") and all(r is None for _, r in ranges[1:]), ranges
    assert manifest["files"][SHARD_1]["sha256"] == io.sha256_file(out / SHARD_1)
    assert not part.exists() and verify_staged(out)["commit"] == server.repos["tiny/sharded"].branches["main"]


# ---------------------------------------------------------------- a killed collection's temporary directory
def test_a_new_write_sweeps_what_a_killed_writer_of_the_same_directory_left(tmp_path):
    target = tmp_path / "activations" / "m" / "step0"
    code = (
        "import os, signal\n"
        "from wneurons.store import io\n"
        f"with io.atomic_directory({str(target)!r}) as tmp:\n"
        "    (tmp / 'shard-0.bin').write_bytes(b'x' * 4096)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == -signal.SIGKILL
    left = sorted(p.name for p in target.parent.iterdir())
    assert len(left) == 1 and left[0].startswith(".step0.") and left[0].endswith(".tmp")  # the kill's leftover
    (target.parent / ".step0.old-notes.tmp").write_text("not a temporary of this writer")
    (target.parent / ".step1.0123abcd.tmp").mkdir()  # another revision's collection, maybe running: kept
    with io.atomic_directory(target) as tmp:
        (tmp / "shard-0.bin").write_bytes(b"y")
    assert sorted(p.name for p in target.parent.iterdir()) == [".step0.old-notes.tmp", ".step1.0123abcd.tmp", "step0"]
