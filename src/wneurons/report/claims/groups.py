"""Claims on ablating layer groups (paper §4, Fig. 4: C14-C17): groups of consecutive layers alone (gK) and
cumulatively (cK), the top-1% W neurons of each, scored on BLiMP by term and TSE by family.

"Early" is a place in the model, not a group number: a group is early when its last layer lies in the first
quarter of the model's layers (the paper's g1 and g2 of 8 groups of 4 on Llama's 32 layers).
"""

from __future__ import annotations

import polars as pl

from wneurons.core.equivalence import zero_discordance_bound
from wneurons.core.uncertainty import MIN_RESAMPLING_UNITS
from wneurons.experiment.grid import condition_key, format_percent, parse_condition_key
from wneurons.report.claims.run import (
    FAILS,
    HOLDS,
    MIN_GROUPS,
    NO_DATA,
    Margin,
    NotRun,
    Outcome,
    Run,
    combine,
    difference_verdict,
    fmt,
    fmt_ci,
    has_ci,
    paired,
    paired_row,
    too_few,
)

GROUP_ALPHA = 0.05  # C14's paired tests (group vs group, term vs clean)
# C14's equivalence margin: a group that costs within ±1 BLiMP point of the peak group (or a term whose drop vs
# clean is within ±1 point of none) is not beaten (not affected): the runs' 1-point resolution, as C11's.
C14_MARGIN = Margin(0.01, GROUP_ALPHA, "the 1-point resolution the runs are sized for, as C11's")
C14_TERMS = ("ellipsis", "subject_verb_agreement")  # the spec asks for both among the peak group's top terms
NPI_BAND = (0.15, 0.25)  # C16: "+20%" read as 20 ± 5 points
C16_ALPHA = 0.05  # C16's 95% CI; with no discordant NPI item, the exact one-sided 97.5% bound stands in for it


def scope_layers(run: Run, model: str) -> tuple[dict[str, list[int]], int]:
    """({scope: its 0-based layers} of the scored conditions, the model's number of layers), from blimp.json's
    condition records (the all-layer scope's layers, else the neuron table's, count the model's layers; without
    either, the highest layer a scope names)."""
    result, _ = run.json(model, "blimp")
    layers = {}
    for key, record in result.get("conditions", {}).items():
        scope = parse_condition_key(key)[0]
        if "layers" in record:
            layers[scope] = [int(x) for x in record["layers"]]
    if "all" in layers:
        return layers, len(layers["all"])
    try:
        table, _ = run.parquet(model, "neurons", ("layer",))
        return layers, int(table["layer"].n_unique())
    except NotRun:  # at least as many layers as the scopes name
        return layers, 1 + max((max(v) for v in layers.values() if v), default=-1)


def _group_drops(run: Run, model: str, bench: str, kind: str, group_kind: str | None = None):
    """{scope: {group: drop}} of W at 1% for gK or cK scopes vs clean (g1 doubles as c1)."""
    frame, src = paired(run, model, bench)
    frame = frame.filter(pl.col("reference") == "clean")
    out: dict[int, dict[str, float]] = {}
    for cond in frame["condition"].unique().to_list():
        scope, selector, percent = parse_condition_key(cond)
        if selector != "wasserstein" or percent != format_percent(1):
            continue
        if scope[0] == kind or (kind == "c" and scope == "g1"):
            rows = frame.filter(pl.col("condition") == cond)
            if group_kind is not None:
                rows = rows.filter(pl.col("group_kind").is_in(["overall", group_kind]))
            out[int(scope[1:])] = dict(zip(rows["group"], rows["drop"], strict=True))
    return dict(sorted(out.items())), src


def _group_vs_group(frame: pl.DataFrame, best: int, other: int) -> tuple[float, float, bool]:
    """(how much more g<best> costs than g<other> on the same items, its p-value, whether the two cost the same
    within ±C14_MARGIN by TOST) from the paired between-group rows (reference the later group, condition the
    earlier)."""
    early, late = sorted((best, other))
    row = paired_row(frame, condition_key(f"g{late}", "wasserstein", 1), condition_key(f"g{early}", "wasserstein", 1))
    sign = 1 if best == early else -1
    return sign * row["drop"], row["p_value"], difference_verdict(row, C14_MARGIN).equivalent


