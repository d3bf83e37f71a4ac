"""Inputs and params of the ablation jobs (``workflow/rules/ablate.smk``): pure functions of the config and a job's
wildcards; ``common.smk`` binds them to the run's config (and, where a job reads a model, to its model input)."""

from __future__ import annotations

from wneurons.experiment import grid, paths, targets


def score_data(config: dict, wildcards) -> str | list:
    """The benchmark's verified data set, or the capability suite's lm-eval tasks."""
    return targets.benchmark_input(config, wildcards.benchmark)


def cohort_neurons(config: dict, wildcards) -> str:
    """The neuron table that chooses an ablation's neurons: the final revision's under
    ablation.checkpoint_selection: final, else the revision's own."""
    m = wildcards.model
    return paths.neurons(m, grid.cohort_revision(config, m, wildcards.revision))


def ablation_inputs(config: dict, wildcards, model_dir) -> dict:
    """Model (``model_dir``: the job's model input, none for local models), data, the cohort's neuron table, and
    for the matched control the search that fixed its m%."""
    m, r = wildcards.model, wildcards.revision
    inputs = {
        "data": targets.benchmark_input(config, wildcards.benchmark),
        "neurons": cohort_neurons(config, wildcards),
    }
    if model_dir:
        inputs["model"] = model_dir
    if wildcards.selector == "matched":
        inputs["search"] = paths.matched_search(m, r, wildcards.scope, wildcards.percent)
    return inputs


def matched_search_inputs(config: dict, wildcards, model_dir) -> dict:
    """Model (as in :func:`ablation_inputs`), validation text, the cohort's neuron table, and the perplexities the
    search matches: the wasserstein condition's ppl.json (its target) and the clean one (the m = 0 end)."""
    m, r = wildcards.model, wildcards.revision
    target = grid.Condition(wildcards.scope, "wasserstein", wildcards.percent, 0)
    inputs = {
        "data": paths.benchmark_data("ppl"),
        "neurons": cohort_neurons(config, wildcards),
        "target": paths.ablation(m, r, target, "ppl"),
        "clean": paths.clean(m, r, "ppl"),
    }
    if model_dir:
        inputs["model"] = model_dir
    return inputs


def condition_results(config: dict, wildcards) -> list[str]:
    """Clean + every configured condition for one benchmark of one checkpoint."""
    m, r, b = wildcards.model, wildcards.revision, wildcards.benchmark
    conditions = grid.conditions_scored(config, m, r, b)
    return [paths.clean(m, r, b), *(paths.ablation(m, r, c, b) for c in conditions)]


def evaluation_params(config: dict, wildcards) -> dict:
    """The evaluation settings of a scoring job (:func:`wneurons.experiment.grid.evaluation_settings`)."""
    return grid.evaluation_settings(config, wildcards.get("benchmark"))


def cohort(config: dict, wildcards) -> dict:
    """Which revision's table chooses the neurons (recorded in every condition) and how many per layer."""
    ablation = config["ablation"]
    return {
        "cohort_source": grid.cohort_revision(config, wildcards.model, wildcards.revision),
        "cohort_selection": ablation["checkpoint_selection"],
        "count_rule": ablation["count_rule"],
    }


def condition_spec(config: dict, wildcards) -> dict:
    """The neuron selection of one ablation job: selector, percent, layers, seed of its trial, cohort."""
    return {
        "selector": wildcards.selector,
        "percent": float(wildcards.percent),
        "scope": wildcards.scope,
        "layers": grid.layers_for_scope(config, wildcards.model, wildcards.scope),
        "trial": int(wildcards.trial),
        "seed": grid.trial_seed(config, int(wildcards.trial)),
        "mode": config["ablation"]["mode"],
    } | cohort(config, wildcards)


def search_spec(config: dict, wildcards) -> dict:
    """The matched search of one scope and percent (:func:`wneurons.experiment.grid.search_settings`) and its
    cohort."""
    m, scope, percent = wildcards.model, wildcards.scope, float(wildcards.percent)
    return grid.search_settings(config, m, scope, percent) | cohort(config, wildcards)
