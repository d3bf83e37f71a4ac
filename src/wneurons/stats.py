"""The science: how far each neuron's pre-activation distribution is from a Gaussian, and how it maps inputs.

WD (Section 2.1): the pre-activations y of one neuron over N tokens are standardized (mean 0, population std,
ddof=0) and compared with N(0, 1) in Wasserstein-1 distance. The authors estimate this with
``scipy.stats.wasserstein_distance(z, g)`` against one Gaussian *sample* g (:func:`wasserstein_distance_sampled`
reproduces that, seeded). :func:`wasserstein_distance_to_normal` computes it exactly: W1 between an empirical
distribution and a continuous one is ``∫_0^1 |F⁻¹(u) - Φ⁻¹(u)| du`` and, after sorting, each order statistic
z_(i) owns the interval [(i-1)/N, i/N] of u, on which the integral has a closed form.

Per interval [a, b] with c = clip(Φ(z), a, b) and G(u) = ∫Φ⁻¹(u) du = -φ(Φ⁻¹(u)):
``∫_a^b |z - Φ⁻¹(u)| du = z (2c - a - b) + G(a) + G(b) - 2 G(c)``.
When z lies outside [Φ⁻¹(a), Φ⁻¹(b)] (c clipped, almost every interval) this is ``|z - m_i| / N`` with
m_i = N (G(b) - G(a)) the mean of N(0,1) over its i-th quantile bin; only the few intervals where the two
quantile functions cross need Φ(z), and there G(c) = -φ(z). The boundaries are shared by all neurons with the
same N and are computed once per call.

All functions take a [N, K] array (tokens x neurons; torch tensor or numpy array, any float dtype) and work in
float64. Results are float64 torch tensors of length K, in units of the standardized pre-activation (WD) or
of the raw pre-activation (mean, std).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import torch
from scipy import special

log = logging.getLogger(__name__)

WD_METHODS = ("exact", "sampled", "both")


# ----------------------------------------------------------------------------------------------------------
# Shared engine: one sort per neuron chunk, every statistic from it.
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _QuantileGrid:
    """Quantities of N(0,1) on the grid u = k/N, k = 0..N, shared by every neuron with N tokens."""

    n: int
    q_lo: np.ndarray  # Φ⁻¹((i-1)/N) for i = 1..N (first is -inf)
    q_hi: np.ndarray  # Φ⁻¹(i/N) (last is +inf)
    g_lo: np.ndarray  # G((i-1)/N) = -φ(q_lo)
    g_hi: np.ndarray  # G(i/N)
    bin_mean: np.ndarray  # m_i = N (G(i/N) - G((i-1)/N)): mean of N(0,1) over its i-th quantile bin

    @classmethod
    def for_n(cls, n: int) -> _QuantileGrid:
        q = special.ndtri(np.arange(n + 1, dtype=np.float64) / n)  # ±inf at the ends, as wanted
        g = -_normal_pdf(q)
        return cls(n=n, q_lo=q[:-1], q_hi=q[1:], g_lo=g[:-1], g_hi=g[1:], bin_mean=n * (g[1:] - g[:-1]))


def _normal_pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _w1_contributions(z: np.ndarray, grid: _QuantileGrid) -> np.ndarray:
    """Per order statistic, ``∫ |z_(i) - Φ⁻¹(u)| du`` over its quantile interval; z is [k, N], sorted per row.

    The row sum is the exact W1 distance to N(0,1). Returned array is float64 [k, N].
    """
    contrib = np.abs(z - grid.bin_mean) / grid.n  # exact wherever z does not cross Φ⁻¹ inside its interval
    rows, cols = np.nonzero((z > grid.q_lo) & (z < grid.q_hi))
    if rows.size:
        zc = z[rows, cols]
        a = cols / grid.n
        b = (cols + 1) / grid.n
        c = special.ndtr(zc)
        contrib[rows, cols] = zc * (2.0 * c - a - b) + grid.g_lo[cols] + grid.g_hi[cols] + 2.0 * _normal_pdf(zc)
    return contrib


@dataclass
class _ChunkStats:
    wd: np.ndarray
    wd_negative: np.ndarray
    wd_positive: np.ndarray
    frac_negative: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    skewness: np.ndarray
    kurtosis: np.ndarray
    constant: np.ndarray
    wd_sampled: np.ndarray | None = None


def _chunk_statistics(block: np.ndarray, grid: _QuantileGrid, gaussian_sorted: np.ndarray | None = None) -> _ChunkStats:
    """All per-neuron statistics of ``block`` ([k neurons, N tokens], neuron-major) from one sort per neuron.

    Sorting happens in the input dtype (numpy's SIMD sort; conversion to float64 afterwards is monotone and
    exact), so float16 shards are sorted at float16 speed.
    """
    raw = np.sort(block, axis=-1).astype(np.float64, copy=False)
    mean = raw.mean(axis=-1)
    centred = raw - mean[:, None]
    std = np.sqrt(np.mean(centred * centred, axis=-1))
    constant = std == 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        z = centred / std[:, None]
    z[constant] = np.nan
    z2 = z * z
    skewness = np.mean(z2 * z, axis=-1)
    kurtosis = np.mean(z2 * z2, axis=-1) - 3.0
    del z2, centred
    contrib = _w1_contributions(z, grid)
    # The RAW sign decides the region; sorting is monotone, so the negative tokens are a prefix of each row.
    negative = raw < 0.0
    wd_negative = np.where(negative, contrib, 0.0).sum(axis=-1)
    wd = contrib.sum(axis=-1)
    wd_sampled = None
    if gaussian_sorted is not None:
        wd_sampled = np.mean(np.abs(z - gaussian_sorted), axis=-1)
    return _ChunkStats(
        wd=wd,
        wd_negative=wd_negative,
        wd_positive=wd - wd_negative,
        frac_negative=negative.mean(axis=-1),
        mean=mean,
        std=std,
        skewness=skewness,
        kurtosis=kurtosis,
        constant=constant,
        wd_sampled=wd_sampled,
    )


def _as_numpy(y: torch.Tensor | np.ndarray, name: str = "y") -> np.ndarray:
    arr = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D [tokens, neurons], got shape {tuple(arr.shape)}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{name} must be a floating-point array, got {arr.dtype}")
    if arr.shape[0] < 2:
        raise ValueError(f"{name} needs at least 2 tokens per neuron, got {arr.shape[0]}")
    return arr


def _iter_neuron_chunks(y_nk: np.ndarray, chunk_neurons: int) -> Iterator[tuple[int, np.ndarray]]:
    """Yield (first neuron, [k, N] contiguous block) for a [N, K] array, ``chunk_neurons`` columns at a time."""
    if chunk_neurons < 1:
        raise ValueError(f"chunk_neurons must be >= 1, got {chunk_neurons}")
    for start in range(0, y_nk.shape[1], chunk_neurons):
        yield start, np.ascontiguousarray(y_nk[:, start : start + chunk_neurons].T)


def _statistics_nk(
    y: torch.Tensor | np.ndarray,
    *,
    chunk_neurons: int,
    gaussian_sorted: np.ndarray | None = None,
) -> _ChunkStats:
    """Statistics of every column of a [N, K] array, chunked over neurons; fields concatenated to length K."""
    arr = _as_numpy(y)
    grid = _QuantileGrid.for_n(arr.shape[0])
    parts = [_chunk_statistics(block, grid, gaussian_sorted) for _, block in _iter_neuron_chunks(arr, chunk_neurons)]
    merged = {}
    for field in _ChunkStats.__dataclass_fields__:
        values = [getattr(p, field) for p in parts]
        merged[field] = None if values[0] is None else np.concatenate(values)
    return _ChunkStats(**merged)


def _check_constant(constant: np.ndarray, allow_constant: bool, what: str = "y") -> None:
    if constant.any() and not allow_constant:
        idx = np.flatnonzero(constant)
        raise ValueError(
            f"{what}: neuron(s) {idx[:10].tolist()}{' ...' if idx.size > 10 else ''} are constant over all "
            f"tokens ({idx.size} in total), so their standardized distribution is undefined; pass "
            "allow_constant=True to get NaN for them"
        )


# ----------------------------------------------------------------------------------------------------------
# Public science functions
# ----------------------------------------------------------------------------------------------------------
def wasserstein_distance_to_normal(
    y: torch.Tensor | np.ndarray, *, allow_constant: bool = False, chunk_neurons: int = 1024
) -> torch.Tensor:
    """Exact W1 distance between each column's standardized empirical distribution and N(0, 1).

    ``y`` is [N tokens, K neurons]; standardization uses the population std (ddof=0), as the authors do.
    Returns a float64 tensor [K] in standardized units. A constant column (a dead neuron) has no standardized
    distribution: it raises ``ValueError`` naming the neuron, or gives NaN when ``allow_constant`` is true.
    """
    stats = _statistics_nk(y, chunk_neurons=chunk_neurons)
    _check_constant(stats.constant, allow_constant)
    return torch.from_numpy(stats.wd)


def sign_split(
    y: torch.Tensor | np.ndarray, *, allow_constant: bool = False, chunk_neurons: int = 1024
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Where each neuron's exact WD comes from: tokens with RAW pre-activation < 0 vs >= 0.

    Returns ``(wd_negative, wd_positive, frac_negative)``, float64 tensors [K]: the two WD parts (standardized
    units) add up to :func:`wasserstein_distance_to_normal` exactly, and ``frac_negative`` is the fraction of
    tokens with y < 0. The split follows the raw sign, not the sign of the standardized value, because the
    nonlinearity (and the ablation a' = max(a, 0)) acts on the raw pre-activation.
    """
    stats = _statistics_nk(y, chunk_neurons=chunk_neurons)
    _check_constant(stats.constant, allow_constant)
    return tuple(torch.from_numpy(v) for v in (stats.wd_negative, stats.wd_positive, stats.frac_negative))


