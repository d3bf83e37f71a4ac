"""`.ci/slurm/run-demo.sh` on the tiny project: a job of every rule that runs inside a checkpoint's allocation
(collection, statistics, clean scoring, the matched search, an ablation, the pair sample, the sign cases, the
weight rows) passes through `profiles/slurm` on the localhost cluster, and the script's own checks hold: every GPU
job asked SLURM for a GPU and no other job did, each allocation paid one model load, the results equal the local
run's and the kept activation shards are byte-identical.

This is CI's SLURM pass over every kind of allocated job. It used to be a second run of a slice of the demo on
SmolLM2 after `make demo` (about 10 minutes of CI); the tiny project runs the same script, the same rules and the
same checks in about a minute.
"""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml
from slurm_cluster import finished_over
from tiny_project import REPO, make_tiny_project, snakemake

from wneurons.experiment import paths
from wneurons.experiment.grid import Condition, format_percent
from wneurons.experiment.rule_files import rules_with

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

MODEL, REVISION = "tiny-llama", "main"


def test_every_allocated_rule_runs_in_an_allocation_and_equals_the_local_run(tmp_path):
    root = tmp_path / "project"
    config_path = make_tiny_project(root)
    config = yaml.safe_load(config_path.read_text())
    config["pairs"] = {"tokens": 64, "max_tokens": 256, "top_k": [3]}  # the pair sample of the final revision
    config["models"][MODEL]["weight_checkpoints"] = [REVISION]  # its weight rows, packed with its other jobs
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    percent = format_percent(config["ablation"]["percents"][0])
    targets = [
        paths.kept_shards(MODEL, REVISION),
        paths.neurons(MODEL, REVISION),
        paths.clean(MODEL, REVISION, "blimp"),
        paths.ablation(MODEL, REVISION, Condition("all", "matched", percent, 0), "tse"),
        paths.pair_sample(MODEL, REVISION),
        paths.sign_cases(MODEL, REVISION),
        paths.weight_rows(MODEL, REVISION),
    ]
    snakemake(root, "--cores", "2", *targets)  # the local run the script compares with
    env = os.environ | {
        "SLURM_DEMO_DIR": str(root),
        "SLURM_DEMO_CONFIG": str(config_path),
        "SLURM_DEMO_TARGETS": " ".join(targets),
        "SLURM_DEMO_OWN_CLUSTER": "0",
        "SLURM_DEMO_MIN_CONCURRENT": "1",  # one checkpoint; concurrent allocations: test_activation_budget.py
        "SLURM_DEMO_TIMEOUT": "900",
    }
    proc = subprocess.run(
        ["bash", str(REPO / ".ci/slurm/run-demo.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=1000,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-4000:]
    assert "results identical to the local run" in proc.stderr
    assert "kept activation shards identical" in proc.stderr
    logs = sorted((root / ".snakemake/slurm_logs").glob("group_gpu-*/*.log"))
    ran = {rule for rule, _ in finished_over(logs)}
    # The rules whose jobs run in a checkpoint's allocations: every rule of workflow/rules with a `group:`, but the
    # statistics parts, which run only where a site's limit splits a revision's statistics (not this tiny one's:
    # tests/workflow/test_stats_parts_dag.py plans them, tests/test_activations.py joins them byte-identically).
    assert ran == rules_with("group:", REPO) - {"neuron_stats_part"}, ran
