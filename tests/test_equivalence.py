"""Decisive verdicts (issue 29): exact paired intervals, Monte Carlo error stated, and equivalence by two one-sided
tests, in core.uncertainty and in the claims that a null decides (C11, C14, C16, C30), on synthetic paired tables."""

import math

import numpy as np
import polars as pl
import pytest
from scipy import stats
from test_claims import M1, R1, W1, make_run, paired_rows, ppl_rows, rows_for

from wneurons.core.equivalence import equivalence_interval, inside_margin, zero_discordance_bound
from wneurons.core.uncertainty import (
    MC_CONFIDENCE_Z,
    MC_ERROR_SHARE,
    bootstrap_mean,
    exact_paired_bootstrap_ci,
    paired_accuracy_difference,
    paired_perplexity_ratio,
    percentile_ci,
    percentile_ci_with_error,
    two_stage_bootstrap_mean,
)
from wneurons.report.claims import FAILS, HOLDS, NO_DATA, NOT_RUN, Run, claim_rows
from wneurons.report.replication import claims_markdown


@pytest.mark.parametrize(("a", "b", "n"), [(30, 10, 400), (3, 1, 50), (0, 5, 40), (200, 190, 4087)])
def test_exact_paired_interval_is_the_limit_of_the_drawn_bootstrap(a, b, n):
    d = np.zeros(n)
    d[:a], d[a : a + b] = 1, -1
    exact = exact_paired_bootstrap_ci(d)
    drawn = percentile_ci(bootstrap_mean(d, resamples=200_000, seed=3))
    # 200,000 draws land within one item step of the exact quantiles (the exact ones are on the item grid)
    assert exact[0] == pytest.approx(drawn[0], abs=1 / n) and exact[1] == pytest.approx(drawn[1], abs=1 / n)
    assert np.allclose(np.array(exact) * n, np.round(np.array(exact) * n))


def test_pooled_rows_state_a_monte_carlo_error_below_half_an_item_step():
    rng = np.random.default_rng(0)
    n = 2000
    clean = rng.random(n) < 0.8
    w = clean & (rng.random(n) < 0.97)
    random = np.stack([clean ^ (rng.random(n) < 0.05) for _ in range(4)])
    row = paired_accuracy_difference(random, w, resamples=500, seed=0)
    assert row["resamples"] > 500  # 500 draws were not enough; more were drawn
    assert row["ci_mc_error"] <= MC_ERROR_SHARE / n
    one = paired_accuracy_difference(clean, w, resamples=500)
    assert one["ci_mc_error"] == 0 and one["resamples"] == 0  # exact: nothing drawn
    assert one["ci98_lo"] <= one["ci_lo"] <= one["ci90_lo"] <= one["drop"] <= one["ci90_hi"] <= one["ci_hi"]


def test_monte_carlo_error_is_a_99_percent_bound_on_the_quantile():
    draws = np.random.default_rng(1).normal(size=40_000)
    _, _, error = percentile_ci_with_error(draws)
    q = 0.025  # the standard error of a normal sample quantile: sqrt(q(1-q)/R) / pdf(z_q)
    expected = math.sqrt(q * (1 - q) / draws.size) / stats.norm.pdf(stats.norm.ppf(q))
    assert error == pytest.approx(MC_CONFIDENCE_Z * expected, rel=0.35)


def test_pooled_endpoints_lie_within_their_stated_error_of_the_limit():
    """The stated ci_mc_error covers each endpoint's distance from its infinite-resample limit (issue 44: with one
    standard error stated, 3 of 24 endpoints were twice their error away). 2,000-resample endpoints of 40 seeds
    against a 1,000,000-resample reference: at 99% per endpoint, at most a few of 80 may miss (one standard error
    missed about a third)."""
    rng = np.random.default_rng(5)
    n, trials = 150, 3
    values = (rng.random((trials, n)) < 0.7).astype(float) - (rng.random(n) < 0.68)
    reference = percentile_ci(two_stage_bootstrap_mean(values, resamples=1_000_000, seed=99))
    misses = 0
    for seed in range(40):
        lo, hi, error = percentile_ci_with_error(two_stage_bootstrap_mean(values, resamples=2000, seed=seed))
        misses += (abs(lo - reference[0]) > error) + (abs(hi - reference[1]) > error)
    assert misses <= 4


