from wneurons.jobs import cohorts_job, logged_to

with logged_to(snakemake.log[0]):
    cohorts_job(snakemake.params.model, snakemake.input[0], snakemake.output[0], snakemake.params.settings)
