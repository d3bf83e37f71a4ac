from wneurons.jobs import figure2bd_job, logged_to

with logged_to(snakemake.log[0]):
    figure2bd_job(
        list(snakemake.input.tables),
        list(snakemake.input.summaries),
        snakemake.params.models,
        snakemake.output.b,
        snakemake.output.d,
    )