@dataclass(frozen=True)
class Moments:
    """Per-neuron moments of the raw pre-activation, float64 tensors [K]."""

    mean: torch.Tensor  # raw units
    std: torch.Tensor  # raw units, population (ddof=0)
    skewness: torch.Tensor  # m3 / m2^1.5 (scipy.stats.skew, bias=True)
    kurtosis: torch.Tensor  # excess: m4 / m2^2 - 3 (scipy.stats.kurtosis, fisher=True, bias=True)


def moments(y: torch.Tensor | np.ndarray, *, chunk_neurons: int = 1024) -> Moments:
    """Mean, population std, skewness and excess kurtosis of each column of ``y`` [N, K].

    Constant columns get std 0 and NaN skewness / kurtosis.
    """
    s = _statistics_nk(y, chunk_neurons=chunk_neurons)
    return Moments(*(torch.from_numpy(v) for v in (s.mean, s.std, s.skewness, s.kurtosis)))


def sorted_gaussian_sample(n: int, seed: int | np.random.SeedSequence | list[int]) -> np.ndarray:
    """The authors' reference: one N(0,1) sample of size ``n`` (here seeded), sorted, float64 [n]."""
    return np.sort(np.random.default_rng(seed).standard_normal(n))


def wasserstein_distance_sampled(
    y: torch.Tensor | np.ndarray, *, seed: int, allow_constant: bool = False, chunk_neurons: int = 1024
) -> torch.Tensor:
    """The authors' WD estimate, vectorized: ``scipy.stats.wasserstein_distance(z, g)`` per neuron.

    g ~ N(0,1) is ONE sample of size N shared by all neurons (the authors draw it unseeded; here it comes from
    ``numpy.random.default_rng(seed)``). For equal sample sizes W1 between two empirical distributions is
    ``mean |sort(z) - sort(g)|``. Returns float64 [K]; carries sampling noise of order N^-1/2 on top of the
    exact value.
    """
    arr = _as_numpy(y)
    stats = _statistics_nk(arr, chunk_neurons=chunk_neurons, gaussian_sorted=sorted_gaussian_sample(arr.shape[0], seed))
    _check_constant(stats.constant, allow_constant)
    return torch.from_numpy(stats.wd_sampled)


