"""The experiment grid: which ablation conditions a (model, revision) gets, which layers a scope covers, which
revision's neuron table picks the neurons, and which layers a revision's activations are collected for.

Pure functions of the validated config, so the workflow (common.smk) and the tests enumerate the same grid.
Scopes: ``all`` (every layer), ``gK`` (layer group K alone, 1-based), ``cK`` (groups 1..K cumulatively, K >= 2;
c1 would equal g1), ``lK`` (the single layer K, 1-based: ``l1`` is layer index 0).
"""

from __future__ import annotations

from typing import NamedTuple

# The capability suite (lm-eval tasks, ``evaluation.capability``) is scored only where the config names tasks:
# see :func:`benchmarks_at`.
CAPABILITY = "capability"
BENCHMARKS = ("blimp", "tse", "ppl", CAPABILITY)
SELECTORS = ("wasserstein", "random", "lowest", "matched")
# Benchmark -> the data set it reads (the keys of the config's `data`); the capability suite reads lm-eval tasks
# written or staged by the workflow instead (``paths.capability_tasks``).
BENCHMARK_DATASETS = {"blimp": "blimp", "tse": "tse", "ppl": "wikitext2"}
DATASETS = tuple(dict.fromkeys(BENCHMARK_DATASETS.values()))


# The precisions a stage runs its model at (config ``neurons.dtype``, ``evaluation.dtype``; what each means:
# wneurons.lm.models.PRECISIONS) and the spellings configs used before precisions had names (torch's dtype names).
PRECISION_NAMES = ("fp32", "tf32", "bf16", "fp16")
PRECISION_ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def precision_name(spelling: str) -> str:
    """The precision a config spelling means ("float32" -> "fp32"); ValueError naming the valid ones otherwise."""
    name = PRECISION_ALIASES.get(spelling, spelling)
    if name not in PRECISION_NAMES:
        raise ValueError(f"dtype {spelling!r} is not one of {', '.join([*PRECISION_NAMES, *PRECISION_ALIASES])}")
    return name


class Condition(NamedTuple):
    """One ablation condition: which neurons (selector, percent per layer, trial) in which layers (scope)."""

    scope: str
    selector: str
    percent: str  # percent of each layer's neurons, formatted as in paths ("0.5", "1")
    trial: int


def format_percent(percent: float | str) -> str:
    """Percent as written in paths, wildcards and condition keys: 0.5 -> "0.5", 1.0 -> "1". The only formatter."""
    return f"{float(percent):g}"


def condition_key(scope: str, selector: str, percent: float | str) -> str:
    """``{scope}/{selector}/p{percent}``: a condition in the aggregate JSONs (random trials pooled). The only place
    the key is built; :func:`parse_condition_key` is the only place it is read."""
    return f"{scope}/{selector}/p{format_percent(percent)}"


class ConditionKey(NamedTuple):
    scope: str
    selector: str
    percent: str  # formatted as in paths


def parse_condition_key(key: str) -> ConditionKey:
    """The parts of a :func:`condition_key`; anything else is a ValueError naming it."""
    parts = key.split("/")
    if len(parts) != 3 or not parts[2].startswith("p"):
        raise ValueError(f"condition key {key!r} is not {{scope}}/{{selector}}/p{{percent}}")
    return ConditionKey(parts[0], parts[1], parts[2][1:])


def layer_groups(num_layers: int, size: int | list[int]) -> list[list[int]]:
    """Consecutive groups of layers (0-based) covering every layer once.

    ``size`` is one group size or a list of sizes taken in order, the last one repeated until every layer is in
    a group (``4`` == ``[4]``; ``[2, 4]`` = layers 0-1, then groups of 4). The last group may be shorter.
    """
    sizes = [size] if isinstance(size, int) else list(size)
    if not sizes or any(s < 1 for s in sizes):
        raise ValueError(f"layer group sizes must be positive integers, got {size!r}")
    groups, start = [], 0
    while start < num_layers:
        step = sizes[min(len(groups), len(sizes) - 1)]
        groups.append(list(range(start, min(start + step, num_layers))))
        start += step
    return groups


def _model_groups(config: dict, model: str) -> list[list[int]]:
    return layer_groups(config["models"][model]["num_layers"], config["ablation"]["layer_groups"]["size"])


def group_scopes(config: dict, model: str) -> list[str]:
    """Layer-group scopes of a model: g1..gK and, if cumulative, c2..cK."""
    spec = config["ablation"]["layer_groups"]
    n_groups = len(_model_groups(config, model))
    if spec["max_groups"] is not None:
        n_groups = min(n_groups, spec["max_groups"])
    scopes = [f"g{k}" for k in range(1, n_groups + 1)]
    if spec["cumulative"]:
        scopes += [f"c{k}" for k in range(2, n_groups + 1)]
    return scopes


