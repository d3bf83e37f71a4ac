from wneurons.jobs.base import logged_to
from wneurons.jobs.report import replication_table_job

with logged_to(snakemake.log[0]):
    replication_table_job(snakemake.params.run, snakemake.output.md, snakemake.output.json, snakemake.output.html)
