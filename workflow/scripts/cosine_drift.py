from wneurons.jobs import cosine_drift_job, logged_to

with logged_to(snakemake.log[0]):
    cosine_drift_job(
        snakemake.params.model,
        snakemake.params.revisions,
        {key: snakemake.input[key] for key in snakemake.input.keys()},
        snakemake.output[0],
    )
