"""How much the grid's numbers move when a real model runs in a cheaper precision than fp32, on a stated sample,
and what each precision costs on the paper grid (docs/performance.md, "Precision").

    python perf/precision_check.py measure --model smollm2=resources/models/smollm2-135m \\
        --model gemma3=resources/models/gemma3-270m [--blimp-pairs 300 --tse-items 300 --wd-tokens 4096]
    python perf/precision_check.py cost [config/config.yaml] [--tflops fp32=20,tf32=100,bf16=200]

``measure`` (the CPU, or a GPU with ``--device cuda``, where ``tf32`` is real TF32): for each model and
precision, BLiMP and TSE decisions (scored as the grid does: ``score_blimp`` / ``score_tse``, the ``authors``
convention) on a seeded sample, and WD / MD of every neuron from
activation shards over the first ``--wd-tokens`` tokens of WikiText-2 test (float16 shards, exact WD, as the grid);
then, against fp32, the decisions that flip, the largest log-prob change, the WD change and the top-1% WD cohort
(per layer, the rule the ablations use) members that leave. Precisions:

- ``bf16``: bf16 weights and matmuls (log-sum-exp in float32, statistics from float16 shards as always);
- ``tf32``: on a CPU identical to fp32 (TF32 is a CUDA tensor-core mode), so it is not run; ``tf32-emulated``
  instead rounds the inputs and weights of every ``nn.Linear`` to TF32's 10-bit mantissa (float32 accumulation),
  the projections' and LM head's share of TF32 on a GPU (attention's score and value matmuls stay float32: an
  underestimate of TF32's effect, by the share of those matmuls).

``cost``: GPU-hours and GPU memory per model of a config's grid for each precision, from ``perf/grid_jobs.py``'s
dry run and token counts (imported, not copied), at the sustained rate per precision the planner sizes the
allocations with (``SUSTAINED_TFLOPS``, or ``--tflops``): assumptions, printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import polars as pl
import torch

from wneurons.experiment.allocations import BYTES_PER_PARAM

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


# ---------------------------------------------------------------------------------------------------------------
# measure


def round_to_tf32(x: torch.Tensor) -> torch.Tensor:
    """``x`` (float32) rounded to nearest-even at TF32's 10 explicit mantissa bits (the low 13 bits cleared)."""
    bits = x.float().contiguous().view(torch.int32)
    rounded = (bits + 0x0FFF + ((bits >> 13) & 1)) & ~0x1FFF
    return rounded.view(torch.float32)


def emulate_tf32(model: torch.nn.Module) -> None:
    """Make every ``nn.Linear`` of ``model`` multiply TF32-rounded inputs by TF32-rounded weights (in place; the
    stored weights stay float32, a tied embedding is not rounded)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):

            def forward(x, m=module):
                return torch.nn.functional.linear(round_to_tf32(x), round_to_tf32(m.weight), m.bias)

            module.forward = forward


def load(model_dir: str, precision: str, device: str = "cpu"):
    from wneurons.lm.models import load_model

    dtype = "fp32" if precision == "tf32-emulated" else precision
    model, tokenizer = load_model(local_path=model_dir, dtype=dtype, device=device)
    if precision == "tf32-emulated":
        emulate_tf32(model)
    return model, tokenizer


def samples(n_blimp: int, n_tse: int, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Seeded samples of BLiMP pairs and TSE items (uniform over the whole sets)."""
    from wneurons.store.data import load_blimp, load_tse

    blimp = load_blimp(DATA / "blimp" / "data")
    tse = load_tse(DATA / "tse" / "pickle" / "EMNLP2018", "pickle")
    return blimp.sample(n_blimp, seed=seed), tse.sample(n_tse, seed=seed)


def neuron_table(model, tokenizer, text: str, tokens: int, window: int, out: Path) -> pl.DataFrame:
    """WD / MD of every neuron from float16 shards over ``tokens`` tokens (the family's window BOS), exact WD."""
    from wneurons.core.stats import neuron_statistics
    from wneurons.lm.activations import collect_activation_shards
    from wneurons.lm.models import tokenizer_adds_bos
    from wneurons.lm.registry import family_spec, resolve_window_bos

    bos = resolve_window_bos(None, family_spec(model), tokenizer_adds_bos(tokenizer))[0]
    collect_activation_shards(
        model, tokenizer, text, out, window=window, max_tokens=tokens, md_tokens=min(2000, tokens), seed=0,
        dtype="float16", window_bos=bos, batch_size=1,
    )  # fmt: skip
    return neuron_statistics(out, wd_method="exact", md_pairs=1000, seed=0)


