from wneurons.jobs import logged_to, neuron_stats_job

with logged_to(snakemake.log[0], snakemake.threads):
    neuron_stats_job(snakemake.params.model, snakemake.input.shards, snakemake.output[0], snakemake.params.stats)
