from wneurons.analysis_jobs import figure5_job
from wneurons.jobs import logged_to

with logged_to(snakemake.log[0]):
    figure5_job(dict(snakemake.input.items()), snakemake.output[0])
