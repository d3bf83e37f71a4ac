"""The science functions of wneurons.core.stats: exact WD against independent integration, properties, MD."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import torch
from scipy import integrate, special

from wneurons.core import stats


def _standardize(y: np.ndarray) -> np.ndarray:
    return (y - y.mean(axis=0)) / y.std(axis=0)


def _w1_by_quadrature(sample: np.ndarray) -> float:
    """W1(standardized empirical distribution of ``sample``, N(0,1)) = ∫_0^1 |Q(u) - Φ⁻¹(u)| du, by scipy.quad.

    Integrates each quantile interval of the step function Q separately, with the crossing point as a breakpoint:
    independent of the closed form in stats.
    """
    z = np.sort((sample - sample.mean()) / sample.std())
    n = z.size
    total = 0.0
    for i, zi in enumerate(z):
        a, b = i / n, (i + 1) / n
        cross = special.ndtr(zi)
        points = [cross] if a < cross < b else None
        total += integrate.quad(
            lambda u, zi=zi: abs(zi - special.ndtri(u)), a, b, points=points, limit=500, epsabs=1e-13, epsrel=1e-13
        )[0]
    return total


def _mixed_columns(n: int, seed: int) -> np.ndarray:
    """Columns of different shapes: Gaussian, skewed, heavy-tailed, bimodal, mostly-negative (like a gate)."""
    rng = np.random.default_rng(seed)
    return np.stack(
        [
            rng.standard_normal(n),
            rng.standard_exponential(n),
            rng.standard_t(3, n),
            np.where(rng.random(n) < 0.3, -3.0, 1.0) + 0.3 * rng.standard_normal(n),
            -rng.gamma(2.0, 1.0, n) + 0.5,
        ],
        axis=1,
    )


@pytest.mark.parametrize("n", [2, 3, 7, 40])
def test_exact_wd_equals_quadrature_small_samples(n):
    y = _mixed_columns(n, seed=n)
    wd = stats.wasserstein_distance_to_normal(y).numpy()
    expected = [_w1_by_quadrature(y[:, k]) for k in range(y.shape[1])]
    np.testing.assert_allclose(wd, expected, rtol=0, atol=1e-9)


def test_two_point_distribution_matches_analytic_integral():
    # Half -1, half +1 is already standardized, and its empirical distribution IS the two-point law, so the exact
    # W1 must equal 2 ∫_0^{1/2} |-1 - Φ⁻¹(u)| du for every even N.
    analytic = (
        2
        * integrate.quad(
            lambda u: abs(-1.0 - special.ndtri(u)), 0, 0.5, points=[special.ndtr(-1.0)], epsabs=1e-14, epsrel=1e-14
        )[0]
    )
    for n in (2, 10, 1000):
        y = np.repeat([-1.0, 1.0], n // 2)[:, None]
        assert stats.wasserstein_distance_to_normal(y).item() == pytest.approx(analytic, abs=1e-11)


def test_standardized_uniform_converges_to_analytic_w1():
    # Continuous U(-√3, √3) has quantile √3 (2u - 1); its W1 to N(0,1) by quadrature (with the crossing points).
    crossings = [scipy.optimize.brentq(lambda u: np.sqrt(3) * (2 * u - 1) - special.ndtri(u), lo, hi) for lo, hi in
                 [(1e-6, 0.4), (0.6, 1 - 1e-6)]]  # fmt: skip
    analytic = integrate.quad(
        lambda u: abs(np.sqrt(3) * (2 * u - 1) - special.ndtri(u)), 0, 1, points=[*crossings, 0.5], limit=200
    )[0]
    n = 200_000
    # Midpoint quantiles: the empirical law differs from the continuous one by O(1/N) in W1.
    y = ((np.arange(n) + 0.5) / n)[:, None]
    assert stats.wasserstein_distance_to_normal(y).item() == pytest.approx(analytic, abs=1e-4)


def test_gaussian_sample_wd_small_and_shrinking_with_n():
    rng = np.random.default_rng(0)
    wd_small = stats.wasserstein_distance_to_normal(rng.standard_normal((1_000, 20))).mean().item()
    wd_large = stats.wasserstein_distance_to_normal(rng.standard_normal((100_000, 20))).mean().item()
    assert wd_large < 0.01
    assert wd_large < wd_small / 4  # roughly N^-1/2: a factor 10 expected


def test_exact_agrees_with_large_sample_scipy():
    y = _mixed_columns(5_000, seed=1)
    exact = stats.wasserstein_distance_to_normal(y).numpy()
    g = np.random.default_rng(2).standard_normal(2_000_000)
    z = _standardize(y)
    reference = [scipy.stats.wasserstein_distance(z[:, k], g) for k in range(y.shape[1])]
    np.testing.assert_allclose(exact, reference, atol=2e-3)


def test_affine_invariance_and_sign_flip_swaps_split():
    y = _mixed_columns(3_000, seed=3) - 0.2  # every column has both signs
    wd = stats.wasserstein_distance_to_normal(y)
    neg, pos, frac = stats.sign_split(y)
    assert ((frac > 0) & (frac < 1)).all()
    scaled = 3.7 * y + 0.0
    torch.testing.assert_close(stats.wasserstein_distance_to_normal(scaled), wd, rtol=0, atol=1e-12)
    torch.testing.assert_close(stats.sign_split(scaled)[0], neg, rtol=0, atol=1e-12)
    # A shift leaves WD unchanged (but moves the sign boundary, so the split may change).
    torch.testing.assert_close(stats.wasserstein_distance_to_normal(2.5 * y - 11.0), wd, rtol=0, atol=1e-10)
    # a < 0 mirrors the distribution; N(0,1) is symmetric, so WD is unchanged and the regions swap.
    flipped = -y
    torch.testing.assert_close(stats.wasserstein_distance_to_normal(flipped), wd, rtol=0, atol=1e-12)
    neg_f, pos_f, frac_f = stats.sign_split(flipped)
    torch.testing.assert_close(neg_f, pos, rtol=0, atol=1e-12)
    torch.testing.assert_close(pos_f, neg, rtol=0, atol=1e-12)
    torch.testing.assert_close(frac_f, 1 - frac, rtol=0, atol=1e-12)


def test_split_sums_to_wd_and_matches_masked_quadrature():
    y = _mixed_columns(30, seed=4) - 0.1
    y[:, 0] = np.abs(y[:, 0])  # a column with no negative token
    y[:, 1] = -np.abs(y[:, 1]) - 0.01  # and one with only negative tokens
    wd = stats.wasserstein_distance_to_normal(y)
    neg, pos, frac = stats.sign_split(y)
    torch.testing.assert_close(neg + pos, wd, rtol=0, atol=1e-12)
    assert neg[0] == 0 and pos[1] == 0
    np.testing.assert_allclose(frac.numpy(), (y < 0).mean(axis=0))
    # The negative part by quadrature: the same integral over the intervals of the negative order statistics.
    k = 3
    order = np.sort(y[:, k])
    z = (order - y[:, k].mean()) / y[:, k].std()
    n = z.size
    expected = sum(
        integrate.quad(lambda u, zi=zi: abs(zi - special.ndtri(u)), i / n, (i + 1) / n, limit=200)[0]
        for i, zi in enumerate(z)
        if order[i] < 0
    )
    assert neg[k].item() == pytest.approx(expected, abs=1e-8)


def test_float16_and_float64_inputs_agree():
    y = _mixed_columns(4_000, seed=5).astype(np.float16)
    torch.testing.assert_close(
        stats.wasserstein_distance_to_normal(y),
        stats.wasserstein_distance_to_normal(y.astype(np.float64)),
        rtol=0,
        atol=1e-12,
    )


def test_chunking_does_not_change_results():
    y = _mixed_columns(500, seed=6)
    y = np.concatenate([y] * 7, axis=1)
    full = stats.wasserstein_distance_to_normal(y, chunk_neurons=1000)
    torch.testing.assert_close(stats.wasserstein_distance_to_normal(y, chunk_neurons=3), full, rtol=0, atol=0)


def test_constant_neuron_is_an_error_unless_allowed():
    y = _mixed_columns(100, seed=7)
    y[:, 2] = 0.5
    with pytest.raises(ValueError, match=r"neuron\(s\) \[2\]"):
        stats.wasserstein_distance_to_normal(y)
    wd = stats.wasserstein_distance_to_normal(y, allow_constant=True)
    assert torch.isnan(wd[2]) and torch.isfinite(wd[[0, 1, 3, 4]]).all()


def test_bad_input_shapes_are_named():
    with pytest.raises(ValueError, match="2-D"):
        stats.wasserstein_distance_to_normal(np.zeros(10))
    with pytest.raises(ValueError, match="at least 2 tokens"):
        stats.wasserstein_distance_to_normal(np.zeros((1, 3)))


def test_sampled_equals_scipy_loop():
    y = _mixed_columns(2_000, seed=8)
    seed = 11
    sampled = stats.wasserstein_distance_sampled(y, seed=seed).numpy()
    g = np.random.default_rng(seed).standard_normal(y.shape[0])
    z = _standardize(y)
    loop = [scipy.stats.wasserstein_distance(z[:, k], g) for k in range(y.shape[1])]
    np.testing.assert_allclose(sampled, loop, rtol=0, atol=1e-10)
    # Same seed, same estimate; another seed, another sample (the authors' noise).
    np.testing.assert_array_equal(stats.wasserstein_distance_sampled(y, seed=seed).numpy(), sampled)
    assert not np.allclose(stats.wasserstein_distance_sampled(y, seed=seed + 1).numpy(), sampled, atol=1e-6)


def test_moments_match_scipy():
    y = _mixed_columns(3_000, seed=9)
    m = stats.moments(y)
    np.testing.assert_allclose(m.mean.numpy(), y.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(m.std.numpy(), y.std(axis=0), rtol=1e-12)
    np.testing.assert_allclose(m.skewness.numpy(), scipy.stats.skew(y, axis=0), rtol=1e-9)
    np.testing.assert_allclose(m.kurtosis.numpy(), scipy.stats.kurtosis(y, axis=0), rtol=1e-9)


def _md_reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """MD by the definition, pair by pair (the authors' loop), for comparison; differences in float64."""
    y = y.astype(np.float64)
    pairs = [(i, i + 1) for i in range(0, len(x), 2)]
    d_x = np.array([np.linalg.norm(x[i] - x[j]) for i, j in pairs])
    out = []
    for k in range(y.shape[1]):
        d_y = np.array([abs(y[i, k] - y[j, k]) for i, j in pairs])
        out.append(np.mean((d_y / np.median(d_y)) / (d_x / d_x.max())))
    return np.array(out)


@pytest.mark.parametrize("n_pairs", [100, 101])  # even and odd: the median of two middle values, or one
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_mapping_difficulty_matches_pairwise_definition(n_pairs, dtype):
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2 * n_pairs, 16))
    w = rng.standard_normal((16, 5))
    y = (np.tanh(x @ w) * 3 - 1).astype(dtype)
    y[:, 4] = np.round(y[:, 4])  # many ties among the differences
    np.testing.assert_allclose(stats.mapping_difficulty(x, y).numpy(), _md_reference(x, y), rtol=1e-12)


