"""The performance scripts that CI cannot run for real still run: perf/gpu_check.py on a tiny shape on the CPU, the
harness benchmark and the scoring profile on a tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_gpu_check_runs_its_four_parts_on_a_tiny_shape():
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "perf/gpu_check.py", "--shape", "tiny", "--scale", "0.005", "--batch-size", "64"]
    cmd += ["--precision-sentences", "200"]
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    for part in ("statistics pass: shards", "WD, split, MD", "BLiMP: 67k pairs, clean", "ablation: perplexity pass"):
        assert part in out, out
    # Phase 4: one line per precision; on a CPU tf32 is fp32, so nothing moves.
    rows = {
        line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in (["fp32"], ["tf32"], ["bf16"])
    }
    assert "precisions on 200 sentences" in out and set(rows) == {"fp32", "tf32", "bf16"}, out
    assert rows["fp32"][3] == rows["tf32"][3] == "0" and float(rows["tf32"][4]) == 0.0, out
    assert float(rows["bf16"][4]) > 0, out
    # ... and the shards of every layer collected in each: WD relative change and top-1% cohort members that leave.
    assert float(rows["tf32"][7]) == 0.0 and rows["tf32"][9] == "0" and float(rows["bf16"][7]) > 0, out


def test_the_harness_benchmark_runs_interleaved_on_a_tiny_model(tmp_path):
    """perf/bench_blimp_vs_harness.py end to end (what `make bench-harness` runs on SmolLM2): the tiny project's
    model and BLiMP files, 3 interleaved repeats of each side, the harness from this interpreter."""
    sys.path.insert(0, str(REPO / "tests" / "workflow"))
    from tiny_project import make_tiny_project

    make_tiny_project(tmp_path / "p")
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "perf/bench_blimp_vs_harness.py", "--model-dir", str(tmp_path / "p/model")]
    cmd += ["--data-dir", str(tmp_path / "p/src/blimp"), "--n-pairs", "6", "--batch-size", "4", "--dtypes", "float32"]
    cmd += ["--harness-batch-sizes", "4,2", "--harness-untimed-batch-sizes", "1", "--repeats", "3", "--threads", "1"]
    cmd += ["--out", str(out)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    order = [(r["side"], r["repeat"]) for r in result["runs"]]
    assert order == [(side, k) for k in range(3) for side in ("wneurons", "lm-eval", "lm-eval")]  # interleaved
    (row,) = [r for r in result["comparisons"] if r["harness_best_batch_size"]]
    (other,) = [r for r in result["comparisons"] if not r["harness_best_batch_size"]]
    assert len(row["speedup_wall_per_repeat"]) == 3
    assert row["speedup_wall_min"] <= row["speedup_wall_median"] <= row["speedup_wall_max"]
    assert row["pairs_compared"] == 12 and row["decisions_differ"] == 0 and row["max_abs_logprob_difference"] < 1e-3
    positions = result["flops"]["positions"]
    assert (
        positions["whole"] > 24 and positions["nodes"] < positions["whole"] and positions["nodes"] <= positions["fed"]
    )
    assert 0 < result["flops"]["fraction_of_matmul"]
    # The harness against itself at its other batch size: what a change of batch shape alone moves.
    assert other["harness_against_its_fastest"]["pairs_compared"] == 12 and "harness_against_its_fastest" not in row
    # The harness once more at batch 1 (untimed, not among the runs): every sentence alone, against its fastest.
    assert result["harness_untimed"]["1"]["pairs_compared"] == 12
    # Every distinct sentence rescored in float64, and each side's fp32 error against it.
    reference = result["float64_reference"]
    sys.path.insert(0, str(REPO / "perf"))
    from bench_blimp_vs_harness import first_pairs

    _, pairs = first_pairs(tmp_path / "p/src/blimp", 6, 6)
    assert reference["sentences"] == len({*pairs["sentence_good"], *pairs["sentence_bad"]})
    assert set(reference["errors"]) == {"wneurons float32 bs=4"} | {f"lm-eval float32 bs={bs}" for bs in (4, 2, 1)}
    for error in reference["errors"].values():
        assert 0 <= error["median"] <= error["p90"] <= error["p99"] <= error["max"] < 1e-3
    # A harness interpreter that does not exist is an error, before any work.
    missing = subprocess.run([*cmd[:2], "--harness-python", "no/such/python"], cwd=REPO, capture_output=True, text=True)
    assert missing.returncode == 2 and "no such interpreter" in missing.stderr


def test_the_scoring_profile_and_the_error_trace_run_on_a_tiny_model(tmp_path):
    """perf/profile_blimp_scoring.py times each part of the engine's batches; on the tiny model it names every part
    and counts the positions and padding of the prefix-tree rows the engine would run. perf/fp32_error_trace.py
    gives a sentence's fp32 error per scored token and every layer's hidden-state error at the worst one."""
    sys.path.insert(0, str(REPO / "tests" / "workflow"))
    from tiny_project import make_tiny_project

    make_tiny_project(tmp_path / "p")
    cmd = [sys.executable, "perf/profile_blimp_scoring.py", "--model-dir", str(tmp_path / "p/model")]
    cmd += ["--data-dir", str(tmp_path / "p/src/blimp"), "--n-pairs", "6", "--batch-size", "4", "--threads", "1"]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=True).stdout
    parts = ("tokenize", "sort + pack", "attention masks", "forward (body + head)", "body", "LM head")
    for part in (*parts, "gather + logsumexp", "of which padding", "GFLOP/s"):
        assert part in out, out
    assert "12 sentences, 3 batches of 4 in" in out, out  # 12 distinct sentences: each scored once
    model = tmp_path / "p/model"
    cmd = [sys.executable, "perf/fp32_error_trace.py", "--model-dir", str(model), "--threads", "1", "the cat sleeps ."]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=True).stdout
    layers = json.loads((model / "config.json").read_text())["num_hidden_layers"]
    per_layer = [line.split() for line in out.splitlines() if line.startswith("    ")]
    assert [int(row[0]) for row in per_layer] == list(range(layers + 1)), out  # the embeddings, then every layer
    assert all(float(row[1]) >= 0 for row in per_layer) and "fp32 error" in out, out
