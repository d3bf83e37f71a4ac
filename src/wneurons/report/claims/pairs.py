"""Claims on differentiated pairs and their pre-activation signs (paper §5-7: C18-C20, C23-C25): the single-neuron
case study (Fig. 5), NN / PN / PP composition by layer (Fig. 6a, 7a) and its correlation with single-layer
ablation error (Fig. 7b-d). On a run's own model the analysis settings are the run's (``figures.figure6/7``).
"""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy import stats

from wneurons.core.pos import FUNCTION_WORDS
from wneurons.experiment.grid import format_percent
from wneurons.report.claims.run import (
    FAILS,
    HOLDS,
    MIN_LAYERS,
    NO_DATA,
    NotRun,
    Outcome,
    Run,
    combine,
    figure_setting,
    fmt,
    too_few,
)

FIGURE6 = {"md_percent": 5.0, "top_k": 100}  # Pythia-1.4B, top 5% MD, top 100 pairs
FIGURE7 = {"md_percent": 0.5, "top_k": 50}  # Llama-3.1-8B, top 0.5% MD, top 50 pairs


def c18_function_words(run: Run, model: str) -> Outcome:
    frame, src = run.parquet(model, "figure5_pairs", ("upos_i", "upos_j"))
    tags = np.concatenate([frame["upos_i"].to_numpy(), frame["upos_j"].to_numpy()])
    share = float(np.isin(tags, FUNCTION_WORDS).mean())
    ours = f"function-word share of the {len(tags)} tokens in the top-{frame.height} pairs: {fmt(share)}"
    sources = [src]
    try:
        robust, rsrc = run.json(model, "figure5_robustness")
        ours += f"; neuron {robust.get('neuron')} has WD rank {robust.get('wd_rank')} in layer {robust.get('layer')}"
        sources.append(rsrc)
    except NotRun:
        pass
    test = f"share of {'/'.join(FUNCTION_WORDS)} > 0.5"
    return Outcome(ours, HOLDS if share > 0.5 else FAILS, "", test, sources)


def c19_nn_pairs(run: Run, model: str) -> Outcome:
    frame, src = run.parquet(model, "figure5_pairs", ("sign",))
    n_nn = int((frame["sign"].str.to_lowercase() == "nn").sum())
    sources, spread = [src], ""
    try:
        robust, rsrc = run.json(model, "figure5_robustness")
        sources.append(rsrc)
        seeds = robust.get("robustness", {}).get("n_nn", [])
        if seeds:
            spread = (
                f"; re-paired over {len(seeds)} seeds: median {np.median(seeds):g}, range {min(seeds)}–{max(seeds)}"
            )
    except NotRun:
        pass
    return Outcome(f"{n_nn}/{frame.height} NN{spread}", HOLDS if n_nn >= 8 else FAILS, "", "#NN in top 10 ≥ 8", sources)


def composition(run: Run, model: str, percent: float, top_k: int) -> tuple[pl.DataFrame, str]:
    """The NN / PN / PP composition by layer of the top ``percent``% MD neurons' top ``top_k`` pairs: the rows of
    ``pairs/composition.parquet``, else (a model no figure selects from has an empty one) recomputed from the
    pair signs beside it (:func:`composition_from_signs`)."""
    try:
        frame, src = run.parquet(model, "composition", ("layer", "top_k", "share_nn", "share_pn", "share_pp"))
        names = ("percent", "selection_percent", "md_percent", "selection")
        pcol = next((c for c in names if c in frame.columns), None)
        if pcol is not None:
            frame = frame.filter(pl.col(pcol).cast(pl.Float64) == percent)
        frame = frame.filter(pl.col("top_k") == top_k).sort("layer")
        if frame.height:
            return frame, src
        why = f"{src} has no rows for {format_percent(percent)}% / top {top_k}"
    except NotRun as absent:
        why = str(absent)
        if "is empty" not in why:
            raise
    return composition_from_signs(run, model, percent, top_k, why)


def composition_from_signs(run: Run, model: str, percent: float, top_k: int, why: str) -> tuple[pl.DataFrame, str]:
    """The composition recomputed from ``pairs/signs.parquet`` (beside the composition file) by the analysis' own
    rules: per layer the top ``percent``% by md_pairs (core.selection.top_percent_indices, the authors' rule),
    shares of their top-``top_k`` pairs (core.pairs.composition). NotRun (with ``why``) when the signs lack
    ``top_k``."""
    from wneurons.core.pairs import composition as pooled_shares
    from wneurons.core.selection import top_percent_indices

    path = run.path(model, "composition").parent / "signs.parquet"
    if not path.exists():
        raise NotRun(f"{why}; no pair signs beside it")
    signs = pl.read_parquet(path)
    if f"n_nn_at_{top_k}" not in signs.columns:
        raise NotRun(f"{why}; {run.rel(path)} has no top-{top_k} counts")
    chosen = [
        rows[top_percent_indices(rows["md_pairs"].to_numpy(), percent)].select("layer", "neuron")
        for _, rows in signs.group_by("layer", maintain_order=True)
    ]
    return pooled_shares(signs, pl.concat(chosen), top_k, percent).sort("layer"), run.rel(path)


