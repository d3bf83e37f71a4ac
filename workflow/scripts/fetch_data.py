from wneurons.jobs.base import logged_to
from wneurons.jobs.data import fetch_data_job

with logged_to(snakemake.log[0]):
    fetch_data_job(snakemake.params.spec, snakemake.output[0])