def single_layer_scopes(config: dict, model: str) -> list[str]:
    """Single-layer scopes (``l1`` = layer index 0) of a model listed in ``ablation.single_layers.models``."""
    spec = config["ablation"]["single_layers"]
    if model not in spec["models"]:
        return []
    layers = spec["layers"]
    if layers is None:
        layers = range(config["models"][model]["num_layers"])
    return [f"l{layer + 1}" for layer in sorted(layers)]


def layers_for_scope(config: dict, model: str, scope: str) -> list[int]:
    """0-based layers a scope ablates; a bad scope is a ValueError naming it."""
    num_layers = config["models"][model]["num_layers"]
    if scope == "all":
        return list(range(num_layers))
    groups = _model_groups(config, model)
    kind, k = scope[:1], scope[1:]
    limit = {"g": len(groups), "c": len(groups), "l": num_layers}.get(kind, 0)
    if not k.isdigit() or not 1 <= int(k) <= limit:
        raise ValueError(
            f"scope {scope!r} is not 'all', g1..g{len(groups)}, c2..c{len(groups)} or l1..l{num_layers} for {model}"
        )
    k = int(k)
    if kind == "l":
        return [k - 1]
    if kind == "g":
        return groups[k - 1]
    return [layer for group in groups[:k] for layer in group]


def ablated_checkpoints(spec: dict) -> list[str]:
    """Checkpoints (not the final revision) that get the checkpoint fractions: all with
    ``checkpoint_ablations: true``, the listed ones with a list, none with false."""
    chosen = spec["checkpoint_ablations"]
    if chosen is True:
        return list(spec["checkpoints"])
    return [r for r in spec["checkpoints"] if r in (chosen or [])]


def conditions_for(config: dict, model: str, revision: str) -> list[Condition]:
    """Every ablation condition scored (on every benchmark) at this checkpoint (the clean model not included).

    Final revision: wasserstein / random (N trials) / perplexity-matched at each percent over all layers, plus
    wasserstein on every layer-group scope and, for models in ``ablation.single_layers``, on every single layer.
    Checkpoints of models with ``checkpoint_ablations``: the same three selectors at the checkpoint percents.
    Models with ``ablate: false``: none.
    """
    spec = config["models"][model]
    ablation = config["ablation"]
    if not spec["ablate"]:
        return []
    final = revision == spec["final_revision"]
    if final:
        # With checkpoint ablations the final revision is the last point of their series (Fig. 6c-d).
        extra = ablation["checkpoint_percents"] if ablated_checkpoints(spec) else []
        percents = list(dict.fromkeys([*ablation["percents"], *extra]))
    elif revision in ablated_checkpoints(spec):
        percents = ablation["checkpoint_percents"]
    else:
        return []
    conditions = []
    for percent in percents:
        p = format_percent(percent)
        conditions.append(Condition("all", "wasserstein", p, 0))
        conditions += [Condition("all", "random", p, t) for t in range(ablation["random_trials"])]
        conditions.append(Condition("all", "matched", p, 0))
    if final:
        for percent in ablation["layer_groups"]["percents"]:
            p = format_percent(percent)
            conditions += [Condition(s, "wasserstein", p, 0) for s in group_scopes(config, model)]
        for percent in ablation["single_layers"]["percents"]:
            p = format_percent(percent)
            conditions += [Condition(s, "wasserstein", p, 0) for s in single_layer_scopes(config, model)]
    return list(dict.fromkeys(conditions))


def trial_seed(config: dict, trial: int) -> int:
    """The seed of an ablation condition's trial (random trial t draws with ``ablation.seed + t``)."""
    return config["ablation"]["seed"] + trial


def evaluation_settings(config: dict, benchmark: str | None) -> dict:
    """The evaluation settings of a scoring job: the capability suite's jobs get the suite and the settings lm-eval
    uses; every other job the rest (so that a new suite reruns only the capability jobs)."""
    evaluation = config["evaluation"]
    if benchmark == CAPABILITY:
        capability = evaluation["capability"]
        return {k: evaluation[k] for k in ("convention", "dtype", "batch_size")} | {
            "seed": capability["seed"],
            "capability": capability,
        }
    others = {k: v for k, v in evaluation.items() if k != "capability"}
    return others | {"tse_format": config["data"]["tse"]["format"]}


def search_settings(config: dict, model: str, scope: str, percent: float) -> dict:
    """The matched control's search for the wasserstein condition at ``percent`` over ``scope``:
    ``ablation.matched`` (tolerance, steps, ...) with the percent, the scope's layers and the clamp's mode (the
    workflow adds the cohort and count rule, :func:`wneurons.experiment.ablations.cohort`; key order kept, so no
    job's params change)."""
    ablation = config["ablation"]
    return ablation["matched"] | {
        "percent": float(percent),
        "layers": layers_for_scope(config, model, scope),
        "mode": ablation["mode"],
    }


