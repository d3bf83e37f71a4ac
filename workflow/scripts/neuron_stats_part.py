from wneurons.jobs.base import logged_to
from wneurons.jobs.neurons import neuron_stats_part_job

with logged_to(snakemake.log[0], snakemake.threads):
    neuron_stats_part_job(
        snakemake.params.model,
        snakemake.input.shards,
        snakemake.output[0],
        snakemake.params.stats,
    )
