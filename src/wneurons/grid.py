"""The experiment grid: which ablation conditions a (model, revision) gets, and which layers a scope covers.

Pure functions of the validated config, so the workflow (common.smk) and the tests enumerate the same grid.
Scopes: ``all`` (every layer), ``gK`` (layer group K alone, 1-based), ``cK`` (groups 1..K cumulatively, K >= 2;
c1 would equal g1).
"""

from __future__ import annotations

from typing import NamedTuple

BENCHMARKS = ("blimp", "tse", "ppl")
SELECTORS = ("wasserstein", "random", "lowest", "matched")


class Condition(NamedTuple):
    """One ablation condition: which neurons (selector, percent per layer, trial) in which layers (scope)."""

    scope: str
    selector: str
    fraction: str  # percent per layer, formatted as in paths ("0.5", "1")
    trial: int


def format_fraction(percent: float) -> str:
    """Percent as written in paths and wildcards: 0.5 -> "0.5", 1.0 -> "1"."""
    return f"{percent:g}"


def layer_groups(num_layers: int, size: int) -> list[list[int]]:
    """Consecutive groups of ``size`` layers (0-based); the last group may be shorter."""
    return [list(range(start, min(start + size, num_layers))) for start in range(0, num_layers, size)]


def group_scopes(config: dict, model: str) -> list[str]:
    """Layer-group scopes of a model: g1..gK and, if cumulative, c2..cK."""
    spec = config["ablation"]["layer_groups"]
    n_groups = len(layer_groups(config["models"][model]["num_layers"], spec["size"]))
    if spec["max_groups"] is not None:
        n_groups = min(n_groups, spec["max_groups"])
    scopes = [f"g{k}" for k in range(1, n_groups + 1)]
    if spec["cumulative"]:
        scopes += [f"c{k}" for k in range(2, n_groups + 1)]
    return scopes


def layers_for_scope(config: dict, model: str, scope: str) -> list[int]:
    """0-based layers a scope ablates; a bad scope is a ValueError naming it."""
    num_layers = config["models"][model]["num_layers"]
    if scope == "all":
        return list(range(num_layers))
    groups = layer_groups(num_layers, config["ablation"]["layer_groups"]["size"])
    kind, k = scope[:1], scope[1:]
    if kind not in ("g", "c") or not k.isdigit() or not 1 <= int(k) <= len(groups):
        raise ValueError(f"scope {scope!r} is not 'all', g1..g{len(groups)} or c2..c{len(groups)} for {model}")
    k = int(k)
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

    Final revision: wasserstein / random (N trials) / perplexity-matched at each fraction over all layers, plus
    wasserstein on every layer-group scope. Checkpoints of models with ``checkpoint_ablations``: the same three
    selectors at the checkpoint fractions. Models with ``ablate: false``: none.
    """
    spec = config["models"][model]
    ablation = config["ablation"]
    if not spec["ablate"]:
        return []
    if revision == spec["final_revision"]:
        # With checkpoint ablations the final revision is the last point of their series (Fig. 6c-d).
        extra = ablation["checkpoint_fractions"] if ablated_checkpoints(spec) else []
        fractions = list(dict.fromkeys([*ablation["fractions"], *extra]))
    elif revision in ablated_checkpoints(spec):
        fractions = ablation["checkpoint_fractions"]
    else:
        return []
    conditions = []
    for percent in fractions:
        f = format_fraction(percent)
        conditions.append(Condition("all", "wasserstein", f, 0))
        conditions += [Condition("all", "random", f, t) for t in range(ablation["random_trials"])]
        conditions.append(Condition("all", "matched", f, 0))
    if revision == spec["final_revision"]:
        for percent in ablation["layer_groups"]["fractions"]:
            f = format_fraction(percent)
            conditions += [Condition(s, "wasserstein", f, 0) for s in group_scopes(config, model)]
    return list(dict.fromkeys(conditions))
