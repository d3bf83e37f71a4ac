"""What the workflow builds: the model and revision lists of the config and the targets of the default rule ``all``.

Pure functions of the validated config, like :mod:`wneurons.experiment.grid`, so the workflow (common.smk, the
Snakefile's ``all``) and the tests enumerate the same targets. Paths come from :mod:`wneurons.experiment.paths`.
"""

from __future__ import annotations

from collections.abc import Iterable

from wneurons.experiment import paths
from wneurons.experiment.config import ConfigError
from wneurons.experiment.grid import (
    CAPABILITY,
    ablated_checkpoints,
    benchmarks_at,
    conditions_for,
    explorer_models,
    single_layer_scopes,
)
from wneurons.store.checkpoints import by_step


# ---------------------------------------------------------------- models and revisions
def final_revision(config: dict, model: str) -> str:
    return config["models"][model]["final_revision"]


def revisions(config: dict, model: str) -> list[str]:
    """Final revision first, then the training checkpoints."""
    spec = config["models"][model]
    return [spec["final_revision"], *spec["checkpoints"]]


def model_revisions(config: dict) -> list[tuple[str, str]]:
    """(model, revision) for every configured model and revision."""
    return [(m, r) for m in config["models"] for r in revisions(config, m)]


def figure1_models(config: dict) -> list[str]:
    """Figure 1's model (``figures.figure1.model``, else the first configured) and its ReLU contrast, if any."""
    fig = config["figures"]["figure1"]
    return [fig["model"] or next(iter(config["models"])), *([fig["contrast"]] if fig["contrast"] else [])]


def analysis_models(config: dict) -> list[str]:
    """Models (final revision) that get a pair sample: those of Figures 5, 6a and 7."""
    figures = config["figures"]
    names = [figures[f]["model"] for f in ("figure5", "figure6", "figure7")]
    return list(dict.fromkeys(m for m in names if m))


def training_models(config: dict) -> list[str]:
    """Models whose training dynamics are analysed: those with checkpoints."""
    return [m for m, spec in config["models"].items() if spec["checkpoints"]]


def drift_models(config: dict) -> list[str]:
    """Training models with a weight grid (at least two weight checkpoints)."""
    return [m for m in training_models(config) if len(config["models"][m]["weight_checkpoints"]) > 1]


def ablation_models(config: dict) -> list[str]:
    """Training models with checkpoint ablations (Fig. 6c-d)."""
    return [m for m in training_models(config) if ablated_checkpoints(config["models"][m])]


def pair_models(config: dict) -> list[str]:
    """Training models whose MD cohort's pair signs are followed (Fig. 6b)."""
    return [m for m in training_models(config) if m in config["training"]["pair_models"]]


# The families of wneurons.lm.registry.FAMILIES whose MLP is gated (an up projection beside the gate; a test keeps
# the two equal): planning decides which checkpoints get the sign cases, and may not import the model runtime.
GATED_FAMILIES = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma3", "gemma3_text"})


def sign_cases_at(config: dict, model: str, revision: str) -> bool:
    """Whether a checkpoint gets the gate x up sign cases of its explorer's neurons (the rule sign_cases): the
    revision the explorer shows, of a model whose family is gated (a model without ``family`` too: its job reads
    the family from the neuron table and writes an empty table for a family without a gate)."""
    family = config["models"][model].get("family")
    shown = model in explorer_models(config) and revision == final_revision(config, model)
    return shown and (family is None or family in GATED_FAMILIES)


def dynamics_revisions(config: dict, model: str) -> list[str]:
    """Final revision and checkpoints in step order (Fig. 2b, 2d)."""
    return by_step(revisions(config, model))


def ablation_revisions(config: dict, model: str) -> list[str]:
    """Checkpoints with ablations and the final revision, in step order (Fig. 6c-d)."""
    spec = config["models"][model]
    return by_step([*ablated_checkpoints(spec), spec["final_revision"]])


def weight_grid(config: dict, model: str) -> list[str]:
    """The revisions whose weight rows the cosine drift reads, in step order."""
    return by_step(config["models"][model]["weight_checkpoints"])


