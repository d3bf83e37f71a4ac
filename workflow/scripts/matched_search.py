from wneurons.jobs.ablate import matched_search_job
from wneurons.jobs.base import logged_to

with logged_to(snakemake.log[0], snakemake.threads):
    matched_search_job(
        snakemake.params.model,
        snakemake.input.data,
        snakemake.input.neurons,
        snakemake.input.target,
        snakemake.input.clean,
        snakemake.output[0],
        snakemake.params.evaluation,
        snakemake.params.search,
    )
