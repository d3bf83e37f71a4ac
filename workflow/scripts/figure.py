from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import figure_job

with logged_to(snakemake.log[0]):
    figure_job(snakemake.rule, snakemake.input, snakemake.output, snakemake.params, snakemake.wildcards)