def c20_pythia_nn(run: Run, model: str) -> Outcome:
    setting = figure_setting(run, "figure6", model, FIGURE6, "pythia-1.4b")
    f, src = composition(run, model, setting["md_percent"], setting["top_k"])
    nn = f["share_nn"].to_numpy()
    rest = f.filter(pl.col("layer") != 0)
    ok_nn = bool((rest["share_nn"] >= 0.30).all())
    argmax = int(f["layer"][int(np.argmax(nn))])
    pp_rare = bool((f["share_pp"] < f["share_pn"]).all())
    verdict = HOLDS if ok_nn and argmax == 1 and pp_rare else FAILS
    ours = (
        f"top {format_percent(setting['md_percent'])}% MD, top {setting['top_k']} pairs: NN share min over layers "
        f"≥ 2 (1-based): {fmt(rest['share_nn'].min())}; max at layer index {argmax}; PP < PN in all: {pp_rare}"
    )
    return Outcome(ours, verdict, "", "NN ≥ 30% except layer 1; argmax = index 1; PP < PN", [src])


def c23_llama_pn(run: Run, model: str) -> Outcome:
    setting = figure_setting(run, "figure7", model, FIGURE7, "llama-3.1-8b")
    f, src = composition(run, model, setting["md_percent"], setting["top_k"])
    if f.height < MIN_LAYERS:
        return too_few(f"{f.height} layers", f.height, "layers", MIN_LAYERS, [src])
    pn_dominant = bool((f["share_pn"] > f["share_nn"]).all())
    nn = f["share_nn"].to_numpy()
    early_high = nn[:4].mean() > nn[-4:].mean()
    verdicts, sources = [HOLDS if pn_dominant else FAILS, HOLDS if early_high else FAILS], [src]
    ours = (
        f"top {format_percent(setting['md_percent'])}% MD, top {setting['top_k']} pairs: PN > NN in all layers: "
        f"{pn_dominant}; NN first 4 layers {fmt(nn[:4].mean())} vs last 4 {fmt(nn[-4:].mean())}"
    )
    try:
        pythia, psrc = composition(run, "pythia-1.4b", FIGURE6["md_percent"], FIGURE6["top_k"])
        lower = nn.mean() < pythia["share_nn"].mean()
        verdicts.append(HOLDS if lower else FAILS)
        sources.append(psrc)
        ours += f"; mean NN {fmt(nn.mean())} vs Pythia-1.4B {fmt(pythia['share_nn'].mean())}"
    except NotRun:
        verdicts.append(NO_DATA)
        ours += "; no Pythia-1.4B composition in this run to compare"
    return Outcome(ours, combine(verdicts), "", "PN > NN every layer; early NN > late; NN < Pythia", sources)


def c24_layerwise_correlation(run: Run, model: str) -> Outcome:
    f, src = run.parquet(model, "layerwise", ("layer", "share_nn", "share_pn", "share_pp", "err_blimp", "err_tse"))
    if f.height < MIN_LAYERS:
        return too_few(f"{f.height} layers scored alone", f.height, "layers", MIN_LAYERS, [src])
    parts, verdicts = [], []
    for err in ("err_blimp", "err_tse"):
        r, p = stats.pearsonr(f["share_nn"], f[err])
        verdicts.append(HOLDS if r > 0 and p < 0.05 else FAILS)
        parts.append(f"r(NN, {err}) = {fmt(r)} (p = {fmt(p)})")
        for other in ("share_pn", "share_pp"):
            r2 = stats.pearsonr(f[other], f[err])[0]
            verdicts.append(HOLDS if r2 <= 0.1 else FAILS)
            parts.append(f"r({other[-2:].upper()}, {err}) = {fmt(r2)}")
    return Outcome(
        "; ".join(parts), combine(verdicts), "", "Pearson over layers; NN > 0 at p < 0.05, PN/PP ≤ 0.1", [src]
    )


def c25_early_peak(run: Run, model: str) -> Outcome:
    f, src = run.parquet(model, "layerwise", ("layer", "share_nn", "err_blimp", "err_tse"))
    if f.height < MIN_LAYERS:
        return too_few(f"{f.height} layers scored alone", f.height, "layers", MIN_LAYERS, [src])
    peaks = {c: int(f["layer"][int(np.argmax(f[c].to_numpy()))]) for c in ("share_nn", "err_blimp", "err_tse")}
    verdict = HOLDS if all(v < 4 for v in peaks.values()) else FAILS
    return Outcome(
        ", ".join(f"{k} peaks at layer index {v}" for k, v in peaks.items()), verdict, "", "all argmax < 4", [src]
    )
