from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import figure1_job

with logged_to(snakemake.log[0]):
    figure1_job(dict(snakemake.input), snakemake.output[0], snakemake.params.figure)
