from wneurons.jobs.base import logged_to
from wneurons.jobs.report import sign_cases_job

with logged_to(snakemake.log[0], snakemake.threads):
    sign_cases_job(
        snakemake.params.model,
        snakemake.input.shards,
        snakemake.input.neurons,
        snakemake.input.wikitext,
        snakemake.output[0],
        snakemake.params.spec["explorer"],
        dtype=snakemake.params.spec["dtype"],
        clamped_percents=snakemake.params.spec["clamped_percents"],
        extra_neurons=[tuple(n) for n in snakemake.params.spec["extra_neurons"]],
    )
