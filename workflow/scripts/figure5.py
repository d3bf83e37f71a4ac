from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import figure5_job

with logged_to(snakemake.log[0]):
    figure5_job(dict(snakemake.input.items()), snakemake.output[0])