def benchmark_input(config: dict, benchmark: str) -> str:
    """The data a benchmark's scoring jobs read: its verified data set, or for the capability suite the lm-eval
    tasks of ``evaluation.capability.source``."""
    if benchmark == CAPABILITY:
        return paths.capability_tasks(config["evaluation"]["capability"]["source"])
    return paths.benchmark_data(benchmark)


# ---------------------------------------------------------------- hub models: staging and pruning
def hub_models(config: dict) -> list[str]:
    """Models given by ``hub_id``: staged (wneurons.lm.hub) before any job reads them."""
    return [m for m, spec in config["models"].items() if "hub_id" in spec]


def staging_root(config: dict) -> str:
    """Where staged hub revisions live (``hub.staging_dir``)."""
    return config["hub"]["staging_dir"]


def hub_revisions(config: dict, model: str) -> list[str]:
    """Every revision of a model that some job reads: final revision, checkpoints, then the weight grid's others."""
    return list(dict.fromkeys([*revisions(config, model), *config["models"][model]["weight_checkpoints"]]))


def staged_revisions(config: dict) -> list[tuple[str, str, str]]:
    """``(model, hub id, revision)`` of every hub revision of the run: what is staged, and what the preflight asks
    the hub about while it is not."""
    return [(m, config["models"][m]["hub_id"], r) for m in hub_models(config) for r in hub_revisions(config, m)]


def weight_readers(config: dict, model: str, revision: str) -> list[str]:
    """The outputs of every job that reads a revision's weights (not only its tokenizer): its neuron table (after
    collection), its aggregates (every clean and ablated score, the matched searches), its weight rows, and the
    final revision's pair sample and the explorer's sign cases. Pruning a staged revision waits for all of them."""
    readers = []
    if revision in revisions(config, model):
        readers += [
            paths.neurons(model, revision),
            *(paths.aggregate(model, revision, b) for b in benchmarks_at(config, model, revision)),
        ]
    if revision in config["models"][model]["weight_checkpoints"]:
        readers.append(paths.weight_rows(model, revision))
    if model in analysis_models(config) and revision == final_revision(config, model):
        readers.append(paths.pair_sample(model, revision))
    if sign_cases_at(config, model, revision):
        readers.append(paths.sign_cases(model, revision))
    return readers


def weight_rows_only_layers(config: dict, model: str, revision: str) -> list[int] | None:
    """The layers read from a revision whose only weight reader is weight rows (a step of the weight grid that is
    neither the final revision nor a checkpoint): staging fetches only the shard(s) holding them
    (``training.cohorts.layer``). None when a job loads the whole model."""
    if weight_readers(config, model, revision) == [paths.weight_rows(model, revision)]:
        return [config["training"]["cohorts"]["layer"]]
    return None


def pruned_revisions(config: dict, model: str) -> list[str]:
    """The staged revisions of a hub model whose weights are removed once read (config ``hub.prune``): every one but the
    final revision (``checkpoints``), all, or none."""
    prune = config["hub"]["prune"]
    if prune == "none" or model not in hub_models(config):
        return []
    final = final_revision(config, model)
    return [r for r in hub_revisions(config, model) if prune == "all" or r != final]


def staging_order(config: dict, model: str, scope: dict[str, set[str]] | None = None) -> list[str]:
    """The pruned revisions of a model in the order they are staged under ``hub.stage_ahead``: the final revision
    first (when pruned: every checkpoint's ablations read its neuron table, so it cannot wait for them), then by
    training step (in the config's order where a revision is not named step<N>). ``scope``: the revisions per model
    that the run's own targets name (:func:`staging_scope`); only those are ordered, so a target of one revision
    never waits for the work of revisions nobody asked for. None: the whole grid (``all``)."""
    pruned = pruned_revisions(config, model)
    if scope is not None:
        pruned = [r for r in pruned if r in scope.get(model, ())]
    final = [r for r in pruned if r == final_revision(config, model)]
    rest = [r for r in pruned if r not in final]
    try:
        rest = by_step(rest)
    except ValueError:
        pass
    return [*final, *rest]


