from wneurons.jobs.base import logged_to
from wneurons.jobs.report import paired_job

with logged_to(snakemake.log[0]):
    paired_job(
        snakemake.wildcards.benchmark,
        snakemake.input.clean,
        list(snakemake.input.conditions),
        snakemake.params.conditions,
        snakemake.output[0],
        resamples=snakemake.params.resamples,
        seed=snakemake.params.seed,
    )
