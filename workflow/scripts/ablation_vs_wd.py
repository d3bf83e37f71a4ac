from wneurons.jobs import ablation_vs_wd_job, logged_to

with logged_to(snakemake.log[0]):
    ablation_vs_wd_job(
        snakemake.params.model,
        snakemake.params.revisions,
        {key: snakemake.input[key] for key in snakemake.input.keys()},
        snakemake.output.table,
        snakemake.output.summary,
        snakemake.params.training,
    )
