"""Config validation, then each stage's inputs, params and resources, in the order the rule files are included.

Paths are spelled in wneurons.experiment.paths, the model lists and the targets of `all` in
wneurons.experiment.targets, the ablation grid in wneurons.experiment.grid; the rules call those modules and the
helpers below (functions of a job's wildcards).
"""

import functools
import os
import sys
from pathlib import Path

from wneurons.jobs import inprocess
from wneurons.jobs.figures import FIGURES
from wneurons.experiment import (
    ablations,
    allocations,
    analyses,
    grid,
    model_inputs,
    neurons,
    paths,
    reporting,
    scratch,
    shard_space,
    slurm_site,
    targets,
    training,
)
from wneurons.jobs import ledger
from wneurons.lm import hub
from wneurons.experiment.config import ConfigError, load_yaml_strict, validate_config
from wneurons.store.checkpoints import resolve_checkpoint_suite, training_revisions

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

# Every path of this run under its config's roots: results_dir, neurons.activations_dir and kept_activations_dir
# (wneurons.experiment.paths.Roots; each Snakemake process of the run, the allocations' too, parses this first).
paths.use_roots(paths.Roots.of(config))
MODELS = config["models"]


def checkpoint_suites():
    """Local checkpoint suites: {model: {revision: directory}}; a suite read from disk fills its revisions. A suite
    that cannot be read exits with one line naming the model's key."""
    suites = {}
    for m, spec in MODELS.items():
        if "checkpoint_suite" not in spec:
            continue
        try:
            suites[m] = resolve_checkpoint_suite(m, spec, paths.trained_suite(m))
        except (ValueError, FileNotFoundError) as err:
            key = (
                ""
                if str(err).startswith("models.")
                else f"models.{m}.checkpoint_suite.path: "
            )
            sys.exit(f"config: {key}{err}")
    return suites


SUITES = checkpoint_suites()


# ---------------------------------------------------------------- hub models: staged here, read offline by the jobs
# Every hub (model, revision) is staged by the local rule stage_model (data.smk) on the machine running this
# Snakemake process, where the internet is; jobs read only staged files (wneurons.lm.hub). A job on a compute node
# (SLURM: this file re-read there by `snakemake --mode remote`) gets the hub turned off before anything imports it.
from wneurons.store.staged import is_staged, read_manifest, staging_dir_problem

if workflow.remote_exec:
    hub.turn_off_hub()
HUB_MODELS = targets.hub_models(config)
STAGING = targets.staging_root(config)
if HUB_MODELS and (problem := staging_dir_problem(STAGING)):
    sys.exit(f"config: {problem}")


def staged_dir(model, revision):
    return paths.staged_dir(model, revision, STAGING)


def staged_manifest(model, revision):
    return paths.staged_manifest(model, revision, STAGING)


def staging_needs(wildcards):
    """What stage_model fetches of a revision besides its identity (wneurons.experiment.model_inputs)."""
    return model_inputs.staging_needs(config, wildcards)


def hub_preflight():
    """Before any job starts, ask the hub about every revision this run stages (its stage_model jobs), then exit
    with one line per problem: gated, missing revision, no such repo, hub unreachable (wneurons.lm.hub.preflight);
    then, from the hub's per-file metadata (wneurons.lm.hub.staging_preflight): missing shards, weight files
    identical to or shared with another revision of the model (staged or not) under `training.integrity` (`drop`:
    printed, and the gate drops them on record), and the bytes to stage against the free space of hub.staging_dir.

    Called from `onstart`, which Snakemake runs only in the main process of a real run once the DAG is known: never
    for -n (planning asks nothing of the hub, so CI's dry run stays offline and fast), never in a job's process
    (a compute node may have no internet; everything its jobs read is staged by then), and not when nothing is to
    be staged. WNEURONS_HUB_PREFLIGHT=0 skips it (staging then reports the same problems, job by job).
    """
    if not workflow.is_main_process or workflow.touch:
        return
    if os.environ.get("WNEURONS_HUB_PREFLIGHT", "1") == "0":
        return
    jobs = [
        job
        for job in workflow.dag.needrun_jobs()
        if job.rule.name == "stage_model" and job.wildcards.model in HUB_MODELS
    ]
    staging = [
        (j.wildcards.model, MODELS[j.wildcards.model]["hub_id"], j.wildcards.revision)
        for j in jobs
    ]
    problems = hub.preflight(staging)
    notes = []
    if not problems and jobs:
        requests = []
        for j in jobs:
            m, r = j.wildcards.model, j.wildcards.revision
            needs = staging_needs(j.wildcards)
            layers = tuple(needs["layers"]) if needs["layers"] else None
            requests.append(
                hub.StageRequest(
                    m, MODELS[m]["hub_id"], r, staged_dir(m, r), layers, needs["family"]
                )
            )
        asked = {(q.model, q.revision) for q in requests}
        staged = {
            m: {
                r: read_manifest(staged_dir(m, r))
                for r in targets.hub_revisions(config, m)
                if (m, r) not in asked
                and is_staged(staged_dir(m, r), MODELS[m]["hub_id"], r)
            }
            for m in {q.model for q in requests}
        }
        problems, notes, _ = hub.staging_preflight(
            requests,
            STAGING,
            staged=staged,
            finals={m: final_revision(m) for m in staged},
            mode=config["training"]["integrity"],
            pruned={m: targets.pruned_revisions(config, m) for m in staged},
            stage_ahead=config["hub"]["stage_ahead"],
        )
    for line in notes:
        print(f"hub preflight: {line}", file=sys.stderr)
    if problems:
        sys.exit(
            f"hub preflight: {len(problems)} problem(s), no job was started:\n"
            + "\n".join(problems)
        )


