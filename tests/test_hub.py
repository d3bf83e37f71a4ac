"""Staging, preflight, pruning and the integrity gate against a hub-compatible server on 127.0.0.1 (real HTTP,
the real huggingface_hub / transformers clients; tests/hub_server.py). Loopback only: nothing here reaches out."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import time
from pathlib import Path

import pytest
import torch
from hub_server import HubServer, pointed_at, save_tiny_revision, tiny_tokenizer

from wneurons.core.dynamics import CheckpointIntegrityError
from wneurons.lm import hub
from wneurons.lm.hub_files import weight_files
from wneurons.lm.hub_integrity import staged_integrity
from wneurons.lm.hub_staging import stage
from wneurons.lm.models import load_model, load_staged
from wneurons.store.io import sha256_files
from wneurons.store.staged import MANIFEST, StagingError, is_staged, prune, read_manifest, verify_staged

SEEDS = {"step0": 0, "step1000": 1, "main": 2}
GRANTED = "hf_granted_secret_0123456789"  # a gated repo's authorized token (never to be printed)
# huggingface_hub writes a download in chunks of DOWNLOAD_CHUNK_SIZE (10 MB) and resumes a dropped transfer from
# the last whole chunk; the tiny files here are chunked smaller, so that a drop mid-file resumes mid-file.
CHUNK = 8192


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[tuple[str, str], Path]:
    """Tiny gpt_neox revisions saved once for the module: (layout, revision) -> directory."""
    root = tmp_path_factory.mktemp("saved")
    layouts = {
        ("safetensors", "step0"): ("safetensors", 0),
        ("safetensors", "step1000"): ("safetensors", 1),
        ("both", "main"): ("both", 2),
        ("sharded", "main"): ("sharded", 2),
        ("bin", "step0"): ("bin", 0),
    }
    return {
        key: save_tiny_revision(root / f"{key[0]}-{key[1]}", seed, weights) for key, (weights, seed) in layouts.items()
    }


@pytest.fixture
def server(saved, tmp_path, monkeypatch):
    """A started server holding the test repos, with huggingface_hub pointed at it."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", CHUNK)
    with HubServer() as srv, pointed_at(srv, monkeypatch, tmp_path / "hf-home"):
        srv.add_revision("tiny/neox", "step0", saved["safetensors", "step0"])
        srv.add_revision("tiny/neox", "step1000", saved["safetensors", "step1000"])
        srv.add_revision("tiny/neox", "main", saved["both", "main"])
        srv.add_revision("tiny/neox-sharded", "main", saved["sharded", "main"])
        srv.add_revision("tiny/neox-bin", "step0", saved["bin", "step0"])
        srv.add_revision("tiny/neox-bin", "main", saved["bin", "step0"])
        # A step branch re-uploaded with the final weights (Pythia #108-style): equal to main.
        srv.add_revision("tiny/neox-dup", "step0", saved["safetensors", "step0"])
        srv.add_revision("tiny/neox-dup", "step1000", saved["both", "main"])
        srv.add_revision("tiny/neox-dup", "main", saved["both", "main"])
        srv.add_revision("gated/neox", "main", saved["safetensors", "step0"], gated=True, tokens=(GRANTED,))
        yield srv


@pytest.fixture
def cut_network(monkeypatch):
    """``cut_network()``: from then on every socket connection attempt is refused, and recorded in the list
    it returns."""

    def arm() -> list:
        attempts = []

        def refuse(self, address, *args, **kwargs):
            attempts.append(address)
            raise ConnectionRefusedError(f"no network in this test: {address}")

        monkeypatch.setattr(socket.socket, "connect", refuse)
        monkeypatch.setattr(socket.socket, "connect_ex", refuse)
        return attempts

    return arm


def _logits(model: torch.nn.Module, tokenizer) -> torch.Tensor:
    ids = torch.tensor([tokenizer("the dogs bark on a table").input_ids])
    with torch.inference_mode():
        return model(input_ids=ids).logits


