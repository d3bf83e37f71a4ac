from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import figure2c_job

with logged_to(snakemake.log[0]):
    figure2c_job(list(snakemake.input), snakemake.params.models, snakemake.output[0])
