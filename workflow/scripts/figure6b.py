from wneurons.jobs import figure6b_job, logged_to

with logged_to(snakemake.log[0]):
    figure6b_job(snakemake.input[0], snakemake.wildcards.model, snakemake.output[0])
