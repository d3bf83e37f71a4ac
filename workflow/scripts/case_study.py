from wneurons.jobs.analyses import case_study_job
from wneurons.jobs.base import logged_to

with logged_to(snakemake.log[0], snakemake.threads):
    case_study_job(dict(snakemake.input.items()), dict(snakemake.output.items()), snakemake.params.case)
