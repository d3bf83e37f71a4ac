"""Where a job's model comes from: its input file and what the loader needs, for every model source (hub, GGUF
conversion, local checkpoint suite, local directory). Pure functions of the config and a model's revision;
``common.smk`` binds them to the run's config, its checkpoint suites and its staging directory."""

from __future__ import annotations

from wneurons.experiment import paths, targets
from wneurons.experiment.config import MODEL_SOURCES, model_source


def model_dir(config: dict, suites: dict, staging: str, model: str, revision: str) -> str | list:
    """Converted local copy for GGUF models, the suite directory for checkpoint suites (``suites``:
    {model: {revision: directory}}), the staged manifest of the revision for hub models (so every job of a revision
    waits for its staging; ``staging``: hub.staging_dir); nothing for local models.
    """
    spec = config["models"][model]
    if model in targets.hub_models(config):
        return paths.staged_manifest(model, revision, staging)
    if MODEL_SOURCES[model_source(spec)].converted:
        return paths.converted_model(model)
    if model in suites:
        suite = spec["checkpoint_suite"]
        return paths.trained_suite(model) if suite["train"] else suite["path"]
    return []


def loader_spec(config: dict, suites: dict, staging: str, model: str, revision: str) -> dict:
    """What the loader needs: hub id + revision and the directory it is staged in, or a local directory (a
    converted copy for GGUF sources, the revision's directory for checkpoint suites); the family to check (null:
    taken from the model) and the window BOS choice (null: the family's default).
    """
    spec = config["models"][model]
    source = model_source(spec)
    loader = {
        "name": model,
        "family": spec["family"],
        "num_layers": spec["num_layers"],
        "window_bos": spec["window_bos"],
        "revision": revision,
    }
    if MODEL_SOURCES[source].converted:
        return loader | {"local_path": paths.converted_model(model)}
    if model in suites:
        return loader | {"local_path": suites[model][revision]}
    if model in targets.hub_models(config):
        return loader | {"hub_id": spec["hub_id"], "staged": paths.staged_dir(model, revision, staging)}
    return loader | {source: spec[source]}


def gguf_input(config: dict, wildcards) -> str | list:
    """The GGUF file a gguf_file model is converted from (a wheel's file is not a workflow input)."""
    return config["models"][wildcards.model].get("gguf_file", [])


def gguf_spec(config: dict, wildcards) -> dict:
    """The GGUF source of a model: its config key and value (converter: wneurons.lm.models.GGUF_CONVERTERS)."""
    spec = config["models"][wildcards.model]
    source = model_source(spec)
    return {"source": source, source: spec[source]}


def hub_source(config: dict, wildcards) -> dict:
    """The hub id and revision stage_model fetches; a model without a hub id is refused (ValueError)."""
    if wildcards.model not in targets.hub_models(config):
        raise ValueError(f"stage_model: models.{wildcards.model} has no hub_id; only hub models are staged")
    return {"repo_id": config["models"][wildcards.model]["hub_id"], "revision": wildcards.revision}


def staging_needs(config: dict, wildcards) -> dict:
    """What stage_model fetches of a revision besides its identity: for a step read only by weight rows, the layers
    they read and the model's family (only the shards holding them are fetched); a whole model otherwise.
    """
    m, r = wildcards.model, wildcards.revision
    layers = targets.weight_rows_only_layers(config, m, r)
    return {"layers": layers, "family": config["models"][m].get("family") if layers else None}
