from wneurons.jobs import logged_to
from wneurons.jobs.analyses import figure7_job

with logged_to(snakemake.log[0]):
    figure7_job(dict(snakemake.input.items()), snakemake.output[0], snakemake.params.figure)
