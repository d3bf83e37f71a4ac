from wneurons.jobs.base import logged_to
from wneurons.jobs.training import train_suite_job

suite = snakemake.params.suite
with logged_to(snakemake.log[0]):
    train_suite_job(
        snakemake.input.wikitext, snakemake.output[0], suite["train"], suite["revisions"], suite["max_tokens"]
    )
