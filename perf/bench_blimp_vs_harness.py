"""BLiMP throughput and accuracy: wneurons.lm.scoring vs lm-evaluation-harness on the same model, data and CPU.

Scores the first ``--n-pairs`` pairs of the first ``--n-paradigms`` BLiMP paradigms (sorted by name) with
``score_blimp(convention="harness")`` (float32) and with the harness's BLiMP task at each ``--harness-batch-sizes``
(``perf/harness/run_harness_blimp.py``, in a process of its own: lm-eval is a dependency of the project, its
capability suite, so it runs from the project's environment, ``--harness-python``), **interleaved**: ours, the
harness at each batch size, ours, ... ``--repeats`` times, so that the machine's drift reaches both sides alike.
Both sides are warmed up before they are timed (ours once per process, the harness once per process on a few
pairs); model loading is excluded on both. Reports, per harness batch size, the ratio of sentences/s (ours ÷
theirs, per repeat: median, min and max), the harness's fastest batch size by its median, both accuracies, how many
decisions differ and the largest per-sentence log-prob difference; the harness against itself at its other batch
sizes, and at ``--harness-untimed-batch-sizes`` (run once after the timed runs: batch 1 scores every sentence
alone); every sentence rescored by our engine in float64, and each side's fp32 error against it (median, p90, p99,
largest: which side's rounding a difference comes from); the achieved FLOP/s of our scoring
(2 × parameters × positions fed ÷ time) against a plain float32 matmul of this machine, same threads.
``--dtypes`` other than float32 are then run once each and compared with our float32 run.

The model must be a local safetensors directory (the harness cannot read GGUF), e.g. from
``wneurons.lm.models.convert_gguf_wheel``.

    OMP_NUM_THREADS=2 python perf/bench_blimp_vs_harness.py --model-dir /tmp/smollm2 --out bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
import torch
from scoring_positions import packed_positions  # this folder

from wneurons.lm.models import load_model
from wneurons.lm.scoring import CONVENTIONS, PREFIX_TREE_ROW, score_blimp, sequence_logprobs, tokenize
from wneurons.store.data import load_blimp
from wneurons.store.io import provenance, write_json

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = Path(os.environ.get("WNEURONS_SHARED_DATA", "/work/shared/data")) / "blimp" / "data"


def first_pairs(data_dir: Path, n_paradigms: int, n_pairs: int) -> tuple[list[str], pl.DataFrame]:
    """The first ``n_paradigms`` BLiMP paradigms (sorted by name) and the first ``n_pairs`` pairs of each."""
    paradigms = sorted(p.stem for p in data_dir.glob("*.jsonl"))[:n_paradigms]
    return paradigms, load_blimp(data_dir, paradigms).group_by("paradigm", maintain_order=True).head(n_pairs)


def load_warm(model_dir: str, pairs: pl.DataFrame, dtype: str, batch_size: int):
    """Our model in ``dtype``, warmed up on a few pairs (the first batches pay one-off allocations)."""
    model, tokenizer = load_model(local_path=model_dir, dtype=dtype)
    score_blimp(model, tokenizer, pairs.head(8), convention="harness", batch_size=batch_size)
    return model, tokenizer


def bench_ours(model, tokenizer, pairs: pl.DataFrame, dtype: str, batch_size: int) -> tuple[dict, pl.DataFrame]:
    """Score ``pairs`` once, timed; returns timing + accuracy and the per-pair frame."""
    wall, cpu = time.perf_counter(), time.process_time()
    summary, scored = score_blimp(
        model, tokenizer, pairs, convention="harness", batch_size=batch_size, return_pairs=True
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    # The per-pair frame keeps row numbers: the pair ids and sentences come from the input.
    scored = scored.with_columns(pairs.select("pair_id", "sentence_good", "sentence_bad")[scored["item"]])
    n_sentences = 2 * pairs.height
    return {
        "side": "wneurons",
        "dtype": dtype,
        "batch_size": batch_size,
        "pairs": pairs.height,
        "wall_s": wall,
        "cpu_s": cpu,
        "sentences_per_s": n_sentences / wall,
        "sentences_per_cpu_s": n_sentences / cpu,
        "accuracy": summary["overall"],
        "by_paradigm": summary["by_paradigm"],
    }, scored


def positions_fed(tokenizer, pairs: pl.DataFrame, batch_size: int) -> dict[str, int]:
    """Token positions one scoring of ``pairs`` runs through the model under the harness convention: ``whole``, the
    harness's (the context token and every sentence token but the last, which predicts nothing; good and bad
    sentences; padding aside), and ``nodes`` / ``fed``, ours (each distinct sentence once, each shared prefix once
    in the engine's prefix-tree rows; without / with their padding)."""
    texts = pairs["sentence_good"].to_list() + pairs["sentence_bad"].to_list()
    whole = sum(len(ids) - 1 for ids in CONVENTIONS["harness"].encode(tokenizer, texts)[0])
    flat, offsets, _ = tokenize(tokenizer, list(dict.fromkeys(texts)), "harness")
    nodes, fed = packed_positions(flat, offsets, batch_size, PREFIX_TREE_ROW)
    return {"whole": whole, "nodes": nodes, "fed": fed}


def matmul_flops(threads: int, size: int = 2048, seconds: float = 2.0) -> float:
    """FLOP/s of a plain float32 ``size`` x ``size`` matmul on this machine at the current thread count (the best of
    repeats over about ``seconds``): the hardware reference for the scoring's achieved FLOP/s."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)  # warm-up
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        torch.mm(a, b)
        best = max(best, 2 * size**3 / (time.perf_counter() - start))
    return best


# The first characters of the lines perf/harness/run_harness_blimp.py prints (lm-eval may print more): once ready,
# then one result per run.
READY, RESULT_LINE = "harness ready", '{"acc_by_paradigm"'


class Harness:
    """lm-evaluation-harness in a process of its own at one batch size: the model loaded and warmed up once, then
    one timed run of the pairs per :meth:`run` (a line on its stdin), so that its runs interleave with ours."""

    def __init__(self, python: str, model_dir: str, data_dir: Path, paradigms: list[str], n_pairs: int, bs: str):
        self.batch_size = bs
        self.cmd = [
            python,
            str(HERE / "harness" / "run_harness_blimp.py"),
            f"--model-dir={model_dir}",
            f"--data-dir={data_dir}",
            f"--paradigms={','.join(paradigms)}",
            f"--limit={n_pairs}",
            f"--batch-size={bs}",
            "--dtype=float32",
        ]
        env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            self.cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, cwd="/tmp"
        )

    def _read_until(self, prefix: str) -> str:
        for line in self.proc.stdout:
            if line.startswith(prefix):
                return line
        self.stderr.seek(0)
        raise RuntimeError(f"harness run failed ({' '.join(self.cmd)}):\n{self.stderr.read()[-3000:]}")

    def wait_ready(self) -> None:
        """Returns once the process has loaded its model and warmed up (so that it computes nothing beside a
        timed run of ours)."""
        self._read_until(READY)

    def run(self) -> tuple[dict, dict]:
        """One timed run: timing + accuracy, and the per-pair log-likelihoods."""
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        out = json.loads(self._read_until(RESULT_LINE))
        # Every paradigm has the same number of pairs, so the mean over paradigms is the micro-average.
        accuracy = float(np.mean(list(out["acc_by_paradigm"].values())))
        return {
            "side": "lm-eval",
            "dtype": "float32",
            "batch_size": self.batch_size,
            "wall_s": out["wall_s"],
            "cpu_s": out["cpu_s"],
            "sentences_per_s": out["n_requests"] / out["wall_s"],
            "sentences_per_cpu_s": out["n_requests"] / out["cpu_s"],
            "accuracy": accuracy,
            "by_paradigm": out["acc_by_paradigm"],
        }, out["loglik"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=120)
        self.stderr.close()


def differences(mine: np.ndarray, ref: np.ndarray) -> dict:
    """Two runs' ``[pairs, 2]`` (good, bad) log-probs, pair by pair: the largest sentence log-prob difference (nats)
    and the number of pairs whose decision (good > bad) differs."""
    return {
        "max_abs_logprob_difference": float(np.abs(mine - ref).max()),
        "decisions_differ": int(((mine[:, 0] > mine[:, 1]) != (ref[:, 0] > ref[:, 1])).sum()),
        "pairs_compared": len(mine),
    }


def paired_with_harness(scored: pl.DataFrame, loglik: dict[str, list]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Our fp32 ``[pairs, 2]`` (good, bad) log-probs, the harness's and the sentences, pairs matched by paradigm and
    row order."""
    mine, theirs, texts = [], [], []
    for paradigm, rows in loglik.items():
        ours = scored.filter(pl.col("paradigm") == paradigm).sort("pair_id").head(len(rows))
        theirs.append(np.array([[r[1], r[2]] for r in sorted(rows)]))
        mine.append(ours.select("logprob_good", "logprob_bad").to_numpy())
        texts.append(ours.select("sentence_good", "sentence_bad").to_numpy())
    return np.concatenate(mine), np.concatenate(theirs), np.concatenate(texts)


def against_harness(scored: pl.DataFrame, loglik: dict[str, list]) -> dict:
    """Our fp32 scores against the harness's (:func:`paired_with_harness`)."""
    mine, theirs, _ = paired_with_harness(scored, loglik)
    return differences(mine, theirs)


def float64_errors(model, tokenizer, texts: np.ndarray, sides: dict[str, np.ndarray], batch_size: int) -> dict:
    """Every sentence of ``texts`` (``[pairs, 2]``) scored again by our engine in float64 (``model`` is converted),
    and each side's fp32 error against it (``sides``: name -> ``[pairs, 2]`` log-probs aligned with ``texts``):
    median, 90th / 99th percentile and largest, in nats. Two fp32 engines that batch differently each err by
    rounding; this says how far each is from the exact value, over every sentence, not only where they differ."""
    distinct = list(dict.fromkeys(texts.reshape(-1).tolist()))
    exact, _ = sequence_logprobs(model.double(), tokenizer, distinct, convention="harness", batch_size=batch_size)
    lookup = dict(zip(distinct, exact, strict=True))
    exact = np.vectorize(lookup.__getitem__, otypes=[np.float64])(texts)
    errors = {}
    for name, values in sides.items():
        error = np.abs(values - exact).reshape(-1)
        errors[name] = {
            "median": float(np.median(error)),
            "p90": float(np.quantile(error, 0.9)),
            "p99": float(np.quantile(error, 0.99)),
            "max": float(error.max()),
        }
    return {"sentences": len(distinct), "errors": errors}


def harness_against_itself(scored: pl.DataFrame, logliks: dict[str, dict], bs: str, best: str) -> dict:
    """The harness at batch ``bs`` against itself at ``best``: what a change of batch shape alone moves in fp32."""
    theirs_here, theirs_best = (paired_with_harness(scored, logliks[b])[1] for b in (bs, best))
    return differences(theirs_here, theirs_best)


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
    parser.add_argument("--repeats", type=int, default=3, help="interleaved timed runs of each side")
    parser.add_argument(
        "--no-float64", action="store_true", help="skip rescoring every sentence in float64 (each side's fp32 error)"
    )
    parser.add_argument(
        "--harness-batch-sizes", default="32,64,128", help="comma-separated, timed; its fastest is the reference"
    )
    parser.add_argument(
        "--harness-untimed-batch-sizes",
        default="",
        help="comma-separated; the harness once more at each, after the timed runs, for its log-probs only (what a "
        "change of its own batch shape moves; batch 1 scores every sentence alone)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads, both sides (default: torch's)")
    parser.add_argument("--out", type=Path, default=None, help="write all numbers here as JSON")
    args = parser.parse_args()
    args.model_dir = str(Path(args.model_dir).resolve())  # the harness runs in another working directory
    args.data_dir = args.data_dir.resolve()
    harness_python = None
    if args.harness_python:  # '' skips the harness on purpose; a path that does not resolve is an error
        harness_python = str(Path(args.harness_python).absolute())  # not resolve(): a venv's python is a symlink
        if not Path(harness_python).is_file():
            parser.error(f"--harness-python {args.harness_python}: no such interpreter ({harness_python})")
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: at least 1")
    if args.threads:
        torch.set_num_threads(args.threads)

    paradigms, pairs = first_pairs(args.data_dir, args.n_paradigms, args.n_pairs)
    print(
        f"{len(paradigms)} paradigms x {args.n_pairs} pairs = {pairs.height} pairs; {torch.get_num_threads()} threads"
    )

    runs, harness_logliks = [], {}
    batch_sizes = args.harness_batch_sizes.split(",") if harness_python else []
    untimed = [bs for bs in args.harness_untimed_batch_sizes.split(",") if bs] if harness_python else []
    harnesses = [
        Harness(harness_python, args.model_dir, args.data_dir, paradigms, args.n_pairs, bs) for bs in batch_sizes
    ]
    model, tokenizer = load_warm(args.model_dir, pairs, "float32", args.batch_size)
    try:
        for harness in harnesses:
            harness.wait_ready()
        for repeat in range(args.repeats):  # interleaved: ours, the harness at each batch size, ours, ...
            run, fp32 = bench_ours(model, tokenizer, pairs, "float32", args.batch_size)
            runs.append(run | {"repeat": repeat})
            print(f"[{repeat}] wneurons float32 bs={args.batch_size:>3}: {run['sentences_per_s']:.1f} sent/s")
            for harness in harnesses:
                run, harness_logliks[harness.batch_size] = harness.run()
                runs.append(run | {"repeat": repeat})
                print(f"[{repeat}] lm-eval  float32 bs={harness.batch_size:>3}: {run['sentences_per_s']:.1f} sent/s")
    finally:
        for harness in harnesses:
            harness.close()
    for bs in untimed:  # one at a time, after the timed runs: nothing of theirs runs beside a timed run
        harness = Harness(harness_python, args.model_dir, args.data_dir, paradigms, args.n_pairs, bs)
        try:
            harness.wait_ready()
            _, harness_logliks[bs] = harness.run()
        finally:
            harness.close()
        print(f"lm-eval  float32 bs={bs:>3}: scored once, untimed, for its log-probs")
    ours = [r for r in runs if r["side"] == "wneurons"]
    median_s = float(np.median([r["wall_s"] for r in ours]))
    positions = positions_fed(tokenizer, pairs, args.batch_size)
    n_params = sum(p.numel() for p in model.parameters())
    hardware = matmul_flops(torch.get_num_threads())
    # The rate of what the engine feeds (padding included) against the hardware; the harness's work done per second.
    achieved = 2 * n_params * positions["fed"] / median_s
    flops = {
        "parameters": n_params,
        "positions": positions,
        "median_wall_s": median_s,
        "achieved_flops": achieved,
        "whole_sentence_flops": 2 * n_params * positions["whole"] / median_s,
        "matmul_flops": hardware,
        "fraction_of_matmul": achieved / hardware,
    }
    print(
        f"wneurons float32: {positions['fed']} positions fed ({positions['nodes']} prefix-tree nodes and their "
        f"padding; the harness feeds {positions['whole']}) x {n_params / 1e6:.1f}M parameters in {median_s:.2f} s "
        f"(median) = {achieved / 1e9:.1f} GFLOP/s, {100 * achieved / hardware:.0f}% of a plain fp32 matmul here "
        f"({hardware / 1e9:.1f} GFLOP/s); the harness's positions in that time: "
        f"{flops['whole_sentence_flops'] / 1e9:.1f} GFLOP/s"
    )
    print(
        f"wneurons float32: accuracy {ours[0]['accuracy']:.4f}; sentences/s over {args.repeats} repeats: "
        + ", ".join(f"{r['sentences_per_s']:.1f}" for r in ours)
    )

    comparisons = []
    by_bs = {bs: [r for r in runs if r["side"] == "lm-eval" and r["batch_size"] == bs] for bs in batch_sizes}
    medians = {bs: float(np.median([r["sentences_per_s"] for r in theirs])) for bs, theirs in by_bs.items()}
    best = max(medians, key=medians.get, default=None)
    for bs, theirs in by_bs.items():
        ratios = [o["sentences_per_s"] / t["sentences_per_s"] for o, t in zip(ours, theirs, strict=True)]
        cpu_ratios = [o["sentences_per_cpu_s"] / t["sentences_per_cpu_s"] for o, t in zip(ours, theirs, strict=True)]
        row = {
            "ours": f"float32 bs={args.batch_size}",
            "harness": f"float32 bs={bs}",
            "harness_best_batch_size": bs == best,
            "speedup_wall_per_repeat": ratios,
            "speedup_wall_median": float(np.median(ratios)),
            "speedup_wall_min": min(ratios),
            "speedup_wall_max": max(ratios),
            "speedup_cpu_median": float(np.median(cpu_ratios)),
            "accuracy_difference_points": 100 * (ours[0]["accuracy"] - theirs[0]["accuracy"]),
        } | against_harness(fp32, harness_logliks[bs])
        if bs != best:
            row["harness_against_its_fastest"] = harness_against_itself(fp32, harness_logliks, bs, best)
        comparisons.append(row)
        print(
            f"float32 bs={args.batch_size} vs harness bs={bs}{' (its fastest)' if bs == best else ''}: "
            f"x{row['speedup_wall_median']:.2f} wall (median of {len(ratios)}; "
            f"{row['speedup_wall_min']:.2f}-{row['speedup_wall_max']:.2f}), x{row['speedup_cpu_median']:.2f} CPU time, "
            "accuracy {accuracy_difference_points:+.2f} points, {decisions_differ} of {pairs_compared} decisions "
            "differ, max |dlogp| {max_abs_logprob_difference:.2e}".format(**row)
        )
        if "harness_against_its_fastest" in row:
            print(
                "  the harness at bs={} against itself at bs={}: {decisions_differ} decisions differ, max |dlogp| "
                "{max_abs_logprob_difference:.2e}".format(bs, best, **row["harness_against_its_fastest"])
            )
    untimed_rows = {bs: harness_against_itself(fp32, harness_logliks, bs, best) for bs in untimed}
    for bs, row in untimed_rows.items():
        print(
            "the harness at bs={} (untimed) against itself at bs={}: {decisions_differ} decisions differ, max |dlogp| "
            "{max_abs_logprob_difference:.2e}".format(bs, best, **row)
        )
    reference = None
    if not args.no_float64:
        ours_name = f"wneurons float32 bs={args.batch_size}"
        if best is None:  # no harness: our pairs in our order
            texts = fp32.select("sentence_good", "sentence_bad").to_numpy()
            sides = {ours_name: fp32.select("logprob_good", "logprob_bad").to_numpy()}
        else:  # the harness's pairs, each side aligned with them
            mine, _, texts = paired_with_harness(fp32, harness_logliks[best])
            sides = {ours_name: mine}
            for bs, loglik in harness_logliks.items():
                sides[f"lm-eval float32 bs={bs}"] = paired_with_harness(fp32, loglik)[1]
        reference = float64_errors(model, tokenizer, texts, sides, args.batch_size)
        print(f"each side's fp32 error against float64 (our engine), over all {reference['sentences']} sentences:")
        for name, error in reference["errors"].items():
            print(
                f"  {name:24} median {error['median']:.2e}  p90 {error['p90']:.2e}  p99 {error['p99']:.2e}  "
                f"max {error['max']:.2e} nats"
            )
    del model

    for dtype in (d for d in args.dtypes.split(",") if d != "float32"):  # once each, against our float32
        subset = pairs
        if args.low_precision_pairs:
            subset = pairs.group_by("paradigm", maintain_order=True).head(args.low_precision_pairs)
        model, tokenizer = load_warm(args.model_dir, subset, dtype, args.batch_size)
        run, scored = bench_ours(model, tokenizer, subset, dtype, args.batch_size)
        del model
        run["against_float32"] = against_fp32(scored, fp32)
        runs.append(run)
        print(
            f"wneurons {dtype:8} bs={args.batch_size:>3}: {run['sentences_per_s']:.1f} sent/s on {subset.height} pairs,"
            " acc {:.4f} ({decisions_differ} of {pairs_compared} decisions differ from float32, max |dlogp| "
            "{max_abs_logprob_difference:.2e})".format(run["accuracy"], **run["against_float32"])
        )
    if args.out:
        write_json(
            args.out,
            {
                "runs": runs,
                "comparisons": comparisons,
                "harness_untimed": untimed_rows,
                "float64_reference": reference,
                "flops": flops,
                "provenance": provenance(
                    model_dir=args.model_dir,
                    paradigms=paradigms,
                    n_pairs=args.n_pairs,
                    threads=torch.get_num_threads(),
                    repeats=args.repeats,
                    convention="harness",
                    argv=sys.argv,
                ),
            },
        )


if __name__ == "__main__":
    main()