def shard_preflight():
    """Before any job of a real run: every collection's shards fit the free space where they go, and so do the
    shards the `activations_mb` budget lets run at once (wneurons.experiment.shard_space; review N9).
    """
    if not workflow.is_main_process or workflow.touch:
        return
    jobs = [
        job
        for job in workflow.dag.needrun_jobs()
        if job.rule.name == "collect_activations"
    ]
    # A Resource, whose value is None where --resources does not set it.
    budget = workflow.global_resources.get("activations_mb")
    budget = getattr(budget, "value", budget)
    problems = shard_space.shard_space_problems(
        [
            (
                f"{j.wildcards.model}@{j.wildcards.revision}",
                str(j.output[0]),
                int(j.resources["activations_mb"]),
            )
            for j in jobs
        ],
        None if budget is None else int(budget),
    )
    if problems:
        sys.exit("shard preflight: no job was started:\n" + "\n".join(problems))


onstart:
    hub_preflight()
    shard_preflight()


def run_script(name, input, output, params, wildcards, threads, log, rule_name=None):
    """The body of the `run:` rules: workflow/scripts/<name> in this Snakemake process, which imports torch and
    loads each model once for many jobs (with --force-use-threads; wneurons.jobs.inprocess says why).
    ``rule_name``: for scripts shared by several rules (figure.py), as ``snakemake.rule``.
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
        **{"rule": rule_name},  # `rule` cannot start a line in a Snakemake file
    )
    # Inside a SLURM allocation: this member is finished, whatever ends the allocation later.
    ledger.record_finished(list(output))


def figure_report(path, rule_name, output=0):
    """A figure rule's output marked for the report, with the caption and section of its row in
    wneurons.jobs.figures.FIGURES (``output``: which of the rule's outputs)."""
    figure = FIGURES[rule_name]
    return report(
        path,
        caption=f"../report/{figure.captions[output]}",
        category=figure.category,
    )


def of_config(function):
    """``function(config, wildcards)`` as a function of a job's wildcards, for a rule's input or params."""
    return lambda wildcards: function(config, wildcards)


# ---------------------------------------------------------------- resources and allocations (cluster facts: site)
# The site's limits and GPU placement: the file `site` of the config (the user's site profile sets it,
# profiles/site.example), else the defaults of wneurons.experiment.allocations.Site.
try:
    SITE_FILE = allocations.site_path(config["site"], workflow.basedir)
    SITE = allocations.Site.from_file(SITE_FILE)
    SITE_KEYS = slurm_site.given_keys(SITE_FILE)
    # `site_limits: slurm` (profiles/slurm): the limits SLURM states, where the site file is silent. Not inside an
    # allocation (its inner run submits nothing, and hundreds of allocations would each ask the controller).
    # Where SLURM cannot be asked (a dry run on a laptop), one line says the plan uses the site file or the
    # defaults; the executor refuses to submit such a plan (slurm_site.READ_ERROR).
    if (
        config["site_limits"] == "slurm"
        and slurm_site.ALLOCATION_VARIABLE not in os.environ
    ):
        SITE, notes = slurm_site.site_from_slurm(SITE, SITE_FILE, SITE_KEYS)
        print("\n".join(notes), file=sys.stderr)
    # A max_mem_mb below a job's need: one line now, not a job capped in silence and killed for memory.
    allocations.check_job_memory(
        config,
        SITE,
        slurm_site.limit_source("max_mem_mb", SITE_KEYS, slurm_site.LIMITS),
    )
except ValueError as err:
    sys.exit(str(err))
PLANNER = allocations.Planner(
    config,
    SITE,
    slurm_site.limit_source("max_runtime", SITE_KEYS, slurm_site.LIMITS),
)
# Every allocation group (gpu-{model}-{revision}-a{k}) is one group job however many connected components its jobs
# form: Snakemake looks their number up under the group's parent id, which profiles/slurm's `group-components` sets.
ALLOCATION_GROUPS = "gpu-allocation"
# What every member of a GPU allocation asks beyond its work: the site's GPU partition, QOS, constraint, GPU type.
GPU_SITE = SITE.gpu_resources()
# Scheduling priority of the jobs that unlock a checkpoint's ablations (the statistics pass: the cohorts; the matched
# search: the matched control): started before clean scoring that is ready at the same time. Without it, on 2 cores, a
# two-thread statistics pass of seconds waits behind a one-thread clean BLiMP scoring (there 45 minutes) while the
# other core idles and no ablation starts (the Gemma-3 decisive run, 2026-12-02;
# tests/workflow/test_tiny_workflow.py fails without it).
UNLOCKS_ABLATIONS = 1


def planned(ask, rule_name, wildcards):
    """``PLANNER.<ask>`` of one job; a job longer than the site allows stops the run in one line (no traceback),
    before anything is submitted: the plan is made while the DAG is built."""
    try:
        return getattr(PLANNER, ask)(rule_name, dict(wildcards.items()))
    except allocations.AllocationTooLong as err:
        sys.exit(f"site: {err}")


def allocation(rule_name):
    """The group of a job of ``rule_name``: its checkpoint's allocation (wneurons.experiment.allocations)."""

    def group(wildcards):
        name = planned("group", rule_name, wildcards)
        workflow.parent_groupids[name] = ALLOCATION_GROUPS
        return name

    return group


def job_runtime(rule_name):
    """Walltime minutes of a job of ``rule_name`` from its work; not scaled by attempt: a retry runs only the
    members its allocation did not finish, so the same request has less to do."""
    return lambda wildcards: planned("minutes", rule_name, wildcards)


def job_mem_mb(rule_name):
    """Memory (MB) of a job of ``rule_name``: its weights at their precision and headroom, x attempt, capped by
    the site's max_mem_mb."""
    return lambda wildcards, attempt: allocations.job_mem_mb(
        config, SITE, rule_name, dict(wildcards.items()), attempt
    )


def mem_mb(wildcards, attempt):
    """Memory (MB) of a submitted job outside the allocations (wneurons.experiment.allocations.unallocated_mem_mb)."""
    return allocations.unallocated_mem_mb(
        config, SITE, dict(wildcards.items()), attempt
    )


def runtime(wildcards, attempt):
    """Minutes of a submitted job outside the allocations (wneurons.experiment.allocations.unallocated_minutes)."""
    return allocations.unallocated_minutes(
        config, SITE, dict(wildcards.items()), attempt
    )


# ---------------------------------------------------------------- models and data (every stage)
def final_revision(model):
    return targets.final_revision(config, model)


def model_dir(wildcards):
    """The job's model input (wneurons.experiment.model_inputs.model_dir): converted copy, suite, staged manifest."""
    return model_inputs.model_dir(
        config, SUITES, STAGING, wildcards.model, wildcards.revision
    )


def loader_spec(model, revision):
    """What the loader needs (wneurons.experiment.model_inputs.loader_spec)."""
    return model_inputs.loader_spec(config, SUITES, STAGING, model, revision)


def model_spec(wildcards):
    return loader_spec(wildcards.model, wildcards.revision)


def model_spec_final(wildcards):
    """What the loader needs at the model's final revision (jobs per model record it)."""
    return loader_spec(wildcards.model, final_revision(wildcards.model))


# ---------------------------------------------------------------- data.smk
gguf_input = of_config(model_inputs.gguf_input)
gguf_spec = of_config(model_inputs.gguf_spec)


def dataset_spec(wildcards):
    return config["data"][wildcards.dataset]


def hub_tasks_params(wildcards):
    """The hub tasks to stage: the capability suite's."""
    return config["evaluation"]["capability"]["tasks"]


hub_source = of_config(model_inputs.hub_source)


def staging_turn(wildcards):
    """stage_model's one input, the same for every hub revision whatever hub.stage_ahead is (so changing it never
    restages): the revision's turn marker, ancient (a rewritten marker reruns nothing).
    """
    return ancient(paths.staging_turn(wildcards.model, wildcards.revision, STAGING))


# hub.stage_ahead orders the staging of the revisions the run's targets name: the whole grid for `all` (and inside
# an allocation, whose inner run is given jobs, not files), only the named ones for file targets, so that
# `snakemake results/pythia-1.4b/step50000/blimp.json` never waits for the work of revisions nobody asked for.
# Read when the DAG is built: Snakemake sets the targets only after this file is parsed.
@functools.cache
def staging_scope():
    return targets.staging_scope(config, workflow.dag_settings.targets)


def staging_turn_inputs(wildcards):
    """What a revision's turn waits for (hub.stage_ahead): the pruning of the revision stage_ahead + 1 places
    before it among the run's revisions (wneurons.experiment.targets.staging_waits_for, staging_scope); nothing
    when it may be staged at once.
    """
    first = targets.staging_waits_for(
        config, wildcards.model, wildcards.revision, staging_scope()
    )
    return (
        [] if first is None else [paths.pruned_record(wildcards.model, first, STAGING)]
    )


def staged_manifests(wildcards):
    """Every hub revision of the run that hub.stage_ahead lets be staged before any job runs (the target rule
    stage_hub_models: staging only, never the jobs a later revision's turn waits for); with stage_ahead null, all.
    """
    return [
        staged_manifest(m, r)
        for m, _, r in targets.staged_revisions(config)
        if targets.staging_waits_for(config, m, r) is None
    ]


def prune_inputs(wildcards):
    """A staged revision and every job output that reads its weights (wneurons.experiment.targets.weight_readers):
    its weights go once all of them exist."""
    m, r = wildcards.model, wildcards.revision
    return {
        "manifest": staged_manifest(m, r),
        "readers": targets.weight_readers(config, m, r),
    }


# ---------------------------------------------------------------- neurons.smk
def shards_output():
    """The collection rule's output: temporary (deleted once the statistics and every other reader are done)
    unless neurons.keep_shards."""
    path = directory(paths.shards("{model}", "{revision}"))
    return path if config["neurons"]["keep_shards"] else temp(path)


collect_params = of_config(neurons.collect_params)
collect_disk_mb = of_config(neurons.collect_disk_mb)


def collects_in_scratch(wildcards):
    """Whether this revision's neuron_stats job collects its own shards in node-local scratch (neurons.scratch_dir;
    wneurons.experiment.scratch): no later job reads them, and collection and statistics share an allocation.
    """
    m, r = wildcards.model, wildcards.revision
    together = not stats_parts(wildcards) and planned(
        "group", "collect_activations", wildcards
    ) == planned("group", "neuron_stats", wildcards)
    return scratch.collects_in_scratch(config, m, r, together)


def stats_parts(wildcards):
    """The layer ranges of the revision's statistics parts where the planner splits them (one job would not fit
    the site's max_runtime: wneurons.experiment.allocations.Planner.stats_parts), else None.
    """
    return PLANNER.stats_parts(wildcards.model, wildcards.revision)


def neuron_stats_inputs(wildcards):
    """The revision's shards; or, collecting in scratch, what collection reads; or, split by layer range, the
    parts' tables (wneurons.experiment.neurons)."""
    in_scratch = collects_in_scratch(wildcards)
    model = model_dir(wildcards) if in_scratch else []
    parts = stats_parts(wildcards)
    return neurons.neuron_stats_inputs(config, wildcards, in_scratch, model, parts)


stats_part_params = of_config(neurons.stats_part_params)


def stats_params(wildcards):
    """What the statistics need; collecting in scratch, the collection's params too."""
    return neurons.stats_params(config, wildcards, collects_in_scratch(wildcards))


def neuron_stats_gpus(wildcards):
    """A GPU when the job collects in scratch (it runs the model), else none."""
    return 1 if collects_in_scratch(wildcards) else 0


def neuron_stats_runtime(wildcards):
    """Minutes: the statistics' share of the allocation, and collecting in scratch the collection's too."""
    minutes = planned("minutes", "neuron_stats", wildcards)
    if collects_in_scratch(wildcards):
        minutes += planned("minutes", "collect_activations", wildcards)
    return minutes


def neuron_stats_mem_mb(wildcards, attempt):
    """Memory (MB): the statistics', and collecting in scratch the larger of theirs and the collection's; joining
    the parts, the join's."""
    w = dict(wildcards.items())
    if stats_parts(wildcards):
        return allocations.stats_join_mem_mb(config, SITE, w, attempt)
    rules = ["neuron_stats"]
    if collects_in_scratch(wildcards):
        rules.append("collect_activations")
    return max(allocations.job_mem_mb(config, SITE, rule, w, attempt) for rule in rules)


# ---------------------------------------------------------------- ablate.smk
# The condition of a score_ablation job as wildcards, for the rule's output paths.
WILDCARD_CONDITION = grid.Condition("{scope}", "{selector}", "{percent}", "{trial}")


def with_model(function):
    """``function(config, wildcards, model_dir)`` as a function of a job's wildcards, for a rule's input."""
    return lambda wildcards: function(config, wildcards, model_dir(wildcards))


# Pure functions of (config, wildcards) in wneurons.experiment.ablations.
score_data = of_config(ablations.score_data)
ablation_inputs = with_model(ablations.ablation_inputs)
matched_search_inputs = with_model(ablations.matched_search_inputs)
condition_results = of_config(ablations.condition_results)
evaluation_params = of_config(ablations.evaluation_params)
condition_spec = of_config(ablations.condition_spec)
search_spec = of_config(ablations.search_spec)


# ---------------------------------------------------------------- figures.smk
def figure_inputs(rule_name):
    """A figure rule's input files, from its row in wneurons.jobs.figures.FIGURES."""
    return lambda wildcards: FIGURES[rule_name].inputs(config, wildcards)


def figure_params(rule_name):
    """A figure rule's settings (its ``figure`` param), from its row in FIGURES."""
    return FIGURES[rule_name].params(config)


# ---------------------------------------------------------------- analyses.smk (paper §3 token level, §5-7)
pair_sample_inputs = with_model(analyses.pair_sample_inputs)
# The rest are pure functions of (config, wildcards) in wneurons.experiment.analyses.
pair_sample_params = of_config(analyses.pair_sample_params)
pair_signs_params = of_config(analyses.pair_signs_params)
pos_tags_inputs = of_config(analyses.pos_tags_inputs)
pos_tags_params = of_config(analyses.pos_tags_params)
pos_surprisal_params = of_config(analyses.pos_surprisal_params)
pos_surprisal_inputs = of_config(analyses.pos_surprisal_inputs)
case_study_inputs = of_config(analyses.case_study_inputs)
case_study_params = of_config(analyses.case_study_params)
layerwise_inputs = of_config(analyses.layerwise_inputs)
layerwise_params = of_config(analyses.layerwise_params)


# ---------------------------------------------------------------- training.smk (Fig. 2b-d, 6b-d)
# Pure functions of (config, wildcards) in wneurons.experiment.training.
suite_train_params = of_config(training.suite_train_params)
integrity_inputs = of_config(training.integrity_inputs)
cohorts_inputs = of_config(training.cohorts_inputs)
pair_signs_training_inputs = of_config(training.pair_signs_training_inputs)
emergence_inputs = of_config(training.emergence_inputs)
cosine_drift_inputs = of_config(training.cosine_drift_inputs)
ablation_vs_wd_inputs = of_config(training.ablation_vs_wd_inputs)
training_params = of_config(training.training_params)
ablation_vs_wd_params = of_config(training.ablation_vs_wd_params)
pair_signs_training_params = of_config(training.pair_signs_training_params)


def of_model(function):
    """``function(config, model)`` as a function of a job's wildcards, for a rule's params."""
    return lambda wildcards: function(config, wildcards.model)


final_revision_of = of_model(targets.final_revision)
dynamics_revisions_of = of_model(targets.dynamics_revisions)
weight_grid_of = of_model(targets.weight_grid)
ablation_revisions_of = of_model(targets.ablation_revisions)


def tokens_per_step(wildcards):
    return MODELS[wildcards.model]["tokens_per_step"]


# ---------------------------------------------------------------- report.smk
def replication_inputs(wildcards):
    """The files the claims table is built from: results, paired tables and the analyses (including the
    training dynamics) the config runs."""
    return targets.claim_inputs(config)


# Pure functions of (config, wildcards) in wneurons.experiment.reporting.
explorer_inputs = with_model(reporting.explorer_inputs)
sign_cases_inputs = with_model(reporting.sign_cases_inputs)
paired_conditions = of_config(reporting.paired_conditions)
paired_inputs = of_config(reporting.paired_inputs)
replication_run = of_config(reporting.replication_run)
explorer_params = of_config(reporting.explorer_params)
sign_cases_params = of_config(reporting.sign_cases_params)


# ---------------------------------------------------------------- the Snakefile's `all`
def all_targets(wildcards=None):
    """Every target of the default run (wneurons.experiment.targets.all_targets)."""
    try:
        return targets.all_targets(config)
    except ConfigError as err:
        sys.exit(str(err))
