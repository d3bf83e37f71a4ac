"""What each job costs and which SLURM allocation runs it: the site's limits decide how a checkpoint is split.

Under ``profiles/slurm`` every job that runs a model (collection, its statistics, clean and ablated scoring, the
matched searches, the pair sample, the weight rows, the explorer's sign cases) belongs to an allocation of its
checkpoint: a Snakemake group ``gpu-{model}-{revision}-a{k}`` whose members run in threads of one process and share
one loaded model (``snakemake_executor_plugin_wneurons_slurm``). A checkpoint is one allocation when its work fits
the site's walltime limit, and several when it does not: its jobs are packed in dependency order
(:func:`checkpoint_jobs`), each allocation taking jobs until the next would push its sum of runtimes past the limit.
Each allocation still loads its model once. docs/design.md ("SLURM: allocations sized to the site") says why this
and not one worker.

A job's runtime and memory come from its work, not from a flat per-model guess: tokens it runs through the model
x parameters x 2 FLOP at the throughput of its precision (:data:`SUSTAINED_TFLOPS`, stated assumptions, or the
site's own ``tflops``). An allocation asks its members' estimates, the safety margin once (on its largest member)
and its model's load once, rounded up once (:func:`pack`); its capability-suite jobs pack apart, last. Snakemake sums
the runtimes of a group's members that cannot run side by side (one GPU), so the ask is spread over the members and
the packing bound is also the walltime the allocation asks.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path

from wneurons.experiment import targets
from wneurons.experiment.grid import (
    CAPABILITY,
    benchmarks_at,
    collected_layers,
    conditions_for,
    conditions_scored,
    neurons_per_layer_of,
    precision_name,
    shard_bytes,
)
from wneurons.experiment.measured_rates import MeasuredRates
from wneurons.experiment.workload import capability_docs, tokens_of

# ---------------------------------------------------------------- the members an allocation holds
# The statistics of a range of layers: where one job over every layer of a revision does not fit the site's
# max_runtime, its statistics run as several of these (:meth:`Planner.stats_parts`) and neuron_stats joins them.
STATS_PART = "neuron_stats_part"
# Members that use no GPU: they run beside the GPU jobs of their allocation.
CPU_MEMBERS = ("neuron_stats", STATS_PART, "weight_rows")


def rate_rule(rule: str) -> str:
    """The rule whose rate a job of ``rule`` is measured and planned at: a statistics part does the statistics'
    work over its layers, so its rate is neuron_stats' (:mod:`wneurons.experiment.rates` measures it so, the
    :class:`Planner` looks it up so)."""
    return "neuron_stats" if rule == STATS_PART else rule


# ---------------------------------------------------------------- cost: minutes and memory of one job
# Sustained TFLOP/s of one GPU job by precision: stated assumptions, low enough for any 80 GB GPU of the A100 / H100 /
# H200 class running batched inference of short sequences: 30% / 20% / 20% of an H100 SXM's dense peaks (fp32 67,
# tf32 495, bf16 990 TFLOP/s), about an A100's fp32 peak and 64% of its tensor-core peaks (19.5 / 156 / 312). The
# site's `tflops` replaces them (profiles/site.example). Every GPU-hour figure prices a job at these (review 1.6):
# the allocations, `wneurons plan` / perf/grid_jobs.py, perf/precision_check.py cost.
SUSTAINED_TFLOPS = {"fp32": 20.0, "tf32": 100.0, "bf16": 200.0}
SUSTAINED_TFLOPS["fp16"] = SUSTAINED_TFLOPS["bf16"]  # the same tensor-core rate
BYTES_PER_PARAM = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
# What an allocation pays before its first forward pass: imports and the job's setup (seconds), then its weights
# from a parallel file system (GB/s); carried by the first job of each allocation (:func:`pack`).
STARTUP_S, LOAD_GBPS = 60.0, 1.0
# Neuron statistics (CPU, the allocation's threads): bytes of shards read and sorted per second; the weight rows:
# bytes of a checkpoint's weight files read per second. Stated assumptions, low on purpose: the demo's SmolLM2
# statistics read 1.6 GB of shards in 6.3 s on 2 cores (its benchmark table), ~250 MB/s.
STATS_BYTES_PER_S, WEIGHT_READ_BYTES_PER_S = 30e6, 200e6
# Bytes of one neuron's row of the statistics table (13 float64 columns at most, and parquet's overhead): what the
# join of a split statistics job reads, holds and writes.
STATS_ROW_BYTES = 128


def precision_of(config: dict, rule: str) -> str:
    """The precision a rule's jobs run at: collection (and the sign cases, over its windows) at ``neurons.dtype``,
    everything else ``evaluation.dtype``."""
    neurons = rule in ("collect_activations", "sign_cases")
    return precision_name(config["neurons" if neurons else "evaluation"]["dtype"])


SITE_GPU_RESOURCES = {"gpu_partition": "slurm_partition", "gpu_qos": "qos", "gpu_constraint": "constraint"}
SITE_GPU_RESOURCES["gpu_model"] = "gpu_model"


@dataclass(frozen=True)
class Site:
    """A SLURM site's limits and speed (the user's site file, profiles/site.example/site.yaml): the largest walltime
    (minutes) and memory (MB) one allocation may ask, the sustained TFLOP/s of one job on its GPU (None:
    :data:`SUSTAINED_TFLOPS` by precision), the safety margin on compute, where GPU allocations go, and ``rates``: a
    rates.json of measured rates (:mod:`wneurons.experiment.rates`) the planner uses in place of the stated ones
    where it has them."""

    max_runtime: int = 24 * 60
    max_mem_mb: int | None = None
    tflops: float | None = None
    margin: float = 2.0
    gpu_partition: str | None = None
    gpu_qos: str | None = None
    gpu_constraint: str | None = None
    gpu_model: str | None = None
    rates: str | None = None

    @classmethod
    def from_file(cls, path: str | None) -> Site:
        """The site of a YAML file (None: the defaults); a wrong key or value is a ValueError naming file and key."""
        if path is None:
            return cls()
        import yaml

        try:
            values = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise ValueError(f"site file {path}: {err}".splitlines()[0]) from None
        if not isinstance(values, dict):
            raise ValueError(f"site file {path}: not a mapping of settings")
        known = {f.name: f for f in fields(cls)}
        for key, value in values.items():
            if key not in known:
                raise ValueError(f"site file {path}: unknown key {key!r}; one of {', '.join(known)}")
            numeric = key in ("max_runtime", "max_mem_mb", "tflops", "margin")
            if value is not None and numeric and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise ValueError(f"site file {path}: {key} {value!r} is not a number")
            if value is not None and not numeric and not isinstance(value, str):
                raise ValueError(f"site file {path}: {key} {value!r} is not a string")
        site = cls(**values)
        problem = site.problem()
        if problem:
            raise ValueError(f"site file {path}: {problem}")
        return site

    def problem(self) -> str | None:
        if self.max_runtime < 5:
            return f"max_runtime {self.max_runtime} minutes: an allocation needs at least 5"
        if self.margin < 1:
            return f"margin {self.margin}: below 1 the estimate is not a bound"
        if self.tflops is not None and self.tflops <= 0:
            return f"tflops {self.tflops}: must be positive"
        if self.max_mem_mb is not None and self.max_mem_mb < 1000:
            return f"max_mem_mb {self.max_mem_mb}: below 1000 MB no job fits"
        return None

    def gpu_resources(self) -> dict[str, str]:
        """What every member of a GPU allocation declares beyond its work (identical for all members of a group, as
        Snakemake requires of string resources): partition, QOS, constraint, GPU type."""
        return {r: getattr(self, s) for s, r in SITE_GPU_RESOURCES.items() if getattr(self, s)}


def site_path(path: str | None, repository: str | Path) -> str | None:
    """A site file named by the config or a profile: relative to the working directory, else to the repository (a
    profile's path, e.g. ``profiles/slurm-ci/site.yaml``, from a run in another directory)."""
    if path and not Path(path).is_absolute() and not Path(path).exists():
        in_repository = Path(repository) / path
        return str(in_repository) if in_repository.exists() else path
    return path


def load_minutes(params_b: float, precision: str) -> float:
    return (STARTUP_S + params_b * BYTES_PER_PARAM[precision] / LOAD_GBPS) / 60


def job_minutes(config: dict, site: Site, rule: str, wildcards: dict) -> float:
    """Walltime minutes one job of ``rule`` may need alone once its model is loaded: margin x its compute."""
    return site.margin * job_estimate_minutes(config, site, rule, wildcards)


def job_estimate_minutes(
    config: dict, site: Site, rule: str, wildcards: dict, root: str | Path = ".", rate: float | None = None
) -> float:
    """Minutes of compute (or reading) one job of ``rule`` needs once its model is loaded, without margin: its
    :func:`job_work` at ``rate`` (work per second, e.g. a measured one), else at the stated rate
    (:func:`stated_rate`); ``root``: where the capability suite is staged (:func:`capability_docs`)."""
    return job_work(config, rule, wildcards, root) / (rate or stated_rate(config, site, rule)) / 60


def job_work(config: dict, rule: str, wildcards: dict, root: str | Path = ".") -> float:
    """The planner's measure of one job's work: bytes read for the CPU members (the statistics: its revision's
    shards; the weight rows: every weight file, the worst case of .bin shards), else FLOP (2 x parameters x
    :func:`tokens_of`)."""
    params_b = config["models"][wildcards["model"]]["params_b"]
    if rule in ("neuron_stats", STATS_PART):
        return float(shard_bytes(config, wildcards["model"], statistics_layers(config, wildcards)))
    if rule == "weight_rows":
        return params_b * 1e9 * 2
    return 2 * params_b * 1e9 * tokens_of(config, rule, wildcards, root)


def stated_rate(config: dict, site: Site, rule: str) -> float:
    """The stated work per second of one job of ``rule``: bytes/s for the CPU members (:data:`STATS_BYTES_PER_S`,
    :data:`WEIGHT_READ_BYTES_PER_S`), else FLOP/s (the site's ``tflops``, else :data:`SUSTAINED_TFLOPS` of the
    rule's precision)."""
    if rule in ("neuron_stats", STATS_PART):
        return STATS_BYTES_PER_S
    if rule == "weight_rows":
        return WEIGHT_READ_BYTES_PER_S
    return (site.tflops or SUSTAINED_TFLOPS[precision_of(config, rule)]) * 1e12


def allocation_load_minutes(config: dict, model: str) -> float:
    """What an allocation that runs its model pays once before its first job computes: imports and its model's
    weights (at the larger of the two stages' precisions)."""
    precision = max((precision_of(config, r) for r in ("collect_activations", "score_clean")), key=BYTES_PER_PARAM.get)
    return load_minutes(config["models"][model]["params_b"], precision)


def member_load_minutes(config: dict, rule: str, model: str) -> float:
    """What an allocation holding a job of ``rule`` pays once before its work: imports and the model's weights
    (:func:`allocation_load_minutes`) for a job that runs the model; only the startup for one that reads files
    (:data:`CPU_MEMBERS`: the statistics, their parts, the weight rows load no model, the pool loads one lazily, at a
    job's first checkout). An allocation pays the largest of its members' (:func:`pack`). (neuron_stats collecting
    in node-local scratch runs the model, but only where it shares its allocation with collection, which pays it.)"""
    return STARTUP_S / 60 if rule in CPU_MEMBERS else allocation_load_minutes(config, model)


def job_mem_mb(config: dict, site: Site, rule: str, wildcards: dict, attempt: int = 1) -> int:
    """Host memory (MB) of one job: its weights at their precision, 50% over for loading, and 2 GB of process; the
    statistics hold three layers of shards; the weight rows one checkpoint file (at most 10 GB). Grows with
    ``attempt`` (a job killed for memory asks more), never past the site's limit."""
    model = config["models"][wildcards["model"]]
    if rule in ("neuron_stats", STATS_PART):  # per layer: a part holds as many layers at a time as the whole
        layers = revision_layers(config, wildcards["model"], wildcards["revision"])
        mb = 2000 + 3 * shard_bytes(config, wildcards["model"], layers) / len(layers) / 2**20
    elif rule == "weight_rows":
        mb = 2000 + min(10_000, model["params_b"] * 2000)
    else:
        mb = 2000 + 1.5 * model["params_b"] * BYTES_PER_PARAM[precision_of(config, rule)] * 1000
    mb = int(mb * attempt)
    return min(mb, site.max_mem_mb) if site.max_mem_mb else mb


def stats_join_mem_mb(config: dict, site: Site, wildcards: dict, attempt: int = 1) -> int:
    """Host memory (MB) of the join of a split statistics job: 2 GB of process and its revision's statistics table
    three times over (the parts read, their concatenation, the table written), x ``attempt``, capped as
    :func:`job_mem_mb`."""
    mb = int((2000 + 3 * statistics_rows(config, wildcards) * STATS_ROW_BYTES / 2**20) * attempt)
    return min(mb, site.max_mem_mb) if site.max_mem_mb else mb


def check_job_memory(config: dict, site: Site, source: str = "site file, max_mem_mb") -> None:
    """A ValueError in one line when the site's ``max_mem_mb`` (from ``source``) is below what a job of an
    allocation needs at its first attempt (:func:`job_mem_mb` uncapped): capped in silence, such a job would be
    killed for memory on every retry. Checked over every checkpoint's jobs (:func:`checkpoint_jobs`) before any runs."""
    if not site.max_mem_mb:
        return
    for model, spec in config["models"].items():
        for revision in dict.fromkeys((spec["final_revision"], *spec["checkpoints"], *spec["weight_checkpoints"])):
            for rule, wildcards in checkpoint_jobs(config, model, revision):
                need = job_mem_mb(config, Site(), rule, wildcards)
                if need > site.max_mem_mb:
                    raise ValueError(
                        f"site: max_mem_mb {site.max_mem_mb:,} MB ({source}) is below what {rule} {model}/{revision} "
                        f"needs: {need:,} MB (wneurons.experiment.allocations.job_mem_mb); raise max_mem_mb to at "
                        "least that, or run this model where memory allows"
                    )


def unallocated_mem_mb(config: dict, site: Site, wildcards: dict, attempt: int = 1) -> int:
    """Host memory (MB) of a submitted job outside the allocations (conversion, training a suite, the analyses'
    tables, the explorer): its model's weights in fp32 plus headroom (3 GB without a model), grown with each retry,
    never past the site's max_mem_mb."""
    params_b = config["models"][wildcards["model"]]["params_b"] if "model" in wildcards else 0
    mb = int((3000 + 6000 * params_b) * attempt)
    return min(mb, site.max_mem_mb) if site.max_mem_mb else mb


def unallocated_minutes(config: dict, site: Site, wildcards: dict, attempt: int = 1) -> int:
    """Walltime minutes of a submitted job outside the allocations (a flat bound: these jobs take minutes), grown
    with each retry, never past the site's max_runtime (a longer request is refused where a site enforces its
    limits)."""
    params_b = config["models"][wildcards["model"]]["params_b"] if "model" in wildcards else 0
    return min(int((20 + 15 * params_b) * attempt), site.max_runtime)


# ---------------------------------------------------------------- statistics by layer range
def revision_layers(config: dict, model: str, revision: str) -> list[int]:
    """The 0-based layers whose statistics a revision computes: its collected layers (every layer by default)."""
    layers = collected_layers(config, model, revision)
    return list(range(config["models"][model]["num_layers"])) if layers is None else layers


def statistics_layers(config: dict, wildcards: dict) -> list[int]:
    """The layers a statistics job reduces: its revision's (:func:`revision_layers`), or for a part
    (:data:`STATS_PART`, wildcard ``layers``) those of its range (:func:`layers_in_range`)."""
    layers = revision_layers(config, wildcards["model"], wildcards["revision"])
    return layers_in_range(layers, wildcards["layers"]) if "layers" in wildcards else layers


def statistics_rows(config: dict, wildcards: dict) -> int:
    """Rows of a statistics job's table: one per neuron of its layers (:func:`statistics_layers`)."""
    return len(statistics_layers(config, wildcards)) * neurons_per_layer_of(config, wildcards["model"])


def layer_ranges(layers: list[int], n_parts: int) -> list[str]:
    """``layers`` cut into ``n_parts`` contiguous runs whose sizes differ by at most one (the larger first), each
    named by its first and last layer: ``"0-8"`` (the ``layers`` wildcard of :data:`STATS_PART`)."""
    size, larger = divmod(len(layers), n_parts)
    ranges, start = [], 0
    for k in range(n_parts):
        stop = start + size + (k < larger)
        ranges.append(f"{layers[start]}-{layers[stop - 1]}")
        start = stop
    return ranges


def layers_in_range(layers: list[int], value: str) -> list[int]:
    """The ``layers`` within a range named ``"first-last"`` (both included)."""
    first, last = (int(v) for v in value.split("-"))
    return [layer for layer in layers if first <= layer <= last]


# ---------------------------------------------------------------- allocations: a checkpoint's jobs, packed
JobKey = tuple[str, tuple[tuple[str, str], ...]]  # (rule, sorted wildcards)


def job_key(rule: str, wildcards: dict) -> JobKey:
    return rule, tuple(sorted((k, str(v)) for k, v in wildcards.items()))


def checkpoint_jobs(config: dict, model: str, revision: str) -> list[tuple[str, dict]]:
    """Every job of the allocated rules at one checkpoint, in packing order: collection and statistics (and for the
    explorer's checkpoint of a gated model its sign cases), the weight
    rows and pair sample (which read nothing of the others), clean scores, the ablations that need no search, the
    matched searches (which read the clean and the wasserstein perplexity), then the matched ablations; the
    capability suite's jobs last (:func:`is_capability`: nothing allocated reads them, and they pack apart)."""
    spec = config["models"][model]
    base = {"model": model, "revision": revision}
    scored = revision in (spec["final_revision"], *spec["checkpoints"])  # collected and scored; else weight rows only
    jobs: list[tuple[str, dict]] = []
    if scored:
        jobs += [("collect_activations", base), ("neuron_stats", base)]
    if scored and targets.sign_cases_at(config, model, revision):  # the explorer's gated neurons: after the statistics
        jobs.append(("sign_cases", base))
    if revision in spec["weight_checkpoints"]:
        jobs.append(("weight_rows", base))
    if _pair_sampled(config, model, revision):
        jobs.append(("pair_sample", base))
    benchmarks = benchmarks_at(config, model, revision) if scored else []
    jobs += [("score_clean", base | {"benchmark": b}) for b in benchmarks]

    def ablations(matched: bool) -> list[tuple[str, dict]]:
        return [
            ("score_ablation", base | c._asdict() | {"trial": str(c.trial), "benchmark": b})
            for b in benchmarks
            for c in conditions_scored(config, model, revision, b)
            if (c.selector == "matched") == matched
        ]

    jobs += ablations(matched=False)
    matched = conditions_for(config, model, revision) if scored else []
    searches = dict.fromkeys((c.scope, c.percent) for c in matched if c.selector == "matched")
    jobs += [("matched_search", base | {"scope": s, "percent": p}) for s, p in searches]
    jobs += ablations(matched=True)
    return [j for j in jobs if not is_capability(*j)] + [j for j in jobs if is_capability(*j)]


def is_capability(rule: str, wildcards: dict) -> bool:
    """Whether a job scores the capability suite: the most fragile (a hub-staged suite, lm-eval) and, at the stated
    sizes, a large share of the compute. Its jobs pack into allocations of their own (:meth:`Planner.plan`), so a
    failing one never holds back the collection, statistics or ablations of its checkpoint (Snakemake runs a group's
    consumers only once every member has succeeded)."""
    return wildcards.get("benchmark") == CAPABILITY


def _pair_sampled(config: dict, model: str, revision: str) -> bool:
    """Whether the checkpoint has a pair sample packed with its other jobs: the final revision of the analyses'
    models, every revision of the models whose pair signs are followed. Not when the sample is read from the kept
    test shards (pairs.source: test_shards): those are written by a local job after collection, and an allocation
    may not be left and re-entered, so the sample is an allocation of its own (:meth:`Planner.group`)."""
    if config["pairs"]["source"] == "test_shards":
        return False
    final = revision == config["models"][model]["final_revision"]
    sampled = final and model in targets.analysis_models(config)
    return sampled or (model in targets.pair_models(config) and revision in targets.revisions(config, model))


def pack(
    estimates: list[float], load: float | list[float], limit: int, margin: float, apart: list[bool] | None = None
) -> tuple[list[int], list[int]]:
    """Allocation index and requested whole minutes of each job, in order, from their ``estimates`` (minutes, no
    margin). An allocation asks its estimates' sum, the margin once (``(margin - 1)`` x its largest estimate: one
    member may take ``margin`` x its estimate), and its load once (:func:`allocation_ask`): ``load``, or with one
    load per job (:func:`member_load_minutes`) the largest of its members'; it takes jobs while that ask stays within
    ``limit``. A job whose ``apart`` differs from the previous one's starts a new allocation. Snakemake asks the sum
    of the members' runtimes, so the ask is spread over them (:func:`spread`)."""
    apart = apart or [False] * len(estimates)
    loads = load if isinstance(load, list) else [load] * len(estimates)
    indices, groups = [], [[]]
    for k, (e, a) in enumerate(zip(estimates, apart, strict=True)):
        group = groups[-1]
        paid = max(loads[i] for i in [*group, k])
        if group and (a != apart[k - 1] or allocation_ask([*(estimates[i] for i in group), e], paid, margin) > limit):
            groups.append(group := [])
        group.append(k)
        indices.append(len(groups) - 1)
    requested = [0] * len(estimates)
    for group in groups:
        members, paid = [estimates[i] for i in group], max(loads[i] for i in group)
        for i, ask in zip(group, spread(members, paid, allocation_ask(members, paid, margin)), strict=True):
            requested[i] = ask
    return indices, requested


def allocation_ask(estimates: list[float], load: float, margin: float) -> int:
    """Whole minutes an allocation of jobs with these ``estimates`` asks: their sum, ``(margin - 1)`` x the largest
    and the ``load``, rounded up once (at least a minute, SLURM's unit)."""
    return max(math.ceil(sum(estimates) + (margin - 1) * max(estimates) + load), 1)


def spread(estimates: list[float], load: float, total: int) -> list[int]:
    """``total`` whole minutes split over the members: in proportion to their estimates (margin included), the
    first also carrying the ``load``; the minutes left by rounding down go to the largest fractions, so the members
    ask exactly ``total`` and none pays a rounding of its own (a member of seconds may ask 0 minutes: the
    allocation's minutes are what SLURM sees). The first member asks at least a minute."""
    scale = (total - load) / sum(estimates) if sum(estimates) > 0 else 0.0
    shares = [e * scale + (load if i == 0 else 0.0) for i, e in enumerate(estimates)]
    asks = [math.floor(s) for s in shares]
    asks[0] = max(asks[0], 1)
    by_fraction = sorted(range(len(asks)), key=lambda i: asks[i] - shares[i])
    for k in range(max(total - sum(asks), 0)):
        asks[by_fraction[k % len(asks)]] += 1
    return asks


class AllocationTooLong(ValueError):
    """One job alone needs more walltime than the site allows."""


class Planner:
    """The allocations of a run's checkpoints under one site, computed once per checkpoint (the group and runtime
    functions of every allocated rule ask it for each job of the DAG). With the site's ``rates`` (a rates.json,
    :mod:`wneurons.experiment.rates`) a job is planned at its measured rate where one was measured; ``sources``
    counts the planned jobs by where their rate came from (:meth:`estimate`)."""

    def __init__(
        self, config: dict, site: Site, runtime_source: str = "site file, max_runtime", root: str | Path = "."
    ) -> None:
        """``runtime_source``: where ``site.max_runtime`` comes from, for the error that names it; ``root``: the
        workflow's working directory (where the capability suite is staged)."""
        self.config, self.site, self.runtime_source, self.root = config, site, runtime_source, root
        self.measured = None
        if site.rates:
            self.measured = MeasuredRates.load(site_path(site.rates, root))
        self.sources: Counter[str] = Counter()
        self._parts: dict[tuple[str, str], list[str] | None] = {}
        self._plans: dict[tuple[str, str], dict[JobKey, tuple[int, int]]] = {}
        # per job: (allocation, asked, estimate, what its allocation pays before its work if it holds this job)
        self._members: dict[tuple[str, str], list[tuple[int, int, float, float]]] = {}

    def plan(self, model: str, revision: str) -> dict[JobKey, tuple[int, int]]:
        """{job: (allocation index, requested minutes)} of one checkpoint, its statistics split by layer range where
        they do not fit one allocation (:meth:`stats_parts`). A job longer than the site's limit is an error naming
        it."""
        if (model, revision) not in self._plans:
            jobs = checkpoint_jobs(self.config, model, revision)
            base = {"model": model, "revision": revision}
            # A revision with statistics (not one of weight rows only): its parts, then neuron_stats joining them.
            parts = self.stats_parts(model, revision) if ("neuron_stats", base) in jobs else None
            if parts:
                k = jobs.index(("neuron_stats", base))
                jobs[k:k] = [(STATS_PART, base | {"layers": r}) for r in parts]
            loads = [member_load_minutes(self.config, rule, model) for rule, _ in jobs]
            estimates = []
            for rule, w in jobs:
                estimate, source = self.estimate(rule, w)
                estimates.append(estimate)
                self.sources[source] += 1
            for (rule, w), e, load in zip(jobs, estimates, loads, strict=True):
                alone = allocation_ask([e], load, self.site.margin)
                if alone > self.site.max_runtime:
                    raise AllocationTooLong(
                        f"{rule} {'/'.join(str(v) for v in w.values())} needs {alone} minutes, more "
                        f"than the site's max_runtime {self.site.max_runtime} ({self.runtime_source}): raise it, or "
                        "cap the job's data (evaluation.*_per_*, perplexity_max_tokens, neurons.max_tokens)"
                    )
            apart = [is_capability(r, w) for r, w in jobs]
            indices, requested = pack(estimates, loads, self.site.max_runtime, self.site.margin, apart)
            self._plans[model, revision] = {
                job_key(r, w): (i, ask) for (r, w), i, ask in zip(jobs, indices, requested, strict=True)
            }
            self._members[model, revision] = list(zip(indices, requested, estimates, loads, strict=True))
        return self._plans[model, revision]

    def stats_parts(self, model: str, revision: str) -> list[str] | None:
        """The layer ranges (:func:`layer_ranges`) of a revision's statistics parts (:data:`STATS_PART`): the fewest
        parts whose largest fits one allocation alone (the startup, its estimate and the margin within the site's
        max_runtime: it loads no model); None where the whole statistics job fits, or where not even one layer does
        (:meth:`plan` then names the job). Per-layer statistics are independent, so the parts' rows are the whole
        job's."""
        if (model, revision) not in self._parts:
            self._parts[model, revision] = None
            base = {"model": model, "revision": revision}
            whole, _ = self._estimate("neuron_stats", base)
            load, limit = member_load_minutes(self.config, STATS_PART, model), self.site.max_runtime
            layers = revision_layers(self.config, model, revision)
            if allocation_ask([whole], load, self.site.margin) > limit:
                for n in range(2, len(layers) + 1):
                    largest = whole * math.ceil(len(layers) / n) / len(layers)  # the work is linear in layers
                    if allocation_ask([largest], load, self.site.margin) <= limit:
                        self._parts[model, revision] = layer_ranges(layers, n)
                        break
        return self._parts[model, revision]

    def estimate(self, rule: str, wildcards: dict) -> tuple[float, str]:
        """Minutes of one job (:func:`job_estimate_minutes`, no margin) and where its rate comes from: "measured"
        (its model's own rate in the site's rates file), "measured, rule median" (the median of the models measured
        for its rule, precision and device) or "stated" (the assumptions of this module, or the site's tflops).
        The statistics of a revision split into parts (:meth:`stats_parts`): neuron_stats only joins their tables
        (:data:`STATS_ROW_BYTES` a neuron, read and written at the stated rate)."""
        if rule == "neuron_stats" and self.stats_parts(wildcards["model"], wildcards["revision"]):
            return 2 * statistics_rows(self.config, wildcards) * STATS_ROW_BYTES / STATS_BYTES_PER_S / 60, "stated"
        return self._estimate(rule, wildcards)

    def _estimate(self, rule: str, wildcards: dict) -> tuple[float, str]:
        rate, source = None, "stated"
        if self.measured is not None:
            found = self.measured.rate(
                rate_rule(rule), precision_of(self.config, rule), wildcards["model"], self.site.gpu_model
            )
            if found is not None:
                rate, source = found
        return job_estimate_minutes(self.config, self.site, rule, wildcards, self.root, rate), source

    def allocation_minutes(self, model: str, revision: str) -> list[tuple[int, float]]:
        """(requested, expected) minutes of each allocation of one checkpoint: what it asks, and the planner's own
        estimate of its members' compute plus what it pays before its work (its model's load, or the startup alone:
        :func:`member_load_minutes`), without the margin."""
        self.plan(model, revision)
        members = self._members[model, revision]
        asked = [0] * (1 + max((i for i, _, _, _ in members), default=-1))
        expected, paid = [0.0] * len(asked), [0.0] * len(asked)
        for i, ask, estimate, load in members:
            asked[i] += ask
            expected[i] += estimate
            paid[i] = max(paid[i], load)
        return [(a, e + p) for a, e, p in zip(asked, expected, paid, strict=True)]

    def capability_sizes(self) -> str:
        """Where the capability suite's document counts come from (:func:`capability_docs`)."""
        return capability_docs(self.config["evaluation"]["capability"], self.root)[1]

    def _planned(self, rule: str, wildcards: dict) -> tuple[int, int] | None:
        return self.plan(wildcards["model"], wildcards["revision"]).get(job_key(rule, wildcards))

    def minutes(self, rule: str, wildcards: dict) -> int:
        """The walltime a job asks: its share of its allocation's (the first job also its model's load)."""
        planned = self._planned(rule, wildcards)
        if planned is None:
            load = member_load_minutes(self.config, rule, wildcards["model"])
            return math.ceil(self.site.margin * self.estimate(rule, wildcards)[0] + load)
        return planned[1]

    def group(self, rule: str, wildcards: dict) -> str:
        """The allocation (Snakemake group) of one job: ``gpu-{model}-{revision}-a{k}``."""
        model, revision = wildcards["model"], wildcards["revision"]
        planned = self._planned(rule, wildcards)
        if planned is None:
            # A job the plan does not list (a target asked for by hand outside the config's grid, a pair sample
            # from kept shards) gets an allocation of its own.
            return f"gpu-{model}-{revision}-{rule}"
        return f"gpu-{model}-{revision}-a{planned[0]}"
