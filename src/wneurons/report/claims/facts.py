"""Claims on the run as a whole (C26-C29): how many neurons the intervention touches, the random trials, the data
sets' sizes and which WikiText-2 split each statistic read."""

from __future__ import annotations

import numpy as np

from wneurons.experiment.grid import condition_key, format_percent
from wneurons.report.claims.run import FAILS, HOLDS, NO_DATA, NotRun, Outcome, Run, combine, fmt


def c26_one_percent(run: Run, model: str) -> Outcome:
    """Share of each layer's neurons perturbed by the W condition at every configured percent (≈ p%)."""
    result, src = run.json(model, "blimp")
    table, nsrc = run.parquet(model, "neurons", ("layer", "neuron"))
    per_layer = table.group_by("layer").len()
    k = dict(zip(per_layer["layer"], per_layer["len"], strict=True))
    parts, verdicts = [], []
    for p in run.config["percents"]:
        key = condition_key("all", "wasserstein", p)
        if key not in result["conditions"]:
            continue
        counts = result["conditions"][key].get("neurons_per_layer")
        if not counts:
            raise ValueError(f"{src}: condition {key} records no neurons_per_layer")
        shares = 100 * np.array([int(v) / k[int(layer)] for layer, v in counts.items()])
        verdicts.append(HOLDS if np.all(np.abs(shares - p) <= p / 2) else FAILS)
        parts.append(f"p{format_percent(p)}: {len(shares)} layers, {fmt(shares.min())}–{fmt(shares.max())}% perturbed")
    if not parts:
        raise NotRun(f"no all-layer wasserstein condition scored for {model}")
    return Outcome("; ".join(parts), combine(verdicts), "", "every layer within p/2 of p%", [src, nsrc])


def c27_random_trials(run: Run) -> Outcome:
    t = run.config["random_trials"]
    return Outcome(
        f"{t} random trials", HOLDS if t == 10 else FAILS, "", "config ablation.random_trials == 10", ["config"]
    )


def c28_data(run: Run) -> Outcome:
    from wneurons.store.data import load_blimp, load_tse

    if not run.data.get("blimp") or not (run.root / run.data["blimp"]).exists():
        raise NotRun("BLiMP data directory absent")
    blimp = load_blimp(run.root / run.data["blimp"])
    tse = load_tse(run.root / run.data["tse"], run.data.get("tse_format", "pickle"))
    sentences = 2 * tse.height + int(tse["sentence_intrusive"].is_not_null().sum())
    blimp_ok = (
        blimp.height == 67_000 and blimp["paradigm"].n_unique() == 67 and blimp["linguistics_term"].n_unique() == 13
    )
    ours = (
        f"BLiMP {blimp.height:,} pairs, {blimp['paradigm'].n_unique()} paradigms, "
        f"{blimp['linguistics_term'].n_unique()} terms; TSE {tse.height:,} items = {sentences:,} sentences, "
        f"{tse['family'].n_unique()} families (the paper's ~350K counts sentences, not pairs)"
    )
    tse_ok = abs(sentences - 350_000) / 350_000 < 0.1 and tse["family"].n_unique() == 3
    return Outcome(
        ours,
        HOLDS if blimp_ok and tse_ok else FAILS,
        "",
        "counts from the data files",
        [run.data["blimp"], run.data["tse"]],
    )


def c29_splits(run: Run, model: str) -> Outcome:
    """Each statistic read the WikiText-2 split the paper names, by the sha256 of the text it recorded: the neuron
    table's (WD/MD) is the *test* split's, the clean perplexity's (``ppl.json``) the *validation* split's. A result
    that recorded no checksum of its text decides nothing (its half is "not enough data")."""
    import hashlib

    from wneurons.store.data import WIKITEXT_TEST, WIKITEXT_VALID, wikitext_split

    meta = run.metadata(model, "neurons")
    ppl, psrc = run.json(model, "ppl")
    wikitext = run.data.get("wikitext2")
    if not wikitext or not (run.root / wikitext / WIKITEXT_TEST).exists():
        raise NotRun("WikiText-2 data directory absent")
    if "text_sha256" not in meta:
        raise ValueError(f"{run.path(model, 'neurons')}: provenance lacks text_sha256")
    digest = {
        split: hashlib.sha256(wikitext_split(run.root / wikitext, split).encode("utf-8")).hexdigest()
        for split in ("test", "valid")
    }
    names = {digest["test"]: WIKITEXT_TEST, digest["valid"]: WIKITEXT_VALID}

    def half(recorded: str | None, split: str) -> tuple[str, str]:
        if recorded is None:
            return NO_DATA, "no checksum of its text recorded"
        if recorded == digest[split] != digest[{"test": "valid", "valid": "test"}[split]]:
            return HOLDS, names[recorded]
        return FAILS, names.get(recorded, "neither split's text")

    stats_verdict, stats_words = half(meta["text_sha256"], "test")
    ppl_verdict, ppl_words = half(ppl.get("provenance", {}).get("text_sha256"), "valid")
    ours = f"WD/MD: {stats_words} ({meta.get('n_tokens')} tokens); perplexity: {ppl_words}"
    src = run.rel(run.path(model, "neurons"))
    return Outcome(
        ours,
        combine([stats_verdict, ppl_verdict]),
        "",
        "sha256 of each statistic's text vs the data files",
        [src, psrc],
    )
