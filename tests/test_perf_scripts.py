"""The performance scripts that CI cannot run for real still run: perf/gpu_check.py on a tiny shape on the CPU; and
the prefix-sharing engine that perf/prefix_sharing.py times computes what the project's engine computes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wneurons.lm.ablation import clamp_negative_preactivations
from wneurons.lm.scoring import batched_logprob_sums

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("prefix_sharing", REPO / "perf" / "prefix_sharing.py")
prefix_sharing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(prefix_sharing)


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


def _sequences_with_shared_prefixes(seed: int = 0, vocab: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Token sequences (CSR) like minimal pairs: pairs/triples that differ after a shared prefix of varying length,
    one sequence that is a prefix of another, and unrelated singletons of every length from 2."""
    rng = np.random.default_rng(seed)
    seqs = []
    for _ in range(12):
        stem = [1, *rng.integers(3, vocab, size=int(rng.integers(1, 9))).tolist()]
        for _ in range(int(rng.integers(2, 4))):
            seqs.append(stem + rng.integers(3, vocab, size=int(rng.integers(1, 6))).tolist())
    seqs.append(seqs[0][:2])  # a prefix of another sequence
    seqs += [[1, *rng.integers(3, vocab, size=n - 1).tolist()] for n in range(2, 12)]
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
    return np.concatenate(seqs).astype(np.int64), offsets


def test_prefix_groups_partition_the_sequences_and_share_their_prefix():
    flat, offsets = _sequences_with_shared_prefixes()
    members, starts, prefixes = prefix_sharing.prefix_groups(flat, offsets)
    assert sorted(members.tolist()) == list(range(len(offsets) - 1))
    lengths = offsets[1:] - offsets[:-1]
    for g, prefix in enumerate(prefixes):
        group = members[starts[g] : starts[g + 1]]
        heads = {tuple(flat[offsets[i] : offsets[i] + prefix]) for i in group}
        assert len(heads) == 1 and (lengths[group] >= prefix + 1).all()
        assert len(group) == 1 or prefix >= 2
    assert (np.diff(starts) > 1).sum() == 12, "each stem's pair / triple is one group"


@pytest.mark.parametrize("family", ["gpt_neox", "llama", "mistral", "qwen2", "qwen3", "gemma3", "opt", "gpt2"])
@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_shared_prefix_scoring_equals_whole_sequences(tiny_model, family, batch_size):
    model = tiny_model(family)
    flat, offsets = _sequences_with_shared_prefixes()
    whole = batched_logprob_sums(model, flat, offsets, batch_size=batch_size, progress=None)
    shared = prefix_sharing.shared_prefix_sums(model, flat, offsets, batch_size=batch_size)
    np.testing.assert_allclose(shared, whole, rtol=1e-5, atol=1e-4)


def test_shared_prefix_scoring_equals_whole_sequences_under_a_clamp(tiny_model):
    model = tiny_model("llama")
    flat, offsets = _sequences_with_shared_prefixes(seed=1)
    neurons = {layer: np.arange(0, 96, 3) for layer in range(3)}
    with clamp_negative_preactivations(model, neurons):
        whole = batched_logprob_sums(model, flat, offsets, batch_size=8, progress=None)
        shared = prefix_sharing.shared_prefix_sums(model, flat, offsets, batch_size=8)
    clean = batched_logprob_sums(model, flat, offsets, batch_size=8, progress=None)
    np.testing.assert_allclose(shared, whole, rtol=1e-5, atol=1e-4)
    assert np.abs(whole - clean).max() > 1e-3, "the clamp changed nothing: the comparison proves nothing"


def test_the_harness_benchmark_runs_interleaved_on_a_tiny_model(tmp_path):
    """perf/bench_blimp_vs_harness.py end to end (what `make bench-harness` runs on SmolLM2): the tiny project's
    model and BLiMP files, 3 interleaved repeats of each side, the harness from this interpreter."""
    sys.path.insert(0, str(REPO / "tests" / "workflow"))
    from tiny_project import make_tiny_project

    make_tiny_project(tmp_path / "p")
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "perf/bench_blimp_vs_harness.py", "--model-dir", str(tmp_path / "p/model")]
    cmd += ["--data-dir", str(tmp_path / "p/src/blimp"), "--n-pairs", "6", "--batch-size", "4", "--dtypes", "float32"]
    cmd += ["--harness-batch-sizes", "4", "--repeats", "3", "--threads", "1", "--out", str(out)]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    order = [(r["side"], r["repeat"]) for r in result["runs"]]
    assert order == [(side, k) for k in range(3) for side in ("wneurons", "lm-eval")]  # interleaved
    (row,) = result["comparisons"]
    assert len(row["speedup_wall_per_repeat"]) == 3 and row["harness_best_batch_size"]
    assert row["speedup_wall_min"] <= row["speedup_wall_median"] <= row["speedup_wall_max"]
    assert row["pairs_compared"] == 12 and row["decisions_differ"] == 0 and row["max_abs_logprob_difference"] < 1e-3
    assert result["flops"]["positions"] > 24 and 0 < result["flops"]["fraction_of_matmul"]
    # A harness interpreter that does not exist is an error, before any work.
    missing = subprocess.run([*cmd[:2], "--harness-python", "no/such/python"], cwd=REPO, capture_output=True, text=True)
    assert missing.returncode == 2 and "no such interpreter" in missing.stderr


def test_the_scoring_profile_runs_on_a_tiny_model(tmp_path):
    """perf/profile_blimp_scoring.py times each part of the engine's batches; on the tiny model it names every part
    and counts the padding of the batches the engine would run."""
    sys.path.insert(0, str(REPO / "tests" / "workflow"))
    from tiny_project import make_tiny_project

    make_tiny_project(tmp_path / "p")
    cmd = [sys.executable, "perf/profile_blimp_scoring.py", "--model-dir", str(tmp_path / "p/model")]
    cmd += ["--data-dir", str(tmp_path / "p/src/blimp"), "--n-pairs", "6", "--batch-size", "4", "--threads", "1"]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=True).stdout
    for part in ("tokenize", "forward (body + head)", "body", "LM head", "gather + logsumexp", "of which padding"):
        assert part in out, out
    assert "24 sentences, 6 batches of 4" in out, out
