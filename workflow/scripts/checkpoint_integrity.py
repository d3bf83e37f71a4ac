from wneurons.jobs import integrity_job, logged_to

with logged_to(snakemake.log[0]):
    integrity_job(list(snakemake.input), snakemake.params.final_revision, snakemake.output[0], snakemake.params.mode)
