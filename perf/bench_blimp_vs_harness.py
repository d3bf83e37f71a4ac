"""BLiMP throughput and accuracy: wneurons.lm.scoring vs lm-evaluation-harness on the same model, data and CPU.

Scores the first ``--n-pairs`` pairs of the first ``--n-paradigms`` BLiMP paradigms (sorted by name) with
``score_blimp(convention="harness")`` in each ``--dtypes``, then (when the harness's interpreter exists) runs the
harness's BLiMP task on the same pairs through ``perf/harness/run_harness_blimp.py`` at each
``--harness-batch-sizes``. Prints sentences/s (model loading excluded on both sides), the speed ratio, both
accuracies and the largest per-sentence log-prob difference. lm-eval is a dependency of the project (its
capability suite, wneurons.lm.lmeval), so the harness runs in the project's own environment, in a process of its
own (``--harness-python``, default this interpreter) so that neither side's imports, threads or caches time the
other's.

The model must be a local safetensors directory (the harness cannot read GGUF), e.g. from
``wneurons.lm.models.convert_gguf_wheel``.

    OMP_NUM_THREADS=2 python perf/bench_blimp_vs_harness.py --model-dir /tmp/smollm2 --out bench.json

Compares our float32 run with the harness's fastest batch size (the ratio the project's target is about) and with
each of the others, pair by pair: accuracy, how many decisions (good > bad) differ, and the largest sentence
log-prob difference. Other dtypes are compared with our float32 run the same way.
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

from wneurons.lm.models import load_model
from wneurons.lm.scoring import score_blimp
from wneurons.store.data import load_blimp
from wneurons.store.io import provenance, write_json

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
    """Run the harness in a process of its own; returns timing + accuracy and its per-pair log-likelihoods."""
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


def differences(mine: np.ndarray, ref: np.ndarray) -> dict:
    """Two runs' ``[pairs, 2]`` (good, bad) log-probs, pair by pair: the largest sentence log-prob difference (nats)
    and the number of pairs whose decision (good > bad) differs."""
    return {
        "max_abs_logprob_difference": float(np.abs(mine - ref).max()),
        "decisions_differ": int(((mine[:, 0] > mine[:, 1]) != (ref[:, 0] > ref[:, 1])).sum()),
        "pairs_compared": len(mine),
    }


def against_harness(scored: pl.DataFrame, loglik: dict[str, list]) -> dict:
    """Our fp32 scores against the harness's, pairs matched by paradigm and row order."""
    mine, theirs = [], []
    for paradigm, rows in loglik.items():
        ours = scored.filter(pl.col("paradigm") == paradigm).sort("pair_id")
        theirs.append(np.array([[r[1], r[2]] for r in sorted(rows)]))
        mine.append(ours.select("logprob_good", "logprob_bad").to_numpy()[: len(rows)])
    return differences(np.concatenate(mine), np.concatenate(theirs))