def test_mapping_difficulty_is_nan_where_the_median_difference_is_zero():
    rng = np.random.default_rng(13)
    x = rng.standard_normal((40, 4))
    y = rng.standard_normal((40, 3))
    y[:, 1] = 2.0  # constant: every d_y is 0
    y[:22, 2] = 0.5  # 11 of 20 pairs identical: the median d_y is 0
    md = stats.mapping_difficulty(x, y).numpy()
    assert np.isfinite(md[0]) and np.isnan(md[1]) and np.isnan(md[2])


def test_mapping_difficulty_of_a_linear_1d_neuron_is_max_over_median():
    # y = w x in one dimension: d_y = |w| d_x, so every ratio is max(d_x) / median(d_x)... divided by d_x / d_x:
    # MD = mean(|w| d_x / median(|w| d_x) * max(d_x) / d_x) = max(d_x) / median(d_x) for any w != 0.
    rng = np.random.default_rng(11)
    x = rng.standard_normal((100, 1))
    y = x @ np.array([[2.0, -0.3, 50.0]])
    d_x = np.abs(x[0::2, 0] - x[1::2, 0])
    np.testing.assert_allclose(stats.mapping_difficulty(x, y).numpy(), d_x.max() / np.median(d_x), rtol=1e-12)


def test_mapping_difficulty_scale_invariance_and_identical_pairs():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((60, 8))
    y = rng.standard_normal((60, 4))
    md = stats.mapping_difficulty(x, y)
    torch.testing.assert_close(stats.mapping_difficulty(5 * x + 1, 0.1 * y - 7), md, rtol=1e-10, atol=0)
    # A pair of identical inputs (same token, same context) has ratio 0/0 and is left out.
    x2, y2 = x.copy(), y.copy()
    x2[1], y2[1] = x2[0], y2[0]
    torch.testing.assert_close(stats.mapping_difficulty(x2, y2), stats.mapping_difficulty(x[2:], y[2:]))
    with pytest.raises(ValueError, match="even number"):
        stats.mapping_difficulty(x[:5], y[:5])


