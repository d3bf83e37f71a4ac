from wneurons.jobs.base import logged_to
from wneurons.jobs.neurons import collect_activations_job

with logged_to(snakemake.log[0], snakemake.threads):
    collect_activations_job(
        snakemake.params.model,
        snakemake.input.wikitext,
        snakemake.output[0],
        snakemake.params.collect,
    )
