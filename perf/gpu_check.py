"""Time the grid's three kinds of GPU work on a Pythia-1.4B-shaped model with random weights (no download).

    bash perf/gpu_check.sh                 # on a machine with a GPU (<= 8 minutes on an H200)
    python perf/gpu_check.py --shape tiny  # the same code path on a CPU, in seconds (a smoke run)

1. the statistics pass: activation shards of every layer over ``--collect-tokens`` tokens (windows of 2048, as
   config/config.yaml), then WD / sign split / MD of every neuron from them;
2. all of BLiMP: 67,000 pairs = 134,000 sentences of 4-26 tokens (BLiMP's spread; lengths drawn, seeded);
3. one ablation condition: the top 1% WD neurons of every layer clamped, BLiMP again and the perplexity pass
   (245k validation tokens);
4. the precisions compared (``--precisions``, default fp32,tf32,bf16; docs/performance.md, "Precision"): the same
   model with the same seed in each, ``--precision-sentences`` BLiMP-length sentences scored under each, with
   throughput, peak GPU memory, and how many minimal-pair decisions (sentence 2i vs 2i+1) and how large a
   log-prob change move from fp32; then activation shards of every layer over ``--precision-tokens`` tokens
   (collection throughput and peak GPU memory) and WD of every neuron from them: the WD change and the top-1% WD
   cohort members that leave (perf/precision_check.py's ``neuron_changes``). Phases 1-3 run in ``--precision``
   (default bf16); phase 1 collects ``--collect-tokens`` tokens (the shards of 280k would not fit a 64 GB disk).
The device is the jobs' (``WNEURONS_DEVICE=cpu`` runs it all on the CPU); ``--out-json`` writes every number.
Token ids are random (seeded): the time of a forward does not depend on which ids it reads, and no tokenizer or
data set is needed on the machine. Each time is printed beside its lower bound, 2 x parameters x tokens at the
device's dense bf16 peak (--peak-tflops; 989 for an H200 SXM), and the ratio between them.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

SHAPES = {
    # Pythia-1.4B (EleutherAI/pythia-1.4b config.json)
    "pythia-1.4b": dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=16, intermediate_size=8192),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256),
}


class _Ids:
    """A stand-in tokenizer: the 'text' is the token ids, written out with spaces."""

    bos_token_id = None

    def __call__(self, text, **_):
        return {"input_ids": [int(t) for t in text.split()]}


def _text(ids: np.ndarray) -> str:
    return " ".join(map(str, ids.tolist()))


def build(shape: str, device: str, dtype: torch.dtype):
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(
        vocab_size=50304,
        max_position_embeddings=2048,
        rotary_pct=0.25,
        use_parallel_residual=True,
        attn_implementation="sdpa",
        **SHAPES[shape],
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = GPTNeoXForCausalLM(config).to(dtype).eval()
    model.requires_grad_(False)
    return model


def collect_and_reduce(model, device: str, ids: np.ndarray, window: int, directory: str) -> tuple[float, float, object]:
    """Seconds and peak GPU GiB (NaN on a CPU) of collecting every layer's shards over ``ids`` (float16, the
    grid's), and the neuron statistics table from them (exact WD, as the grid)."""
    from wneurons.core.stats import neuron_statistics
    from wneurons.lm.activations import collect_activation_shards

    md_tokens = min(2000, ids.size)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    collect_activation_shards(
        model, _Ids(), _text(ids), directory, window=window, md_tokens=md_tokens, seed=0, dtype="float16",
        progress_every=1e9,
    )  # fmt: skip
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else float("nan")
    return seconds, peak, neuron_statistics(directory, wd_method="exact", md_pairs=md_tokens // 2, seed=0)


def compare_precisions(args, device: str, flat: np.ndarray, offsets: np.ndarray) -> list[dict]:
    """Phase 4, per precision: scoring throughput, peak GPU memory and the minimal-pair decisions that move from
    the first precision; collection throughput and peak memory, and the WD / top-1% cohort changes."""
    from precision_check import neuron_changes

    from wneurons.lm.models import matmul_precision, resolve_precision
    from wneurons.lm.scoring import batched_logprob_sums

    n = min(args.precision_sentences, len(offsets) - 1) // 2 * 2
    flat, offsets = flat[: offsets[n]], offsets[: n + 1]
    window = 2048
    tokens = max(window, args.precision_tokens // window * window)
    ids = np.random.default_rng(1).integers(0, 50304, tokens)
    print(
        f"\nprecisions on {n:,} sentences ({n // 2:,} pairs: sentence 2i vs 2i+1), batch {args.batch_size}; "
        f"shards of every layer over {tokens:,} tokens, WD of every neuron from them"
    )
    print(
        f"{'precision':<10}{'sentences/s':>12}{'peak GiB':>10}{'pairs moved':>13}{'max |dlogprob|':>16}"
        f"{'collect tok/s':>15}{'peak GiB':>10}{'WD rel. change':>16}{'WD Spearman':>13}{'top-1% left':>13}"
    )
    reference, rows = None, []
    for name in args.precisions.split(","):
        precision = resolve_precision(name)
        model = build(args.shape, device, precision.weights)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        with matmul_precision(precision, device):
            batched_logprob_sums(model, flat, offsets[: args.batch_size + 1], batch_size=args.batch_size, progress=None)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            sums = batched_logprob_sums(model, flat, offsets, batch_size=args.batch_size, progress=None)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            peak = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else float("nan")
            with tempfile.TemporaryDirectory() as tmp:
                collect_s, collect_peak, table = collect_and_reduce(model, device, ids, window, f"{tmp}/shards")
        decisions = sums[0::2] > sums[1::2]
        if reference is None:  # the first precision listed is the reference (fp32 by default)
            reference = (name, sums, decisions, table)
        moved = int((decisions != reference[2]).sum())
        change = float(np.abs(sums - reference[1]).max())
        neurons = neuron_changes(reference[3], table, 1.0)
        rows.append(
            dict(
                precision=name,
                reference=reference[0],
                sentences=n,
                sentences_per_s=n / seconds,
                peak_gib=peak,
                pairs=n // 2,
                pairs_moved=moved,
                max_abs_logprob_change=change,
                collect_tokens=tokens,
                collect_tokens_per_s=tokens / collect_s,
                collect_peak_gib=collect_peak,
                neurons=neurons,
            )  # fmt: skip
        )
        print(
            f"{name:<10}{n / seconds:>12,.0f}{peak:>10.1f}{moved:>13,}{change:>16.3g}{tokens / collect_s:>15,.0f}"
            f"{collect_peak:>10.1f}{neurons['wd_median_rel_change']:>16.2e}{neurons['wd_spearman']:>13.6f}"
            f"{neurons['top1pct_cohort_left']:>7} of {neurons['top1pct_cohort_size']:<4}  (vs {reference[0]})",
            flush=True,
        )
        del model
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", choices=SHAPES, default="pythia-1.4b")
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--batch-size", type=int, default=512, help="BLiMP sentences per forward")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of every token count (smoke runs)")
    parser.add_argument("--precision", default="bf16", help="precision of phases 1-3 on a GPU (fp32 on a CPU)")
    parser.add_argument("--precisions", default="fp32,tf32,bf16", help="phase 4, the first one the reference")
    parser.add_argument("--precision-sentences", type=int, default=20_000, help="phase 4's sentences")
    parser.add_argument("--precision-tokens", type=int, default=8192, help="phase 4's collection (whole windows)")
    parser.add_argument("--collect-tokens", type=int, default=16384, help="phase 1's collection (x --scale)")
    parser.add_argument("--skip-grid", action="store_true", help="phase 4 only")
    parser.add_argument("--out-json", default=None, help="every number of the run, as JSON")
    args = parser.parse_args()

    from wneurons.core.selection import select_neurons
    from wneurons.core.stats import neuron_statistics
    from wneurons.lm.ablation import clamp_negative_preactivations
    from wneurons.lm.activations import collect_activation_shards
    from wneurons.lm.models import job_devices, matmul_precision, resolve_precision
    from wneurons.lm.perplexity import perplexity
    from wneurons.lm.scoring import batched_logprob_sums

    device = job_devices(os.environ, torch.cuda.is_available(), torch.cuda.device_count())[0]
    precision = resolve_precision(args.precision if device.startswith("cuda") else "fp32")
    results: dict = {"args": vars(args), "torch": torch.__version__, "phases": {}}

    def save(**fields) -> None:
        results.update(fields)
        if args.out_json:
            Path(args.out_json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out_json).write_text(json.dumps(results, indent=1))

    dtype = precision.weights
    rng = np.random.default_rng(0)
    n_sentences = int(134_000 * args.scale) or 64
    lengths = rng.integers(4, 27, n_sentences)
    offsets = np.zeros(n_sentences + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = rng.integers(0, 50304, int(offsets[-1]))
    if args.skip_grid:
        save(precisions=compare_precisions(args, device, flat, offsets))
        return
    model = build(args.shape, device, dtype)
    n_params = sum(p.numel() for p in model.parameters() if p is not model.get_output_embeddings().weight)
    n_params += model.get_output_embeddings().weight.numel()  # the head is a matmul of its own (untied)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    save(device=name, parameters=n_params)
    print(
        f"device: {name}; shape {args.shape}: {n_params / 1e9:.3f}B parameters, {precision.name}; "
        f"torch {torch.__version__}"
    )
    tf32 = matmul_precision(precision, device)
    tf32.__enter__()  # phases 1-3 run with the matmul setting of their precision

    def report(what: str, seconds: float, tokens: float) -> None:
        bound = 2 * n_params * tokens / (args.peak_tflops * 1e12)
        ratio = seconds / bound
        print(f"{what:<44}{seconds:>9.1f} s   bound {bound:>7.1f} s   x{ratio:>6.1f}   {tokens:>12,.0f} tokens")
        results["phases"][what] = {"seconds": seconds, "bound_seconds": bound, "tokens": float(tokens)}
        save()

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    window, test_tokens = 2048, int(args.collect_tokens * args.scale) // 2048 * 2048 or 2048
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        collect_activation_shards(
            model,
            _Ids(),
            _text(rng.integers(0, 50304, test_tokens)),
            f"{tmp}/shards",
            window=window,
            max_tokens=None,
            md_tokens=2000,
            seed=0,
            dtype="float16",
            model_name=args.shape,
            progress_every=1e9,
        )
        sync()
        collect = time.perf_counter() - start
        report("statistics pass: shards of every layer", collect, test_tokens)
        start = time.perf_counter()
        stats = neuron_statistics(f"{tmp}/shards", wd_method="exact", md_pairs=1000, seed=0)
        print(f"{'statistics pass: WD, split, MD of every neuron':<44}{time.perf_counter() - start:>9.1f} s   (CPU)")

    def blimp() -> float:
        start = time.perf_counter()
        batched_logprob_sums(model, flat, offsets, batch_size=args.batch_size, progress=None)
        sync()
        return time.perf_counter() - start

    report("BLiMP: 67k pairs, clean", blimp(), offsets[-1])
    layers = list(range(model.config.num_hidden_layers))
    neurons = select_neurons(stats, "wasserstein", 1.0, layers)
    valid = rng.integers(0, 50304, (max(1, int(245_000 * args.scale) // window), window))
    with clamp_negative_preactivations(model, neurons):
        report("ablation (top 1% WD, every layer): BLiMP", blimp(), offsets[-1])
        start = time.perf_counter()
        perplexity(model, _Ids(), _text(valid.reshape(-1)), convention="no-special-tokens", window=window, batch_size=8)
        sync()
        report("ablation: perplexity pass", time.perf_counter() - start, valid.size)
    if device.startswith("cuda"):
        print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
        save(peak_gib_phases_1_3=torch.cuda.max_memory_allocated() / 2**30)
    tf32.__exit__(None, None, None)
    model = None  # freed: phase 4 measures its own peak memory
    save(precisions=compare_precisions(args, device, flat, offsets))


if __name__ == "__main__":
    main()
