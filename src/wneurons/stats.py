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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import torch
from scipy import special

log = logging.getLogger(__name__)

WD_METHODS = ("exact", "sampled", "both")
# Neurons per chunk: 16 x N float64 work arrays stay cache-sized (2 MiB at N = 16k); see _Engine.
CHUNK_NEURONS = 16


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
    width: np.ndarray  # q_hi - q_lo (inf for the two outer bins)

    @classmethod
    def for_n(cls, n: int) -> _QuantileGrid:
        q = special.ndtri(np.arange(n + 1, dtype=np.float64) / n)  # ±inf at the ends, as wanted
        g = -_normal_pdf(q)
        return cls(
            n=n, q_lo=q[:-1], q_hi=q[1:], g_lo=g[:-1], g_hi=g[1:], bin_mean=n * (g[1:] - g[:-1]), width=q[1:] - q[:-1]
        )


def _normal_pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


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

    @classmethod
    def concatenate(cls, parts: list[_ChunkStats]) -> _ChunkStats:
        fields = {}
        for name in cls.__dataclass_fields__:
            values = [getattr(p, name) for p in parts]
            fields[name] = None if values[0] is None else np.concatenate(values)
        return cls(**fields)


class _Engine:
    """Per-neuron statistics of neuron-major blocks ([k neurons, N tokens]) with N fixed.

    Holds the quantile grid and two float64 work arrays of ``chunk_neurons x N``, reused for every chunk:
    small chunks keep them cache-resident and avoid a fresh allocation (and page faults) per operation, which
    dominates the cost of numpy's elementwise passes at this size (measured: 3x faster than 1024-neuron chunks).
    """

    def __init__(self, n_tokens: int, chunk_neurons: int, gaussian_sorted: np.ndarray | None = None):
        if chunk_neurons < 1:
            raise ValueError(f"chunk_neurons must be >= 1, got {chunk_neurons}")
        if n_tokens < 2:
            raise ValueError(f"need at least 2 tokens per neuron, got {n_tokens}")
        self.n = n_tokens
        self.chunk_neurons = chunk_neurons
        self.grid = _QuantileGrid.for_n(n_tokens)
        self.gaussian_sorted = gaussian_sorted
        self._z = np.empty((chunk_neurons, n_tokens))
        self._w = np.empty((chunk_neurons, n_tokens))

    def __call__(self, block: np.ndarray) -> _ChunkStats:
        """All statistics of ``block`` [k <= chunk_neurons, N] from one sort per neuron."""
        k, n = block.shape
        grid = self.grid
        z, w = self._z[:k], self._w[:k]
        # Sort in the stored dtype (numpy's SIMD sort; float16 shards sort at float16 speed), then widen: the
        # conversion is monotone and exact, so the float64 rows are sorted too.
        np.copyto(z, np.sort(block, axis=-1))
        n_negative = np.count_nonzero(z < 0.0, axis=-1)  # RAW sign; negatives are a prefix of each row
        mean = z.mean(axis=-1)
        np.subtract(z, mean[:, None], out=z)
        std = np.sqrt(np.einsum("ij,ij->i", z, z) / n)
        constant = std == 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            np.multiply(z, (1.0 / std)[:, None], out=z)  # constant rows become 0 * inf = NaN everywhere
        np.multiply(z, z, out=w)
        skewness = np.einsum("ij,ij->i", w, z) / n
        kurtosis = np.einsum("ij,ij->i", w, w) / n - 3.0
        wd_sampled = None
        if self.gaussian_sorted is not None:
            wd_sampled = np.abs(np.subtract(z, self.gaussian_sorted, out=w), out=w).mean(axis=-1)
        # N * contribution of each order statistic: |z - m_i| where the quantile functions do not cross ...
        np.abs(np.subtract(z, grid.bin_mean, out=w), out=w)
        # ... and the closed form with the split at c = Φ(z) in the few intervals where they do.
        # A crossing (q_lo < z < q_hi) implies |z - m_i| < q_hi - q_lo since m_i lies in the bin too: one cheap
        # comparison finds the candidates, the exact test runs on those few only.
        candidates = np.flatnonzero(w < grid.width)
        rows, cols = np.divmod(candidates, n)
        zc = z.ravel()[candidates]
        crossing = (zc > grid.q_lo[cols]) & (zc < grid.q_hi[cols])
        rows, cols, zc = rows[crossing], cols[crossing], zc[crossing]
        if rows.size:
            a, b, c = cols / n, (cols + 1) / n, special.ndtr(zc)
            w[rows, cols] = n * (zc * (2.0 * c - a - b) + grid.g_lo[cols] + grid.g_hi[cols] + 2.0 * _normal_pdf(zc))
        wd = w.sum(axis=-1) / n
        # Sum over the negative prefix of each row in one call: reduceat over [row start, row start + n_neg).
        # reduceat returns the element itself for an empty segment, hence the fix-ups for n_neg = 0 and = n.
        starts = np.arange(k) * n
        bounds = np.stack([starts, starts + np.minimum(n_negative, n - 1)], axis=1).ravel()
        prefix = np.add.reduceat(w.ravel(), bounds)[0::2] / n
        wd_negative = np.where(n_negative == 0, 0.0, np.where(n_negative == n, wd, prefix))
        return _ChunkStats(
            wd=wd,
            wd_negative=wd_negative,
            wd_positive=wd - wd_negative,
            frac_negative=n_negative / n,
            mean=mean,
            std=std,
            skewness=skewness,
            kurtosis=kurtosis,
            constant=constant,
            wd_sampled=wd_sampled,
        )