def against_fp32(scored: pl.DataFrame, fp32: pl.DataFrame) -> dict:
    """A lower-precision run's scores against our fp32 run on the pairs it scored."""
    both = scored.join(fp32, on=["paradigm", "pair_id"], suffix="_fp32")
    return differences(
        both.select("logprob_good", "logprob_bad").to_numpy(),
        both.select("logprob_good_fp32", "logprob_bad_fp32").to_numpy(),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default="/tmp/smollm2", help="local safetensors model directory")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="folder of BLiMP <paradigm>.jsonl")
    parser.add_argument("--n-paradigms", type=int, default=6)
    parser.add_argument("--n-pairs", type=int, default=1000, help="first N pairs of each paradigm")
    parser.add_argument("--batch-size", type=int, default=64, help="ours")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="ours, comma-separated; float32 is compared")
    parser.add_argument(
        "--low-precision-pairs",
        type=int,
        default=None,
        help="first N pairs per paradigm for the dtypes other than float32 (a CPU without bf16 units emulates it)",
    )
    parser.add_argument("--harness-python", default=sys.executable, help="'' skips the harness")
    parser.add_argument(
        "--harness-batch-sizes", default="32,64,128", help="comma-separated; its fastest is the reference"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads, both sides (default: torch's)")
    parser.add_argument("--out", type=Path, default=None, help="write all numbers here as JSON")
    args = parser.parse_args()
    args.model_dir = str(Path(args.model_dir).resolve())  # the harness runs in another working directory
    args.data_dir = args.data_dir.resolve()
    if args.threads:
        torch.set_num_threads(args.threads)

    paradigms = sorted(p.stem for p in args.data_dir.glob("*.jsonl"))[: args.n_paradigms]
    pairs = load_blimp(args.data_dir, paradigms).group_by("paradigm", maintain_order=True).head(args.n_pairs)
    print(
        f"{len(paradigms)} paradigms x {args.n_pairs} pairs = {pairs.height} pairs; {torch.get_num_threads()} threads"
    )

    runs, scored_by_dtype, harness_logliks = [], {}, {}
    harness_python = args.harness_python if args.harness_python and Path(args.harness_python).exists() else None
    if harness_python:
        for bs in args.harness_batch_sizes.split(","):
            run, harness_logliks[bs] = bench_harness(
                harness_python, args.model_dir, args.data_dir, paradigms, args.n_pairs, bs
            )
            runs.append(run)
            print(f"lm-eval  float32  bs={bs:>3}: {run['sentences_per_s']:.1f} sent/s, acc {run['accuracy']:.4f}")
    for dtype in args.dtypes.split(","):
        subset = pairs
        if dtype != "float32" and args.low_precision_pairs:
            subset = pairs.group_by("paradigm", maintain_order=True).head(args.low_precision_pairs)
        run, scored_by_dtype[dtype] = bench_ours(args.model_dir, subset, dtype, args.batch_size)
        run["pairs"] = subset.height
        if dtype != "float32" and "float32" in scored_by_dtype:
            run["against_float32"] = against_fp32(scored_by_dtype[dtype], scored_by_dtype["float32"])
        runs.append(run)
        print(
            f"wneurons {dtype:8} bs={args.batch_size:>3}: {run['sentences_per_s']:.1f} sent/s on {subset.height} pairs,"
            f" acc {run['accuracy']:.4f}"
            + (
                " ({decisions_differ} of {pairs_compared} decisions differ from float32,"
                " max |dlogp| {max_abs_logprob_difference:.2e})".format(**run["against_float32"])
                if "against_float32" in run
                else ""
            )
        )

    comparisons = []
    harness_runs = [r for r in runs if r["side"] == "lm-eval"]
    best = max(harness_runs, key=lambda r: r["sentences_per_s"], default=None)
    for theirs in harness_runs:
        # A dtype run on fewer pairs (--low-precision-pairs) is compared with our float32 run only.
        for ours in (r for r in runs if r["side"] == "wneurons" and r["pairs"] == pairs.height):
            row = {
                "ours": f"{ours['dtype']} bs={ours['batch_size']}",
                "harness": f"float32 bs={theirs['batch_size']}",
                "harness_best_batch_size": theirs is best,
                "speedup_wall": ours["sentences_per_s"] / theirs["sentences_per_s"],
                "speedup_cpu": ours["sentences_per_cpu_s"] / theirs["sentences_per_cpu_s"],
                "accuracy_difference_points": 100 * (ours["accuracy"] - theirs["accuracy"]),
            }
            if ours["dtype"] == "float32":
                row |= against_harness(scored_by_dtype["float32"], harness_logliks[theirs["batch_size"]])
            comparisons.append(row)
            print(
                f"{row['ours']:>17} vs harness {row['harness']}{' (its fastest)' if theirs is best else ''}: "
                f"x{row['speedup_wall']:.2f} wall, x{row['speedup_cpu']:.2f} CPU time, "
                f"accuracy {row['accuracy_difference_points']:+.2f} points"
                + (
                    ", {decisions_differ} of {pairs_compared} decisions differ,"
                    " max |dlogp| {max_abs_logprob_difference:.2e}".format(**row)
                    if "decisions_differ" in row
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
