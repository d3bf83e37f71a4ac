"""The ONLY place that turns config into paths, lists and parameters. Rules call these helpers."""

import sys
from pathlib import Path

from wneurons.config import ConfigError, load_yaml_strict, validate_config
from wneurons.grid import (
    BENCHMARKS,
    Condition,
    cohort_revision,
    collected_layers,
    conditions_for,
    layers_for_scope,
    shard_bytes,
)

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


def kept_shards_path(model, revision):
    """Hard links to the shards of a revision that a job reads after its statistics (Figure 1): they survive the
    deletion of the temporary shards and cost no disk of their own."""
    return f"resources/kept-activations/{model}/{revision}"


def neurons_path(model, revision):
    return f"results/{model}/{revision}/neurons.parquet"


def clean_path(model, revision, benchmark):
    return f"results/{model}/{revision}/clean/{benchmark}.json"


def ablation_path(model, revision, condition, benchmark):
    c = condition
    return f"results/{model}/{revision}/ablations/{c.scope}/{c.selector}/p{c.percent}/t{c.trial}/{benchmark}.json"


def matched_search_path(model, revision, scope, percent):
    return (
        f"results/{model}/{revision}/ablations/{scope}/matched/p{percent}/search.json"
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
    return targets


# ---------------------------------------------------------------- inputs
def model_dir(wildcards):
    """Converted local copy for GGUF-in-wheel models; nothing for hub / local models (loaded directly)."""
    if "gguf_wheel" in MODELS[wildcards.model]:
        return f"resources/models/{wildcards.model}"
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


def cohort_neurons(wildcards):
    """The neuron table that chooses an ablation's neurons: the final revision's under
    ablation.checkpoint_selection: final, else the revision's own."""
    m = wildcards.model
    return neurons_path(m, cohort_revision(config, m, wildcards.revision))


def ablation_inputs(wildcards):
    """Model, data, the cohort's neuron table, and for the matched control the search that fixed its m%."""
    m, r = wildcards.model, wildcards.revision
    inputs = {
        "data": data_dir(wildcards.benchmark),
        "neurons": cohort_neurons(wildcards),
    }
    if model_dir(wildcards):
        inputs["model"] = model_dir(wildcards)
    if wildcards.selector == "matched":
        inputs["search"] = matched_search_path(
            m, r, wildcards.scope, wildcards.fraction
        )
    return inputs


def matched_search_inputs(wildcards):
    """Model, validation text, the cohort's neuron table, and the perplexities the search matches: the
    wasserstein condition's ppl.json (its target) and the clean one (the m = 0 end)."""
    m, r = wildcards.model, wildcards.revision
    target = Condition(wildcards.scope, "wasserstein", wildcards.fraction, 0)
    inputs = {
        "data": data_dir("ppl"),
        "neurons": cohort_neurons(wildcards),
        "target": ablation_path(m, r, target, "ppl"),
        "clean": clean_path(m, r, "ppl"),
    }
    if model_dir(wildcards):
        inputs["model"] = model_dir(wildcards)
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
        inputs[f"shards{i}"] = kept_shards_path(m, final_revision(m))
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
    spec = MODELS[wildcards.model]
    loader = {
        "name": wildcards.model,
        "family": spec["family"],
        "num_layers": spec["num_layers"],
    }
    if "hub_id" in spec:
        loader |= {"hub_id": spec["hub_id"], "revision": wildcards.revision}
    elif "local_path" in spec:
        loader |= {"local_path": spec["local_path"], "revision": wildcards.revision}
    else:
        loader |= {
            "local_path": f"resources/models/{wildcards.model}",
            "revision": wildcards.revision,
        }
    return loader


def gguf_spec(wildcards):
    return MODELS[wildcards.model]["gguf_wheel"]


def dataset_spec(wildcards):
    return config["data"][wildcards.dataset]


def _cohort(wildcards):
    """Which revision's table chooses the neurons (recorded in every condition) and how many per layer."""
    ablation = config["ablation"]
    return {
        "cohort_source": cohort_revision(config, wildcards.model, wildcards.revision),
        "cohort_selection": ablation["checkpoint_selection"],
        "count_rule": ablation["count_rule"],
    }


def condition_spec(wildcards):
    """The neuron selection of one ablation job: selector, percent, layers, seed of its trial, cohort."""
    return {
        "selector": wildcards.selector,
        "percent": float(wildcards.fraction),
        "scope": wildcards.scope,
        "layers": layers_for_scope(config, wildcards.model, wildcards.scope),
        "trial": int(wildcards.trial),
        "seed": config["ablation"]["seed"] + int(wildcards.trial),
        "mode": config["ablation"]["mode"],
    } | _cohort(wildcards)


def search_spec(wildcards):
    return (
        config["ablation"]["matched"]
        | {
            "percent": float(wildcards.fraction),
            "layers": layers_for_scope(config, wildcards.model, wildcards.scope),
            "mode": config["ablation"]["mode"],
        }
        | _cohort(wildcards)
    )


def collect_params(wildcards):
    """Only what changes the shards: a new MD pair count or WD method must not rerun the model. ``layers`` only
    when collection is restricted, so that configs without it keep their recorded params.
    """
    keys = ("window", "max_tokens", "dtype", "shard_dtype", "md_tokens", "seed")
    params = {k: config["neurons"][k] for k in keys}
    layers = collected_layers(config, wildcards.model, wildcards.revision)
    if layers is not None:
        params["layers"] = layers
    return params


def shards_output():
    """The collection rule's output: temporary (deleted once the statistics and every other reader are done)
    unless neurons.keep_shards."""
    path = directory(shards_path("{model}", "{revision}"))
    return path if config["neurons"]["keep_shards"] else temp(path)


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


def collect_disk_mb(wildcards):
    """Scratch disk of one collection job: its shards (see wneurons.grid.shard_bytes) plus 1 GB headroom."""
    m, r = wildcards.model, wildcards.revision
    return 1024 + shard_bytes(config, m, collected_layers(config, m, r)) // 2**20
