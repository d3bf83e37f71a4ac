from wneurons.jobs.analyses import pos_surprisal_job
from wneurons.jobs.base import logged_to

with logged_to(snakemake.log[0], snakemake.threads):
    pos_surprisal_job(
        snakemake.input.tags,
        snakemake.input.w,
        snakemake.input.m,
        snakemake.input.clean,
        snakemake.input.search,
        snakemake.output[0],
        snakemake.params.pos,
    )
