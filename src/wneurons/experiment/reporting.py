"""Inputs and params of the jobs of ``workflow/rules/report.smk`` (paired statistics, the claims table, the
explorer): pure functions of the config and a job's wildcards; ``common.smk`` binds them to the run's config (and,
where a job reads a model, to its model input)."""

from __future__ import annotations

from wneurons.experiment import grid, paths, targets


def paired_conditions(config: dict, wildcards) -> dict:
    """The conditions of one checkpoint, in the order of paired_inputs' list (JSON-able for the job)."""
    m, r, b = wildcards.model, wildcards.revision, wildcards.benchmark
    return [c._asdict() for c in grid.conditions_scored(config, m, r, b)]


def paired_inputs(config: dict, wildcards) -> dict:
    m, r, b = wildcards.model, wildcards.revision, wildcards.benchmark
    conditions = grid.conditions_scored(config, m, r, b)
    return {
        "clean": paths.clean_items(m, r, b),
        "conditions": [paths.ablation_items(m, r, c, b) for c in conditions],
    }


def replication_run(config: dict, wildcards) -> dict:
    """What wneurons.report.claims.Run needs: per model its family, size and files; config facts; data directories."""
    return {
        "models": {
            m: {
                "family": spec["family"],
                "params_b": spec["params_b"],
                "revision": targets.final_revision(config, m),
                "checkpoints": list(spec["checkpoints"]),
                "files": targets.claim_files(config, m),
            }
            for m, spec in config["models"].items()
        },
        "config": {
            "random_trials": config["ablation"]["random_trials"],
            "percents": config["ablation"]["percents"],
            "resamples": config["report"]["resamples"],
            "seed": config["report"]["seed"],
            "convention": config["evaluation"]["convention"],
        },
        "data": {
            "blimp": paths.benchmark_data("blimp"),
            "tse": paths.benchmark_data("tse"),
            "tse_format": config["data"]["tse"]["format"],
            "wikitext2": paths.benchmark_data("ppl"),
        },
    }


def explorer_params(config: dict, wildcards) -> dict:
    """The explorer's settings, the other revisions' tables it links, the clamped sets it opens and Figure 5's neuron
    when it is this model's and named (null: the layer's top-WD neuron, in the sets). The clamped sets are the
    configured percents up to 1% (the paper's central condition; 5% of an 8B model would be ~23,000 pages), or the
    smallest percent when all are larger."""
    m, r = wildcards.model, wildcards.revision
    figure5 = config["figures"]["figure5"]
    named = figure5["model"] == m and figure5["neuron"] is not None
    return {
        "explorer": config["report"]["explorer"],
        "checkpoints": [c for c in targets.revisions(config, m) if c != r],
        "clamped_percents": [float(p) for p in config["ablation"]["percents"] if p <= 1]
        or [float(min(config["ablation"]["percents"]))],
        "extra_neurons": [[figure5["layer"], figure5["neuron"]]] if named else [],
    }


def sign_cases_params(config: dict, wildcards) -> dict:
    """What the sign cases need: the explorer settings that choose its neurons and the top tokens per case, the
    clamped sets and Figure 5's neuron (as the explorer's), and the precision collection ran in
    (``neurons.dtype``); not the other revisions, whose change must not rerun the model."""
    spec = explorer_params(config, wildcards)
    chosen = {k: spec["explorer"][k] for k in ("neurons_per_layer", "layers", "contexts")}
    return {"explorer": chosen, "clamped_percents": spec["clamped_percents"], "extra_neurons": spec["extra_neurons"],
            "dtype": config["neurons"]["dtype"]}  # fmt: skip


def explorer_inputs(config: dict, wildcards, model_dir) -> dict:
    """Shards, tables and text of the model (``model_dir``: the job's model input, none for local models); its pair
    sample and POS tags when the analyses make them; its sign cases when the config draws them."""
    m, r = wildcards.model, wildcards.revision
    others = [c for c in targets.revisions(config, m) if c != r]
    inputs = {
        "shards": paths.shards(m, r),
        "neurons": paths.neurons(m, r),
        "wikitext": paths.benchmark_data("ppl"),
        "checkpoints": [paths.neurons(m, c) for c in others],
    }
    if model_dir:
        inputs["model"] = model_dir
    if m in targets.analysis_models(config) and r == targets.final_revision(config, m):
        inputs["sample"] = paths.pair_sample(m, r)
        if config["pos"]["model"] == m:
            inputs["tags"] = paths.pos_tags(m)
    if targets.sign_cases_at(config, m, r):
        inputs["sign_cases"] = paths.sign_cases(m, r)
    return inputs


def sign_cases_inputs(config: dict, wildcards, model_dir) -> dict:
    """The model (as in :func:`explorer_inputs`), its neuron table (which neurons the explorer lists), WikiText-2
    and the shards (their windows)."""
    m, r = wildcards.model, wildcards.revision
    inputs = {
        "shards": paths.shards(m, r),
        "neurons": paths.neurons(m, r),
        "wikitext": paths.benchmark_data("ppl"),
    }
    if model_dir:
        inputs["model"] = model_dir
    return inputs
