from wneurons.jobs import fetch_data_job, logged_to

with logged_to(snakemake.log[0]):
    fetch_data_job(snakemake.params.spec, snakemake.output[0])
