from wneurons.jobs.base import logged_to
from wneurons.jobs.data import capability_tasks_job

with logged_to(snakemake.log[0]):
    capability_tasks_job(snakemake.input.wikitext, snakemake.output[0])
