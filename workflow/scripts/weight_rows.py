from wneurons.jobs.base import logged_to
from wneurons.jobs.training import weight_rows_job

with logged_to(snakemake.log[0], snakemake.threads):
    weight_rows_job(snakemake.params.model, snakemake.params.layer, snakemake.output.rows, snakemake.output.record)