def _all_neurons(
    get_block: Callable[[int, int], np.ndarray],
    n_neurons: int,
    n_tokens: int,
    *,
    chunk_neurons: int,
    gaussian_sorted: np.ndarray | None = None,
    threads: int | None = None,
) -> _ChunkStats:
    """Statistics of neurons 0..n_neurons-1; ``get_block(start, stop)`` returns their [stop - start, N] values.

    Chunks are shared round-robin among ``threads`` workers (default: torch's thread count, which honours
    OMP_NUM_THREADS), each with its own :class:`_Engine` work arrays; numpy's sort and ufuncs release the GIL.
    """
    starts = list(range(0, n_neurons, chunk_neurons))
    threads = max(1, min(len(starts), torch.get_num_threads() if threads is None else threads))

    def work(worker: int) -> list[tuple[int, _ChunkStats]]:
        engine = _Engine(n_tokens, chunk_neurons, gaussian_sorted)
        return [(s, engine(get_block(s, min(s + chunk_neurons, n_neurons)))) for s in starts[worker::threads]]

    if threads == 1:
        done = work(0)
    else:
        with ThreadPoolExecutor(threads) as pool:
            done = [item for part in pool.map(work, range(threads)) for item in part]
    return _ChunkStats.concatenate([part for _, part in sorted(done, key=lambda item: item[0])])


def _as_numpy(y: torch.Tensor | np.ndarray, name: str = "y") -> np.ndarray:
    arr = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D [tokens, neurons], got shape {tuple(arr.shape)}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{name} must be a floating-point array, got {arr.dtype}")
    if arr.shape[0] < 2:
        raise ValueError(f"{name} needs at least 2 tokens per neuron, got {arr.shape[0]}")
    return arr


def _statistics_nk(
    y: torch.Tensor | np.ndarray, *, chunk_neurons: int, gaussian_sorted: np.ndarray | None = None
) -> _ChunkStats:
    """Statistics of every column of a [N, K] array, fields of length K."""
    arr = _as_numpy(y)
    n_tokens, n_neurons = arr.shape
    y_kn = _neuron_major_copy(arr)
    return _all_neurons(
        lambda start, stop: y_kn[start:stop],
        n_neurons,
        n_tokens,
        chunk_neurons=chunk_neurons,
        gaussian_sorted=gaussian_sorted,
    )


def _neuron_major_copy(arr: np.ndarray, rows_per_block: int = 512) -> np.ndarray:
    """[N, K] -> contiguous [K, N], copied in blocks of rows: a plain ``ascontiguousarray(arr.T)`` strides through
    memory column by column and was measured 3-6x slower at N = 20k, K = 1536."""
    out = np.empty(arr.shape[::-1], dtype=arr.dtype)
    for start in range(0, arr.shape[0], rows_per_block):
        out[:, start : start + rows_per_block] = arr[start : start + rows_per_block].T
    return out


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
    y: torch.Tensor | np.ndarray, *, allow_constant: bool = False, chunk_neurons: int = CHUNK_NEURONS
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
    y: torch.Tensor | np.ndarray, *, allow_constant: bool = False, chunk_neurons: int = CHUNK_NEURONS
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


