"""Compiled per-neuron kernels behind :mod:`wneurons.core.stats`: every statistic of a neuron from its sorted values,
and the differences at token pairs that its mapping difficulty (MD) starts from (at the end of the module).

A neuron's N values are reduced to **runs**: its distinct values in increasing order with their counts. Within a
run every order statistic has the same value z, so the exact WD's sum over order statistics (see stats.py)

    sum_{i in run} |z - m_i|,   m_i = mean of N(0,1) over its i-th quantile bin (increasing in i)

splits at s = r + #{i in [r, e): m_i < z} into two prefix sums of m: ``z (2s - r - e) - 2 P[s] + P[r] + P[e]``
for the run's ranks [r, e). Over a neuron that is N branch-free compares and O(1) arithmetic per run. The few
quantile bins where z itself lies (the quantile functions cross) get the closed form with Φ(z) instead of
|z - m_i|.

Two paths:

- float16 values (the activation shards) with N large against the 65,536 float16 patterns: the patterns map to
  order-preserving keys, and a neuron's runs are its **key histogram** (N increments into 65,536 counters, then
  one scan; O(N), no comparison sort).
- smaller N (few ties) and any other float dtype: the values are sorted (float16 as keys, by numpy's radix sort
  of uint16) and taken one order statistic at a time (:func:`_order_statistics`), in branch-free loops.

The authors' sampled estimate (mean |z_(i) - g_(i)| against one sorted Gaussian sample g) uses the same merge
with g in place of the bin means. Everything accumulates in float64, each sum in one fixed order (:data:`LANES`), so
the same values give the same bits on any thread, in any chunk and from any compile. The kernels hold no Python
objects and release the GIL, so :mod:`wneurons.core.stats` runs neuron chunks on several threads.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

# Columns of the per-neuron output array.
WD, WD_NEGATIVE, FRAC_NEGATIVE, MEAN, STD, SKEWNESS, KURTOSIS, WD_SAMPLED = range(8)
N_COLUMNS = 8

KEY_SPACE = 1 << 16
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)


def float16_keys(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Order-preserving uint16 keys of float16 bit patterns: key(a) < key(b) iff a < b (for non-NaN values).

    Negative values have their bits inverted, non-negative ones get the sign bit set; -0.0 and +0.0 get two
    adjacent keys with the same value. ``bits`` may be any strided view; the keys go to ``out`` (a new C-ordered
    array by default), so the transform also lays them out.
    """
    bits = bits.view(np.uint16)
    out = np.empty(bits.shape, np.uint16) if out is None else out
    np.right_shift(bits, 15, out=out)
    np.multiply(out, np.uint16(0x7FFF), out=out)
    np.bitwise_or(out, np.uint16(0x8000), out=out)
    np.bitwise_xor(out, bits, out=out)
    return out


def _key_values() -> np.ndarray:
    keys = np.arange(KEY_SPACE, dtype=np.uint32)
    bits = np.where(keys & 0x8000, keys ^ 0x8000, keys ^ 0xFFFF).astype(np.uint16)
    return bits.view(np.float16).astype(np.float64)


# KEY_VALUES[key] = the float16 value with that key, as float64 (NaN patterns included; they never occur in a run
# because the shards refuse NaN). BIT_VALUES[bits]: the same for the raw bit patterns.
KEY_VALUES = _key_values()
BIT_VALUES = np.arange(KEY_SPACE, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)


@njit(nogil=True, cache=True)
def _runs_from_histogram(bits, counts, run_keys, run_counts):
    """Runs of one neuron's float16 values (``bits`` uint16 [N]) by counting keys; returns the number of runs.

    ``counts`` is a zeroed int32 scratch of KEY_SPACE counters and is left zeroed. Only the key range actually
    used is scanned; the scan is branch-free so that it costs the same for any occupancy.
    """
    lo = KEY_SPACE
    hi = -1
    for t in range(bits.shape[0]):
        b = np.int32(bits[t])
        key = b ^ (((b >> 15) * 0x7FFF) | 0x8000)
        counts[key] += 1
        lo = min(lo, key)
        hi = max(hi, key)
    d = 0
    for key in range(lo, hi + 1):
        c = counts[key]
        run_keys[d] = key
        run_counts[d] = c
        d += c != 0
        counts[key] = 0
    return d


