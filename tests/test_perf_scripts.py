"""The performance scripts that CI cannot run for real still run: perf/gpu_check.py on a tiny shape on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_gpu_check_runs_its_three_parts_on_a_tiny_shape():
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "perf/gpu_check.py", "--shape", "tiny", "--scale", "0.005", "--batch-size", "64"]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    for part in ("statistics pass: shards", "WD, split, MD", "BLiMP: 67k pairs, clean", "ablation: perplexity pass"):
        assert part in out, out
