"""Claims on where Wasserstein neurons' structure sits and how it scales (paper §1-2.3: C1, C2)."""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy import stats

from wneurons.core.uncertainty import MIN_RESAMPLING_UNITS, bootstrap_mean, percentile_ci, sign_test
from wneurons.report.claims.run import (
    FAILS,
    HOLDS,
    NO_DATA,
    PYTHIA,
    NotRun,
    Outcome,
    Run,
    ci_verdict,
    fmt,
    too_few,
    top_layer1,
)


def c1_negative_region(run: Run, model: str) -> Outcome:
    """Per-token normalised sign split of the top-1% WD neurons of layer index 1 (not the plain negative share:
    wd_negative grows with the fraction of negative tokens, so each side is divided by its share of tokens)."""
    from wneurons.core.stats import negative_per_token_ratio
    from wneurons.lm.registry import family_spec

    top, src = top_layer1(run, model)
    f = top["frac_negative"].to_numpy()
    ratio = negative_per_token_ratio(top["wd_negative"].to_numpy(), top["wd_positive"].to_numpy(), f)
    log_ratio = np.log(ratio[(f > 0) & (f < 1)])
    if log_ratio.size < 3:
        return too_few(f"{log_ratio.size} usable neurons", log_ratio.size, "neurons", MIN_RESAMPLING_UNITS, [src])
    relu = family_spec(run.family(model)).nonlinearity == "relu"
    direction = -1 if relu else 1
    npos, nneg, p = sign_test(log_ratio)
    plain = float(np.median(top["wd_negative"].to_numpy() - top["wd_positive"].to_numpy()))
    ours = (
        f"mean log[(WD−/f−)/(WD+/f+)] = {fmt(log_ratio.mean())} over {log_ratio.size} neurons "
        f"({npos} negative-heavy); median WD−−WD+ = {fmt(plain)}; expected {'<' if relu else '>'} 0 "
        f"({'ReLU' if relu else 'smooth'} nonlinearity)"
    )
    if log_ratio.size < MIN_RESAMPLING_UNITS:  # a bootstrap over a handful of neurons is no CI
        return too_few(ours, log_ratio.size, "neurons", MIN_RESAMPLING_UNITS, [src])
    lo, hi = percentile_ci(bootstrap_mean(log_ratio, resamples=run.config["resamples"], seed=run.config["seed"]))
    return Outcome(
        ours,
        ci_verdict(lo, hi, 0.0, direction),
        f"[{fmt(lo)}, {fmt(hi)}]",
        f"bootstrap over neurons; sign test p = {fmt(p)}",
        [src],
    )


def c2_size_max_wd(run: Run) -> Outcome:
    sizes, maxima, sources = [], [], []
    for m in PYTHIA:
        if m not in run.models:
            continue
        table, src = run.parquet(m, "neurons", ("layer", "wd"))
        wd = table.filter(pl.col("layer") == 1)["wd"].drop_nans().drop_nulls()
        sizes.append(run.models[m]["params_b"])
        maxima.append(float(wd.max()))
        sources.append(src)
    if not sizes:
        raise NotRun("no Pythia model in this run")
    ours = ", ".join(f"{s:g}B: {fmt(x)}" for s, x in zip(sizes, maxima, strict=True))
    if len(sizes) < 3:
        return too_few(f"max WD layer 1: {ours}", len(sizes), "sizes", 3, sources)
    rho, p = stats.spearmanr(sizes, maxima)
    verdict = HOLDS if rho > 0 and p < 0.05 else (FAILS if rho <= 0 else NO_DATA)
    return Outcome(f"max WD layer 1: {ours}", verdict, "", f"Spearman ρ = {fmt(rho)}, p = {fmt(p)}", sources)