@njit(nogil=True, cache=True)
def _store_moments(out, n, mean, m2, m3, m4, n_negative):
    """Mean, std, fraction negative, skewness and excess kurtosis from central power sums into ``out``; returns
    1 / std, or 0 for a constant (dead) neuron, whose standardized distribution (WD, shape) is NaN."""
    var = m2 / n
    std = math.sqrt(var)
    out[MEAN] = mean
    out[STD] = std
    out[FRAC_NEGATIVE] = n_negative / n
    if var == 0.0:
        out[WD] = np.nan
        out[WD_NEGATIVE] = np.nan
        out[SKEWNESS] = np.nan
        out[KURTOSIS] = np.nan
        out[WD_SAMPLED] = np.nan
        return 0.0
    out[SKEWNESS] = m3 / n / (var * std)
    out[KURTOSIS] = m4 / n / (var * var) - 3.0
    return 1.0 / std


@njit(nogil=True, cache=True)
def _crossing_correction(z, b, n, bin_mean, g_lo, g_hi):
    """N times the exact integral of |z - Φ⁻¹(u)| over quantile bin ``b`` (which holds z), minus the |z - m_b|
    that the sums put there: the closed form splits the bin at c = Φ(z), where G(c) = -φ(z)."""
    c = 0.5 * math.erfc(-z * _INV_SQRT_2)
    exact = n * (z * (2.0 * c - (2 * b + 1) / n) + g_lo[b] + g_hi[b]) + 2.0 * n * _INV_SQRT_2PI * math.exp(-0.5 * z * z)
    return exact - abs(z - bin_mean[b])


@njit(nogil=True, cache=True)
def _run_statistics(values, counts, d, n, bin_mean, prefix, q_lo, q_hi, g_lo, g_hi, gauss, gauss_prefix, out):
    """All statistics of one neuron from its ``d`` runs (``values`` increasing, ``counts`` summing to n)."""
    total = 0.0
    for j in range(d):
        total += counts[j] * values[j]
    mean = total / n
    m2 = 0.0
    m3 = 0.0
    m4 = 0.0
    n_negative = 0
    for j in range(d):
        x = values[j] - mean
        c = counts[j]
        x2 = x * x
        m2 += c * x2
        m3 += c * x2 * x
        m4 += c * x2 * x2
        if values[j] < 0.0:  # the RAW sign
            n_negative += c
    inv_std = _store_moments(out, n, mean, m2, m3, m4, n_negative)
    if inv_std == 0.0:
        return
    sampled = gauss.shape[0] > 0
    wd = 0.0
    wd_negative = 0.0
    wd_sampled = 0.0
    r = 0  # first rank of the run
    for j in range(d):
        z = (values[j] - mean) * inv_std
        e = r + counts[j]
        # Split of the run's ranks: sc = r + #{i in [r, e): m_i < z}. Counted branch-free over the run (O(N) in
        # all) rather than by advancing a pointer, whose data-dependent exit mispredicts about once per run.
        sc = r
        for i in range(r, e):
            sc += bin_mean[i] < z
        part = z * (2 * sc - r - e) - 2.0 * prefix[sc] + prefix[r] + prefix[e]
        # The quantile bin holding z can only be sc - 1 (whose mean is < z) or sc (whose mean is >= z): each bin
        # holds its own mean. Where it lies in the run, the closed form with Φ(z) replaces |z - m_b|.
        b = -1
        if sc > r and z < q_hi[sc - 1]:
            b = sc - 1
        elif sc < e and z > q_lo[sc]:
            b = sc
        if b >= 0:
            part += _crossing_correction(z, b, n, bin_mean, g_lo, g_hi)
        wd += part
        if values[j] < 0.0:
            wd_negative += part
        if sampled:
            sc = r
            for i in range(r, e):
                sc += gauss[i] < z
            wd_sampled += z * (2 * sc - r - e) - 2.0 * gauss_prefix[sc] + gauss_prefix[r] + gauss_prefix[e]
        r = e
    out[WD] = wd / n
    out[WD_NEGATIVE] = wd_negative / n
    out[WD_SAMPLED] = wd_sampled / n if sampled else np.nan