def capability_scored(config: dict, model: str, revision: str) -> bool:
    """Whether the capability suite is scored at this checkpoint: the config names tasks, and the revision is the
    final one (or ``evaluation.capability.checkpoints`` asks for every revision)."""
    capability = config["evaluation"]["capability"]
    if not capability["tasks"]:
        return False
    return capability["checkpoints"] or revision == config["models"][model]["final_revision"]


def benchmarks_at(config: dict, model: str, revision: str) -> list[str]:
    """The benchmarks scored at this checkpoint (under every one of its conditions): BLiMP, TSE and perplexity
    everywhere, the capability suite where :func:`capability_scored`."""
    return [b for b in BENCHMARKS if b != CAPABILITY or capability_scored(config, model, revision)]


def conditions_scored(config: dict, model: str, revision: str, benchmark: str) -> list[Condition]:
    """The conditions one benchmark is scored under at this checkpoint: every condition of :func:`conditions_for`;
    for the capability suite those over all layers only, unless ``evaluation.capability.layer_scopes``."""
    conditions = conditions_for(config, model, revision)
    if benchmark == CAPABILITY and not config["evaluation"]["capability"]["layer_scopes"]:
        return [c for c in conditions if c.scope == "all"]
    return conditions


def cohort_revision(config: dict, model: str, revision: str) -> str:
    """The revision whose neuron table chooses the neurons ablated at ``revision``: the final revision under
    ``ablation.checkpoint_selection: final`` (the paper's "same neurons at every checkpoint"), else ``revision``."""
    if config["ablation"]["checkpoint_selection"] == "final":
        return config["models"][model]["final_revision"]
    return revision


def collected_layers(config: dict, model: str, revision: str) -> list[int] | None:
    """0-based layers whose activations (and statistics) are collected at ``revision``; None = every layer."""
    kind = "final" if revision == config["models"][model]["final_revision"] else "checkpoints"
    return layer_setting(config, model, kind)


def layer_setting(config: dict, model: str, kind: str) -> list[int] | None:
    """``neurons.layers.<kind>`` (kind ``final`` or ``checkpoints``), overridden per model by
    ``models.<model>.neuron_layers.<kind>``; sorted, None = every layer."""
    override = config["models"][model].get("neuron_layers", {})
    layers = override[kind] if kind in override else config["neurons"]["layers"][kind]
    return None if layers is None else sorted(layers)


# WikiText-2 test in SmolLM2's tokenizer (measured: 304,986 tokens of 1,294,336 characters); the GPT-NeoX and
# Llama-3 tokenizers give fewer, so this bounds the shards of every configured model from above.
WIKITEXT2_TEST_TOKENS = 305_000
SHARD_BYTES = {"float16": 2, "float32": 4}


def neurons_per_layer_of(config: dict, model: str) -> int:
    """d_ff of a model: ``models.<model>.d_ff``, else the GPT-style estimate 4 * sqrt(params / (12 * layers))."""
    spec = config["models"][model]
    if spec.get("d_ff"):
        return int(spec["d_ff"])
    return int(4 * (spec["params_b"] * 1e9 / (12 * spec["num_layers"])) ** 0.5)


def shard_bytes(config: dict, model: str, layers: list[int] | None) -> int:
    """Bytes of one revision's activation shards: layers x d_ff x tokens x shard dtype (the pre-activations), plus
    layers x md_tokens x d_in x 4 (the MD inputs, d_in taken as d_ff / 4)."""
    neurons = config["neurons"]
    n_layers = config["models"][model]["num_layers"] if layers is None else len(layers)
    tokens = (
        WIKITEXT2_TEST_TOKENS if neurons["max_tokens"] is None else min(neurons["max_tokens"], WIKITEXT2_TEST_TOKENS)
    )
    tokens -= tokens % neurons["window"]
    d_ff = neurons_per_layer_of(config, model)
    y = n_layers * d_ff * tokens * SHARD_BYTES[neurons["shard_dtype"]]
    x = n_layers * neurons["md_tokens"] * (d_ff // 4) * 4
    return y + x


def explorer_models(config: dict) -> list[str]:
    """Models with a neuron explorer (``report.explorer.models``; null: the models of Figure 1 and Figure 5, whose
    neurons the figures show; not Figure 1's ReLU contrast). An explorer keeps its model's final-revision shards
    until it has read them (up to 448 GB each: docs/performance.md)."""
    models = config["report"]["explorer"]["models"]
    if models is not None:
        return models
    figures = config["figures"]
    named = [figures["figure1"]["model"] or next(iter(config["models"])), figures["figure5"]["model"]]
    return list(dict.fromkeys(m for m in named if m))
