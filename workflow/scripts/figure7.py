from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import figure7_job

with logged_to(snakemake.log[0]):
    figure7_job(dict(snakemake.input.items()), snakemake.output[0], snakemake.params.figure)