# Every float sum below runs in one fixed order, written out: LANES partial sums (element i goes to lane i % LANES
# over the first n - n % LANES elements), combined as (s0 + s1) + (s2 + s3), then the remaining elements in order.
# No fastmath: with ``reassoc`` LLVM chose the order itself, and it chose differently by compile context (a fresh
# compile against numba's cache, the kernel called alone or from float16_block), so the same shards gave WD and
# moments that moved in the last bits from one run to the next. Four independent chains keep the adds pipelined.
LANES = 4


@njit(nogil=True, cache=True)
def _lane_sum(v):
    """Sum of ``v`` [N] in the fixed order above."""
    n = v.shape[0]
    body = n - n % LANES
    s0 = s1 = s2 = s3 = 0.0
    for i in range(0, body, LANES):
        s0 += v[i]
        s1 += v[i + 1]
        s2 += v[i + 2]
        s3 += v[i + 3]
    total = (s0 + s1) + (s2 + s3)
    for i in range(body, n):
        total += v[i]
    return total


@njit(nogil=True, cache=True)
def _central_power_sums(v, mean):
    """Sums of (v - mean)^2, ^3, ^4 over ``v`` [N], each in the fixed order above."""
    n = v.shape[0]
    body = n - n % LANES
    a0 = a1 = a2 = a3 = 0.0
    b0 = b1 = b2 = b3 = 0.0
    c0 = c1 = c2 = c3 = 0.0
    for i in range(0, body, LANES):
        x = v[i] - mean
        x2 = x * x
        a0 += x2
        b0 += x2 * x
        c0 += x2 * x2
        x = v[i + 1] - mean
        x2 = x * x
        a1 += x2
        b1 += x2 * x
        c1 += x2 * x2
        x = v[i + 2] - mean
        x2 = x * x
        a2 += x2
        b2 += x2 * x
        c2 += x2 * x2
        x = v[i + 3] - mean
        x2 = x * x
        a3 += x2
        b3 += x2 * x
        c3 += x2 * x2
    m2 = (a0 + a1) + (a2 + a3)
    m3 = (b0 + b1) + (b2 + b3)
    m4 = (c0 + c1) + (c2 + c3)
    for i in range(body, n):
        x = v[i] - mean
        x2 = x * x
        m2 += x2
        m3 += x2 * x
        m4 += x2 * x2
    return m2, m3, m4


@njit(nogil=True, cache=True)
def _sum_of_gaps(v, reference, lo, hi, mean, inv_std):
    """Sum over i in [lo, hi) of |(v[i] - mean) * inv_std - reference[i]|, in the fixed order above (lanes counted
    from ``lo``)."""
    body = lo + (hi - lo) - (hi - lo) % LANES
    s0 = s1 = s2 = s3 = 0.0
    for i in range(lo, body, LANES):
        s0 += abs((v[i] - mean) * inv_std - reference[i])
        s1 += abs((v[i + 1] - mean) * inv_std - reference[i + 1])
        s2 += abs((v[i + 2] - mean) * inv_std - reference[i + 2])
        s3 += abs((v[i + 3] - mean) * inv_std - reference[i + 3])
    total = (s0 + s1) + (s2 + s3)
    for i in range(body, hi):
        total += abs((v[i] - mean) * inv_std - reference[i])
    return total


@njit(nogil=True, cache=True)
def _order_statistics(v, bin_mean, q_lo, q_hi, g_lo, g_hi, gauss, out):
    """All statistics of one neuron from its sorted values ``v`` [N], one order statistic at a time.

    For neurons with few ties (N small against the float16 key space, or float32/64 data) this beats the run
    form: the sums are branch-free and in a fixed order (:data:`LANES`), so that the result depends on the values
    only, never on how or where the kernel was compiled.
    """
    n = v.shape[0]
    mean = _lane_sum(v) / n
    m2, m3, m4 = _central_power_sums(v, mean)
    n_negative = 0
    for i in range(n):
        n_negative += v[i] < 0.0  # the RAW sign; negatives are a prefix of the sorted values
    inv_std = _store_moments(out, n, mean, m2, m3, m4, n_negative)
    if inv_std == 0.0:
        return
    wd_negative = _sum_of_gaps(v, bin_mean, 0, n_negative, mean, inv_std)
    wd_positive = _sum_of_gaps(v, bin_mean, n_negative, n, mean, inv_std)
    # Crossing bins (z inside its own quantile bin): rare, so this scan's branch is well predicted.
    for i in range(n):
        z = (v[i] - mean) * inv_std
        if q_lo[i] < z and z < q_hi[i]:
            if i < n_negative:
                wd_negative += _crossing_correction(z, i, n, bin_mean, g_lo, g_hi)
            else:
                wd_positive += _crossing_correction(z, i, n, bin_mean, g_lo, g_hi)
    out[WD] = (wd_negative + wd_positive) / n
    out[WD_NEGATIVE] = wd_negative / n
    if gauss.shape[0] > 0:
        out[WD_SAMPLED] = _sum_of_gaps(v, gauss, 0, n, mean, inv_std) / n
    else:
        out[WD_SAMPLED] = np.nan