def _expected_logits(seed: int) -> torch.Tensor:
    from conftest import build_tiny_model

    return _logits(build_tiny_model("gpt_neox", seed=seed), tiny_tokenizer())


def _staged_files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


# ---------------------------------------------------------------- staging, then loading with no hub
@pytest.mark.parametrize(
    ("repo", "revision", "weights"),
    [
        ("tiny/neox", "step1000", ["model.safetensors"]),
        ("tiny/neox", "main", ["model.safetensors"]),  # has .bin too: safetensors only are fetched
        ("tiny/neox-sharded", "main", None),  # index + every shard it names
        ("tiny/neox-bin", "step0", ["pytorch_model.bin"]),
    ],
    ids=["single", "prefers-safetensors", "sharded", "bin-only"],
)
def test_stage_then_load_with_the_hub_stopped(server, tmp_path, cut_network, repo, revision, weights):
    out = tmp_path / "staged" / repo.replace("/", "--") / revision
    manifest = stage(repo, revision, out)
    commit = server.repos[repo].branches[revision]
    assert manifest["commit"] == commit
    assert read_manifest(out) == manifest
    if weights is None:  # sharded: the index first, then its shards
        index = json.loads(server.file(repo, revision, "model.safetensors.index.json"))
        weights = sorted(set(index["weight_map"].values()))
        assert len(weights) > 1
        assert "model.safetensors.index.json" in manifest["files"]
    assert manifest["weight_files"] == weights
    # The weight digest is store.io.sha256_files' over the files on disk, as weight_rows records it today.
    assert manifest["weights_sha256"] == sha256_files([out / n for n in weights])
    # Exactly what a load needs, and every file's recorded sha256 is the server's.
    assert _staged_files(out) == sorted([MANIFEST, *manifest["files"]])
    assert "pytorch_model.bin" not in manifest["files"] or weights == ["pytorch_model.bin"]
    for name, record in manifest["files"].items():
        assert record["sha256"] == hashlib.sha256(server.file(repo, revision, name)).hexdigest(), name
    # Pinned: every file was fetched at the commit, not at the branch name (which may move meanwhile).
    resolves = [path for srv, _, path, _ in server.requests if srv == "hub" and "/resolve/" in path]
    assert resolves and all(f"/resolve/{commit}/" in path for path in resolves)

    server.stop()  # no route to the hub; and any connection attempt at all is refused and recorded
    attempts = cut_network()
    model, tokenizer, provenance = load_staged(out)
    assert attempts == []
    assert provenance == {
        "hub_id": repo,
        "revision": revision,
        "commit": commit,
        "weights_sha256": manifest["weights_sha256"],
    }
    assert torch.equal(_logits(model, tokenizer), _expected_logits(SEEDS[revision]))


def test_staged_directory_and_files_get_the_users_umask(server, tmp_path):
    previous = os.umask(0o027)
    try:
        stage("tiny/neox", "step0", tmp_path / "staged")
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [tmp_path / "staged", *(tmp_path / "staged").iterdir()]}
    assert modes.pop("staged") == 0o750
    assert set(modes.values()) == {0o640}, modes


def test_a_dropped_transfer_leaves_nothing_that_looks_staged_and_a_rerun_resumes_the_file(server, tmp_path):
    size = len(server.file("tiny/neox", "step1000", "model.safetensors"))
    server.drop_transfer("tiny/neox", "step1000", "model.safetensors", at=size // 2)
    out = tmp_path / "staged"
    with pytest.raises(Exception, match="(?i)peer closed|incomplete|connection"):
        stage("tiny/neox", "step1000", out)
    assert not out.exists()
    assert not list(tmp_path.rglob(MANIFEST))
    # The bytes received are kept, in the hidden work directory only, under a name no load reads.
    partial = [p for p in tmp_path.rglob("*model.safetensors*") if p.is_file()]
    assert [p.relative_to(tmp_path) for p in partial] == [Path(".staged.staging/.partial/model.safetensors.part")]
    kept = partial[0].stat().st_size
    assert 0 < kept <= size // 2
    fetched = server.gets("config.json")

    server.clear_failures()
    before = len(server.requests)
    manifest = stage("tiny/neox", "step1000", out)
    assert server.gets("config.json") == fetched  # kept from the failed attempt, not fetched again
    ranges = [r for srv, method, _, r in server.requests[before:] if srv == "cdn" and method == "GET"]
    assert ranges == [f"bytes={kept}-"]  # the rest of the file only
    assert manifest["files"]["model.safetensors"]["size"] == size
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "hf-home") == ["staged"]


