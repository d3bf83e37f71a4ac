from wneurons.jobs import logged_to
from wneurons.jobs.analyses import figure5_job

with logged_to(snakemake.log[0]):
    figure5_job(dict(snakemake.input.items()), snakemake.output[0])
