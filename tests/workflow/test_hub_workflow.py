"""Hub models through the real Snakefile, against the hub-compatible server on 127.0.0.1 (tests/hub_server.py):
staged first, on this machine; then statistics, scoring and the training dynamics of a tiny Pythia-shaped repo run
with the hub stopped (no route to it at all), locally and under profiles/slurm on the localhost cluster
(.ci/slurm/README.md; those are marked `cluster`); checkpoint weights pruned once read; results readable by the group.
The preflight stops a run before any job with one line per bad model; the integrity gate reads the staged manifests.
Loopback only: nothing here reaches out."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from hub_server import HubServer, pointed_at
from slurm_cluster import PROFILES
from tiny_project import (
    SCORED_BENCHMARKS,
    capability_suite,
    make_tiny_project,
    snakemake,
    snakemake_command,
    tiny_config,
    word_tokenizer,
)

from wneurons.experiment import paths
from wneurons.experiment.grid import CAPABILITY
from wneurons.store.lmeval_tasks import ITEMS_FILE
from wneurons.store.staged import read_manifest, verify_staged

pytestmark = pytest.mark.slow

MODEL, REPO_ID, FINAL = "tiny-pythia", "tiny/pythia", "step2000"
CHECKPOINTS = ["step0", "step1000"]
STAGING = "hub-staging"  # hub.staging_dir, away from its default
UMASK = 0o027  # group may read, others not: files written 0600 (mkstemp) or 0644 (a fixed mode) both fail
SHARD_1 = "model-00001-of-00003.safetensors"


def save_pythia_revision(directory: Path, seed: int, weights: str = "safetensors") -> Path:
    """A tiny random GPT-NeoX (weights from ``seed``) with the tiny project's word-level tokenizer, saved like a
    Pythia revision: ``weights`` ``"safetensors"``, ``"sharded"`` (safetensors shards and their index, as the
    large Pythias), or ``"bin"`` (pytorch_model.bin only, as early Pythia steps)."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    tokenizer = word_tokenizer()
    vocab = tokenizer.get_vocab()
    config = GPTNeoXConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPTNeoXForCausalLM(config)
    if weights == "safetensors":
        model.save_pretrained(directory)
    elif weights == "sharded":
        model.save_pretrained(directory, max_shard_size="60KB")
    else:
        model.config.save_pretrained(directory)
        torch.save(model.state_dict(), directory / "pytorch_model.bin")
    tokenizer.save_pretrained(directory)
    return directory


def hub_config(root: Path, models: dict, **sections) -> Path:
    """The tiny project's config with ``models`` (hub models) in place of its local one, a small ablation grid,
    no explorer; ``sections`` replace whole top-level sections."""
    cfg = tiny_config(root)
    cfg["models"] = models
    cfg["ablation"] = {
        "random_trials": 1,
        "percents": [5],
        "matched": {"tolerance": 0.05, "max_steps": 3},
        "layer_groups": {"size": 2},  # the tiny models have 4 layers
    }
    cfg["report"] = {"explorer": {"models": []}}
    cfg["training"] = {"bootstrap": 100}
    cfg["hub"] = {"staging_dir": STAGING}
    cfg |= sections
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def pythia_entry(repo_id: str = REPO_ID, final: str = FINAL, checkpoints: list[str] = CHECKPOINTS) -> dict:
    return {
        "family": "gpt_neox",
        "hub_id": repo_id,
        "final_revision": final,
        "checkpoints": checkpoints,
        "weight_checkpoints": [*checkpoints, final] if checkpoints else [],
        "tokens_per_step": 64,
        "num_layers": 4,
        "params_b": 0.001,
    }


