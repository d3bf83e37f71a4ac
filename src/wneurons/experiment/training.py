"""Inputs and params of the jobs of ``workflow/rules/training.smk`` (Fig. 2b-d, 6b-d): pure functions of the config
and a job's wildcards; ``common.smk`` binds them to the run's config."""

from __future__ import annotations

from wneurons.experiment import paths, targets
from wneurons.store.checkpoints import training_revisions


def suite_train_params(config: dict, wildcards) -> dict:
    """The trainer's settings, the revisions it saves, and how far the neuron statistics read WikiText-2 test."""
    spec = config["models"][wildcards.model]
    return {
        "train": spec["checkpoint_suite"]["train"],
        "revisions": training_revisions(spec),
        "max_tokens": config["neurons"]["max_tokens"],
    }


def integrity_inputs(config: dict, wildcards) -> list:
    """Every training revision's weight digest: a hub model's staged manifests (the gate runs right after staging),
    else the weight records."""
    m = wildcards.model
    if m in targets.hub_models(config):
        return [
            paths.staged_manifest(m, r, targets.staging_root(config)) for r in training_revisions(config["models"][m])
        ]
    return [paths.weight_record(m, r) for r in training_revisions(config["models"][m])]


def cohorts_inputs(config: dict, wildcards) -> dict:
    """The final revision's neuron table, and its pair signs (MD over the pair sample) for Fig. 6b models."""
    m, final = wildcards.model, targets.final_revision(config, wildcards.model)
    inputs = {"neurons": paths.neurons(m, final)}
    if m in targets.pair_models(config):
        inputs["pair_signs"] = paths.pair_signs(m, final)
    return inputs


def gated(model: str) -> dict:
    """The cohorts a training analysis follows and the integrity gate it must pass."""
    return {"cohorts": paths.cohorts(model), "integrity": paths.integrity(model)}


def pair_signs_training_inputs(config: dict, wildcards) -> dict:
    m = wildcards.model
    revs = targets.dynamics_revisions(config, m)
    return gated(m) | {"signs": [paths.pair_signs(m, r) for r in revs]}


def emergence_inputs(config: dict, wildcards) -> dict:
    m = wildcards.model
    revs = targets.dynamics_revisions(config, m)
    return gated(m) | {
        "neurons": [paths.neurons(m, r) for r in revs],
        "tse": [paths.clean(m, r, "tse") for r in revs],
        "blimp": [paths.clean(m, r, "blimp") for r in revs],
    }


def cosine_drift_inputs(config: dict, wildcards) -> dict:
    m = wildcards.model
    revs = targets.weight_grid(config, m)
    return gated(m) | {"rows": [paths.weight_rows(m, r) for r in revs]}


def ablation_vs_wd_inputs(config: dict, wildcards) -> dict:
    m = wildcards.model
    revs = targets.ablation_revisions(config, m)
    return gated(m) | {
        "neurons": [paths.neurons(m, r) for r in revs],
        "blimp": [paths.aggregate(m, r, "blimp") for r in revs],
        "tse": [paths.aggregate(m, r, "tse") for r in revs],
    }


def training_params(config: dict, wildcards) -> dict:
    t = config["training"]
    keys = ("emergence_fraction", "bootstrap", "seed")
    return {k: t[k] for k in keys}


def ablation_vs_wd_params(config: dict, wildcards) -> dict:
    """The checkpoint percent compared across checkpoints (the first of ablation.checkpoint_percents)."""
    percent = config["ablation"]["checkpoint_percents"][0]
    return training_params(config, wildcards) | {"percent": percent}


def pair_signs_training_params(config: dict, wildcards) -> dict:
    return {"top_k": config["training"]["pair_top_k"]}
