from wneurons.analysis_jobs import figure7_job
from wneurons.jobs import logged_to

with logged_to(snakemake.log[0]):
    figure7_job(dict(snakemake.input.items()), snakemake.output[0], snakemake.params.figure)
