from wneurons.jobs.base import logged_to
from wneurons.jobs.neurons import neuron_stats_job

with logged_to(snakemake.log[0], snakemake.threads):
    neuron_stats_job(
        snakemake.params.model,
        snakemake.input.get("shards"),
        snakemake.output[0],
        snakemake.params.stats,
        wikitext_dir=snakemake.input.get("wikitext"),
        scratch_dir=snakemake.config["neurons"]["scratch_dir"],
        parts=snakemake.input.get("parts"),
    )