def test_perplexity_rows_state_their_monte_carlo_error():
    rng = np.random.default_rng(2)
    counts = np.full(40, 100.0)
    clean = rng.gamma(3.0, 1.0, 40) * 100
    row = paired_perplexity_ratio(clean, clean + 30 + rng.normal(0, 5, 40), counts, resamples=300, seed=0)
    assert row["resamples"] >= 300 and 0 < row["ci_mc_error"] < row["ci_hi"] - row["ci_lo"]


def test_equivalence_interval_reads_its_column_then_approximates_and_bounds_zero_discordance():
    row = {"n": 1000, "drop": 0.0, "ci_lo": -0.01, "ci_hi": 0.01, "ci98_lo": -0.012, "ci98_hi": 0.011}
    assert equivalence_interval(row, 0.01)[:2] == (-0.012, 0.011)
    lo, hi, how = equivalence_interval({k: row[k] for k in ("n", "drop", "ci_lo", "ci_hi")}, 0.01)
    z = stats.norm.ppf(0.99) / stats.norm.ppf(0.975)
    assert (lo, hi) == pytest.approx((-0.01 * z, 0.01 * z)) and "normal approximation" in how


# ------------------------------------------------------- the exact interval of the discordant counts (issue 44)
def single_trial_row(differ_ref: int, differ_cond: int, n: int) -> dict:
    """The paired row of n 0/1 items of which ``differ_ref`` are right only under the reference and
    ``differ_cond`` only under the condition, as the paired tables compute it (the exact bootstrap included)."""
    ref = np.ones(n, dtype=bool)
    cond = ref.copy()
    cond[:differ_ref] = False
    ref[differ_ref : differ_ref + differ_cond] = False
    return paired_accuracy_difference(ref, cond)


def test_no_discordant_item_gives_the_exact_bound_of_that_share():
    # the bootstrap of n equal items is the point 0 at any n; the exact interval is Clopper-Pearson's at 0 of n
    row = single_trial_row(0, 0, 40)
    assert row["ci98_lo"] == row["ci98_hi"] == 0
    lo, hi, how = equivalence_interval(row, 0.05)
    assert (lo, hi) == pytest.approx((-zero_discordance_bound(40, 0.025), zero_discordance_bound(40, 0.025)))
    assert "0 of 40 items differ" in how


def test_one_differing_item_of_402_is_not_equivalent_within_one_point_at_alpha_001():
    """Neox-mini's C11 row of issue 44: its bootstrap interval [0, 0.995] pts lies inside ±1, yet the exact
    bound for zero differing items at this n (1.14 pts at alpha = 0.01) does not."""
    row = single_trial_row(1, 0, 402)
    assert inside_margin(row["ci98_lo"], row["ci98_hi"], 0.01)  # what the bootstrap alone decided
    assert not inside_margin(*equivalence_interval(row, 0.01)[:2], 0.01)
    # The same item pooled over 10 random draws (it differs in every draw): the two-stage interval is widened
    ref = np.ones((10, 402), dtype=bool)
    cond = np.ones(402, dtype=bool)
    cond[0] = False
    pooled = paired_accuracy_difference(ref, cond, resamples=500)
    assert pooled["trials"] == 10 and inside_margin(pooled["ci98_lo"], pooled["ci98_hi"], 0.01)
    assert not inside_margin(*equivalence_interval(pooled, 0.01)[:2], 0.01)


