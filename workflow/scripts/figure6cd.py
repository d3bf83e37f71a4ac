from wneurons.jobs import figure6cd_job, logged_to

with logged_to(snakemake.log[0]):
    figure6cd_job(snakemake.input.table, snakemake.input.summary, snakemake.wildcards.model, snakemake.output[0])
