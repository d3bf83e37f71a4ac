from wneurons.jobs.analyses import pos_tags_job
from wneurons.jobs.base import logged_to

with logged_to(snakemake.log[0], snakemake.threads):
    pos_tags_job(snakemake.input.ppl_items, snakemake.input.wikitext, snakemake.output[0], snakemake.params.pos)