@pytest.mark.parametrize("alpha", [0.01, 0.05])
def test_adding_an_agreeing_item_never_undoes_equivalence(alpha):
    """Monotone in agreement: for every count of differing items, once the interval lies inside ±m it stays
    inside at every larger n (one more agreeing item each step), and it never widens."""
    for differ_ref, differ_cond in [(0, 0), (1, 0), (0, 2), (3, 1), (6, 6), (12, 3)]:
        previous, inside_at = None, None
        for n in range(max(10, differ_ref + differ_cond), 4000, 7):
            lo, hi, _ = equivalence_interval(
                {"n": n, "only_reference": differ_ref, "only_condition": differ_cond, "trials": 1}, alpha
            )
            if previous is not None:
                assert previous[0] <= lo <= 0 <= hi <= previous[1], (differ_ref, differ_cond, n)
            previous = (lo, hi)
            if inside_margin(lo, hi, 0.01):
                inside_at = inside_at or n
            else:
                assert inside_at is None, (differ_ref, differ_cond, n, inside_at)
        assert inside_at is not None  # each count becomes equivalent at some n below 4000: the loop tested it


def test_the_exact_interval_errs_at_most_alpha_on_the_margin_where_the_bootstrap_does_not():
    """A true difference of exactly the margin (+1 point: 1% of items right only under the reference, none the
    other way) at n = 402: the interval may lie inside ±1 point in at most alpha of the samples (TOST's error).
    The exact paired bootstrap's 90% interval does so in about 9% (one differing item or none: [0, 0.75] pts)."""
    alpha, n = 0.05, 402
    counts = np.random.default_rng(44).multinomial(n, [0.01, 0.0, 0.99], size=2000)[:, 0]
    values, freq = np.unique(counts, return_counts=True)

    def inside(only_reference: int, interval) -> bool:
        row = single_trial_row(only_reference, 0, n) if interval == "bootstrap" else None
        if row is not None:
            return inside_margin(row["ci90_lo"], row["ci90_hi"], 0.01)
        return inside_margin(*equivalence_interval(
            {"n": n, "only_reference": only_reference, "only_condition": 0, "trials": 1}, alpha)[:2], 0.01)  # fmt: skip

    rate = {how: sum(f for v, f in zip(values, freq, strict=True) if inside(int(v), how)) / counts.size
            for how in ("exact", "bootstrap")}  # fmt: skip
    assert rate["exact"] <= alpha < rate["bootstrap"], rate


# ---------------------------------------------------------------- claims decided by equivalence
def c11_tables(drop: float, half: float, p: float, n: int = 9112) -> pl.DataFrame:
    """Paired BLiMP/TSE rows W vs matched and vs random with drop ± half (95%) and its 98% interval, and the
    discordant counts such a difference and CI have at n (se = sqrt(D) / n for a small drop)."""
    z = stats.norm.ppf(0.99) / stats.norm.ppf(0.975)
    table = paired_rows({(M1, W1): (drop, half), (R1, W1): (drop, half)}, p)
    differing = round((half / stats.norm.ppf(0.975) * n) ** 2)
    net = round(drop * n)
    return table.with_columns(
        n=n,
        ci98_lo=drop - z * half,
        ci98_hi=drop + z * half,
        only_reference=(differing + net) // 2,
        only_condition=(differing - net) // 2,
        trials=pl.when(pl.col("trial") == "pooled").then(10).otherwise(1),
    )


def c11_row(tmp_path, drop, half, p, ppl=None):
    table = c11_tables(drop, half, p)
    ppl = ppl if ppl is not None else ppl_rows({("clean", W1): 2.0, ("clean", M1): 2.0**0.95})
    files = {"paired_blimp": table, "paired_tse": table, "paired_ppl": ppl}
    return rows_for(claim_rows(make_run(tmp_path, {"llama-3.1-8b": {"family": "llama", "files": files}})), "C11")[0]


