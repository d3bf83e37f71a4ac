from wneurons.jobs.base import logged_to
from wneurons.jobs.neurons import keep_activations_job

with logged_to(snakemake.log[0]):
    keep_activations_job(snakemake.input.shards, snakemake.output[0])
