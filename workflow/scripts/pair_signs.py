from wneurons.jobs.analyses import pair_signs_job
from wneurons.jobs.base import logged_to

with logged_to(snakemake.log[0], snakemake.threads):
    pair_signs_job(
        snakemake.input.sample,
        snakemake.input.neurons,
        snakemake.output.signs,
        snakemake.output.composition,
        snakemake.params.signs,
    )
