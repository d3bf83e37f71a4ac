from wneurons.jobs import figure2a_job, logged_to

with logged_to(snakemake.log[0]):
    figure2a_job(list(snakemake.input), snakemake.params.models, snakemake.output[0], snakemake.params.layer)
