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
quantile functions cross need Φ(z), and there G(c) = -φ(z). The bin boundaries are shared by all neurons with
the same N and are computed once per call; the per-neuron work is done by the compiled kernels of
:mod:`wneurons.core.wd_kernels` (float16 activation shards are counted, not sorted: O(N) per neuron).

All functions take a [N, K] array (tokens x neurons; torch tensor or numpy array, any float dtype) and compute
in float64. Results are float64 torch tensors of length K, in units of the standardized pre-activation (WD) or
of the raw pre-activation (mean, std).
"""

from __future__ import annotations

import functools
import logging
import math
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import torch
from scipy import special

from wneurons.core import wd_kernels
from wneurons.core.pairs import input_distances
from wneurons.store.shards import ShardIndex

log = logging.getLogger(__name__)

WD_METHODS = ("exact", "sampled", "both")
# Neurons per kernel call: amortizes the call and the scratch arrays; small enough to spread over threads.
CHUNK_NEURONS = 64
# float16 neurons with fewer tokens than this are radix-sorted (numpy's stable uint16 sort) and taken one order
# statistic at a time; from it on they are counted into 65,536 key counters and taken one run of ties at a time.
# Measured crossover on a 2-core Sapphire Rapids: sorting wins at N = 32768 (4.9 vs 6.0 ns per value), counting
# at N = 65536 (4.3 vs 5.0) and by 2.2x at the paper's N ~ 280k.
HISTOGRAM_MIN_TOKENS = 3 << 14


# ----------------------------------------------------------------------------------------------------------
# Shared engine: runs of each neuron's values, every statistic from one merge with the quantile grid.
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
    prefix: np.ndarray  # [N + 1]: prefix sums of bin_mean

    @classmethod
    @functools.lru_cache(maxsize=4)  # every layer of a shard directory has the same N
    def for_n(cls, n: int) -> _QuantileGrid:
        q = special.ndtri(np.arange(n + 1, dtype=np.float64) / n)  # ±inf at the ends, as wanted
        g = -np.exp(-0.5 * q * q) / math.sqrt(2.0 * math.pi)
        bin_mean = n * (g[1:] - g[:-1])
        prefix = np.concatenate([[0.0], np.cumsum(bin_mean)])
        return cls(n=n, q_lo=q[:-1], q_hi=q[1:], g_lo=g[:-1], g_hi=g[1:], bin_mean=bin_mean, prefix=prefix)


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
    md: np.ndarray | None = None

    @classmethod
    def concatenate(cls, parts: list[_ChunkStats]) -> _ChunkStats:
        fields = {}
        for name in cls.__dataclass_fields__:
            values = [getattr(p, name) for p in parts]
            fields[name] = None if values[0] is None else np.concatenate(values)
        return cls(**fields)


@dataclass(frozen=True)
class _Pairs:
    """MD's token pairs for one layer: ``columns`` = [first tokens..., second tokens...] (positions in N) and the
    weight max(d_x) / d_x of each pair whose inputs differ (identical-input pairs are dropped)."""

    columns: np.ndarray
    weight: np.ndarray


class _Engine:
    """Per-neuron statistics of neuron-major blocks ([k neurons, N tokens]) with N fixed."""

    def __init__(self, n_tokens: int, gaussian_sorted: np.ndarray | None = None, pairs: _Pairs | None = None):
        if n_tokens < 2:
            raise ValueError(f"need at least 2 tokens per neuron, got {n_tokens}")
        self.n = n_tokens
        self.grid = _QuantileGrid.for_n(n_tokens)
        if gaussian_sorted is None:
            self.gaussian, self.gaussian_prefix = np.empty(0), np.empty(0)
        else:
            self.gaussian = np.ascontiguousarray(gaussian_sorted, dtype=np.float64)
            self.gaussian_prefix = np.concatenate([[0.0], np.cumsum(self.gaussian)])
        self.pairs = pairs

    def __call__(self, block: np.ndarray) -> _ChunkStats:
        """All statistics of ``block``: [k, N], or [k, n_windows, window] (any strides, e.g. the shards' read view).

        Any float dtype; float16 goes by keys: radix-sorted (small N) or counted (large N).
        """
        k, n = block.shape[0], self.n
        if math.prod(block.shape[1:]) != n:
            raise ValueError(f"block of shape {block.shape} does not hold N = {n} tokens per neuron")
        g = self.grid
        grid_args = (g.bin_mean, g.prefix, g.q_lo, g.q_hi, g.g_lo, g.g_hi, self.gaussian, self.gaussian_prefix)
        out = np.empty((k, wd_kernels.N_COLUMNS))
        md = None
        if block.dtype == np.float16:
            presorted = n < HISTOGRAM_MIN_TOKENS
            if presorted:  # one pass lays the keys out per neuron; numpy's stable uint16 sort is a radix sort
                bits = wd_kernels.float16_keys(block).reshape(k, n)
                if self.pairs is not None:  # MD from the contiguous keys, before they are sorted
                    md = _md_rows(bits, self.pairs, wd_kernels.KEY_VALUES)
                bits.sort(axis=-1, kind="stable")
            else:
                bits = np.ascontiguousarray(block).reshape(k, n).view(np.uint16)
                if self.pairs is not None:
                    md = _md_rows(bits, self.pairs, wd_kernels.BIT_VALUES)
            wd_kernels.float16_block(bits, presorted, wd_kernels.KEY_VALUES, *grid_args, out)
        else:
            values = np.ascontiguousarray(block).reshape(k, n)
            if self.pairs is not None:
                md = _md_rows(values, self.pairs)
            values = np.sort(values, axis=-1)
            wd_kernels.sorted_block(values, g.bin_mean, g.q_lo, g.q_hi, g.g_lo, g.g_hi, self.gaussian, out)
        wd, wd_negative = out[:, wd_kernels.WD], out[:, wd_kernels.WD_NEGATIVE]
        return _ChunkStats(
            wd=wd,
            wd_negative=wd_negative,
            wd_positive=wd - wd_negative,
            frac_negative=out[:, wd_kernels.FRAC_NEGATIVE],
            mean=out[:, wd_kernels.MEAN],
            std=out[:, wd_kernels.STD],
            skewness=out[:, wd_kernels.SKEWNESS],
            kurtosis=out[:, wd_kernels.KURTOSIS],
            constant=out[:, wd_kernels.STD] == 0.0,
            wd_sampled=out[:, wd_kernels.WD_SAMPLED] if self.gaussian.size else None,
            md=md,
        )


def all_neuron_statistics(
    get_block: Callable[[int, int], np.ndarray],
    n_neurons: int,
    n_tokens: int,
    *,
    chunk_neurons: int,
    gaussian_sorted: np.ndarray | None = None,
    pairs: _Pairs | None = None,
    threads: int | None = None,
) -> _ChunkStats:
    """Statistics of neurons 0..n_neurons-1 (the engine of every statistics pass, public for perf/bench_wd.py);
    ``get_block(start, stop)`` returns their [stop - start, N] values.

    Chunks go to ``threads`` workers as they free up (default: torch's thread count, which honours
    OMP_NUM_THREADS); the kernels, numpy's sort and the shard reads release the GIL.
    """
    engine = _Engine(n_tokens, gaussian_sorted, pairs)
    # The pool starts a thread per submitted task up to this bound, so a single chunk runs on a single thread.
    with ThreadPoolExecutor(max(1, torch.get_num_threads() if threads is None else threads)) as pool:
        return _gather(_submit(pool, engine, get_block, n_neurons, chunk_neurons))


def _submit(
    pool: ThreadPoolExecutor,
    engine: _Engine,
    get_block: Callable[[int, int], np.ndarray],
    n_neurons: int,
    chunk_neurons: int,
) -> list[Future]:
    """One task per neuron chunk; each reads its own block when it runs, so memory holds a chunk per thread."""
    if chunk_neurons < 1:
        raise ValueError(f"chunk_neurons must be >= 1, got {chunk_neurons}")
    return [
        pool.submit(lambda start: engine(get_block(start, min(start + chunk_neurons, n_neurons))), start)
        for start in range(0, n_neurons, chunk_neurons)
    ]


def _gather(futures: list[Future]) -> _ChunkStats:
    return _ChunkStats.concatenate([future.result() for future in futures])


def _as_numpy(y: torch.Tensor | np.ndarray, name: str = "y") -> np.ndarray:
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu()
        arr = (y.float() if y.dtype == torch.bfloat16 else y).numpy()  # numpy has no bfloat16; float32 is exact
    else:
        arr = np.asarray(y)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D [tokens, neurons], got shape {tuple(arr.shape)}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{name} must be a floating-point array, got {arr.dtype}")
    if arr.shape[0] < 2:
        raise ValueError(f"{name} needs at least 2 tokens per neuron, got {arr.shape[0]}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or inf")
    return arr


def _statistics_nk(
    y: torch.Tensor | np.ndarray, *, chunk_neurons: int, gaussian_sorted: np.ndarray | None = None
) -> _ChunkStats:
    """Statistics of every column of a [N, K] array, fields of length K."""
    arr = _as_numpy(y)
    n_tokens, n_neurons = arr.shape
    y_kn = _neuron_major_copy(arr)
    return all_neuron_statistics(
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


def negative_per_token_ratio(wd_negative, wd_positive, frac_negative) -> np.ndarray:
    """The sign split per token: (WD− / f−) / (WD+ / (1 − f−)) of each neuron (:func:`sign_split`'s outputs), float64;
    NaN where one side has no tokens (f− is 0 or 1). Above 1: the negative side carries more WD per token."""
    neg, pos, f = (np.asarray(v, dtype=np.float64) for v in (wd_negative, wd_positive, frac_negative))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((f > 0) & (f < 1), (neg / f) / (pos / (1 - f)), np.nan)


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


# ----------------------------------------------------------------------------------------------------------
# Mapping difficulty
# ----------------------------------------------------------------------------------------------------------
def _pairs_for(x: np.ndarray, columns: np.ndarray) -> _Pairs:
    """MD pairs (columns[0], columns[1]), (columns[2], columns[3]), ... whose projection inputs are the rows of
    ``x`` [2P, d_in] in the same order. Pairs with identical inputs (d_x = 0, e.g. the same token at the start of
    two windows) have an undefined ratio 0/0 and are left out (logged)."""
    d_x = input_distances(x)
    keep = d_x > 0
    if not keep.all():
        if not keep.any():
            raise ValueError("mapping_difficulty: every pair has identical inputs (d_x = 0)")
        log.warning(
            "mapping_difficulty: %d of %d pairs have identical inputs and are left out", (~keep).sum(), keep.size
        )
    d_x = d_x[keep]
    return _Pairs(columns=np.concatenate([columns[0::2][keep], columns[1::2][keep]]), weight=d_x.max() / d_x)


def _md_rows(rows: np.ndarray, pairs: _Pairs, lut: np.ndarray | None = None) -> np.ndarray:
    """MD of each neuron (row of ``rows`` [k, N]) over ``pairs``: mean over pairs of (d_y / median(d_y)) times
    max(d_x) / d_x, with d_y in float64. ``rows``: float32 / float64 values, or uint16 codes that ``lut`` decodes
    (float16 keys or bit patterns). A neuron with median d_y = 0 gets NaN."""
    p = pairs.weight.size
    first, second = pairs.columns[:p], pairs.columns[p:]
    d_y = np.empty((rows.shape[0], p))
    if lut is not None:
        wd_kernels.pair_differences_codes(rows, first, second, lut, d_y)
    else:
        wd_kernels.pair_differences_values(rows, first, second, d_y)
    # numpy's median (the mean of the two middle values for even P) from a SIMD sort of each row: 3x faster here
    # than np.median's partition, and 4x faster than numba's np.partition.
    ordered = np.sort(d_y, axis=1)
    median = (ordered[:, (p - 1) // 2] + ordered[:, p // 2]) / 2
    weighted = np.empty(rows.shape[0])
    wd_kernels.weighted_row_sums(d_y, pairs.weight, weighted)
    with np.errstate(divide="ignore", invalid="ignore"):
        md = weighted / (median * p)
    md[median == 0] = np.nan
    return md


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
    pairs = _pairs_for(xa, np.arange(xa.shape[0]))
    values = ya.T if ya.dtype in (np.float32, np.float64) else ya.T.astype(np.float64)  # float16: exact in float64
    return torch.from_numpy(_md_rows(np.ascontiguousarray(values), pairs))


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

    Layers are streamed (at most two queued at a time) and each neuron chunk is read once, for WD and MD
    together: peak memory is one chunk of the shard (``chunk_neurons * N`` values), the kernels' 65,536 counters
    and per-run arrays per thread, and the quantile grid (``6 * 8 * N`` bytes), independent of depth and width.
    """
    if wd_method not in WD_METHODS:
        raise ValueError(f"wd_method must be one of {WD_METHODS}, got {wd_method!r}")
    index = ShardIndex.load(shard_dir)
    if md_pairs is not None and not 1 <= 2 * md_pairs <= len(index.md_positions):
        raise ValueError(
            f"md_pairs={md_pairs} needs {2 * md_pairs} tokens but the shards in {shard_dir} hold inputs for "
            f"{len(index.md_positions)} (collect with a larger md_tokens)"
        )
    frames = []

    def table(layer: int, n_neurons: int, stats: _ChunkStats) -> pl.DataFrame:
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
            "md": stats.md if md_pairs is not None else np.full(n_neurons, np.nan),
            "constant": stats.constant,
        }
        if wd_method != "exact":
            frame["wd_sampled"] = stats.wd_sampled
        if stats.constant.any():
            log.warning("layer %d: %d constant (dead) neurons; their WD is NaN", layer, stats.constant.sum())
        return pl.DataFrame(frame)

    # One pool for all layers, and layer L+1's tasks queued before layer L's results are collected: the workers
    # never wait for the main thread's per-layer setup and table building. At most two layers are in flight.
    # The shard store says how many reader threads keep the cores busy (more for O_DIRECT shards).
    in_flight: deque[tuple[int, int, list[Future]]] = deque()

    def finish_oldest() -> None:
        layer, n_neurons, futures = in_flight.popleft()
        frames.append(table(layer, n_neurons, _gather(futures)))

    with ThreadPoolExecutor(index.reader_threads(torch.get_num_threads())) as pool:
        for layer in index.layers if layers is None else layers:
            n_neurons, n_tokens = index.y_blocks(layer).shape[1], index.n_tokens  # checks the layer and the file
            pairs = None
            if md_pairs is not None:
                pairs = _pairs_for(index.x_md(layer)[: 2 * md_pairs], index.md_positions[: 2 * md_pairs])
            gaussian = sorted_gaussian_sample(n_tokens, [seed, layer]) if wd_method != "exact" else None
            engine = _Engine(n_tokens, gaussian, pairs)
            get_block = functools.partial(index.y_neuron_windows, layer)  # one chunk in memory per task
            in_flight.append((layer, n_neurons, _submit(pool, engine, get_block, n_neurons, chunk_neurons)))
            if len(in_flight) == 2:
                finish_oldest()
        while in_flight:
            finish_oldest()
    return pl.concat(frames)