@pytest.mark.parametrize(
    ("drop", "half", "p", "verdict", "equivalent"),
    [
        (-0.0014, 0.00525, 0.63, FAILS, True),  # Gemma-3's decisive W − matched: −0.14 [−0.67, 0.38] pts at 9,112
        (0.0137, 0.0109, 0.013, NO_DATA, False),  # SmolLM2's: +1.37 [0.25, 2.42], p = 0.013 ≥ 0.01, past +1
        (0.0137, 0.0050, 1e-6, HOLDS, False),  # the same difference at the n that detects it
        (-0.03, 0.01, 1e-6, FAILS, False),  # the controls cost more than W
    ],
)
def test_c11_inside_the_margin_does_not_hold_straddling_is_not_enough_beyond_holds(
    tmp_path, drop, half, p, verdict, equivalent
):
    row = c11_row(tmp_path, drop, half, p)
    assert row["verdict"] == verdict, row
    assert row["margin"] == "±1 pt" and row["alpha"] == 0.01
    assert ("equivalent within ±1 pt" in row["note"]) == equivalent
    if equivalent:
        assert "blimp W−matched" in row["note"] and "tse W−random" in row["note"]
    md = claims_markdown(claim_rows(make_run(tmp_path / "md", {})) + [row], "results")
    line = next(x for x in md.splitlines() if x.startswith("| C11 | ") and "llama-3.1-8b" in x)
    assert "[α = 0.01; equivalence margin ±1 pt]" in line
    assert (f"**{FAILS}** (equivalent within ±1 pt" in line) == equivalent


def test_c11_equivalence_from_real_per_item_outcomes(tmp_path):
    """The decision from paired tables built by the paired job's own function: W and the matched control differ
    on 100 of 4,000 items, evenly: equivalent within ±1 point at α = 0.01 (the exact interval of the discordant
    counts, ±0.84 points; with 200 differing it is ±1.10, where the bootstrap's was ±0.82)."""
    from wneurons.report.replication import paired_comparisons

    rng = np.random.default_rng(0)
    n = 4000
    clean = rng.random(n) < 0.85
    w = clean.copy()
    flip = np.concatenate([rng.choice(np.flatnonzero(w), 50, replace=False),
                           rng.choice(np.flatnonzero(~w), 50, replace=False)])  # fmt: skip
    matched = w.copy()
    matched[flip] = ~matched[flip]
    randoms = {t: clean ^ (rng.random(n) < 0.02) for t in range(10)}
    items = lambda c: pl.DataFrame({"item": np.arange(n), "linguistics_term": "t", "paradigm": "p",  # noqa: E731
                                    "family": "f", "task": "x", "correct": c})  # fmt: skip
    tables = {W1: {0: items(w)}, M1: {0: items(matched)}, R1: {t: items(r) for t, r in randoms.items()}}
    files = {
        f"paired_{b}": paired_comparisons(b, items(clean), tables, resamples=2000, seed=0) for b in ("blimp", "tse")
    }
    files["paired_ppl"] = ppl_rows({("clean", W1): 2.0, ("clean", M1): 2.0**0.95})
    row = rows_for(claim_rows(make_run(tmp_path, {"llama-3.1-8b": {"family": "llama", "files": files}})), "C11")[0]
    wm = (
        files["paired_blimp"]
        .filter((pl.col("reference") == M1) & (pl.col("group_kind") == "overall"))
        .row(0, named=True)
    )
    assert -0.01 < wm["ci98_lo"] and wm["ci98_hi"] < 0.01 and wm["ci_mc_error"] == 0
    assert row["verdict"] == FAILS and "blimp W−matched" in row["note"], row


