from wneurons.jobs.base import logged_to
from wneurons.jobs.figures import capability_figure_job

with logged_to(snakemake.log[0]):
    capability_figure_job(snakemake.input, snakemake.output[0], snakemake.wildcards.model)
