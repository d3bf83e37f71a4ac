from wneurons.jobs import logged_to
from wneurons.jobs.analyses import pair_signs_job

with logged_to(snakemake.log[0], snakemake.threads):
    pair_signs_job(
        snakemake.input.sample,
        snakemake.input.neurons,
        snakemake.output.signs,
        snakemake.output.composition,
        snakemake.params.signs,
    )
