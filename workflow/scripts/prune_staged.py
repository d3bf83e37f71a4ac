from pathlib import Path

from wneurons.jobs.base import logged_to
from wneurons.store.staged import prune

with logged_to(snakemake.log[0]):
    prune(Path(snakemake.input.manifest).parent, snakemake.output[0])
