from wneurons.jobs import logged_to
from wneurons.jobs.analyses import layerwise_job

with logged_to(snakemake.log[0], snakemake.threads):
    layerwise_job(
        dict(snakemake.input.items()),
        snakemake.output.table,
        snakemake.output.correlations,
        snakemake.params.layerwise,
    )