def c14_early_groups(run: Run, model: str) -> Outcome:
    """The group with the largest overall BLiMP drop is early (its last layer in the first quarter) and costs
    significantly more than every later group (paired test between groups, p < GROUP_ALPHA); ellipsis and
    subject-verb agreement are both among its top-3 terms, each with a significant drop vs clean."""
    drops, src = _group_drops(run, model, "blimp", "g", "linguistics_term")
    if not drops:
        raise NotRun(f"no layer-group ablation scored for {model}")
    overall = {k: v["all"] for k, v in drops.items()}
    listed = ", ".join(f"g{k}: {fmt(100 * v)}" for k, v in overall.items())
    if len(drops) < MIN_GROUPS:
        return too_few(f"overall drop (pts) {listed}", len(drops), "groups", MIN_GROUPS, [src])
    frame, _ = paired(run, model, "blimp")
    layers, n_layers = scope_layers(run, model)
    early = {k for k in drops if f"g{k}" in layers and max(layers[f"g{k}"]) < n_layers / 4}
    best = max(overall, key=overall.get)
    spans = ", ".join(f"g{k} = layers {min(v)}–{max(v)}" for k in drops if (v := layers.get(f"g{k}")))
    ours = f"overall drop (pts) by group: {listed}; {spans} of {n_layers}"
    if not early:
        return Outcome(ours, NO_DATA, "", f"no group ends in the first quarter of {n_layers} layers", [src])
    # an early peak is tested against every later group; a late one against every early group
    targets = [k for k in drops if k not in early] if best in early else sorted(early)
    versus = [(k, *_group_vs_group(frame, best, k)) for k in targets]
    beaten = {k for k, d, p, _ in versus if d > 0 and p < GROUP_ALPHA}
    tied = {k for k, _, _, same in versus if same}
    ours += f"; g{best} vs " + ", ".join(
        f"g{k}: +{fmt(100 * d)} pts (p = {fmt(p)}{', equivalent' if same else ''})" for k, d, p, same in versus
    )
    notes = []
    if best not in early:  # a later group costs significantly more than every early one: against the claim
        place = FAILS if beaten >= set(targets) else NO_DATA
    elif tied:  # the early peak costs the same as a later group: it is not the largest
        place = FAILS
        notes.append(f"g{best} equivalent to " + ", ".join(f"g{k}" for k in sorted(tied)))
    else:
        place = HOLDS if beaten >= set(targets) else NO_DATA
    terms = {}
    for term in C14_TERMS:
        try:
            terms[term] = paired_row(
                frame, "clean", condition_key(f"g{best}", "wasserstein", 1), group=("linguistics_term", term)
            )
        except NotRun:
            continue
    top3 = sorted((t for t in drops[best] if t != "all"), key=lambda t: -drops[best][t])[:3]
    unaffected = [t for t, r in terms.items() if difference_verdict(r, C14_MARGIN).equivalent]
    if unaffected:  # a term whose drop is equivalent to none is not among the most affected
        term_verdict = FAILS
        notes.append(f"{', '.join(unaffected)} unaffected")
    elif len(terms) < len(C14_TERMS):
        term_verdict = NO_DATA
    elif any(r["p_value"] >= GROUP_ALPHA or r["drop"] <= 0 for r in terms.values()):
        term_verdict = NO_DATA  # a drop indistinguishable from none cannot be ranked
    else:
        term_verdict = HOLDS if set(C14_TERMS) <= set(top3) else FAILS
    ours += f"; g{best} top terms: {', '.join(top3)}; " + ", ".join(
        f"{t} {fmt(100 * r['drop'])} pts (p = {fmt(r['p_value'])}, n = {r['n']})" for t, r in terms.items()
    )
    test = (
        f"peak group early (ends before layer {n_layers / 4:g}) and > every later group, paired p < {GROUP_ALPHA}; "
        f"top-3 terms include ellipsis and S-V agreement, each p < {GROUP_ALPHA} vs clean; a group or term "
        f"equivalent within {C14_MARGIN.words()} (TOST) does not hold"
    )
    note = f"equivalent within {C14_MARGIN.words()}: {'; '.join(notes)}" if notes else ""
    verdict = combine([place, term_verdict])
    return Outcome(ours, verdict, "", test, [src], note=note, margin=C14_MARGIN.words(), alpha=GROUP_ALPHA)