@pytest.fixture(scope="module")
def revisions(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("revisions")
    return {
        "step0": save_pythia_revision(root / "step0", 0, "bin"),
        "step1000": save_pythia_revision(root / "step1000", 1),
        "step2000": save_pythia_revision(root / "step2000", 2),
    }


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """Sharded revisions (3 safetensors shards and their index, as the large Pythias), by branch: file -> bytes."""
    root = tmp_path_factory.mktemp("sharded")
    steps = {"step0": 0, "step1000": 1, "step1500": 3, "step2000": 2}
    return {
        r: {p.name: p.read_bytes() for p in save_pythia_revision(root / r, seed, "sharded").iterdir()}
        for r, seed in steps.items()
    }


@pytest.fixture
def served(revisions, sharded, tmp_path, monkeypatch):
    """The hub server with the tiny Pythia repo (main = step2000, as Pythia's main = step143000), a gated repo, and
    a re-uploaded repo whose step1000 holds main's weights; huggingface_hub pointed at it (for the subprocesses too)."""
    with HubServer() as srv, pointed_at(srv, monkeypatch, tmp_path / "hf-home"):
        for branch in ("step0", "step1000", "step2000"):
            srv.add_revision(REPO_ID, branch, revisions[branch])
        srv.add_revision(REPO_ID, "main", revisions["step2000"])
        srv.add_revision("gated/pythia", "main", revisions["step2000"], gated=True, tokens=("hf_granted_0123456789",))
        srv.add_revision("tiny/reuploaded", "step0", revisions["step0"])
        srv.add_revision("tiny/reuploaded", "step1000", revisions["step2000"])
        srv.add_revision("tiny/reuploaded", "step2000", revisions["step2000"])
        srv.add_revision("tiny/reuploaded", "main", revisions["step2000"])
        # Sharded: step1500 is read by weight rows only; step1000's first shard is the final revision's (pythia#206).
        for branch, files in sharded.items():
            srv.add_revision("tiny/sharded", branch, files)
        substituted = {**sharded["step1000"], SHARD_1: sharded["step2000"][SHARD_1]}
        for branch, files in (("step0", sharded["step0"]), ("step1000", substituted)):
            srv.add_revision("tiny/substituted", branch, files)
        for branch in ("step2000", "main"):
            srv.add_revision("tiny/substituted", branch, sharded["step2000"])
        yield srv


def run_targets() -> list[str]:
    """Statistics and scoring of every revision, the training dynamics, the pruning of the checkpoints."""
    revisions = [FINAL, *CHECKPOINTS]
    out = [paths.neurons(MODEL, r) for r in revisions]
    out += [paths.aggregate(MODEL, r, b) for r in revisions for b in SCORED_BENCHMARKS]
    out += [paths.emergence_table(MODEL), paths.emergence_summary(MODEL), paths.cosine_drift(MODEL)]
    return out + [paths.pruned_record(MODEL, r, STAGING) for r in CHECKPOINTS]


def job_lines(output: str) -> list[str]:
    """The job headers Snakemake prints when it starts a job."""
    return [line for line in output.splitlines() if line.strip().startswith(("rule ", "localrule ", "group job "))]


def planned_jobs(output: str) -> set[tuple[str, str]]:
    """(rule, wildcards) of every job a dry run's output lists (a group's members indented under the group)."""
    parts = re.split(r"^\s*(?:local)?rule (\w+):$", output, flags=re.MULTILINE)
    wildcards = [re.search(r"^\s+wildcards: (.*)$", body, flags=re.MULTILINE) for body in parts[2::2]]
    return {(rule, w[1] if w else "") for rule, w in zip(parts[1::2], wildcards, strict=True)}


# ---------------------------------------------------------------- stage, then run with the hub stopped
# The staged run on this machine's local executor, and through profiles/slurm on the localhost cluster (a compute
# node: every job, allocations included, with no route to the hub). The SLURM run also scores the final revision's
# capability suite from a staged suite whose items file is broken, so that every capability job fails on every
# attempt (issue 42: a failing capability member must leave its revision's ablations and the checkpoint grid
# running; only under SLURM, where the allocations are Snakemake groups: a local run ignores groups, and would pass
# whatever the packing).
@pytest.fixture(scope="module", params=["local", pytest.param("slurm", marks=pytest.mark.cluster)])
def hub_run(request, revisions, tmp_path_factory):
    slurm = request.param == "slurm"
    profiles = PROFILES if slurm else ()
    root = tmp_path_factory.mktemp(f"hub-run-{request.param}")
    make_tiny_project(root)
    evaluation = tiny_config(root)["evaluation"] | ({"capability": capability_suite(root, 3)} if slurm else {})
    # Under SLURM the checkpoints are also ablated, with the final revision's neurons (its cohort): the checkpoint grid
    # a final revision's failing member could hold back.
    hub_config(root, {MODEL: pythia_entry() | ({"checkpoint_ablations": True} if slurm else {})}, evaluation=evaluation)
    capability = [paths.aggregate(MODEL, FINAL, CAPABILITY)] if slurm else []
    with pytest.MonkeyPatch.context() as mp, HubServer() as srv, pointed_at(srv, mp, root / "hf-home"):
        for branch, directory in revisions.items():
            srv.add_revision(REPO_ID, branch, directory)
        srv.add_revision(REPO_ID, "main", revisions[FINAL])
        commits = {r: srv.repos[REPO_ID].branches[r] for r in revisions}
        previous = os.umask(UMASK)
        try:
            tasks = [paths.capability_tasks("wikitext2")] if slurm else []
            staged = snakemake(root, "--cores", "2", "stage_hub_models", *tasks)
            planned = set()
            if slurm:  # a staged file that no longer parses, as a copy cut short by a full disk leaves it
                (root / paths.capability_tasks("wikitext2") / ITEMS_FILE).write_text('{"context": "the cut\n')
                planned = planned_jobs(snakemake(root, "-n", *run_targets(), *capability).stdout)
            staging_requests = len(srv.requests)
            srv.stop()  # from here on nothing answers on the hub's ports
            run = snakemake(root, "--cores", "2", *profiles, *run_targets(), *capability, timeout=1500, check=False)
            assert run.returncode == 0 or capability, f"{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
        finally:
            os.umask(previous)
        yield {
            "root": root,
            "commits": commits,
            "staged": staged,
            "run": run,
            "staging_requests": staging_requests,
            "requests": len(srv.requests),
            "capability": capability,
            "planned": planned,
        }


def test_staging_pins_every_revision_outside_the_library_cache(hub_run):
    root = hub_run["root"]
    assert hub_run["staging_requests"] > 0
    for revision, commit in hub_run["commits"].items():
        manifest = json.loads((root / paths.staged_manifest(MODEL, revision, STAGING)).read_text())
        assert (manifest["repo_id"], manifest["revision"], manifest["commit"]) == (REPO_ID, revision, commit)
    step0 = json.loads((root / paths.staged_manifest(MODEL, "step0", STAGING)).read_text())
    assert step0["weight_files"] == ["pytorch_model.bin"]
    # HF_HOME (the library's cache) holds no weights: staging writes only into hub.staging_dir.
    assert not [p for p in (root / "hf-home").rglob("*") if p.suffix in (".safetensors", ".bin")]


def test_the_jobs_ran_with_no_route_to_the_hub_and_record_the_commit(hub_run):
    root, commits = hub_run["root"], hub_run["commits"]
    assert hub_run["requests"] == hub_run["staging_requests"]  # the server was stopped: nothing more arrived
    assert "rule stage_model:" not in hub_run["run"].stdout + hub_run["run"].stderr  # all staged beforehand
    for revision, commit in commits.items():
        for bench in SCORED_BENCHMARKS:
            clean = json.loads((root / paths.clean(MODEL, revision, bench)).read_text())
            assert clean["provenance"]["commit"] == commit, (revision, bench)
        record = json.loads((root / paths.weight_record(MODEL, revision)).read_text())
        manifest = json.loads((root / paths.staged_manifest(MODEL, revision, STAGING)).read_text())
        assert record["weights_sha256"] == manifest["weights_sha256"]
        assert record["provenance"]["commit"] == commit
    integrity = json.loads((root / paths.integrity(MODEL)).read_text())
    assert integrity["commits"] == commits and integrity["problems"] == [] and integrity["dropped"] == []
    for target in run_targets():
        assert (root / target).stat().st_size > 0


def test_a_failing_capability_member_leaves_the_ablations_and_the_checkpoint_grid_running(hub_run):
    """Under SLURM every capability job of the final revision fails (the fixture breaks the staged suite) and the
    run goes on (--keep-going, profiles/slurm): the revision's ablations, its statistics and the checkpoint grid they
    feed (the other revisions' ablations with the final revision's neurons, the training dynamics) are all produced;
    what is left to run is exactly the capability jobs and their aggregate, and Snakemake names the failed jobs."""
    if not hub_run["capability"]:
        pytest.skip("a local run ignores groups: the capability fault is injected into the SLURM run only")
    root, run = hub_run["root"], hub_run["run"]
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-4000:]
    capability = {job for job in hub_run["planned"] if f"benchmark={CAPABILITY}" in job[1]}
    assert {rule for rule, _ in capability} == {"score_clean", "score_ablation", "aggregate_scores"}, capability
    assert all((root / target).stat().st_size > 0 for target in run_targets())
    cohort = {job for job in hub_run["planned"] if job[0] == "score_ablation" and f"revision={FINAL}" not in job[1]}
    assert cohort, "no checkpoint is ablated: the checkpoint grid is not under test"
    left = planned_jobs(snakemake(root, "-n", *run_targets(), *hub_run["capability"]).stdout)
    assert left == capability, left ^ capability
    # Snakemake's errors name the capability jobs and no other (each attempt's), and a job's log the broken file.
    failed = set(re.findall(r"^\s*Error in rule (\w+):\n(?:\s+\w+: .*\n)*?\s+output: (\S+?),", out, flags=re.MULTILINE))
    scored = {(rule, w) for rule, w in capability if rule != "aggregate_scores"}
    assert len(failed) == len(scored) and all(output.endswith(f"/{CAPABILITY}.json") for _, output in failed), failed
    log = (root / paths.log_file("score_clean", f"{MODEL}/{FINAL}/{CAPABILITY}")).read_text()
    assert str(root / paths.capability_tasks("wikitext2") / ITEMS_FILE) in log, log[-2000:]