def test_a_transfer_dropped_once_resumes_with_a_range_request(server, tmp_path):
    size = len(server.file("tiny/neox", "step0", "model.safetensors"))
    server.drop_transfer("tiny/neox", "step0", "model.safetensors", at=size // 3, times=1)
    manifest = stage("tiny/neox", "step0", tmp_path / "staged")
    ranges = [r for srv, method, _, r in server.requests if srv == "cdn" and method == "GET" and r]
    assert ranges == [f"bytes={size // 3 // CHUNK * CHUNK}-"]  # from the last whole chunk received
    assert manifest["files"]["model.safetensors"]["size"] == size


def test_a_file_that_differs_from_the_hubs_metadata_is_refused(server, tmp_path):
    server.corrupt("tiny/neox", "step0", "model.safetensors")
    with pytest.raises(StagingError, match="model.safetensors sha256 .* differs from the hub's"):
        stage("tiny/neox", "step0", tmp_path / "staged")
    assert not (tmp_path / "staged").exists()
    server.clear_failures()  # the bad file was not kept: the next attempt fetches it again, and succeeds
    assert stage("tiny/neox", "step0", tmp_path / "staged")["commit"]
    server.corrupt("tiny/neox", "step0", "config.json")
    with pytest.raises(StagingError, match="config.json git blob .* differs"):
        stage("tiny/neox", "step0", tmp_path / "other")
    assert not (tmp_path / "other").exists()


def test_a_gated_repo_stages_with_a_granted_token_which_never_leaves_the_hub_nor_is_written(server, tmp_path):
    manifest = stage("gated/neox", "main", tmp_path / "staged", token=GRANTED)
    assert manifest["commit"] == server.repos["gated/neox"].branches["main"]
    assert server.cdn_authorizations == []  # the LFS redirect's other origin never saw the token
    assert any(srv == "cdn" for srv, *_ in server.requests)
    for path in (tmp_path / "staged").rglob("*"):
        assert GRANTED.encode() not in path.read_bytes()


def test_stage_refuses_files_the_revision_lacks(server, tmp_path):
    with pytest.raises(StagingError, match="has no model.safetensors"):
        stage("tiny/neox-bin", "step0", tmp_path / "staged", files=["config.json", "model.safetensors"])


# ---------------------------------------------------------------- preflight
def test_preflight_one_line_per_bad_model_fast_and_without_the_token(server):
    models = [
        ("pythia-tiny", "tiny/neox", "main"),
        ("pythia-tiny", "tiny/neox", "step1000"),
        ("pythia-tiny-typo", "tiny/neox", "step999"),
        ("llama-gated", "gated/neox", "main"),
        ("no-such", "tiny/no-such-repo", "main"),
    ]
    wrong = "hf_wrong_secret_9876543210"
    started = time.monotonic()
    problems = hub.preflight(models, token=wrong)
    elapsed = time.monotonic() - started
    assert elapsed < 3, elapsed  # the library's retries would take 48 s on an unreachable hub
    assert len(problems) == 3, problems
    typo, gated, missing = problems
    assert typo.startswith("pythia-tiny-typo: tiny/neox has no revision step999 (nearest: step0, step1000")
    assert gated.startswith("llama-gated: gated/neox is gated and the token given has no access yet")
    assert f"{server.url}/gated/neox" in gated and "HF_TOKEN" in gated and "huggingface-cli login" in gated
    assert missing.startswith("no-such: no repository tiny/no-such-repo")
    assert not any(wrong in line for line in problems)

    assert hub.preflight(models[:2] + [("llama-gated", "gated/neox", "main")], token=GRANTED) == []
    no_token = hub.preflight([("llama-gated", "gated/neox", "main")])
    assert len(no_token) == 1 and "no token was given" in no_token[0]


def test_preflight_names_the_unreachable_host_once_and_asks_no_more(server):
    host = server.url.removeprefix("http://")
    server.stop()
    started = time.monotonic()
    problems = hub.preflight([("a", "tiny/neox", "main"), ("b", "tiny/neox-bin", "step0")], token=GRANTED)
    assert time.monotonic() - started < 3
    assert len(problems) == 1
    assert problems[0].startswith(f"hub {host} unreachable from this machine")
    assert "could not check 2 model revisions (a@main, b@step0)" in problems[0]
    assert "Stage them on a machine that reaches" in problems[0]
    assert GRANTED not in problems[0]


def test_preflight_gives_up_after_one_timeout_on_a_hub_that_never_answers(server):
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts connections, never answers
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        problems = hub.preflight(
            [("a", "tiny/neox", "main"), ("b", "tiny/other", "main")], endpoint=endpoint, timeout=0.5
        )
        elapsed = time.monotonic() - started
    assert len(problems) == 1 and "unreachable" in problems[0] and "Timeout" in problems[0], problems
    assert elapsed < 1.5, elapsed  # one request timed out; nothing retried, the second repo not asked


def test_weight_files_prefers_safetensors_and_follows_the_shard_index():
    index = {"weight_map": {"a": "model-00002-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"}}
    sharded = ["model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert weight_files([*sharded, "pytorch_model.bin"], lambda name: index) == sharded  # index, then shards
    assert weight_files(["pytorch_model.bin", "config.json"], lambda name: index) == ["pytorch_model.bin"]
    with pytest.raises(StagingError, match="names shards the revision does not have: model-00002"):
        weight_files(sharded[:2], lambda name: index)
    with pytest.raises(StagingError, match="no weights"):
        weight_files(["config.json", "consolidated.safetensors"], lambda name: index)


def test_preflight_has_nothing_to_ask_when_everything_is_staged(server, tmp_path):
    stage("tiny/neox", "step0", tmp_path / "step0")
    assert is_staged(tmp_path / "step0", "tiny/neox", "step0")
    assert not is_staged(tmp_path / "step0", "tiny/neox", "main")
    server.stop()
    assert hub.preflight([]) == []


# ---------------------------------------------------------------- pruning and the integrity gate
def test_prune_removes_the_weights_keeps_the_manifest_and_loading_then_refuses(server, tmp_path):
    out = tmp_path / "staged"
    staged = stage("tiny/neox-sharded", "main", out)
    mtimes = [p.stat().st_mtime_ns for p in (out, out / MANIFEST)]
    pruned = prune(out)
    assert [p.stat().st_mtime_ns for p in (out, out / MANIFEST)] == mtimes  # Snakemake sees no newer input
    assert pruned["pruned"] is True
    assert pruned["weights_sha256"] == staged["weights_sha256"]
    assert pruned["pruned_bytes"] == sum(staged["files"][n]["size"] for n in pruned["pruned_files"])
    left = _staged_files(out)
    assert not any(n.endswith((".safetensors", ".index.json")) for n in left)
    assert "config.json" in left and MANIFEST in left
    assert prune(out) == pruned  # idempotent
    assert verify_staged(out, weights=False)["pruned"] is True
    with pytest.raises(StagingError, match="pruned"):
        load_staged(out)


def test_the_integrity_gate_names_a_step_equal_to_main_or_drops_it_on_record(server, tmp_path):
    staged = {}
    for revision in ("step0", "step1000", "main"):
        stage("tiny/neox-dup", revision, tmp_path / revision)
        staged[revision] = tmp_path / revision
    prune(staged["step0"])  # a pruned revision still has its digest
    with pytest.raises(CheckpointIntegrityError, match="checkpoints main, step1000 equal the final revision"):
        staged_integrity(staged, "main")
    record = staged_integrity(staged, "main", mode="drop", out_path=tmp_path / "integrity.json")
    assert record["dropped"] == ["step1000"]
    assert record["commits"]["step1000"] != record["commits"]["main"]  # different commits, identical weights
    assert json.loads((tmp_path / "integrity.json").read_text())["dropped"] == ["step1000"]
    clean = {r: staged[r] for r in ("step0", "main")}
    assert staged_integrity(clean, "main")["problems"] == []


def test_loading_an_unstaged_directory_says_to_stage_it(tmp_path):
    with pytest.raises(StagingError, match="not staged"):
        load_staged(tmp_path)


# ---------------------------------------------------------------- the external conversion request
def test_a_bin_only_hub_load_starts_no_safetensors_conversion_request(server, monkeypatch):
    import transformers.modeling_utils

    calls = []
    # Stands in for the request to the external conversion service: recorded, never sent.
    monkeypatch.setattr(transformers.modeling_utils, "auto_conversion", lambda *a, **k: calls.append(a))
    monkeypatch.delenv("DISABLE_SAFETENSORS_CONVERSION", raising=False)
    model, tokenizer = load_model(hub_id="tiny/neox-bin", revision="step0")
    assert os.environ["DISABLE_SAFETENSORS_CONVERSION"] == "1"
    assert calls == []
    assert torch.equal(_logits(model, tokenizer), _expected_logits(0))


# ---------------------------------------------------------------- the workflow's side: paths and targets
def _paper_config(tmp_path) -> dict:
    import yaml

    from wneurons.experiment.config import validate_config

    root = Path(__file__).resolve().parents[1]
    cfg = yaml.safe_load((root / "config/config.yaml").read_text())
    for spec in cfg["data"].values():
        spec["local_dir"] = str(tmp_path)
    return validate_config(cfg, root / "workflow/schemas/config.schema.yaml", root)


def test_the_path_table_spells_the_manifest_as_staging_writes_it():
    from wneurons.experiment import paths

    assert paths.STAGED_MANIFEST == MANIFEST
    assert paths.staged_manifest("m", "step0") == f"{paths.STAGED}/m/step0/{MANIFEST}"
    assert paths.staged_dir("m", "step0", "/scratch/hub") == "/scratch/hub/m/step0"
    assert paths.pruned_record("m", "step0", "/scratch/hub") == "/scratch/hub/m/step0.pruned.json"


def test_every_hub_revision_of_the_grid_is_staged_and_checkpoints_pruned_after_their_readers(tmp_path):
    from wneurons.experiment import paths, targets

    paper = _paper_config(tmp_path)
    assert targets.staging_root(paper) == paths.STAGED
    staged = targets.staged_revisions(paper)
    assert len(staged) == len(set(staged)) == 8 * 26 + 4  # 8 Pythias x 26 revisions; 4 models at their main
    assert ("llama-3.1-8b", "meta-llama/Llama-3.1-8B", "main") in staged
    m = "pythia-1.4b"
    assert targets.pruned_revisions(paper, m) == [r for r in targets.hub_revisions(paper, m) if r != "step143000"]
    # A checkpoint with statistics: its neuron table and aggregates; a weight-grid step: its weight rows only.
    assert targets.weight_readers(paper, m, "step1000") == [
        paths.neurons(m, "step1000"),
        *(paths.aggregate(m, "step1000", b) for b in ("blimp", "tse", "ppl")),
    ]
    assert targets.weight_readers(paper, m, "step10000") == [paths.weight_rows(m, "step10000")]
    final = targets.weight_readers(paper, m, "step143000")
    assert paths.weight_rows(m, "step143000") in final and paths.pair_sample(m, "step143000") in final
    assert len(targets.prune_targets(paper)) == 8 * 25
    paper["hub"]["prune"] = "all"
    assert len(targets.prune_targets(paper)) == 8 * 26 + 4
    paper["hub"]["prune"] = "none"
    assert targets.prune_targets(paper) == []
