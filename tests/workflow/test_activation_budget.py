"""The shards budget under SLURM (issue 27): `--resources activations_mb=` limits how many allocations with a
collection run at once; `--resources disk_mb=` (the old advice) does not, since Snakemake scopes `disk_mb` as local.

Two tiny models, each one allocation (collection + statistics) on the localhost cluster of `.ci/slurm/up.sh`
(`profiles/slurm` + `profiles/slurm-ci`, which lets 2 jobs run at once); every job waits a few seconds first so that
two allocations that may overlap do. The allocations' own logs give when each ran (the inner Snakemake's
timestamps). Skipped where no cluster answers.
"""

from __future__ import annotations

import os
import re
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from slurm_cluster import allocation_logs, finish, run_slurm
from tiny_project import REPO, add_model_copy, make_tiny_project, snakemake

from wneurons.experiment import paths

MODELS = ("tiny-llama", "tiny-llama-b")
REVISION = "main"
STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$", flags=re.MULTILINE)


def two_model_project(root: Path) -> Path:
    """The tiny project with a second model (a copy of the same weights): two collections."""
    config_path = make_tiny_project(root)
    config = yaml.safe_load(config_path.read_text())
    add_model_copy(root, config, MODELS[1])
    config["report"] = {"explorer": {"models": []}}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return root


def collection_request_mb(root: Path) -> int:
    """The activations_mb one collection asks, from a dry run through profiles/slurm."""
    proc = snakemake(root, "-n", "--profile", str(REPO / "profiles/slurm"), paths.neurons(MODELS[0], REVISION))
    asks = [int(m) for m in re.findall(r"activations_mb=(\d+)", proc.stdout)]
    assert asks, f"no activations_mb in the dry run:\n{proc.stdout[-3000:]}"
    return max(asks)


def test_the_dry_run_asks_each_collection_its_shards(tmp_path):
    root = two_model_project(tmp_path / "p")
    assert collection_request_mb(root) >= 1024  # its shards + 1 GB (common.smk: collect_disk_mb)


def intervals(root: Path) -> dict[str, tuple[datetime, datetime]]:
    """Per model: first and last timestamp its allocation's log printed."""
    spans = {}
    for model in MODELS:
        stamps = [
            datetime.strptime(s, "%a %b %d %H:%M:%S %Y")
            for log in allocation_logs(root, model, REVISION)
            for s in STAMP.findall(log.read_text(errors="replace"))
        ]
        assert stamps, f"no allocation log with timestamps for {model}"
        spans[model] = (min(stamps), max(stamps))
    return spans


def overlap_s(spans: dict[str, tuple[datetime, datetime]]) -> float:
    (a0, a1), (b0, b1) = spans.values()
    return (min(a1, b1) - max(a0, b0)).total_seconds()


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize(("resource", "overlaps"), [("disk_mb", True), ("activations_mb", False)])
def test_only_activations_mb_limits_concurrent_collections_under_slurm(tmp_path, resource, overlaps):
    root = two_model_project(tmp_path / "p")
    budget = collection_request_mb(root) * 3 // 2  # one collection fits, two do not
    targets = [paths.neurons(m, REVISION) for m in MODELS]
    env = os.environ | {"WNEURONS_INJECT_DELAY": f"8:{tmp_path / 'never'}"}
    start = time.monotonic()
    proc = run_slurm(root, *targets, "--resources", "gpu=1", f"{resource}={budget}", env=env)  # --resources last
    code, out = finish(proc)
    assert code == 0, out[-4000:]
    spans = intervals(root)
    print(
        f"{resource}={budget}: allocations {spans}, overlap {overlap_s(spans):.0f} s, {time.monotonic() - start:.0f} s"
    )
    assert (overlap_s(spans) > 0) is overlaps, spans