def test_checkpoint_weights_are_pruned_once_read_and_the_final_revision_kept(hub_run):
    root = hub_run["root"]
    for revision in CHECKPOINTS:
        directory = root / paths.staged_dir(MODEL, revision, STAGING)
        manifest = read_manifest(directory)
        assert manifest["pruned"] and manifest["pruned_bytes"] > 0
        assert not [n for n in manifest["weight_files"] if (directory / n).exists()]
        assert (directory / "tokenizer.json").is_file()  # the tokenizer stays
        record = json.loads((root / paths.pruned_record(MODEL, revision, STAGING)).read_text())
        assert record["revision"] == revision and record["pruned_files"] == manifest["pruned_files"]
    final = root / paths.staged_dir(MODEL, FINAL, STAGING)
    assert verify_staged(final)["pruned"] is False
    assert not (root / paths.pruned_record(MODEL, FINAL, STAGING)).exists()
    # Pruning left every output up to date: nothing to rerun.
    assert "Nothing to be done" in snakemake(root, "-n", *run_targets()).stdout


def test_results_and_staged_files_are_readable_by_the_group(hub_run):
    root = hub_run["root"]
    files = [p for top in ("results", STAGING) for p in (root / top).rglob("*") if p.is_file()]
    assert len(files) > 50
    modes = {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in files}
    assert not {p: oct(m) for p, m in modes.items() if m & 0o777 & ~(0o666 & ~UMASK) or not m & stat.S_IRGRP}