def _tied_float16_columns(n: int, seed: int) -> np.ndarray:
    """float16 columns with many ties, both zeros, an all-negative and an all-positive neuron."""
    cols = _mixed_columns(n, seed).astype(np.float16)
    rng = np.random.default_rng(seed)
    coarse = np.round(rng.standard_normal(n) * 4) / 4  # ~30 distinct values: long runs of ties
    zeros = np.where(rng.random(n) < 0.5, np.float16(-0.0), np.float16(0.0)) + (rng.random(n) < 0.3)
    negative = -np.abs(rng.standard_normal(n)) - 0.1
    positive = np.abs(rng.standard_t(2, n)) + 0.1
    return np.concatenate([cols, np.stack([coarse, zeros, negative, positive], axis=1).astype(np.float16)], axis=1)


@pytest.mark.parametrize("n", [3, 257, 5_000])
def test_float16_counting_and_sorting_paths_agree_with_float64(monkeypatch, n):
    # The counting path (runs of ties from a key histogram) and the sorting path (order statistics) must give the
    # float64 path's numbers for the same values, ties and signed zeros included.
    y = _tied_float16_columns(n, seed=n)
    reference = stats._statistics_nk(y.astype(np.float64), chunk_neurons=5, gaussian_sorted=np.sort(np.arange(n) / n))
    for threshold in (n + 1, 2):  # sorting, then counting
        monkeypatch.setattr(stats, "HISTOGRAM_MIN_TOKENS", threshold)
        got = stats._statistics_nk(y, chunk_neurons=5, gaussian_sorted=np.sort(np.arange(n) / n))
        for name in ("wd", "wd_negative", "frac_negative", "mean", "std", "skewness", "kurtosis", "wd_sampled"):
            np.testing.assert_allclose(getattr(got, name), getattr(reference, name), rtol=1e-12, atol=1e-12)
    assert reference.frac_negative[-2] == 1.0 and reference.frac_negative[-1] == 0.0


