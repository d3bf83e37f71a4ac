from wneurons.jobs import keep_activations_job, logged_to

with logged_to(snakemake.log[0]):
    keep_activations_job(snakemake.input.shards, snakemake.output[0])
