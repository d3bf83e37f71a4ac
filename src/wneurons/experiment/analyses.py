"""Inputs and params of the analyses' jobs (``workflow/rules/analyses.smk``, paper §3 token level and §5-7): pure
functions of the config and a job's wildcards; ``common.smk`` binds them to the run's config."""

from __future__ import annotations

from wneurons.experiment import grid, paths, targets


def analysis_condition(scope: str, selector: str, percent: float) -> grid.Condition:
    """The trial-0 condition an analysis reads (its percent formatted as in paths)."""
    return grid.Condition(scope, selector, grid.format_percent(percent), 0)


def pair_sample_inputs(config: dict, wildcards, model_dir) -> dict:
    """WikiText-2's validation text, and what the pairs are read from: the kept test shards, or the model
    (``model_dir``: the job's model input, none for local models)."""
    inputs = {"wikitext": paths.benchmark_data("ppl")}
    if config["pairs"]["source"] == "test_shards":
        inputs["shards"] = paths.kept_shards(wildcards.model, wildcards.revision)
    elif model_dir:
        inputs["model"] = model_dir
    return inputs


def pair_sample_params(config: dict, wildcards) -> dict:
    """Sample size, seed, source; the validation stream cut like the perplexity stream."""
    pairs = config["pairs"]
    return {
        "source": pairs["source"],
        "tokens": pairs["tokens"],
        "seed": pairs["seed"],
        "window": config["evaluation"]["perplexity_window"],
        "max_tokens": pairs["max_tokens"],
        "dtype": config["neurons"]["dtype"],
    }


def pair_signs_params(config: dict, wildcards) -> dict:
    """top-k list and the (percent, top_k) selections of the figures drawn from this model."""
    figures = config["figures"]
    selections = [
        {"percent": figures[f]["md_percent"], "top_k": figures[f]["top_k"]}
        for f in ("figure6", "figure7")
        if figures[f]["model"] == wildcards.model
    ]
    top_k = sorted({*config["pairs"]["top_k"], *(s["top_k"] for s in selections)})
    return {"top_k": top_k, "selections": selections}


def pos_tags_inputs(config: dict, wildcards) -> dict:
    m = wildcards.model
    return {
        "ppl_items": paths.clean_items(m, targets.final_revision(config, m), "ppl"),
        "wikitext": paths.benchmark_data("ppl"),
    }


def pos_tags_params(config: dict, wildcards) -> dict:
    """Only what changes the tags (a new figure threshold must not re-tag)."""
    return {"spacy_model": config["pos"]["spacy_model"]}


def pos_surprisal_params(config: dict, wildcards) -> dict:
    return {k: config["pos"][k] for k in ("percent", "n_boot", "seed")}


def pos_surprisal_inputs(config: dict, wildcards) -> dict:
    m, r, p = wildcards.model, wildcards.revision, config["pos"]["percent"]
    w = analysis_condition("all", "wasserstein", p)
    matched = analysis_condition("all", "matched", p)
    return {
        "tags": paths.pos_tags(m),
        "w": paths.ablation_items(m, r, w, "ppl"),
        "m": paths.ablation_items(m, r, matched, "ppl"),
        "clean": paths.clean_items(m, r, "ppl"),
        "search": paths.matched_search(m, r, "all", matched.percent),
    }


def case_study_inputs(config: dict, wildcards) -> dict:
    m, r = wildcards.model, wildcards.revision
    inputs = {
        "sample": paths.pair_sample(m, r),
        "neurons": paths.neurons(m, r),
        # the histogram of Fig. 5b, after the temporary shards are gone
        "shards": paths.kept_shards(m, r),
    }
    if config["pos"]["model"] == m:
        inputs["tags"] = paths.pos_tags(m)
    return inputs


def case_study_params(config: dict, wildcards) -> dict:
    fig = config["figures"]["figure5"]
    return {
        "layer": fig["layer"],
        "neuron": fig["neuron"],
        "top_k": fig["top_k"],
        "seeds": list(range(fig["seed"], fig["seed"] + fig["seeds"])),
        "bins": fig["bins"],
    }


def layerwise_inputs(config: dict, wildcards) -> dict:
    m, r = wildcards.model, wildcards.revision
    pct = config["figures"]["figure7"]["ablation_percent"]
    scopes = grid.single_layer_scopes(config, m)
    conditions = [analysis_condition(s, "wasserstein", pct) for s in scopes]
    return {
        "composition": paths.pair_composition(m, r),
        "clean_blimp": paths.clean_items(m, r, "blimp"),
        "clean_tse": paths.clean_items(m, r, "tse"),
        "blimp_items": [paths.ablation_items(m, r, c, "blimp") for c in conditions],
        "tse_items": [paths.ablation_items(m, r, c, "tse") for c in conditions],
    }


def layerwise_params(config: dict, wildcards) -> dict:
    fig = config["figures"]["figure7"]
    scopes = grid.single_layer_scopes(config, wildcards.model)
    return {
        "layers": [int(s[1:]) - 1 for s in scopes],
        "md_percent": fig["md_percent"],
        "top_k": fig["top_k"],
        "ablation_percent": fig["ablation_percent"],
        "seed": config["pairs"]["seed"],
    }
