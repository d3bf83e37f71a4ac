from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import figure2a_job

with logged_to(snakemake.log[0]):
    figure2a_job(list(snakemake.input), snakemake.params.models, snakemake.output[0], snakemake.params.layer)