# ---------------------------------------------------------------- preflight
def test_preflight_one_line_per_bad_model_and_no_job_started(served, tmp_path, monkeypatch):
    make_tiny_project(tmp_path)
    models = {
        "gated-pythia": pythia_entry("gated/pythia", "main", []),
        # A final revision of its own: at the same one it would be the same model as MODEL, refused as such.
        "missing-step": pythia_entry(REPO_ID, "step1000", ["step999"]),
        MODEL: pythia_entry(),
    }
    hub_config(tmp_path, models)
    monkeypatch.setenv("HF_TOKEN", "hf_not_granted_secret_42")
    proc = snakemake(tmp_path, "--cores", "1", "all", check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    problems = sorted(line for line in out.splitlines() if line.startswith(("gated-pythia:", "missing-step:")))
    assert len(problems) == 2, out[-3000:]
    assert "is gated" in problems[0] and "HF_TOKEN" in problems[0]
    assert "no revision step999" in problems[1] and "nearest: step0, step1000" in problems[1]
    assert "hub preflight: 2 problem(s), no job was started" in out
    assert "hf_not_granted_secret_42" not in out
    assert job_lines(out) == [] and not (tmp_path / "logs").exists() and not (tmp_path / STAGING).exists()

    served.stop()
    proc = snakemake(tmp_path, "--cores", "1", "all", check=False, timeout=300)
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if line.startswith("hub 127.0.0.1:")]
    assert proc.returncode != 0 and len(lines) == 1 and "unreachable" in lines[0], out[-3000:]
    assert job_lines(out) == [] and not (tmp_path / STAGING).exists()
    # A dry run asks the hub nothing: it plans the staging and succeeds with the hub unreachable.
    assert "stage_model" in snakemake(tmp_path, "-n", "all").stdout


