from wneurons.jobs import collect_activations_job, logged_to

with logged_to(snakemake.log[0], snakemake.threads):
    collect_activations_job(
        snakemake.params.model,
        snakemake.input.wikitext,
        snakemake.output[0],
        snakemake.params.collect,
    )
