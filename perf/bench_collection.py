"""Activation collection before and after a change, side by side in one process: the same model, text and arguments
through ``collect_activation_shards`` of this tree ("after") and of an earlier revision ("before", loaded from git
or a file), timed in alternating order, and the shards of the two compared byte for byte.

    python perf/bench_collection.py                              # SmolLM2-135M over WikiText-2 test, on the CPU
    python perf/bench_collection.py --shape pythia-1.4b --precision bf16 --tokens 16384 --window 2048  # a GPU
    python perf/bench_collection.py --before none                # the current code only (throughput)

``--before``: a git revision of this repository whose ``src/wneurons/lm/activations.py`` is the "before" (default
7099757, the last one that synced the device per layer and copied into pageable memory), a path to such a file, or
"none". ``--shape`` runs a random-weight model of perf/gpu_check.py's shapes over random token ids instead of
``--model``. The device is the jobs' (``WNEURONS_DEVICE`` overrides); the result (per variant: seconds of each
repeat, median tokens/s, peak GPU memory, host buffer bytes; the ratio; whether the bytes agree) is printed and,
with ``--out``, written as JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
BEFORE = "7099757"
MODULE = "src/wneurons/lm/activations.py"


def load_before(before: str):
    """``collect_activation_shards`` of ``before`` (a git revision or a file), imported under a name of its own
    (its imports resolve to this tree's package), or None for "none"."""
    if before == "none":
        return None
    source = Path(before).read_text() if Path(before).is_file() else None
    if source is None:
        show = ["git", "-C", str(ROOT), "show", f"{before}:{MODULE}"]
        source = subprocess.run(show, capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "activations_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("activations_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.collect_activation_shards


def model_and_text(args, device: str):
    """``(model, tokenizer, text, window_bos)`` on ``device`` in ``args.precision``."""
    from wneurons.lm.models import resolve_precision

    if args.shape:
        sys.path.insert(0, str(ROOT / "perf"))
        from gpu_check import _Ids, _text, build

        model = build(args.shape, device, resolve_precision(args.precision).weights)
        ids = np.random.default_rng(0).integers(0, model.config.vocab_size, args.tokens)
        return model, _Ids(), _text(ids), False
    from wneurons.lm.models import load_model, tokenizer_adds_bos
    from wneurons.lm.registry import family_spec, resolve_window_bos
    from wneurons.store.data import wikitext_split

    model, tokenizer = load_model(local_path=args.model, dtype=args.precision, device=device)
    bos = resolve_window_bos(None, family_spec(model), tokenizer_adds_bos(tokenizer))[0]
    return model, tokenizer, wikitext_split(DATA / "wikitext-2" / "raw", "test"), bos


def shard_bytes(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.glob("*.npy"))}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    parser.add_argument("--model", default=str(ROOT / "resources/models/smollm2-135m"))
    parser.add_argument("--shape", default=None, help="a random-weight shape of perf/gpu_check.py instead")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--before", default=BEFORE)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float16", help="the shards' dtype")
    parser.add_argument("--io", default="auto")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--dir", default=None, help="where the shards go (default: a temporary directory)")
    parser.add_argument("--out", default=None, help="JSON result")
    args = parser.parse_args()

    from wneurons.lm.activations import collect_activation_shards
    from wneurons.lm.models import job_devices, matmul_precision

    if args.threads:
        torch.set_num_threads(args.threads)
    device = job_devices(os.environ, torch.cuda.is_available(), torch.cuda.device_count())[0]
    variants = {"after": collect_activation_shards}
    before = load_before(args.before)
    if before is not None:
        variants = {"before": before, **variants}
    model, tokenizer, text, bos = model_and_text(args, device)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    print(
        f"collection: {args.shape or Path(args.model).name} ({args.precision}) on {name}, {args.tokens:,} tokens in "
        f"windows of {args.window}, batch {args.batch_size}, {args.dtype} shards, io {args.io}; "
        f"{torch.get_num_threads()} threads; before = {args.before}",
        flush=True,
    )
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-collection-"))
    result: dict = {"variants": {}, "bytes_identical": None}
    seconds: dict[str, list[float]] = {v: [] for v in variants}
    cpu: dict[str, list[float]] = {v: [] for v in variants}  # process CPU time: steadier than wall on a shared CPU
    hooks: dict[str, list[float]] = {v: [] for v in variants}  # index.json's seconds_in_hooks: the changed code alone
    peak: dict[str, float] = {}
    host_bytes: dict[str, int | None] = {}
    kwargs = dict(
        window=args.window, max_tokens=args.tokens, batch_size=args.batch_size, md_tokens=min(2000, args.tokens),
        seed=0, dtype=args.dtype, io=args.io, window_bos=bos, progress_every=1e9,
    )  # fmt: skip
    with matmul_precision(args.precision, device), torch.inference_mode():
        for repeat in range(args.repeats):
            order = list(variants) if repeat % 2 == 0 else list(reversed(variants))  # alternate: drift cancels
            written = {}
            for variant in order:
                out = work / f"{variant}-{repeat}"
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                start, start_cpu = time.perf_counter(), time.process_time()
                meta = variants[variant](model, tokenizer, text, out, **kwargs)
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                    peak[variant] = max(peak.get(variant, 0.0), torch.cuda.max_memory_allocated() / 2**30)
                seconds[variant].append(time.perf_counter() - start)
                cpu[variant].append(time.process_time() - start_cpu)
                hooks[variant].append(meta["seconds_in_hooks"])
                host_bytes[variant] = meta.get("host_buffer_bytes")
                written[variant] = shard_bytes(out) if repeat == 0 and len(variants) == 2 else None
                shutil.rmtree(out)
                print(
                    f"  {variant:<7}repeat {repeat}: {seconds[variant][-1]:7.2f} s wall, {cpu[variant][-1]:7.2f} s CPU,"
                    f"{hooks[variant][-1]:7.2f} s in hooks",
                    flush=True,
                )
            if written.get("before") is not None:
                result["bytes_identical"] = written["before"] == written["after"]
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)
    n_tokens = meta["n_tokens"]
    print(
        f"\n{'variant':<8}{'median s':>10}{'CPU s':>8}{'hooks s':>9}{'tokens/s':>12}{'peak GPU GiB':>14}"
        f"{'host buffers MiB':>18}"
    )
    for variant, times in seconds.items():
        median = statistics.median(times)
        mib = None if host_bytes[variant] is None else host_bytes[variant] / 2**20
        result["variants"][variant] = {
            "seconds": [round(t, 3) for t in times],
            "median_seconds": round(median, 3),
            "cpu_seconds": [round(t, 3) for t in cpu[variant]],
            "median_cpu_seconds": round(statistics.median(cpu[variant]), 3),
            "seconds_in_hooks": [round(t, 3) for t in hooks[variant]],
            "median_seconds_in_hooks": round(statistics.median(hooks[variant]), 3),
            "tokens_per_second": round(n_tokens / median, 1),
            "peak_gpu_gib": round(peak[variant], 2) if variant in peak else None,
            "host_buffer_mib": None if mib is None else round(mib, 1),
        }
        print(
            f"{variant:<8}{median:>10.2f}{statistics.median(cpu[variant]):>8.2f}"
            f"{statistics.median(hooks[variant]):>9.2f}{n_tokens / median:>12,.0f}"
            f"{peak.get(variant, float('nan')):>14.2f}"
            f"{float('nan') if mib is None else mib:>18.1f}"
        )
    if len(variants) == 2:
        ratio = statistics.median(seconds["after"]) / statistics.median(seconds["before"])
        cpu_ratio = statistics.median(cpu["after"]) / statistics.median(cpu["before"])
        hook_ratio = statistics.median(hooks["after"]) / statistics.median(hooks["before"])
        result |= {
            "after_over_before": round(ratio, 3),
            "after_over_before_cpu": round(cpu_ratio, 3),
            "after_over_before_hooks": round(hook_ratio, 3),
        }
        print(
            f"after / before (medians): {ratio:.3f} wall, {cpu_ratio:.3f} CPU time, {hook_ratio:.3f} in hooks; "
            f"shards byte-identical: {result['bytes_identical']}"
        )
    result |= {"device": name, "tokens": n_tokens, "args": vars(args), "torch": torch.__version__}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
