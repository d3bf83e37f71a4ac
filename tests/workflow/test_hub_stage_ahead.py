"""hub.stage_ahead through the real Snakefile on the localhost hub (tests/hub_server.py): a revision is staged only
once the revision stage_ahead + 1 places before it is pruned, and changing the setting afterwards restages nothing.

Three weight-rows-only steps of the sharded tiny Pythia (each reads one shard), so the revisions' jobs are cheap."""

from __future__ import annotations

import pytest
import yaml
from test_hub_workflow import FINAL, STAGING, hub_config, job_lines, pythia_entry, revisions, served, sharded  # noqa: F401
from tiny_project import dry_run_jobs, make_tiny_project, snakemake

from wneurons.experiment import paths

pytestmark = pytest.mark.slow

MODEL, STEPS = "sharded", ["step0", "step1000", "step1500"]


def project(root, stage_ahead) -> None:
    entry = pythia_entry("tiny/sharded", FINAL, [])
    entry["weight_checkpoints"] = [*STEPS, FINAL]
    hub_config(root, {MODEL: entry}, hub={"staging_dir": STAGING, "stage_ahead": stage_ahead})


def test_each_revision_is_staged_after_the_one_before_it_is_pruned(served, tmp_path):  # noqa: F811
    make_tiny_project(tmp_path)
    project(tmp_path, 0)
    pruned = [paths.pruned_record(MODEL, r, STAGING) for r in STEPS]
    run = snakemake(tmp_path, "--cores", "2", *pruned, timeout=900)
    order = [line.split(":")[0].split()[-1] for line in job_lines(run.stdout + run.stderr)]
    assert order.count("stage_model") == 3 and order.count("prune_staged") == 3
    # Jobs in the order Snakemake started them: stage, read, prune, one revision after the other.
    assert [r for r in order if r in ("stage_model", "prune_staged")] == ["stage_model", "prune_staged"] * 3, order
    for before, after in zip(STEPS, STEPS[1:], strict=False):
        manifest = tmp_path / paths.staged_manifest(MODEL, after, STAGING)
        assert manifest.stat().st_mtime >= (tmp_path / paths.pruned_record(MODEL, before, STAGING)).stat().st_mtime

    # A new lead (or none) reruns at most the turn markers, never staging nor the jobs reading it.
    for ahead in (2, None):
        config = yaml.safe_load((tmp_path / "config.yaml").read_text())
        config["hub"]["stage_ahead"] = ahead
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        planned = dry_run_jobs(tmp_path, *pruned)
        assert set(planned) <= {"staging_turn"}, planned
