from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import figure4_job

with logged_to(snakemake.log[0]):
    figure4_job(snakemake.input.blimp, snakemake.input.tse, snakemake.output[0])