def test_c11_and_c30_read_how_well_the_matched_control_matched(tmp_path):
    # W beyond the matched control on every benchmark, but the control's perplexity stopped 15% short of W's:
    # a weaker control cannot show that W hurts more.
    search = {"percent": 95.0, "perplexity": 170.0, "target_perplexity": 200.0, "tolerance": 0.02,
              "clean_perplexity": 150.0, "converged": False, "relative_gap": 0.15}  # fmt: skip
    ppl = {"conditions": {M1: {"matched_percent": 95.0, "matched_search": search}}}
    table = c11_tables(0.05, 0.01, 1e-6)
    files = {"paired_blimp": table, "paired_tse": table, "ppl": ppl}
    rows = claim_rows(make_run(tmp_path, {"llama-3.1-8b": {"family": "llama", "files": files}}))
    c11 = rows_for(rows, "C11")[0]
    assert c11["verdict"] == NO_DATA and "matched control weaker: perplexity 170 vs W's 200 (-15%)" in c11["ours"]
    # C30: W hurts grammar more (trivial with a weaker control) -> not enough data, not "holds".
    from wneurons.experiment.grid import CAPABILITY

    cap = c11_tables(0.05, 0.01, 1e-6)  # matched − W > 0 on the capability suite too: W hurts it more
    files = {"paired_blimp": table, "paired_tse": table, f"paired_{CAPABILITY}": cap, "ppl": ppl}
    c30 = rows_for(claim_rows(make_run(tmp_path / "c30", {"llama-3.1-8b": {"family": "llama", "files": files}})), "C30")
    assert c30[0]["verdict"] == NO_DATA and c30[0]["alpha"] == 0.05 and c30[0]["margin"] == "±1 pt"
    # The same W − control differences with a control that overshot W's perplexity: W still hurts grammar more
    # than a stronger control, which decides; on the capability suite W hurting more is not trivial either.
    search |= {"perplexity": 240.0, "relative_gap": 0.2}
    files["ppl"] = {"conditions": {M1: {"matched_percent": 95.0, "matched_search": search}}}
    c30 = rows_for(claim_rows(make_run(tmp_path / "s", {"llama-3.1-8b": {"family": "llama", "files": files}})), "C30")
    assert c30[0]["verdict"] == FAILS and "matched control stronger" in c30[0]["ours"]


def test_a_matched_control_that_c9_says_matched_nothing_carries_no_part(tmp_path):
    """Neox-mini in issue 44: W does not raise perplexity, so C9 finds nothing to match; the "matched" control is
    then no control of W's perplexity, and neither C11's W − matched parts nor any C30 part may hold or fail on it
    (before: W changes no TSE item while the control raises TSE by points, and those parts held)."""
    from wneurons.experiment.grid import CAPABILITY

    search = {"percent": 95.0, "perplexity": 150.5, "target_perplexity": 149.0, "tolerance": 0.02,
              "clean_perplexity": 150.0, "converged": False, "relative_gap": 0.01}  # fmt: skip
    ppl = {"conditions": {M1: {"matched_percent": 95.0, "matched_search": search}}}
    grammar = c11_tables(0.05, 0.01, 1e-6)  # W − control +5 points, p = 1e-6: decided on its own
    files = {"paired_blimp": grammar, "paired_tse": grammar, f"paired_{CAPABILITY}": c11_tables(-0.05, 0.01, 1e-6)}
    run = make_run(tmp_path, {"llama-3.1-8b": {"family": "llama", "files": files | {"ppl": ppl}}})
    rows = claim_rows(run)
    c9 = rows_for(rows, "C9")[0]
    assert c9["verdict"] == FAILS and "nothing to match" in c9["ours"]
    c11, c30 = rows_for(rows, "C11")[0], rows_for(rows, "C30")[0]
    assert c11["verdict"] == NO_DATA and c30["verdict"] == NO_DATA, (c11, c30)
    assert "matched nothing" in c11["ours"] and c11["ours"].count("a control that matched nothing (C9)") == 2
    assert c30["ours"].count("a control that matched nothing (C9)") == 3
    # The same tables with a search that matched W's perplexity: every part holds, so the guard alone decided.
    search |= {"target_perplexity": 170.0, "perplexity": 170.5, "relative_gap": 0.003, "converged": True}
    again = claim_rows(make_run(tmp_path / "m", {"llama-3.1-8b": {"family": "llama", "files": files | {"ppl": ppl}}}))
    assert rows_for(again, "C30")[0]["verdict"] == HOLDS


