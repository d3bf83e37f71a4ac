from wneurons.jobs.base import logged_to
from wneurons.jobs.training import pair_signs_over_training_job

with logged_to(snakemake.log[0]):
    pair_signs_over_training_job(
        snakemake.params.model,
        snakemake.params.revisions,
        {key: snakemake.input[key] for key in snakemake.input.keys()},
        snakemake.output[0],
        snakemake.params.signs,
    )
