from pathlib import Path

from wneurons.jobs.base import logged_to
from wneurons.lm.hub_staging import stage

with logged_to(snakemake.log[0]):
    hub, needs = snakemake.params.hub, snakemake.params.needs
    stage(hub["repo_id"], hub["revision"], Path(snakemake.output[0]).parent, **needs)
