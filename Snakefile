"""wneurons: Wasserstein neurons and what their negative pre-activations do (see README.md)."""

from snakemake.utils import min_version

min_version("9.0")


# The paper's grid by default. A config given on the command line (e.g. config/demo.yaml) replaces it instead of
# being merged into it; cluster jobs re-read the same command-line config, so they see the same grid.
# Snakemake's own message for a YAML syntax error names neither file nor line; this one does (file:line:column). A
# --configfile is read by Snakemake's command line before this file, so `wneurons run CONFIG` checks it instead.
if not workflow.config_settings.configfiles:
    import sys
    from wneurons.experiment.config import ConfigError, load_yaml_strict

    try:
        load_yaml_strict("config/config.yaml")
    except ConfigError as err:
        sys.exit(str(err))

    configfile: "config/config.yaml"


# `gpu` counts the GPUs of one machine (`--resources gpu=N` there) or of one submitted SLURM job, never of the whole
# cluster: the SLURM profile's gpu=1 caps each group job at one GPU, not the cluster at one job.
# `activations_mb` is the shared file system's budget for activation shards (profiles/slurm): global, so that under
# SLURM the main process counts it over every allocation it submits (`disk_mb`, local by Snakemake's default, is
# counted only inside each one). Only collect_activations declares it (its shards, wneurons.experiment.grid).
resource_scopes:
    gpu="local",
    activations_mb="global",


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/neurons.smk"
include: "workflow/rules/ablate.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/analyses.smk"
include: "workflow/rules/training.smk"
include: "workflow/rules/report.smk"


# The vocabularies' alternatives come from wneurons.experiment.grid, where the grid is enumerated.
wildcard_constraints:
    model="[a-z0-9][a-z0-9._-]*",
    revision="[A-Za-z0-9._-]+",
    benchmark="|".join(grid.BENCHMARKS),
    dataset="|".join(grid.DATASETS),
    scope="all|[gcl][0-9]+",
    selector="|".join(grid.SELECTORS),
    percent="[0-9]+(\.[0-9]+)?",
    trial="[0-9]+",
    layers="[0-9]+-[0-9]+",


rule all:
    default_target: True
    input:
        all_targets,
    localrule: True
