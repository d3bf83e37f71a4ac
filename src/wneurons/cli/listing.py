"""``wneurons list`` (what a config computes, from the grid functions alone: no Snakemake) and ``wneurons run
--limit`` (a quick run at capped benchmark sizes, in a results dir of its own)."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import yaml

from wneurons.experiment import paths, targets
from wneurons.experiment.grid import (
    BENCHMARK_DATASETS,
    CAPABILITY,
    benchmarks_at,
    conditions_for,
    conditions_scored,
)
from wneurons.store import data as data_store

# Benchmark -> (config key of its per-group cap, key of its offset, the data's group column, unit).
CAPS = {
    "blimp": ("blimp_pairs_per_paradigm", "blimp_pairs_offset", "paradigm", "pairs per paradigm"),
    "tse": ("tse_items_per_subtask", "tse_items_offset", "task", "items per subtask"),
}
LIMIT_FILE = "limit.yaml"  # the overrides of a --limit run, inside its results dir


def _conditions_line(conditions) -> str:
    """``wasserstein 5%: all, g1, g2; random 5%: all x2 trials; ...`` (conditions grouped by selector and percent)."""
    scopes: dict[tuple[str, str], list[str]] = defaultdict(list)
    trials: dict[tuple[str, str], int] = defaultdict(int)
    for c in conditions:
        key = (c.selector, c.percent)
        if c.scope not in scopes[key]:
            scopes[key].append(c.scope)
        trials[key] = max(trials[key], c.trial + 1)
    parts = []
    for (selector, percent), names in scopes.items():
        n = trials[(selector, percent)]
        parts.append(f"{selector} {percent}%: {', '.join(names)}" + (f" x{n} trials" if n > 1 else ""))
    return "; ".join(parts)


def _data_dir(config: dict, dataset: str, workdir: Path) -> Path | None:
    """The data a benchmark reads: the run's verified copy, else the config's ``local_dir``; None if neither."""
    verified = workdir / paths.dataset(dataset)
    if (verified / data_store.SOURCE_FILE).is_file():
        return verified
    local = config["data"][dataset].get("local_dir")
    if local and (workdir / local).is_dir():
        return (workdir / local).resolve()
    return None


def benchmark_sizes(config: dict, workdir: str | os.PathLike = ".") -> dict[str, str]:
    """Benchmark -> what a run scores of it, in words: the items drawn (counted on the data where it is here),
    perplexity's token cap, the capability tasks' documents."""
    evaluation, workdir = config["evaluation"], Path(workdir)
    sizes = {}
    for benchmark, (cap_key, offset_key, group, unit) in CAPS.items():
        cap, offset = evaluation[cap_key], evaluation.get(offset_key, 0)
        cap_words = f"{'all' if cap is None else cap} {unit}" + (f" after the first {offset}" if offset else "")
        where = _data_dir(config, BENCHMARK_DATASETS[benchmark], workdir)
        if where is None:
            sizes[benchmark] = f"{cap_words} (data not here: counts unknown)"
            continue
        try:
            if benchmark == "blimp":
                frame = data_store.load_blimp(where)
            else:
                frame = data_store.load_tse(where, config["data"]["tse"]["format"])
        except (OSError, ValueError) as err:
            sizes[benchmark] = f"{cap_words} (data at {where} not read: {str(err).splitlines()[0]})"
            continue
        groups = frame.group_by(group).len()["len"].to_list()
        drawn = sum(max(0, min(n - offset, n if cap is None else cap)) for n in groups)
        sizes[benchmark] = f"{drawn} items: {cap_words} x {len(groups)} {group}s of {frame.height} ({where})"
    tokens = evaluation["perplexity_max_tokens"]
    sizes["ppl"] = (
        f"WikiText-2 validation, {'every token' if tokens is None else f'at most {tokens} tokens'} "
        f"in windows of {evaluation['perplexity_window']}"
    )
    capability = evaluation["capability"]
    if capability["tasks"]:
        limits = capability["limits"]
        docs = ", ".join(f"{t} {limits.get(t, 'all')} docs" for t in capability["tasks"])
        sizes[CAPABILITY] = f"lm-eval tasks ({capability['source']}): {docs}"
    return sizes


def scoring_jobs(config: dict) -> dict[str, int]:
    """The scoring jobs of the grid, from the grid functions: ``clean`` (one per checkpoint and benchmark),
    ``ablated`` (one per condition and benchmark) and ``matched searches`` (one per matched condition)."""
    counts = {"clean": 0, "ablated": 0, "matched searches": 0}
    for model, revision in targets.model_revisions(config):
        for benchmark in benchmarks_at(config, model, revision):
            counts["clean"] += 1
            counts["ablated"] += len(conditions_scored(config, model, revision, benchmark))
        conditions = conditions_for(config, model, revision)
        counts["matched searches"] += len({(c.scope, c.percent) for c in conditions if c.selector == "matched"})
    return counts


def describe(config: dict, workdir: str | os.PathLike = ".") -> list[str]:
    """What a validated config computes, as lines: models and revisions, the conditions of each checkpoint, the
    benchmarks and their sizes, the number of scoring jobs."""
    lines = [f"results in {config.get('results_dir', paths.RESULTS)}/", f"models ({len(config['models'])}):"]
    for model, spec in config["models"].items():
        revisions = targets.revisions(config, model)
        rest = f", then {', '.join(revisions[1:])}" if revisions[1:] else ""
        family = spec.get("family") or "family from the model"
        lines.append(f"  {model}: {family}, {spec['num_layers']} layers; revisions {revisions[0]} (final){rest}")
    lines.append("conditions (besides the clean model):")
    for model, revision in targets.model_revisions(config):
        conditions = conditions_for(config, model, revision)
        if conditions:
            lines.append(f"  {model}/{revision}: {len(conditions)}: {_conditions_line(conditions)}")
    if not any(conditions_for(config, m, r) for m, r in targets.model_revisions(config)):
        lines.append("  none (no model ablates)")
    lines.append("benchmarks:")
    lines += [f"  {name}: {text}" for name, text in benchmark_sizes(config, workdir).items()]
    jobs = scoring_jobs(config)
    counted = ", ".join(f"{n} {kind}" for kind, n in jobs.items())
    lines.append(f"scoring jobs: {sum(jobs.values())} ({counted}); every job of the DAG: wneurons status")
    return lines


# ---------------------------------------------------------------- run --limit
def limit_overrides(config: dict, limit: int) -> tuple[dict, list[str]]:
    """The config overrides of a quick run at ``limit`` items per BLiMP paradigm / TSE subtask / capability task and
    ``limit`` perplexity windows, into ``{results_dir}-limit{limit}``; and one line per capped key saying what it
    was (keys already at or under the limit are left alone)."""
    if limit < 1:
        raise ValueError(f"--limit must be a positive number of items, got {limit}")
    evaluation, changed = config["evaluation"], []
    overrides: dict = {"evaluation": {}}

    def cap(key: str, value, new: int, where: dict) -> None:
        if value is None or value > new:
            where[key] = new
            changed.append(f"{key} {'null' if value is None else value} -> {new}")

    for cap_key, *_ in CAPS.values():
        cap(cap_key, evaluation[cap_key], limit, overrides["evaluation"])
    window = evaluation["perplexity_window"]
    cap("perplexity_max_tokens", evaluation["perplexity_max_tokens"], limit * window, overrides["evaluation"])
    capability = evaluation["capability"]
    limits: dict = {}
    for task in capability["tasks"]:
        cap(f"capability.limits.{task}", capability["limits"].get(task), limit, limits)
    if limits:
        overrides["evaluation"]["capability"] = {"limits": {k.rsplit(".", 1)[1]: v for k, v in limits.items()}}
    changed = [f"evaluation.{line}" for line in changed]
    results_dir = f"{str(config.get('results_dir', paths.RESULTS)).rstrip('/')}-limit{limit}"
    overrides["results_dir"] = results_dir
    return overrides, changed


def write_limit_file(config: dict, limit: int, root: Path) -> tuple[Path, str]:
    """Write the overrides of :func:`limit_overrides` to ``{results_dir}-limit{N}/limit.yaml`` (under ``root``, the
    run's working directory: a second ``--configfile``, merged over the config); return its path and a line saying
    what was capped. Snakemake's ``--config`` cannot carry them: it reads nested values as strings."""
    overrides, changed = limit_overrides(config, limit)
    path = root / overrides["results_dir"] / LIMIT_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    header = f"# wneurons run --limit {limit}: merged over the run's config (a second --configfile).\n"
    path.write_text(header + yaml.safe_dump(overrides, sort_keys=False))
    capped = "; ".join(changed) if changed else "nothing (every size is already within the limit)"
    line = (
        f"quick run (--limit {limit}): capped {capped}; neuron statistics not capped (neurons.max_tokens); "
        f"results in {overrides['results_dir']}/ (overrides: {path})"
    )
    return path, line