def _monotone(drops: dict[int, dict[str, float]], tolerance: float = 0.01) -> tuple[list[str], list[str]]:
    groups = sorted({g for v in drops.values() for g in v})
    ok, bad = [], []
    for g in groups:
        series = [drops[k][g] for k in sorted(drops) if g in drops[k]]
        (ok if all(b >= a - tolerance for a, b in zip(series, series[1:], strict=False)) else bad).append(g)
    return ok, bad


def _cumulative(run: Run, model: str, bench: str, group_kind: str) -> Outcome:
    drops, src = _group_drops(run, model, bench, "c", group_kind)
    if set(drops) <= {1}:  # g1 doubles as c1: without a c2 no cumulative ablation ran (layer_groups.cumulative)
        raise NotRun(f"no cumulative layer-group ablation scored for {model}")
    if len(drops) < 3:
        return too_few(f"cumulative scopes c1..c{max(drops)}", len(drops), "cumulative scopes", 3, [src])
    ok, bad = _monotone(drops)
    ours = f"non-decreasing over c1..c{max(drops)}: {len(ok)}/{len(ok) + len(bad)}" + (
        f"; not: {', '.join(bad)}" if bad else ""
    )
    return Outcome(ours, HOLDS if not bad else FAILS, "", "each step ≥ previous − 1 pt", [src])


def c15_cumulative_blimp(run: Run, model: str) -> Outcome:
    return _cumulative(run, model, "blimp", "linguistics_term")


def c16_npi_first_group(run: Run, model: str) -> Outcome:
    """The NPI accuracy drop of g1 (the first 4 layers) is 20 ± 5 points: holds when its 95% CI lies inside the
    band, does not hold when it lies wholly outside it (at any n: a CI from few items is wide and rarely does),
    otherwise not enough data; needs a CI (MIN_RESAMPLING_UNITS items) and g1 = layers 0-3. With no NPI item
    changed the bootstrap CI is the point 0 at any n; the exact bound ±(1 − 0.025^(1/n)) replaces it."""
    from wneurons.store.data import NPI_FAMILY

    frame, src = paired(run, model, "tse")
    row = paired_row(frame, "clean", condition_key("g1", "wasserstein", 1), group=("family", NPI_FAMILY))
    layers, _ = scope_layers(run, model)
    g1 = layers.get("g1")
    lo, hi = row["ci_lo"], row["ci_hi"]
    ours = f"NPI accuracy drop at g1 (layers {g1}): {fmt(100 * row['drop'])} pts (n = {row['n']})"
    ci = fmt_ci(lo, hi, 100)
    low, high = NPI_BAND
    band = {"margin": f"band {100 * low:g}–{100 * high:g} pts", "alpha": C16_ALPHA}
    if g1 is not None and g1 != [0, 1, 2, 3]:
        return Outcome(ours, NO_DATA, ci, "g1 is not the first 4 layers (layer_groups.size: 4)", [src], **band)
    if row["n"] < MIN_RESAMPLING_UNITS or not has_ci(row):
        out = too_few(ours, row["n"], "NPI items", MIN_RESAMPLING_UNITS, [src])
        out.ci, out.margin, out.alpha = ci, band["margin"], band["alpha"]
        return out
    if (row.get("only_reference") or 0) + (row.get("only_condition") or 0) == 0 and "only_reference" in row:
        hi = zero_discordance_bound(row["n"], C16_ALPHA / 2)  # the exact bound of "no item changed"
        lo = -hi
        ours += f"; no item differs: exact bound 1 − α^(1/n) at n = {row['n']}"
        ci = fmt_ci(lo, hi, 100)
    verdict = HOLDS if low <= lo and hi <= high else FAILS if hi < low or lo > high else NO_DATA
    note = "CI wholly outside the band" if verdict == FAILS else ""
    test = f"95% CI inside {100 * low:g}–{100 * high:g} pts holds, wholly outside it does not"
    return Outcome(ours, verdict, ci, test, [src], note=note, **band)


def c17_cumulative_tse(run: Run, model: str) -> Outcome:
    return _cumulative(run, model, "tse", "family")
