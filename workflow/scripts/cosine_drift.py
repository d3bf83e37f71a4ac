from wneurons.jobs.base import logged_to
from wneurons.jobs.training import cosine_drift_job

with logged_to(snakemake.log[0]):
    cosine_drift_job(
        snakemake.params.model,
        snakemake.params.revisions,
        {key: snakemake.input[key] for key in snakemake.input.keys()},
        snakemake.output[0],
    )
