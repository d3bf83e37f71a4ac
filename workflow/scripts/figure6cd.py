from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import figure6cd_job

with logged_to(snakemake.log[0]):
    figure6cd_job(snakemake.input.table, snakemake.input.summary, snakemake.wildcards.model, snakemake.output[0])
