"""BLiMP throughput and accuracy: wneurons.scoring vs lm-evaluation-harness on the same model, data and CPU.

Scores the first ``--n-pairs`` pairs of the first ``--n-paradigms`` BLiMP paradigms (sorted by name) with
``score_blimp(convention="harness")`` in each ``--dtypes``, then (when the harness's interpreter exists) runs the
harness's BLiMP task on the same pairs through ``perf/harness/run_harness_blimp.py`` at each
``--harness-batch-sizes``. Prints sentences/s (model loading excluded on both sides), the speed ratio, both
accuracies and the largest per-sentence log-prob difference. The harness lives in its own venv, never the
project's:

    python3 -m venv /tmp/lmeval && /tmp/lmeval/bin/pip install torch==2.13.0 "lm-eval[hf]"

The model must be a local safetensors directory (the harness cannot read GGUF), e.g. from
``wneurons.models.convert_gguf_wheel``.

    OMP_NUM_THREADS=2 python perf/bench_blimp_vs_harness.py --model-dir /tmp/smollm2 --out bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import torch

from wneurons.data import load_blimp
from wneurons.io import provenance, write_json
from wneurons.models import load_model
from wneurons.scoring import score_blimp

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = Path(os.environ.get("WNEURONS_SHARED_DATA", "/work/shared/data")) / "blimp" / "data"


def bench_ours(model_dir: str, pairs: pl.DataFrame, dtype: str, batch_size: int) -> tuple[dict, pl.DataFrame]:
    """Score ``pairs`` once (after a short warm-up); returns timing + accuracy and the per-pair frame."""
    model, tokenizer = load_model(local_path=model_dir, dtype=dtype)
    score_blimp(model, tokenizer, pairs.head(8), convention="harness", batch_size=batch_size)  # warm-up
    wall, cpu = time.perf_counter(), time.process_time()
    summary, scored = score_blimp(
        model, tokenizer, pairs, convention="harness", batch_size=batch_size, return_pairs=True
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    scored = scored.with_columns(pairs["pair_id"].gather(scored["item"]))  # the per-pair frame keeps row numbers
    n_sentences = 2 * pairs.height
    return {
        "side": "wneurons",
        "dtype": dtype,
        "batch_size": batch_size,
        "wall_s": wall,
        "cpu_s": cpu,
        "sentences_per_s": n_sentences / wall,
        "sentences_per_cpu_s": n_sentences / cpu,
        "accuracy": summary["overall"],
        "by_paradigm": summary["by_paradigm"],
    }, scored


def bench_harness(python: str, model_dir: str, data_dir: Path, paradigms: list[str], n_pairs: int, batch_size: str):
    """Run the harness in its own interpreter; returns timing + accuracy and its per-pair log-likelihoods."""
    cmd = [
        python,
        str(HERE / "harness" / "run_harness_blimp.py"),
        f"--model-dir={model_dir}",
        f"--data-dir={data_dir}",
        f"--paradigms={','.join(paradigms)}",
        f"--limit={n_pairs}",
        f"--batch-size={batch_size}",
        "--dtype=float32",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd="/tmp")
    if done.returncode != 0:
        raise RuntimeError(f"harness run failed ({' '.join(cmd)}):\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # Every paradigm has the same number of pairs, so the mean over paradigms is the micro-average.
    accuracy = float(np.mean(list(out["acc_by_paradigm"].values())))
    return {
        "side": "lm-eval",
        "dtype": "float32",
        "batch_size": batch_size,
        "wall_s": out["wall_s"],
        "cpu_s": out["cpu_s"],
        "sentences_per_s": out["n_requests"] / out["wall_s"],
        "sentences_per_cpu_s": out["n_requests"] / out["cpu_s"],
        "accuracy": accuracy,
        "by_paradigm": out["acc_by_paradigm"],
    }, out["loglik"]


def max_loglik_difference(scored: pl.DataFrame, loglik: dict[str, list]) -> float:
    """Largest |ours - harness| log-prob over all sentences (nats); pairs matched by paradigm and row order."""
    worst = 0.0
    for paradigm, rows in loglik.items():
        ours = scored.filter(pl.col("paradigm") == paradigm).sort("pair_id")
        rows = sorted(rows)
        theirs = np.array([[r[1], r[2]] for r in rows])
        mine = ours.select("logprob_good", "logprob_bad").to_numpy()[: len(rows)]
        worst = max(worst, float(np.abs(mine - theirs).max()))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default="/tmp/smollm2", help="local safetensors model directory")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="folder of BLiMP <paradigm>.jsonl")
    parser.add_argument("--n-paradigms", type=int, default=10)
    parser.add_argument("--n-pairs", type=int, default=100, help="first N pairs of each paradigm")
    parser.add_argument("--batch-size", type=int, default=64, help="ours")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="ours, comma-separated")
    parser.add_argument("--harness-python", default="/tmp/lmeval/bin/python", help="'' skips the harness")
    parser.add_argument("--harness-batch-sizes", default="64,1", help="comma-separated; 1 is the harness default")
    parser.add_argument("--threads", type=int, default=None, help="torch threads, both sides (default: torch's)")
    parser.add_argument("--out", type=Path, default=None, help="write all numbers here as JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    paradigms = sorted(p.stem for p in args.data_dir.glob("*.jsonl"))[: args.n_paradigms]
    pairs = load_blimp(args.data_dir, paradigms).group_by("paradigm", maintain_order=True).head(args.n_pairs)
    print(
        f"{len(paradigms)} paradigms x {args.n_pairs} pairs = {pairs.height} pairs; {torch.get_num_threads()} threads"
    )

    runs, scored_fp32 = [], None
    harness_python = args.harness_python if args.harness_python and Path(args.harness_python).exists() else None
    harness_logliks = {}
    if harness_python:
        for bs in args.harness_batch_sizes.split(","):
            run, harness_logliks[bs] = bench_harness(
                harness_python, args.model_dir, args.data_dir, paradigms, args.n_pairs, bs
            )
            runs.append(run)
            print(f"lm-eval  float32  bs={bs:>3}: {run['sentences_per_s']:.1f} sent/s, acc {run['accuracy']:.4f}")
    for dtype in args.dtypes.split(","):
        run, scored = bench_ours(args.model_dir, pairs, dtype, args.batch_size)
        runs.append(run)
        scored_fp32 = scored if dtype == "float32" else scored_fp32
        print(
            f"wneurons {dtype:8} bs={args.batch_size:>3}: "
            f"{run['sentences_per_s']:.1f} sent/s, acc {run['accuracy']:.4f}"
        )

    comparisons = []
    for theirs in (r for r in runs if r["side"] == "lm-eval"):
        for ours in (r for r in runs if r["side"] == "wneurons"):
            row = {
                "ours": f"{ours['dtype']} bs={ours['batch_size']}",
                "harness": f"float32 bs={theirs['batch_size']}",
                "speedup_wall": ours["sentences_per_s"] / theirs["sentences_per_s"],
                "speedup_cpu": ours["sentences_per_cpu_s"] / theirs["sentences_per_cpu_s"],
                "accuracy_difference_points": 100 * (ours["accuracy"] - theirs["accuracy"]),
            }
            if ours["dtype"] == "float32":
                row["max_abs_logprob_difference"] = max_loglik_difference(
                    scored_fp32, harness_logliks[theirs["batch_size"]]
                )
            comparisons.append(row)
            print(
                f"{row['ours']:>17} vs harness {row['harness']}: x{row['speedup_wall']:.2f} wall, "
                f"x{row['speedup_cpu']:.2f} CPU time, accuracy {row['accuracy_difference_points']:+.2f} points"
                + (
                    f", max |dlogp| {row['max_abs_logprob_difference']:.2e}"
                    if "max_abs_logprob_difference" in row
                    else ""
                )
            )
    if args.out:
        write_json(
            args.out,
            {
                "runs": runs,
                "comparisons": comparisons,
                "provenance": provenance(
                    model_dir=args.model_dir,
                    paradigms=paradigms,
                    n_pairs=args.n_pairs,
                    threads=torch.get_num_threads(),
                    convention="harness",
                    argv=sys.argv,
                ),
            },
        )


if __name__ == "__main__":
    main()