def staging_waits_for(config: dict, model: str, revision: str, scope: dict[str, set[str]] | None = None) -> str | None:
    """The revision whose pruning lets ``revision`` be staged: with ``hub.stage_ahead: N``, the one N + 1 places
    earlier in :func:`staging_order` (over ``scope``), so at most N + 1 pruned revisions of a model are on disk at
    once (one in use, N staged ahead of it). None: staged at once (one of the first N + 1, a revision that is kept
    or outside the scope, no bound)."""
    ahead = config["hub"]["stage_ahead"]
    order = staging_order(config, model, scope)
    if ahead is None or revision not in order:
        return None
    index = order.index(revision) - ahead - 1
    return order[index] if index >= 0 else None


def staging_scope(config: dict, requested: Iterable[str]) -> dict[str, set[str]] | None:
    """The hub revisions a run's requested targets name, per model, for :func:`staging_order`: each target must lie
    inside one checkpoint's results, staged directory or shards (``results/pythia-1.4b/step50000/blimp.json``).
    None (the whole grid's lanes) when nothing is requested (the default target ``all``) or when any target is a
    rule name or a file of several checkpoints (a figure, the report), whose DAG may stage the whole grid."""
    requested = [t.removeprefix("./").rstrip("/") for t in requested]
    if not requested:
        return None
    root = staging_root(config)
    owners = {}
    for model in hub_models(config):
        for revision in hub_revisions(config, model):
            for folder in (
                paths.checkpoint_dir(model, revision),
                paths.staged_dir(model, revision, root),
                paths.shards(model, revision),
                paths.kept_shards(model, revision),
            ):
                owners[folder] = (model, revision)
    scope: dict[str, set[str]] = {}
    for target in requested:
        parts = target.split("/")
        folders = ("/".join(parts[:i]) for i in range(len(parts), 0, -1))  # the target, then its parents
        owner = next((owners[f] for f in folders if f in owners), None)
        if owner is None:
            return None
        scope.setdefault(owner[0], set()).add(owner[1])
    return scope


def prune_targets(config: dict) -> list[str]:
    """The markers of every staged revision the run prunes (:func:`pruned_revisions`)."""
    root = staging_root(config)
    return [paths.pruned_record(m, r, root) for m in hub_models(config) for r in pruned_revisions(config, m)]


# ---------------------------------------------------------------- targets of `all`
def checkpoint_targets(config: dict) -> list[str]:
    """Per checkpoint: the neuron table and the aggregates; per ablated final revision Figures 3 and 4 (4 only with
    layer-group or single-layer scopes) and, with a capability suite, its figure beside 3c; Figures 1 and 2a."""
    targets = []
    for model, revision in model_revisions(config):
        targets.append(paths.neurons(model, revision))
        targets += [paths.aggregate(model, revision, b) for b in benchmarks_at(config, model, revision)]
        conditions = conditions_for(config, model, revision)
        if revision == final_revision(config, model) and conditions:
            targets.append(paths.figure("figure3", model, revision))
            if CAPABILITY in benchmarks_at(config, model, revision):
                targets.append(paths.figure("capability", model, revision))
            if any(c.scope != "all" for c in conditions):
                targets.append(paths.figure("figure4", model, revision))
    return [*targets, paths.figure("figure1"), paths.figure("figure2a")]


def training_targets(config: dict) -> list[str]:
    """Figures 2b and 2d (any training model), 2c (any weight grid), 6c-d and 6b per model that has them."""
    targets = []
    if training_models(config):
        targets += [paths.figure("figure2b"), paths.figure("figure2d")]
    if drift_models(config):
        targets.append(paths.figure("figure2c"))
    targets += [paths.figure("figure6cd", m) for m in ablation_models(config)]
    targets += [paths.figure("figure6b", m) for m in pair_models(config)]
    return targets


