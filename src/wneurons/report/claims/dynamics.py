"""Claims on training dynamics over checkpoints (paper §2.3 and §6: C3-C5 on the Pythia suite, C21-C22 on
Pythia-1.4B), each also checked on the run's own models with the analysis (e.g. a training suite of the run).

Step thresholds are Pythia's (25K and 16K of 143K steps); on another model they scale to its final step (the same
share of training), as stated in each row.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import polars as pl

from wneurons.core.uncertainty import MIN_CORRELATION_POINTS
from wneurons.experiment.grid import format_percent
from wneurons.report.claims.run import (
    FAILS,
    HOLDS,
    MIN_CHECKPOINTS,
    MIN_INTERVALS,
    NO_DATA,
    PYTHIA,
    NotRun,
    Outcome,
    Run,
    combine,
    correlation_verdict,
    fmt,
    too_few,
)

PYTHIA_FINAL_STEP = 143_000
EMERGENCE_STEP = 25_000  # C3: "within ~25K steps"
EARLY_NN_STEP = 16_000  # C21: NN share x2 "by step 16K"
CONTROL_R_BOUND = 0.5  # C22: a control's |r| above this is not "little or none"
# C21's "small" NN (step 0) and PP shares: below the share NN (and PP) have among pairs of two independent outputs
# each negative with probability 1/2 (NN 1/4, PN 1/2, PP 1/4), so "small" means below what chance signs give.
SMALL_SHARE = 0.25


def _step_limit(step: int, model: str, final_step: int) -> tuple[float, str]:
    """A Pythia step threshold for ``model``: itself on Pythia, else the same share of ``final_step``."""
    if model in PYTHIA:
        return float(step), f"{step // 1000}K"
    limit = step * final_step / PYTHIA_FINAL_STEP
    return limit, f"{fmt(limit)} (= {step // 1000}K/{PYTHIA_FINAL_STEP // 1000}K of step {final_step})"


def _per_pythia(run: Run, key: str, columns: tuple[str, ...], fn: Callable, by: str = "step") -> tuple[list, list]:
    """``[(model, fn(frame sorted by ``by``, model))]`` over the Pythia models whose file ``key`` exists."""
    results, sources = [], []
    for m in PYTHIA:
        try:
            frame, src = run.parquet(m, key, columns)
        except NotRun:
            continue
        results.append((m, fn(frame.sort(by), m)))
        sources.append(src)
    if not results:
        raise NotRun(f"no results/<pythia>/training/{key}.parquet")
    return results, sources


def _emergence(run: Run, frame: pl.DataFrame, model: str, fractions: set) -> dict:
    """The emergence step as the run's emergence job defines it (core.dynamics.emergence_step), at the
    ``training.emergence_fraction`` recorded in the table's footer (the function's default where none is).

    The crossing lies between the last checkpoint below the fraction and the first at it: holds when that first
    step is within the limit, does not hold when the last one below is already at or past it; a limit between
    the two checkpoints (a bracketing interval) decides nothing."""
    from wneurons.core.dynamics import emergence_step

    fraction = run.metadata(model, "emergence").get("emergence_fraction")
    fractions.add(fraction)
    given = {} if fraction is None else {"fraction": fraction}
    step = emergence_step(frame["step"], frame["cohort_wd_mean"], **given)
    limit, words = _step_limit(EMERGENCE_STEP, model, int(frame["step"].max()))
    steps = frame["step"].to_list()
    before = max((s for s in steps if step is not None and s < step), default=None)
    if frame.height < MIN_CHECKPOINTS:
        verdict = NO_DATA
    elif step is not None and step <= limit:
        verdict = HOLDS
    elif step is None or (before is not None and before >= limit):
        verdict = FAILS
    else:
        verdict = NO_DATA
    bracket = step is not None and before is not None and before < limit < step
    return {"step": step, "before": before, "n": frame.height, "limit": words, "verdict": verdict, "bracket": bracket}


def _reached(fractions: set) -> str:
    return "/".join(sorted(f"{format_percent(100 * x)}%" if x is not None else "default fraction" for x in fractions))


def c3_emergence(run: Run) -> Outcome:
    fractions: set = set()
    results, sources = _per_pythia(
        run, "emergence", ("step", "cohort_wd_mean"), lambda f, m: _emergence(run, f, m, fractions)
    )
    usable = [e for _, e in results if e["n"] >= MIN_CHECKPOINTS]
    ours = f"emergence step ({_reached(fractions)} of final): " + ", ".join(
        f"{m}: {e['step']}" + (f" (crossing in ({e['before']}, {e['step']}])" if e["bracket"] else "")
        for m, e in results
    )
    if len(usable) < 3:
        return too_few(ours, len(usable), f"sizes with ≥ {MIN_CHECKPOINTS} checkpoints", 3, sources)
    early = sum(e["verdict"] == HOLDS for e in usable)
    open_ = sum(e["verdict"] == NO_DATA for e in usable)  # checkpoints bracket the limit
    need = math.ceil(5 / 8 * len(usable))
    verdict = HOLDS if early >= need else FAILS if early + open_ < need else NO_DATA
    test = f"{early}/{len(usable)} ≤ 25K (needs {need})" + (f"; {open_} bracket 25K" if open_ else "")
    return Outcome(ours, verdict, "", test, sources)


def c3_emergence_of(run: Run, model: str) -> Outcome:
    frame, src = run.parquet(model, "emergence", ("step", "cohort_wd_mean"))
    fractions: set = set()
    e = _emergence(run, frame.sort("step"), model, fractions)
    ours = f"emergence step ({_reached(fractions)} of final): {e['step']} of {int(frame['step'].max())}"
    if e["n"] < MIN_CHECKPOINTS:
        return too_few(ours, e["n"], "checkpoints", MIN_CHECKPOINTS, [src])
    test = f"emergence step ≤ {e['limit']}"
    if e["bracket"]:
        ours += f"; the crossing lies between steps {e['before']} and {e['step']}"
        return Outcome(ours, NO_DATA, "", test + "; checkpoints on both sides of the limit decide nothing", [src],
                       note="the checkpoints bracket the limit")  # fmt: skip
    return Outcome(ours, e["verdict"], "", test, [src])


def _drift_shape(f: pl.DataFrame) -> tuple[str, str]:
    """(verdict, text) of one model's cohort ncd: > 1 in the first interval, < 1 afterwards, each beyond 2 SEM
    where the table has SEMs (cohort_ncd_sem), else on the point values."""
    ncd = f["cohort_ncd_mean"].to_numpy().astype(np.float64)
    sem = f["cohort_ncd_sem"].to_numpy().astype(np.float64) if "cohort_ncd_sem" in f.columns else np.zeros(ncd.size)
    sem = np.nan_to_num(sem)
    first, first_sem = ncd[0], sem[0]
    later, later_sem = float(ncd[1:].mean()), float(np.sqrt((sem[1:] ** 2).sum()) / max(1, ncd.size - 1))
    early = HOLDS if first - 2 * first_sem > 1 else FAILS if first + 2 * first_sem < 1 else NO_DATA
    late = HOLDS if later + 2 * later_sem < 1 else FAILS if later - 2 * later_sem > 1 else NO_DATA
    text = f"first {fmt(first)}±{fmt(first_sem)}, later {fmt(later)}±{fmt(later_sem)}"
    return combine([early, late]), text


def c4_cosine_drift(run: Run) -> Outcome:
    results, sources = _per_pythia(
        run, "cosine_drift", ("end_step", "cohort_ncd_mean"), lambda f, m: (f.height, *_drift_shape(f)), by="end_step"
    )
    usable = [(m, v) for m, (n, v, _) in results if n >= MIN_INTERVALS]
    ours = "cohort ncd: " + ", ".join(f"{m}: {t}" for m, (_, _, t) in results)
    if not usable:
        return too_few(ours, 0, f"sizes with ≥ {MIN_INTERVALS} intervals", 1, sources)
    held = sum(v == HOLDS for _, v in usable)
    failed = sum(v == FAILS for _, v in usable)
    verdict = HOLDS if held > len(usable) / 2 else FAILS if failed >= len(usable) / 2 else NO_DATA
    return Outcome(ours, verdict, "", f"{held}/{len(usable)} sizes > 1 then < 1 (beyond 2 SEM)", sources)


def c4_cosine_drift_of(run: Run, model: str) -> Outcome:
    f, src = run.parquet(model, "cosine_drift", ("end_step", "cohort_ncd_mean"))
    f = f.sort("end_step")
    if f.height < MIN_INTERVALS:
        return too_few(f"{f.height} intervals", f.height, "intervals", MIN_INTERVALS, [src])
    verdict, text = _drift_shape(f)
    return Outcome(f"cohort ncd: {text} over {f.height} intervals", verdict, "", "> 1 then < 1, beyond 2 SEM", [src])


def c5_wd_tse_correlation(run: Run) -> Outcome:
    results, sources = _per_pythia(
        run,
        "emergence",
        ("step", "cohort_wd_mean", "tse_overall"),
        lambda f, m: correlation_verdict(f["cohort_wd_mean"], f["tse_overall"], run, at_least=0.7),
    )
    ours = ", ".join(f"{m}: {t}" for m, (_, t) in results)
    verdicts = [v for _, (v, _) in results]
    if all(v == NO_DATA for v in verdicts):
        return too_few(ours, 0, f"sizes with ≥ {MIN_CORRELATION_POINTS} checkpoints", 1, sources)
    return Outcome(ours, combine(verdicts), "", "Pearson r ≥ 0.7 per size, CI above 0", sources)


def c5_wd_tse_correlation_of(run: Run, model: str) -> Outcome:
    f, src = run.parquet(model, "emergence", ("step", "cohort_wd_mean", "tse_overall"))
    verdict, text = correlation_verdict(f["cohort_wd_mean"], f["tse_overall"], run, at_least=0.7)
    if f.height < MIN_CORRELATION_POINTS:
        return too_few(text, f.height, "checkpoints", MIN_CORRELATION_POINTS, [src])
    return Outcome(text, verdict, "", "Pearson r ≥ 0.7 over checkpoints, CI above 0", [src])


def _small_share(f: pl.DataFrame, sign: str, rows: pl.DataFrame) -> str:
    """Whether the ``sign`` share (nn, pp) of ``rows`` is small, i.e. below SMALL_SHARE: holds when every row lies
    below it beyond 2 SEM (the table's ``sem_<sign>``; the point alone without one), fails when a row lies above
    it beyond 2 SEM, else not enough data."""
    share = rows[f"share_{sign}"].to_numpy().astype(np.float64)
    sem = rows[f"sem_{sign}"].to_numpy().astype(np.float64) if f"sem_{sign}" in f.columns else np.zeros_like(share)
    if np.any(share - 2 * sem > SMALL_SHARE):
        return FAILS
    return HOLDS if np.all(share + 2 * sem < SMALL_SHARE) else NO_DATA


def c21_nn_over_training(run: Run, model: str) -> Outcome:
    """In layer 2 (index 1) the NN share of the most differentiated pairs is small at step 0, at least doubles by
    step 16K (Pythia's; scaled to the model's final step), PP stays small at every checkpoint and PN falls
    (docs/analyses.md §F). "Small": below SMALL_SHARE beyond 2 SEM (:func:`_small_share`)."""
    f, src = run.parquet(model, "pair_signs_training", ("step", "share_nn", "share_pn", "share_pp"))
    if "layer" in f.columns:  # the MD cohort of layer index 1 (the paper's layer 2)
        f = f.filter(pl.col("layer") == 1)
    if f.height < MIN_CHECKPOINTS:
        return too_few(f"{f.height} checkpoints", f.height, "checkpoints", MIN_CHECKPOINTS, [src])
    f = f.sort("step")
    limit, words = _step_limit(EARLY_NN_STEP, model, int(f["step"].max()))
    nn0 = float(f["share_nn"][0])
    early = f.filter((pl.col("step") <= limit) & (pl.col("step") > f["step"][0]))["share_nn"].max()
    if early is None:
        return Outcome(f"no checkpoint after step {f['step'][0]} and by step {words}", NO_DATA, sources=[src])
    pn_falls = float(f["share_pn"][-1]) < float(f["share_pn"][0])
    verdicts = {
        "NN(step 0) small": _small_share(f, "nn", f.head(1)),
        f"NN ×2 by step {words}": HOLDS if early >= 2 * nn0 else FAILS,
        "PP small throughout": _small_share(f, "pp", f),
        "PN falls": HOLDS if pn_falls else FAILS,
    }
    ours = (
        f"NN step {f['step'][0]}: {fmt(nn0)}, max by step {words}: {fmt(early)}; PP max {fmt(f['share_pp'].max())}; "
        f"PN {fmt(f['share_pn'][0])} → {fmt(f['share_pn'][-1])} over {f.height} checkpoints; "
        + ", ".join(f"{name}: {v}" for name, v in verdicts.items())
    )
    test = f"{'; '.join(verdicts)} (small: < {SMALL_SHARE:g} beyond 2 SEM)"
    return Outcome(ours, combine(list(verdicts.values())), "", test, [src])


def c22_ablation_vs_wd(run: Run, model: str) -> Outcome:
    """W's error increase follows the cohort's WD over checkpoints (r ≥ 0.8, CI above 0); each control's does
    not (|r| ≤ CONTROL_R_BOUND and its CI covers 0); every correlation needs MIN_CORRELATION_POINTS checkpoints."""
    f, src = run.parquet(model, "ablation_vs_wd", ("selector", "benchmark", "cohort_wd_mean", "error_increase"))
    parts, verdicts, counts = [], [], []
    for bench in ("blimp", "tse"):
        for selector in ("wasserstein", "random", "matched"):
            rows = f.filter((pl.col("benchmark") == bench) & (pl.col("selector") == selector))
            if rows.height == 0:
                continue
            counts.append(rows.height)
            bound = {"at_least": 0.8} if selector == "wasserstein" else {"at_most": CONTROL_R_BOUND}
            verdict, text = correlation_verdict(rows["cohort_wd_mean"], rows["error_increase"], run, **bound)
            parts.append(f"{bench} {selector}: {text}")
            verdicts.append(verdict)
    if not parts:
        raise NotRun(f"{src} has no rows")
    if min(counts) < MIN_CORRELATION_POINTS:
        return too_few("; ".join(parts), min(counts), "checkpoints", MIN_CORRELATION_POINTS, [src])
    test = f"r_W ≥ 0.8 with CI above 0; controls |r| ≤ {CONTROL_R_BOUND} with CI covering 0"
    return Outcome("; ".join(parts), combine(verdicts), "", test, [src])
