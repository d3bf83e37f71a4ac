"""Exact WD engine vs the authors' method (per-neuron scipy loop against one sampled Gaussian), at equal N.

Usage: OMP_NUM_THREADS=2 python perf/bench_wd.py [--sizes 8192:1536,20000:1536,65536:512,280000:256]

For each N:K, float16 values (the shards' dtype) go to the engine as the statistics pass runs it (neuron-major
rows, 1 and 2 threads) and, as float64 columns, to the authors' loop. The scipy loop is timed on
``--loop-neurons`` neurons and scaled linearly to all neurons (each neuron is an independent call, so the scaling
is exact up to timer noise); the engine runs on all of them. Agreement: exact WD vs scipy against a very large
Gaussian sample (``--reference-size``), whose own sampling error is ~1/sqrt(size). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import scipy.stats

from wneurons.core import stats


def synthetic_preactivations(n: int, k: int, seed: int) -> np.ndarray:
    """[n, k] float32 columns ranging from Gaussian to strongly non-Gaussian (skewed, heavy-tailed, bimodal)."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, k))
    skew = rng.uniform(0, 1, k)
    spikes = (rng.random((n, k)) < rng.uniform(0, 0.05, k)) * rng.uniform(-8, -2, k)
    return (base + skew * (np.exp(base) - 1) + spikes).astype(np.float32)


def authors_loop(y: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The authors' per-neuron estimate: standardize (ddof=0), scipy.stats.wasserstein_distance(z, g)."""
    out = np.empty(y.shape[1])
    for k in range(y.shape[1]):
        col = y[:, k].astype(np.float64)
        out[k] = scipy.stats.wasserstein_distance((col - col.mean()) / col.std(), g)
    return out


def engine_seconds(y16: np.ndarray, threads: int) -> float:
    """The engine as the statistics pass runs it: neuron-major float16 rows (the shards' layout), all neurons."""
    y_kn = np.ascontiguousarray(y16.T)

    def run():
        return stats.all_neuron_statistics(
            lambda a, b: y_kn[a:b], y_kn.shape[0], y_kn.shape[1], chunk_neurons=stats.CHUNK_NEURONS, threads=threads
        )

    run()  # warm-up: loads the compiled kernels from numba's cache (or compiles them)
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="8192:1536,20000:1536,65536:512,280000:256",
        help="comma-separated N:K (tokens:neurons); 280000 is the paper's N (WikiText-2 test, Pythia tokenizer)",
    )
    parser.add_argument("--loop-neurons", type=int, default=32)
    parser.add_argument("--threads", default="1,2", help="engine thread counts to time (the scipy loop uses 1)")
    parser.add_argument("--reference-size", type=int, default=4_000_000)
    parser.add_argument("--reference-neurons", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]

    rows = []
    for size in args.sizes.split(","):
        n, k = (int(v) for v in size.split(":"))
        # float16, as the activation shards store them; the scipy loop gets the same values.
        y16 = synthetic_preactivations(n, k, args.seed).astype(np.float16)
        g = np.random.default_rng(args.seed + 1).standard_normal(n)
        timings = {}
        for t in threads:
            timings[t] = engine_seconds(y16, t)
        subset = slice(0, min(args.loop_neurons, k))
        start = time.perf_counter()
        loop = authors_loop(y16[:, subset], g)
        t_loop_all = (time.perf_counter() - start) * k / (subset.stop - subset.start)
        sampled = stats.wasserstein_distance_sampled(y16[:, subset], seed=args.seed + 1).numpy()
        row = {
            "tokens": n,
            "neurons": k,
            "path": "counting" if n >= stats.HISTOGRAM_MIN_TOKENS else "radix sort",
            "scipy_loop_seconds_scaled_to_all_neurons": round(t_loop_all, 3),
            "scipy_loop_neurons_measured": subset.stop - subset.start,
            "ns_per_value_scipy_loop": round(t_loop_all / (n * k) * 1e9, 1),
        }
        for t in threads:
            row[f"exact_seconds_{t}_threads"] = round(timings[t], 4)
            row[f"ns_per_value_{t}_threads"] = round(timings[t] / (n * k) * 1e9, 2)
            row[f"speedup_vs_scipy_loop_{t}_threads"] = round(t_loop_all / timings[t], 1)
        row["vectorized_sampled_equals_scipy_loop_max_abs_diff"] = float(np.abs(sampled - loop).max())
        rows.append(row)

    # Agreement with a very large reference sample (first size), and the authors' estimator's error at equal N.
    n, k = (int(v) for v in args.sizes.split(",")[0].split(":"))
    y = synthetic_preactivations(n, k, args.seed)
    exact = stats.wasserstein_distance_to_normal(y[:, :64]).numpy()
    ref_g = np.random.default_rng(args.seed + 2).standard_normal(args.reference_size)
    ref = authors_loop(y[:, : args.reference_neurons], ref_g)
    noise = np.stack([stats.wasserstein_distance_sampled(y[:, :64], seed=s).numpy() for s in range(10)])
    print(
        json.dumps(
            {
                "sizes": rows,
                "reference_size": args.reference_size,
                "exact_vs_large_sample_scipy_max_abs_diff": float(np.abs(exact[: args.reference_neurons] - ref).max()),
                "authors_estimator_at_equal_N": {
                    "tokens": n,
                    "mean_bias_vs_exact": float((noise - exact).mean()),
                    "std_over_10_seeds_mean_over_neurons": float(noise.std(axis=0).mean()),
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