def mapping_difficulty(x: torch.Tensor | np.ndarray, y: torch.Tensor | np.ndarray) -> torch.Tensor:
    """Mapping difficulty (MD) of each neuron from token pairs; pairs are consecutive rows (0,1), (2,3), ...

    ``x`` [2P, d_in] are the projection's inputs and ``y`` [2P, K] its raw outputs for the same 2P distinct
    tokens (the caller draws them, like the authors' ``choice(N, 2P, replace=False)``). With
    d_x = ||x_i - x_j||_2 and d_y = |y_i - y_j|: MD = mean over pairs of (d_y / median(d_y)) / (d_x / max(d_x)),
    median as numpy's (mean of the two middle values). Returns float64 [K], dimensionless.

    Pairs with identical inputs (d_x = 0, e.g. the same token at the start of two windows) have an undefined
    ratio 0/0 and are left out (logged). A neuron with median d_y = 0 gets NaN.
    """
    xa, ya = _as_numpy(x, "x"), _as_numpy(y, "y")
    if xa.shape[0] != ya.shape[0] or xa.shape[0] % 2:
        raise ValueError(f"x and y need the same even number of rows (2P), got {xa.shape[0]} and {ya.shape[0]}")
    xa = xa.astype(np.float64, copy=False)
    ya = ya.astype(np.float64, copy=False)
    d_x = np.linalg.norm(xa[0::2] - xa[1::2], axis=1)
    d_y = np.abs(ya[0::2] - ya[1::2])
    keep = d_x > 0
    if not keep.all():
        if not keep.any():
            raise ValueError("mapping_difficulty: every pair has identical inputs (d_x = 0)")
        log.warning(
            "mapping_difficulty: %d of %d pairs have identical inputs and are left out",
            (~keep).sum(),
            keep.size,
        )
        d_x, d_y = d_x[keep], d_y[keep]
    median_dy = np.median(d_y, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        md = np.mean((d_y / median_dy) * (d_x.max() / d_x)[:, None], axis=0)
    md[median_dy == 0] = np.nan
    return torch.from_numpy(md)


# ----------------------------------------------------------------------------------------------------------
# The table: every neuron of every layer, streamed from activation shards
# ----------------------------------------------------------------------------------------------------------
def neuron_statistics(
    shard_dir: str | Path,
    *,
    wd_method: str = "exact",
    md_pairs: int | None = 1000,
    seed: int = 0,
    chunk_neurons: int = 1024,
    layers: list[int] | None = None,
) -> pl.DataFrame:
    """One row per (layer, neuron) from the activation shards written by ``collect_activation_shards``.

    Columns: layer, neuron (0-based), wd (the WD used downstream: exact for ``wd_method`` "exact" / "both", the
    authors' sampled estimate for "sampled"), wd_negative, wd_positive (always the exact split), frac_negative, mean, std (raw units), skewness, kurtosis (excess), md, constant (dead neuron:
    WD columns NaN) and, for ``wd_method`` "sampled" / "both", wd_sampled (the authors' estimate; the Gaussian
    sample for layer L is seeded by ``(seed, L)``). MD uses the first ``2 * md_pairs`` of the token positions
    drawn at collection (``None`` skips MD: NaN). Layers are streamed one at a time and neurons in chunks of
    ``chunk_neurons``: peak memory is about ``8 * 6 * chunk_neurons * N`` bytes, independent of model size.
    """
    from wneurons.activations import (
        ShardIndex,
    )  # activations imports torch models; keep stats importable alone

    if wd_method not in WD_METHODS:
        raise ValueError(f"wd_method must be one of {WD_METHODS}, got {wd_method!r}")
    index = ShardIndex.load(shard_dir)
    if md_pairs is not None and not 1 <= 2 * md_pairs <= len(index.md_positions):
        raise ValueError(
            f"md_pairs={md_pairs} needs {2 * md_pairs} tokens but the shards in {shard_dir} hold inputs for "
            f"{len(index.md_positions)} (collect with a larger md_tokens)"
        )
    frames = []
    for layer in range(index.n_layers) if layers is None else layers:
        y_kn = index.y_neuron_major(layer)  # memmap [K, N]; only one chunk is in memory at a time
        n_neurons, n_tokens = y_kn.shape
        grid = _QuantileGrid.for_n(n_tokens)
        gaussian = sorted_gaussian_sample(n_tokens, [seed, layer]) if wd_method != "exact" else None
        parts = [
            _chunk_statistics(np.asarray(y_kn[start : start + chunk_neurons]), grid, gaussian)
            for start in range(0, n_neurons, chunk_neurons)
        ]
        cols = {
            f: np.concatenate([getattr(p, f) for p in parts])
            for f in _ChunkStats.__dataclass_fields__
            if f != "wd_sampled"
        }
        if md_pairs is not None:
            rows = index.md_positions[: 2 * md_pairs]
            md = mapping_difficulty(index.x_md(layer)[: 2 * md_pairs], y_kn[:, rows].T).numpy()
        else:
            md = np.full(n_neurons, np.nan)
        frame = {
            "layer": np.full(n_neurons, layer, dtype=np.int32),
            "neuron": np.arange(n_neurons, dtype=np.int32),
            "wd": np.concatenate([p.wd_sampled for p in parts]) if wd_method == "sampled" else cols["wd"],
            **{
                k: cols[k]
                for k in (
                    "wd_negative",
                    "wd_positive",
                    "frac_negative",
                    "mean",
                    "std",
                    "skewness",
                    "kurtosis",
                )
            },
            "md": md,
            "constant": cols["constant"],
        }
        if gaussian is not None:
            frame["wd_sampled"] = np.concatenate([p.wd_sampled for p in parts])
        if cols["constant"].any():
            log.warning("layer %d: %d constant (dead) neurons; their WD is NaN", layer, cols["constant"].sum())
        frames.append(pl.DataFrame(frame))
        del y_kn
    return pl.concat(frames)
