"""wneurons: Wasserstein neurons and what their negative pre-activations do (see README.md)."""

from snakemake.utils import min_version

min_version("9.0")


# The paper's grid by default. A config given on the command line (e.g. config/demo.yaml) replaces it instead of
# being merged into it; cluster jobs re-read the same command-line config, so they see the same grid.
if not workflow.config_settings.configfiles:

    configfile: "config/config.yaml"


# `gpu` counts the GPUs of one machine (`--resources gpu=N` there) or of one submitted SLURM job, never of the whole
# cluster: the SLURM profile's gpu=1 caps each group job at one GPU, not the cluster at one job.
resource_scopes:
    gpu="local",


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


rule all:
    default_target: True
    input:
        all_targets,
    localrule: True
