"""A command-line config replaces the paper grid instead of being merged into it.

Cluster job steps re-read the workflow with only ``--configfiles`` (no other flags), so a merged config would
give a job a different grid than the main process had (seen: figure1 asking for OPT shards in the demo).
"""

import subprocess
import sys
from pathlib import Path

from wneurons.experiment import paths

REPO = Path(__file__).resolve().parents[2]


def _dry_run(target: str, *options: str) -> str:
    # targets first: --configfile and --quiet take several values each
    cmd = [sys.executable, "-m", "snakemake", target, "-n", "--forceall", *options]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_demo_config_alone_defines_the_grid():
    out = _dry_run(paths.figure("figure1"), "--configfile", "config/demo.yaml")
    assert paths.shards("smollm2-135m", "main") in out
    # a merged paper grid would add the OPT contrast model (a hub download) to Figure 1
    assert "opt-1.3b" not in out


def test_without_a_config_the_paper_grid_is_used():
    out = _dry_run(paths.figure("figure1"))
    assert paths.shards("pythia-1.4b", "step143000") in out
    assert paths.shards("opt-1.3b", "main") in out