# ---------------------------------------------------------------- the integrity gate on staged manifests
def test_a_step_branch_equal_to_main_stops_the_preflight_or_is_dropped_on_record(served, tmp_path):
    make_tiny_project(tmp_path)
    hub_config(tmp_path, {"reuploaded": pythia_entry("tiny/reuploaded")})
    target = paths.integrity("reuploaded")
    proc = snakemake(tmp_path, "--cores", "1", target, check=False, timeout=300)
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if line.startswith("reuploaded:")]
    assert proc.returncode != 0 and len(lines) == 1, out[-3000:]
    assert lines[0].startswith("reuploaded: checkpoints step1000, step2000 equal the final revision (model.safetensors")
    assert job_lines(out) == [] and not (tmp_path / STAGING).exists()  # from the hub's metadata: nothing staged

    hub_config(tmp_path, {"reuploaded": pythia_entry("tiny/reuploaded")}, training={"integrity": "drop"})
    proc = snakemake(tmp_path, "--cores", "1", target, timeout=300)
    assert "drop keeps step2000 and drops step1000, on record" in proc.stderr
    integrity = json.loads((tmp_path / target).read_text())
    assert integrity["dropped"] == ["step1000"] and integrity["mode"] == "drop"
    assert integrity["commits"]["step1000"] == served.repos["tiny/reuploaded"].branches["step1000"]
    assert not (tmp_path / "results/reuploaded/step0").exists()  # staging and the gate only: no model ran

    # The gate on staged manifests still fires when the preflight is skipped.
    hub_config(tmp_path, {"reuploaded": pythia_entry("tiny/reuploaded")})
    env = {**os.environ, "WNEURONS_HUB_PREFLIGHT": "0"}
    cmd = snakemake_command(tmp_path, "--cores", "1", target, "--forcerun", "checkpoint_integrity")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    log = (tmp_path / paths.log_file("checkpoint_integrity", "reuploaded")).read_text()
    assert proc.returncode != 0 and "checkpoints step1000, step2000 equal the final revision" in log


# ---------------------------------------------------------------- fetch only what is read; preflight from metadata
def test_a_weight_rows_only_step_stages_only_the_shard_holding_its_layer(served, tmp_path):
    make_tiny_project(tmp_path)
    entry = pythia_entry("tiny/sharded", FINAL, ["step0"])
    entry["weight_checkpoints"] = ["step0", "step1500", FINAL]
    hub_config(tmp_path, {"sharded": entry})
    start = len(served.sent)
    snakemake(tmp_path, "--cores", "1", paths.weight_rows("sharded", "step1500"), timeout=600)
    manifest = read_manifest(tmp_path / paths.staged_dir("sharded", "step1500", STAGING))
    index = json.loads(served.file("tiny/sharded", "step1500", "model.safetensors.index.json"))
    holder = index["weight_map"]["gpt_neox.layers.1.mlp.dense_h_to_4h.weight"]
    assert manifest["staged_for"]["files"] == [holder] and len(manifest["weight_files"]) == 3
    shards = [p.split("file=")[1] for srv, p, n in served.sent[start:] if srv == "cdn" and n]
    assert shards == [holder]  # the only weight bytes this run downloaded
    record = json.loads((tmp_path / paths.weight_record("sharded", "step1500")).read_text())
    assert record["weights_sha256"] == manifest["weights_sha256"]


def test_the_preflight_names_a_substituted_shard_before_any_download(served, tmp_path):
    make_tiny_project(tmp_path)
    hub_config(tmp_path, {"substituted": pythia_entry("tiny/substituted")})
    proc = snakemake(tmp_path, "--cores", "1", "all", check=False, timeout=300)
    out = proc.stdout + proc.stderr
    lines = [line for line in out.splitlines() if line.startswith("substituted:")]
    assert proc.returncode != 0 and len(lines) == 1, out[-3000:]
    assert lines[0].startswith(f"substituted: checkpoints step1000, step2000 (the final revision) share {SHARD_1}")
    assert "training.integrity: error stops the run" in lines[0]
    assert "hub preflight: 1 problem(s), no job was started" in out
    assert job_lines(out) == [] and not (tmp_path / STAGING).exists()
    assert [p for srv, p, n in served.sent if srv == "cdn" and n] == []  # no weight byte downloaded


def test_a_staging_dir_that_is_a_file_is_one_line_before_any_job(tmp_path):
    make_tiny_project(tmp_path)
    hub_config(tmp_path, {MODEL: pythia_entry()})
    (tmp_path / STAGING).write_text("not a directory")
    proc = snakemake(tmp_path, "-n", "all", check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"config: hub.staging_dir {STAGING} is a file, not a directory: point it at a directory" in out
    assert "Traceback" not in out and len(out.strip().splitlines()) <= 3, out