def test_counting_path_matches_quadrature_and_scipy(monkeypatch):
    monkeypatch.setattr(stats, "HISTOGRAM_MIN_TOKENS", 2)
    # Column 0 (Gaussian) and the four tied columns; scipy.quad returns inf on the first interval of the float16
    # exponential column (its minimum sits far in the tail), a limit of the reference, not of the closed form.
    y = _tied_float16_columns(300, seed=21)[:, [0, 5, 6, 7, 8]]
    wd = stats.wasserstein_distance_to_normal(y).numpy()
    expected = [_w1_by_quadrature(y[:, k].astype(np.float64)) for k in range(y.shape[1])]
    np.testing.assert_allclose(wd, expected, rtol=0, atol=1e-9)
    g = np.random.default_rng(4).standard_normal(300)
    loop = [scipy.stats.wasserstein_distance(z, g) for z in _standardize(y.astype(np.float64)).T]
    np.testing.assert_allclose(stats.wasserstein_distance_sampled(y, seed=4).numpy(), loop, rtol=0, atol=1e-10)


def test_constant_float16_neuron_on_both_paths(monkeypatch):
    y = _tied_float16_columns(100, seed=22)
    y[:, 1] = np.float16(-2.5)
    for threshold in (10**6, 2):
        monkeypatch.setattr(stats, "HISTOGRAM_MIN_TOKENS", threshold)
        with pytest.raises(ValueError, match=r"neuron\(s\) \[1\]"):
            stats.wasserstein_distance_to_normal(y)
        s = stats._statistics_nk(y, chunk_neurons=4)
        assert s.constant.tolist() == [k == 1 for k in range(y.shape[1])]
        assert np.isnan(s.wd[1]) and s.mean[1] == -2.5 and s.frac_negative[1] == 1.0


