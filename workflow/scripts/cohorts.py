from wneurons.jobs.base import logged_to
from wneurons.jobs.training import cohorts_job

with logged_to(snakemake.log[0]):
    cohorts_job(
        snakemake.params.model,
        snakemake.input.neurons,
        snakemake.output[0],
        snakemake.params.settings,
        md_pairs_path=snakemake.input.get("pair_signs"),
    )