@njit(nogil=True, cache=True)
def float16_block(bits, presorted, key_values, bin_mean, prefix, q_lo, q_hi, g_lo, g_hi, gauss, gauss_prefix, out):
    """Statistics of every row of ``bits`` (uint16 [k, N]: float16 patterns, or their keys sorted per row when
    ``presorted``) into ``out`` float64 [k, N_COLUMNS]: presorted rows one order statistic at a time, the others
    counted into runs."""
    k, n = bits.shape
    if presorted:
        values = np.empty(n, np.float64)
        for row in range(k):
            keys = bits[row]
            for t in range(n):
                values[t] = key_values[keys[t]]
            _order_statistics(values, bin_mean, q_lo, q_hi, g_lo, g_hi, gauss, out[row])
        return
    space = min(n, KEY_SPACE)
    counts = np.zeros(KEY_SPACE, np.int32)
    run_keys = np.empty(space, np.int32)
    run_counts = np.empty(space, np.int64)
    values = np.empty(space, np.float64)
    for row in range(k):
        d = _runs_from_histogram(bits[row], counts, run_keys, run_counts)
        for j in range(d):
            values[j] = key_values[run_keys[j]]
        _run_statistics(
            values, run_counts, d, n, bin_mean, prefix, q_lo, q_hi, g_lo, g_hi, gauss, gauss_prefix, out[row]
        )


@njit(nogil=True, cache=True)
def sorted_block(values, bin_mean, q_lo, q_hi, g_lo, g_hi, gauss, out):
    """Statistics of every row of ``values`` (float [k, N], each row sorted) into ``out`` [k, N_COLUMNS]."""
    k, n = values.shape
    row_values = np.empty(n, np.float64)
    for row in range(k):
        for t in range(n):
            row_values[t] = values[row, t]
        _order_statistics(row_values, bin_mean, q_lo, q_hi, g_lo, g_hi, gauss, out[row])


# ---------------------------------------------------------------- mapping difficulty
@njit(nogil=True, cache=True)
def pair_differences_codes(codes, first, second, lut, out):
    """d_y = |y(first[i]) - y(second[i])| of every row of ``codes`` (uint16 [k, N]: float16 keys or bit
    patterns, decoded by ``lut``, float64 [65,536]) into ``out`` float64 [k, P]: one pass, no gathered copies
    (5x faster than numpy's fancy indexing of the codes and then of the table)."""
    for j in range(codes.shape[0]):
        row = codes[j]
        for i in range(first.shape[0]):
            out[j, i] = abs(lut[row[first[i]]] - lut[row[second[i]]])


@njit(nogil=True, cache=True)
def pair_differences_values(values, first, second, out):
    """:func:`pair_differences_codes` for float32 / float64 values [k, N]; the differences are taken in float64."""
    for j in range(values.shape[0]):
        row = values[j]
        for i in range(first.shape[0]):
            out[j, i] = abs(np.float64(row[first[i]]) - np.float64(row[second[i]]))


@njit(nogil=True, cache=True)
def weighted_row_sums(values, weight, out):
    """out[j] = sum_i values[j, i] * weight[i] for float64 ``values`` [k, P], in index order: MD's weighted mean
    of pair differences. A plain loop rather than BLAS, whose gemv kernels sum a row in an order that depends on
    the number of rows in the block (the neuron chunk) and on its threads."""
    for j in range(values.shape[0]):
        total = 0.0
        for i in range(values.shape[1]):
            total += values[j, i] * weight[i]
        out[j] = total
