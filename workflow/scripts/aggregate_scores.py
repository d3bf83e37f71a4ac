from wneurons.jobs.ablate import aggregate_job
from wneurons.jobs.base import logged_to

with logged_to(snakemake.log[0]):
    aggregate_job(
        list(snakemake.input),
        snakemake.output[0],
        snakemake.wildcards.model,
        snakemake.wildcards.revision,
        snakemake.wildcards.benchmark,
    )
