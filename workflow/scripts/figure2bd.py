from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import figure2bd_job

with logged_to(snakemake.log[0]):
    figure2bd_job(
        list(snakemake.input.tables),
        list(snakemake.input.summaries),
        snakemake.params.models,
        snakemake.output.b,
        snakemake.output.d,
    )