def moments(y: torch.Tensor | np.ndarray, *, chunk_neurons: int = CHUNK_NEURONS) -> Moments:
    """Mean, population std, skewness and excess kurtosis of each column of ``y`` [N, K].

    Constant columns get std 0 and NaN skewness / kurtosis.
    """
    s = _statistics_nk(y, chunk_neurons=chunk_neurons)
    return Moments(*(torch.from_numpy(v) for v in (s.mean, s.std, s.skewness, s.kurtosis)))


def sorted_gaussian_sample(n: int, seed: int | np.random.SeedSequence | list[int]) -> np.ndarray:
    """The authors' reference: one N(0,1) sample of size ``n`` (here seeded), sorted, float64 [n]."""
    return np.sort(np.random.default_rng(seed).standard_normal(n))


def wasserstein_distance_sampled(
    y: torch.Tensor | np.ndarray, *, seed: int, allow_constant: bool = False, chunk_neurons: int = CHUNK_NEURONS
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
    chunk_neurons: int = CHUNK_NEURONS,
    layers: list[int] | None = None,
) -> pl.DataFrame:
    """One row per (layer, neuron) from the activation shards written by ``collect_activation_shards``.

    Columns: layer, neuron (0-based); wd (the WD used downstream: exact for ``wd_method`` "exact" / "both",
    the authors' sampled estimate for "sampled"); wd_negative, wd_positive (always the exact split, standardized
    units); frac_negative; mean, std (raw units); skewness, kurtosis (excess); md; constant (a dead neuron: its
    WD columns are NaN); and for "sampled" / "both" wd_sampled (the Gaussian sample for layer L is seeded by
    ``(seed, L)``). MD uses the first ``2 * md_pairs`` token positions drawn at collection (``None``: MD NaN).

    Layers are streamed one at a time and neurons in chunks of ``chunk_neurons``: peak memory is about
    ``3 * 8 * chunk_neurons * N`` bytes for WD plus ``8 * 2P * (d_in + K)`` for MD, independent of depth.
    """
    # Imported here: activations pulls in the model stack, and the pure functions above must not need it.
    from wneurons.activations import ShardIndex

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
        y_kn = index.y_neuron_major(layer)  # memmap [K, N]; only one chunk is read into memory at a time
        n_neurons, n_tokens = y_kn.shape
        gaussian = sorted_gaussian_sample(n_tokens, [seed, layer]) if wd_method != "exact" else None
        stats = _all_neurons(
            lambda start, stop, y_kn=y_kn: np.asarray(y_kn[start:stop]),
            n_neurons,
            n_tokens,
            chunk_neurons=chunk_neurons,
            gaussian_sorted=gaussian,
        )
        if md_pairs is not None:
            positions = index.md_positions[: 2 * md_pairs]
            md = mapping_difficulty(index.x_md(layer)[: 2 * md_pairs], y_kn[:, positions].T).numpy()
        else:
            md = np.full(n_neurons, np.nan)
        frame = {
            "layer": np.full(n_neurons, layer, dtype=np.int32),
            "neuron": np.arange(n_neurons, dtype=np.int32),
            "wd": stats.wd_sampled if wd_method == "sampled" else stats.wd,
            "wd_negative": stats.wd_negative,
            "wd_positive": stats.wd_positive,
            "frac_negative": stats.frac_negative,
            "mean": stats.mean,
            "std": stats.std,
            "skewness": stats.skewness,
            "kurtosis": stats.kurtosis,
            "md": md,
            "constant": stats.constant,
        }
        if wd_method != "exact":
            frame["wd_sampled"] = stats.wd_sampled
        if stats.constant.any():
            log.warning("layer %d: %d constant (dead) neurons; their WD is NaN", layer, stats.constant.sum())
        frames.append(pl.DataFrame(frame))
    return pl.concat(frames)
