from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import figure3_job

with logged_to(snakemake.log[0]):
    figure3_job(snakemake.input.ppl, snakemake.input.blimp, snakemake.input.tse, snakemake.output[0])
