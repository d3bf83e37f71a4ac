from wneurons.jobs.base import logged_to
from wneurons.jobs.data import stage_lmeval_tasks_job

with logged_to(snakemake.log[0]):
    stage_lmeval_tasks_job(snakemake.params.tasks, snakemake.output[0])