def run_one(model_dir: str, precision: str, blimp, tse, text: str, args) -> dict:
    """Scores, neuron table and seconds of one model in one precision, on ``args.device`` (with TF32 on for
    ``tf32`` on a CUDA device); the peak GPU memory in GiB there."""
    from wneurons.lm.models import matmul_precision

    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    with matmul_precision("fp32" if precision == "tf32-emulated" else precision, args.device):
        row = _run_one(model_dir, precision, blimp, tse, text, args)
    row["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    return row


def _run_one(model_dir: str, precision: str, blimp, tse, text: str, args) -> dict:
    from wneurons.lm.scoring import score_blimp, score_tse

    model, tokenizer = load(model_dir, precision, args.device)
    row: dict = {"precision": precision}
    start = time.perf_counter()
    row["blimp"] = score_blimp(model, tokenizer, blimp, batch_size=args.batch_size, return_pairs=True)[1]
    row["blimp_s"] = time.perf_counter() - start
    start = time.perf_counter()
    row["tse"] = score_tse(model, tokenizer, tse, batch_size=args.batch_size, return_items=True)[1]
    row["tse_s"] = time.perf_counter() - start
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        row["neurons"] = neuron_table(model, tokenizer, text, args.wd_tokens, args.window, Path(tmp) / "shards")
    row["wd_s"] = time.perf_counter() - start
    return row


def top_cohort(stats: pl.DataFrame, percent: float) -> set[tuple[int, int]]:
    from wneurons.core.selection import select_neurons

    layers = sorted(stats["layer"].unique().to_list())
    chosen = select_neurons(stats, "wasserstein", percent, layers)
    return {(layer, int(n)) for layer, idx in chosen.items() for n in idx.tolist()}


def compare(ref: dict, row: dict, percent: float) -> dict:
    """What moves from ``ref`` (fp32) to ``row``: decisions, log-probs, WD, MD and the top-``percent`` WD cohort."""
    out = {"precision": row["precision"], "peak_gpu_gib": row.get("peak_gpu_gib")}
    for bench in ("blimp", "tse"):
        a, b = ref[bench], row[bench]
        flips = int((a["correct"] != b["correct"]).sum())
        delta = np.abs(
            np.concatenate([(a[c] - b[c]).to_numpy() for c in ("logprob_good", "logprob_bad")]).astype(np.float64)
        )
        out[bench] = {
            "n": a.height,
            "decisions_moved": flips,
            "accuracy_ref": float(a["correct"].mean()),
            "accuracy": float(b["correct"].mean()),
            "max_abs_logprob_change": float(np.nanmax(delta)),
            "median_abs_logprob_change": float(np.nanmedian(delta)),
            "seconds": round(row[f"{bench}_s"], 1),
        }
    out["neurons"] = neuron_changes(ref["neurons"], row["neurons"], percent) | {"seconds": round(row["wd_s"], 1)}
    return out


def neuron_changes(ref: pl.DataFrame, table: pl.DataFrame, percent: float) -> dict:
    """How the per-neuron statistics ``table`` differ from ``ref`` (same neurons): WD change (median / max
    absolute, median relative), WD Spearman, MD median change, and how many of ``ref``'s top-``percent`` WD cohort
    (per layer, the ablations' rule) are not in ``table``'s."""
    wa, wb = ref.sort("layer", "neuron"), table.sort("layer", "neuron")
    dwd = np.abs(wa["wd"].to_numpy() - wb["wd"].to_numpy())
    rel = dwd / np.maximum(np.abs(wa["wd"].to_numpy()), 1e-12)
    dmd = np.abs(wa["md"].to_numpy() - wb["md"].to_numpy()) if "md" in wa.columns else np.array([np.nan])
    ca, cb = top_cohort(wa, percent), top_cohort(wb, percent)
    return {
        "n_neurons": wa.height,
        "wd_median_abs_change": float(np.median(dwd)),
        "wd_max_abs_change": float(dwd.max()),
        "wd_median_rel_change": float(np.median(rel)),
        "wd_spearman": float(
            pl.DataFrame({"a": wa["wd"], "b": wb["wd"]}).select(pl.corr("a", "b", method="spearman"))[0, 0]
        ),
        "md_median_abs_change": float(np.nanmedian(dmd)),
        f"top{percent:g}pct_cohort_size": len(ca),
        f"top{percent:g}pct_cohort_left": len(ca - cb),
    }


def measure(args) -> None:
    from wneurons.lm.models import job_devices
    from wneurons.store.data import wikitext_split

    torch.set_num_threads(args.threads)
    args.device = args.device or job_devices(os.environ, torch.cuda.is_available(), torch.cuda.device_count())[0]
    blimp, tse = samples(args.blimp_pairs, args.tse_items, args.seed)
    text = wikitext_split(DATA / "wikitext-2" / "raw", "test")
    report = {
        "sample": {
            "blimp_pairs": blimp.height,
            "tse_items": tse.height,
            "wd_tokens": args.wd_tokens,
            "window": args.window,
            "seed": args.seed,
            "threads": args.threads,
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu",
        },
        "models": {},
    }
    for name, model_dir in (m.split("=", 1) for m in args.model):
        ref = run_one(model_dir, "fp32", blimp, tse, text, args)
        rows = [compare(ref, ref, args.percent)]
        for precision in args.precisions.split(","):
            if precision == "fp32" or (precision == "tf32" and not args.device.startswith("cuda")):
                continue  # the reference; tf32 is fp32 on a CPU
            rows.append(compare(ref, run_one(model_dir, precision, blimp, tse, text, args), args.percent))
            print(json.dumps({name: rows[-1]}), flush=True)
        report["models"][name] = rows
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print_measure(report, args.percent)


def print_measure(report: dict, percent: float) -> None:
    s = report["sample"]
    print(
        f"\nn: {s['blimp_pairs']} BLiMP pairs, {s['tse_items']} TSE items (seed {s['seed']}), WD over {s['wd_tokens']} "
        f"WikiText-2 test tokens (windows of {s['window']}); torch {s['torch']}, {s['threads']} threads, "
        f"{s.get('device', 'cpu')}"
    )
    print(
        "| model | precision | BLiMP decisions moved | TSE decisions moved | max abs log-prob change (nats) "
        f"| median abs WD change (rel.) | WD Spearman | top-{percent:g}% WD cohort members that leave "
        "| s (BLiMP/TSE/WD) | peak GPU GiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model, rows in report["models"].items():
        for r in rows:
            b, t, n = r["blimp"], r["tse"], r["neurons"]
            lp = max(b["max_abs_logprob_change"], t["max_abs_logprob_change"])
            print(
                f"| {model} | {r['precision']} | {b['decisions_moved']} of {b['n']} "
                f"| {t['decisions_moved']} of {t['n']} | {lp:.3g} "
                f"| {n['wd_median_abs_change']:.2g} ({n['wd_median_rel_change']:.1e}) | {n['wd_spearman']:.5f} "
                f"| {n[f'top{percent:g}pct_cohort_left']} of {n[f'top{percent:g}pct_cohort_size']} "
                f"| {b['seconds']}/{t['seconds']}/{n['seconds']} "
                f"| {'-' if r.get('peak_gpu_gib') is None else format(r['peak_gpu_gib'], '.1f')} |"
            )


# ---------------------------------------------------------------------------------------------------------------
# cost


def gpu_memory_gb(params_b: float, precision: str, vocab: int, batch: int = 64, length: int = 200) -> float:
    """GB a scoring job needs on the GPU: the weights in ``precision`` plus, the largest transient, lm-eval's
    float32 log-softmax of a ``[batch, length, vocab]`` batch and its logits in the weights' dtype (perplexity caps
    its logits at 2 GiB per batch, which is less at these sizes), plus 10% for the forward's activations and the
    allocator. An estimate, not a measurement."""
    weights = params_b * 1e9 * BYTES_PER_PARAM[precision]
    logits = batch * length * vocab * (4 + BYTES_PER_PARAM[precision])
    return 1.1 * (weights + logits) / 1e9


# Vocabulary sizes of the grid's families (their config.json), for the logits term of gpu_memory_gb.
VOCAB = {"pythia": 50_304, "llama": 128_256, "mistral": 32_768, "qwen3": 151_936, "opt": 50_272}


def cost(args) -> None:
    import yaml

    from wneurons.experiment.allocations import SUSTAINED_TFLOPS
    from wneurons.experiment.config import validate_config
    from wneurons.experiment.plan import dry_run  # perf/grid_jobs.py's dry run: the GPU-hours table's own
    from wneurons.experiment.rule_files import rules_with
    from wneurons.experiment.workload import tokens_of

    schema = ROOT / "workflow/schemas/config.schema.yaml"
    config = validate_config(yaml.safe_load((ROOT / args.config).read_text()), schema)
    gpu = rules_with("gpu=1,", ROOT)
    flops: dict[str, float] = defaultdict(float)
    # The default site (24 h, no SLURM asked): the grid as perf/grid_jobs.py --site-limits none plans it.
    for job in dry_run(args.config, [args.profile], root=ROOT, site_limits="none"):
        if job.rule in gpu:
            params = config["models"][job.wildcards["model"]]["params_b"] * 1e9
            flops[job.wildcards["model"]] += 2 * params * tokens_of(config, job.rule, job.wildcards)
    # The planner's rates (the allocations are sized with them), one per precision; --tflops replaces them.
    given = dict((k, float(v)) for k, v in (kv.split("=") for kv in args.tflops.split(","))) if args.tflops else {}
    rates = {p: given.get(p, SUSTAINED_TFLOPS[p]) for p in ("fp32", "tf32", "bf16")}
    source = "--tflops" if given else "wneurons.experiment.allocations.SUSTAINED_TFLOPS, the planner's"
    print(
        f"config {args.config}; forward FLOPs = 2 x parameters x tokens of every GPU job (perf/grid_jobs.py); "
        f"sustained TFLOP/s {rates} ({source}; assumptions)"
    )
    models = sorted(flops, key=lambda m: config["models"][m]["params_b"])
    print(
        "| model | PFLOP | "
        + " | ".join(f"{p} ({t:g}) GPU-h" for p, t in rates.items())
        + " | GPU GB fp32 = tf32 | GPU GB bf16 |"
    )
    print("|---|---|" + "---|" * len(rates) + "---|---|")
    totals: dict[str, float] = defaultdict(float)
    for model in models:
        spec = config["models"][model]
        vocab = next((v for k, v in VOCAB.items() if model.startswith(k)), 50_304)
        hours = {p: flops[model] / (t * 1e12) / 3600 for p, t in rates.items()}
        for p, h in hours.items():
            totals[p] += h
        mem = " | ".join(f"{gpu_memory_gb(spec['params_b'], p, vocab):.0f}" for p in ("fp32", "bf16"))
        cells = " | ".join(f"{h:,.1f}" for h in hours.values())
        print(f"| {model} | {flops[model] / 1e15:,.0f} | {cells} | {mem} |")
    cells = " | ".join(f"**{totals[p]:,.0f}**" for p in rates)
    print(f"| **total** | **{sum(flops.values()) / 1e15:,.0f}** | {cells} | | |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="decisions, WD and cohorts that move from fp32, on a CPU")
    m.add_argument("--model", action="append", required=True, help="NAME=DIR of a converted model (repeatable)")
    m.add_argument("--precisions", default="bf16,tf32-emulated", help="compared with fp32 (tf32 = fp32 on a CPU)")
    m.add_argument("--device", default=None, help="default: the jobs' (WNEURONS_DEVICE overrides)")
    m.add_argument("--blimp-pairs", type=int, default=300)
    m.add_argument("--tse-items", type=int, default=300)
    m.add_argument("--wd-tokens", type=int, default=4096)
    m.add_argument("--window", type=int, default=1024)
    m.add_argument("--percent", type=float, default=1.0, help="the WD cohort compared (top percent per layer)")
    m.add_argument("--batch-size", type=int, default=64)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--threads", type=int, default=2)
    m.add_argument("--out", default="perf/out/precision_check.json")
    c = sub.add_parser("cost", help="GPU-hours and GPU memory per precision of a config's grid")
    c.add_argument("config", nargs="?", default="config/config.yaml")
    c.add_argument("--profile", default="profiles/slurm")
    c.add_argument(
        "--tflops",
        help="sustained TFLOP/s per precision, e.g. fp32=19.5,tf32=156,bf16=312 (default: the planner's, "
        "wneurons.experiment.allocations.SUSTAINED_TFLOPS)",
    )
    args = parser.parse_args()
    measure(args) if args.command == "measure" else cost(args)


if __name__ == "__main__":
    main()
