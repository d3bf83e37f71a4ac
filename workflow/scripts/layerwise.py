from wneurons.jobs.analyses import layerwise_job
from wneurons.jobs.base import logged_to

with logged_to(snakemake.log[0], snakemake.threads):
    layerwise_job(
        dict(snakemake.input.items()),
        snakemake.output.table,
        snakemake.output.correlations,
        snakemake.params.layerwise,
    )
