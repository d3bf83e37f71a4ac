"""Exact WD engine vs the authors' method (per-neuron scipy loop against one sampled Gaussian), at equal N.

Usage: OMP_NUM_THREADS=2 python perf/bench_wd.py [--tokens 20000] [--neurons 1536] [--loop-neurons 96]

The scipy loop is timed on ``--loop-neurons`` neurons and scaled linearly to all neurons (each neuron is an
independent call, so the scaling is exact up to timer noise); the exact engine runs on all of them. Agreement:
exact WD vs scipy against a very large Gaussian sample (``--reference-size``), whose own sampling error is
~1/sqrt(size). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import scipy.stats

from wneurons import stats


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=20_000)
    parser.add_argument("--neurons", type=int, default=1536)
    parser.add_argument("--loop-neurons", type=int, default=96)
    parser.add_argument("--reference-size", type=int, default=4_000_000)
    parser.add_argument("--reference-neurons", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    y = synthetic_preactivations(args.tokens, args.neurons, args.seed)
    g = np.random.default_rng(args.seed + 1).standard_normal(args.tokens)

    t = time.perf_counter()
    exact = stats.wasserstein_distance_to_normal(y).numpy()
    t_exact = time.perf_counter() - t

    t = time.perf_counter()
    sampled = stats.wasserstein_distance_sampled(y, seed=args.seed + 1).numpy()
    t_sampled_vectorized = time.perf_counter() - t

    subset = slice(0, args.loop_neurons)
    t = time.perf_counter()
    loop = authors_loop(y[:, subset], g)
    t_loop_subset = time.perf_counter() - t
    t_loop_all = t_loop_subset * args.neurons / args.loop_neurons

    # Agreement with a very large reference sample, and the authors' estimator's error at equal N.
    ref_g = np.random.default_rng(args.seed + 2).standard_normal(args.reference_size)
    ref = authors_loop(y[:, : args.reference_neurons], ref_g)
    noise = np.stack([stats.wasserstein_distance_sampled(y[:, :64], seed=s).numpy() for s in range(10)])

    print(
        json.dumps(
            {
                "tokens": args.tokens,
                "neurons": args.neurons,
                "exact_seconds_all_neurons": round(t_exact, 3),
                "sampled_vectorized_seconds_all_neurons": round(t_sampled_vectorized, 3),
                "scipy_loop_seconds_measured": round(t_loop_subset, 3),
                "scipy_loop_neurons_measured": args.loop_neurons,
                "scipy_loop_seconds_scaled_to_all_neurons": round(t_loop_all, 3),
                "speedup_exact_vs_scipy_loop": round(t_loop_all / t_exact, 1),
                "vectorized_sampled_equals_scipy_loop_max_abs_diff": float(np.abs(sampled[subset] - loop).max()),
                "reference_size": args.reference_size,
                "exact_vs_large_sample_scipy_max_abs_diff": float(np.abs(exact[: args.reference_neurons] - ref).max()),
                "authors_estimator_at_equal_N": {
                    "mean_bias_vs_exact": float((noise - exact[:64]).mean()),
                    "std_over_10_seeds_mean_over_neurons": float(noise.std(axis=0).mean()),
                },
                "wd_range": [float(exact.min()), float(exact.max())],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
