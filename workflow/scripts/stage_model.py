from pathlib import Path

from wneurons.jobs.base import logged_to
from wneurons.lm.hub import stage

with logged_to(snakemake.log[0]):
    stage(snakemake.params.hub["repo_id"], snakemake.params.hub["revision"], Path(snakemake.output[0]).parent)
