from wneurons.jobs import cohorts_job, logged_to

with logged_to(snakemake.log[0]):
    cohorts_job(
        snakemake.params.model,
        snakemake.input.neurons,
        snakemake.output[0],
        snakemake.params.settings,
        md_pairs_path=snakemake.input.get("pair_signs"),
    )
