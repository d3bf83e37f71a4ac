"""Inputs, params and scratch disk of the neuron jobs (``workflow/rules/neurons.smk``: collection and statistics):
pure functions of the config and a job's wildcards; ``common.smk`` binds them to the run's config and, for
whether a statistics job collects in scratch, to its allocation plan."""

from __future__ import annotations

from wneurons.experiment import allocations, grid, paths


def collect_params(config: dict, wildcards) -> dict:
    """What collection needs: a new MD pair count or WD method must not rerun the model (``shard_io`` only says
    how the bytes reach the disk). ``layers`` only when collection is restricted, so that configs without it keep
    their recorded params.
    """
    keys = ("window", "max_tokens", "dtype", "shard_dtype", "md_tokens", "seed", "shard_io")
    params = {k: config["neurons"][k] for k in keys}
    layers = grid.collected_layers(config, wildcards.model, wildcards.revision)
    if layers is not None:
        params["layers"] = layers
    return params


def collect_disk_mb(config: dict, wildcards) -> int:
    """Scratch disk (MB) of one collection job: its shards (:func:`wneurons.experiment.grid.shard_bytes`) plus 1 GB
    headroom."""
    m, r = wildcards.model, wildcards.revision
    return 1024 + grid.shard_bytes(config, m, grid.collected_layers(config, m, r)) // 2**20


def neuron_stats_inputs(config: dict, wildcards, in_scratch: bool, model_dir, parts: list[str] | None = None) -> dict:
    """The revision's shards; or, collecting in scratch (``in_scratch``), what collection reads: the model
    (``model_dir``, the job's model input; none for local models) and WikiText-2; or, where the planner split the
    statistics by layer range (``parts``: the ranges), the parts' tables, which the job joins."""
    if parts:
        return {"parts": [paths.neurons_part(wildcards.model, wildcards.revision, r) for r in parts]}
    if not in_scratch:
        return {"shards": paths.shards(wildcards.model, wildcards.revision)}
    inputs = {"wikitext": paths.dataset("wikitext2")}
    if model_dir:
        inputs["model"] = model_dir
    return inputs


def stats_params(config: dict, wildcards, in_scratch: bool) -> dict:
    """What the statistics need; collecting in scratch (``in_scratch``), the collection's params too (a job in
    scratch records the same params as collect_activations would)."""
    keys = ("wd_method", "md_pairs", "seed")
    params = {k: config["neurons"][k] for k in keys}
    if in_scratch:
        params["collect"] = collect_params(config, wildcards)
    return params


def stats_part_params(config: dict, wildcards) -> dict:
    """What a part of the statistics needs: the statistics' params and the layers of its range (wildcard
    ``layers``, ``"first-last"``) among those its revision collects."""
    w = {"model": wildcards.model, "revision": wildcards.revision, "layers": wildcards.layers}
    return stats_params(config, wildcards, False) | {"layers": allocations.statistics_layers(config, w)}
