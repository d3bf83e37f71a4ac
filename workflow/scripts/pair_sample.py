from wneurons.jobs.analyses import pair_sample_job
from wneurons.jobs.base import logged_to

with logged_to(snakemake.log[0], snakemake.threads):
    pair_sample_job(
        snakemake.params.model,
        snakemake.input.wikitext,
        snakemake.output[0],
        snakemake.params.pairs,
        shards_dir=snakemake.input.get("shards"),
    )
