from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import figure3d_job

with logged_to(snakemake.log[0]):
    figure3d_job(snakemake.input[0], snakemake.output[0], snakemake.params.figure)