def test_c14_a_group_costing_the_same_as_the_peak_does_not_hold(tmp_path):
    from test_claims import TERMS, group_tables

    # g1 and g2 end in the first quarter of 32 layers; g3 (layers 8-11) costs 0.2 pts less than g1 with a 90%
    # interval of ±0.3 pts: inside ±1, so the early peak does not beat it
    table, blimp = group_tables({"g1": 0.06, "g2": 0.03, "g3": 0.058, "g4": 0.0}, TERMS, 0.4, 1e-4, n=20000)
    later = (pl.col("reference") == "g3/wasserstein/p1") & (pl.col("condition") == "g1/wasserstein/p1")
    table = table.with_columns(
        ci90_lo=pl.when(later).then(pl.col("drop") - 0.003).otherwise(None),
        ci90_hi=pl.when(later).then(pl.col("drop") + 0.003).otherwise(None),
    )
    run = make_run(tmp_path, {"llama-3.1-8b": {"family": "llama", "files": {"paired_blimp": table, "blimp": blimp}}})
    row = rows_for(claim_rows(run), "C14")[0]
    assert row["verdict"] == FAILS and "g1 equivalent to g3" in row["note"] and row["alpha"] == 0.05


def test_c3_checkpoints_bracketing_the_limit_decide_nothing(tmp_path):
    # neox-mini: 90% of the final WD first reached at step 80, not at step 20; the limit 55.9 lies between them.
    steps = np.array([0, 20, 80, 160, 320])
    emergence = pl.DataFrame({"step": steps, "cohort_wd_mean": [0.05, 0.1, 0.19, 0.2, 0.2], "tse_overall": 0.5})
    run = make_run(tmp_path, {"mini": {"family": "gpt_neox", "files": {"emergence": emergence}}})
    row = rows_for(claim_rows(run), "C3")[-1]
    assert row["verdict"] == NO_DATA and "between steps 20 and 80" in row["ours"], row
    late = emergence.with_columns(cohort_wd_mean=pl.Series([0.05, 0.1, 0.12, 0.19, 0.2]))  # reached at 160 > 80
    row = rows_for(claim_rows(make_run(tmp_path / "late", {"mini": {"files": {"emergence": late}}})), "C3")[-1]
    assert row["verdict"] == FAILS


def test_c20_and_c23_read_pair_signs_when_the_composition_is_empty(tmp_path):
    from wneurons.store import io

    rng = np.random.default_rng(0)
    layers, k = 8, 200
    signs = []
    for layer in range(layers):
        nn = rng.integers(30, 60, k) if layer == 1 else rng.integers(10, 25, k)
        signs.append(pl.DataFrame({"layer": layer, "neuron": np.arange(k), "md_pairs": rng.random(k),
                                   "frac_negative": rng.random(k), "n_nn_at_100": nn, "n_pn_at_100": 100 - nn - 5,
                                   "n_pp_at_100": 5, "share_all_nn": 0.2, "share_all_pn": 0.7,
                                   "share_all_pp": 0.1}))  # fmt: skip
    folder = tmp_path / "results" / "mini" / "main" / "pairs"
    folder.mkdir(parents=True)
    io.write_parquet(folder / "composition.parquet", pl.DataFrame())  # no figure selects from this model
    pl.concat(signs).write_parquet(folder / "signs.parquet")
    spec = {
        "mini": {
            "family": "gpt_neox",
            "params_b": 0.01,
            "files": {"composition": str(folder.relative_to(tmp_path) / "composition.parquet")},
        }
    }
    setting = {"md_percent": 5.0, "top_k": 100}
    config = {"random_trials": 10, "percents": [1.0], "resamples": 500, "seed": 0,
              "figures": {"figure6": setting, "figure7": setting}}  # fmt: skip
    rows = {r["id"]: r for r in claim_rows(Run(models=spec, config=config, data={}, root=tmp_path))}
    assert rows["C20"]["verdict"] == FAILS and "signs.parquet" in rows["C20"]["sources"][0], rows["C20"]
    assert "max at layer index 1" in rows["C20"]["ours"]  # NN 0.11-0.25 < 0.30 outside layer 1
    assert rows["C23"]["verdict"] != NOT_RUN
