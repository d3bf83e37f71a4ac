from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import figure6a_job

with logged_to(snakemake.log[0]):
    figure6a_job(snakemake.input[0], snakemake.output[0], snakemake.params.figure)