def test_nan_or_inf_input_is_named():
    y = _mixed_columns(50, seed=23)
    y[7, 2] = np.inf
    with pytest.raises(ValueError, match="NaN or inf"):
        stats.wasserstein_distance_to_normal(y)


# ---------------------------------------------------------------------------------------------------------------
# Bit reproducibility: one fixed summation order, whatever compiled the kernel and however the work is split
# ---------------------------------------------------------------------------------------------------------------
def _lane_sum_reference(terms: np.ndarray) -> float:
    """wd_kernels' documented order: LANES partial sums (element i to lane i % LANES), (s0 + s1) + (s2 + s3),
    then the tail in order; written independently, one IEEE add at a time."""
    from wneurons.core import wd_kernels

    lanes, body = wd_kernels.LANES, terms.size - terms.size % wd_kernels.LANES
    partial = [0.0] * lanes
    for i in range(body):
        partial[i % lanes] += float(terms[i])
    total = (partial[0] + partial[1]) + (partial[2] + partial[3])
    for value in terms[body:]:
        total += float(value)
    return total


@pytest.mark.parametrize("n", [1_003, 16_384])
def test_sums_run_in_the_documented_order_in_every_compile_context(n):
    # With fastmath "reassoc" LLVM picked the order of these sums itself, differently for the kernel called alone
    # and from the block kernels (and for a fresh compile against numba's cache): the same values gave moments and
    # WD that moved in the last bits. Every context must now give the same bits, and mean / std those of the
    # documented order.
    from wneurons.core import wd_kernels

    rng = np.random.default_rng(n)
    y16 = (rng.standard_normal((3, n)) * 1.3 + 0.2).astype(np.float16)
    y16[2] = np.abs(y16[2])  # an all-positive neuron: the negative part is empty
    values = np.sort(y16.astype(np.float64), axis=1)
    g = stats._QuantileGrid.for_n(n)
    gauss = stats.sorted_gaussian_sample(n, 0)
    alone = np.empty((3, wd_kernels.N_COLUMNS))
    for row in range(3):
        wd_kernels._order_statistics(values[row], g.bin_mean, g.q_lo, g.q_hi, g.g_lo, g.g_hi, gauss, alone[row])
    from_float64 = np.empty_like(alone)
    wd_kernels.sorted_block(values, g.bin_mean, g.q_lo, g.q_hi, g.g_lo, g.g_hi, gauss, from_float64)
    keys = wd_kernels.float16_keys(y16)
    keys.sort(axis=-1, kind="stable")
    from_float16 = np.empty_like(alone)
    gauss_prefix = np.concatenate([[0.0], np.cumsum(gauss)])
    args = (g.bin_mean, g.prefix, g.q_lo, g.q_hi, g.g_lo, g.g_hi, gauss, gauss_prefix, from_float16)
    wd_kernels.float16_block(keys, True, wd_kernels.KEY_VALUES, *args)
    np.testing.assert_array_equal(from_float64, alone)
    np.testing.assert_array_equal(from_float16, alone)
    for row in range(3):
        mean = _lane_sum_reference(values[row]) / n
        assert alone[row, wd_kernels.MEAN] == mean
        assert alone[row, wd_kernels.STD] == np.sqrt(_lane_sum_reference((values[row] - mean) ** 2) / n)


def test_statistics_are_the_same_bits_from_a_fresh_compile_and_from_numba_cache(tmp_path):
    # The first process compiles the kernels into an empty cache, the second loads them from it.
    import hashlib
    import os
    import subprocess
    import sys

    script = (
        "import hashlib, numpy as np\n"
        "from wneurons.core import stats\n"
        "y = (np.random.default_rng(1).standard_normal((4096, 40)) * 1.3 + 0.2).astype(np.float16)\n"
        "s = stats._statistics_nk(y, chunk_neurons=16, gaussian_sorted=stats.sorted_gaussian_sample(4096, 2))\n"
        "print(hashlib.sha256(b''.join(getattr(s, f).tobytes() for f in ('wd', 'wd_negative', 'mean', 'std',"
        " 'skewness', 'kurtosis', 'wd_sampled'))).hexdigest())\n"
    )
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    digests = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    ]
    assert digests[0] == digests[1] and len(digests[0].strip()) == len(hashlib.sha256().hexdigest())
