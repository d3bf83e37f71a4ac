from wneurons.jobs import figure2c_job, logged_to

with logged_to(snakemake.log[0]):
    figure2c_job(list(snakemake.input), snakemake.params.models, snakemake.output[0])