def report_targets(config: dict) -> list[str]:
    """The claims table (md, json, html) and one explorer per configured model (final revision)."""
    targets = [paths.replication_md(), paths.replication_json(), paths.replication_html()]
    targets += [paths.explorer(m, final_revision(config, m)) for m in explorer_models(config)]
    return targets


def analysis_targets(config: dict) -> list[str]:
    """Tables and figures of the analyses that the config asks for (a figure's model set to null: none). A Figure 7
    model without single-layer ablations is a ConfigError."""
    figures, targets = config["figures"], []
    for model in analysis_models(config):
        rev = final_revision(config, model)
        targets += [paths.pair_signs(model, rev), paths.pair_composition(model, rev)]
    if figures["figure5"]["model"]:
        targets.append(paths.figure("figure5"))
    if figures["figure6"]["model"]:
        targets.append(paths.figure("figure6a"))
    if figures["figure7"]["model"]:
        if not single_layer_scopes(config, figures["figure7"]["model"]):
            raise ConfigError(
                f"figures.figure7.model {figures['figure7']['model']!r} has no single-layer ablations: "
                "add it to ablation.single_layers.models"
            )
        targets.append(paths.figure("figure7"))
    if config["pos"]["model"]:
        targets.append(paths.figure("figure3d"))
    return targets


def all_targets(config: dict) -> list[str]:
    """Every target of the default rule ``all``, in this order: checkpoints, training, report, analyses, and the
    pruning of staged hub revisions once read."""
    return [
        *checkpoint_targets(config),
        *training_targets(config),
        *report_targets(config),
        *analysis_targets(config),
        *prune_targets(config),
    ]


# ---------------------------------------------------------------- the files the claims table reads
def claim_files(config: dict, model: str) -> dict[str, str]:
    """Every result file a claim may read for one model (final revision), by key; absent ones say "not run"."""
    r = final_revision(config, model)
    scored = benchmarks_at(config, model, r)
    files = {"neurons": paths.neurons(model, r), **{b: paths.aggregate(model, r, b) for b in scored}}
    if conditions_for(config, model, r):
        files |= {f"paired_{b}": paths.paired(model, r, b) for b in scored}
    files |= {
        "pos_surprisal": paths.pos_surprisal(model, r),
        "composition": paths.pair_composition(model, r),
        "figure5_pairs": paths.case_study_pairs(model, r),
        "figure5_robustness": paths.case_study_robustness(model, r),
        "layerwise": paths.layerwise_table(model, r),
        "emergence": paths.emergence_table(model),
        "cosine_drift": paths.cosine_drift(model),
        "pair_signs_training": paths.pair_signs_training(model),
        "ablation_vs_wd": paths.ablation_vs_wd_table(model),
    }
    return files


def produced_analysis_files(config: dict, model: str) -> list[str]:
    """The keys of :func:`claim_files` among the analyses (including the training dynamics) that this config
    produces for ``model``."""
    figures, keys = config["figures"], []
    if model in analysis_models(config):
        keys.append("composition")
    if figures["figure5"]["model"] == model:
        keys += ["figure5_pairs", "figure5_robustness"]
    if figures["figure7"]["model"] == model:
        keys.append("layerwise")
    if config["pos"]["model"] == model:
        keys.append("pos_surprisal")
    if model in training_models(config):
        keys.append("emergence")
    if model in drift_models(config):
        keys.append("cosine_drift")
    if model in pair_models(config):
        keys.append("pair_signs_training")
    if model in ablation_models(config):
        keys.append("ablation_vs_wd")
    return keys


def claim_inputs(config: dict) -> list[str]:
    """The files the claims table is built from: per model its neuron table, aggregates, paired tables and the
    analyses the config runs."""
    inputs = []
    for model in config["models"]:
        files = claim_files(config, model)
        scored = benchmarks_at(config, model, final_revision(config, model))
        inputs += [files["neurons"], *(files[b] for b in scored)]
        inputs += [files[f"paired_{b}"] for b in scored if f"paired_{b}" in files]
        inputs += [files[k] for k in produced_analysis_files(config, model)]
    return inputs
