from wneurons.jobs.base import logged_to
from wneurons.jobs.training import integrity_job

with logged_to(snakemake.log[0]):
    integrity_job(list(snakemake.input), snakemake.params.final_revision, snakemake.output[0], snakemake.params.mode)
