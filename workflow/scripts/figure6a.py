from wneurons.analysis_jobs import figure6a_job
from wneurons.jobs import logged_to

with logged_to(snakemake.log[0]):
    figure6a_job(snakemake.input[0], snakemake.output[0], snakemake.params.figure)
