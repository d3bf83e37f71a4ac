from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import figure6b_job

with logged_to(snakemake.log[0]):
    figure6b_job(snakemake.input[0], snakemake.wildcards.model, snakemake.output[0])
