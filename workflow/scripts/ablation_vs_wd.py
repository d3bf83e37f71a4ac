from wneurons.jobs.base import logged_to
from wneurons.jobs.training import ablation_vs_wd_job

with logged_to(snakemake.log[0]):
    ablation_vs_wd_job(
        snakemake.params.model,
        snakemake.params.revisions,
        {key: snakemake.input[key] for key in snakemake.input.keys()},
        snakemake.output.table,
        snakemake.output.summary,
        snakemake.params.training,
    )
