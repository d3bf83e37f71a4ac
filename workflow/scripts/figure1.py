from wneurons.jobs import figure1_job, logged_to

with logged_to(snakemake.log[0]):
    figure1_job(dict(snakemake.input), snakemake.output[0], snakemake.params.figure)
