from wneurons.jobs.base import logged_to
from wneurons.jobs.report import explorer_job

with logged_to(snakemake.log[0]):
    explorer_job(
        snakemake.params.model,
        snakemake.input.shards,
        snakemake.input.neurons,
        snakemake.input.wikitext,
        snakemake.output.site,
        snakemake.params.spec["explorer"],
        checkpoint_tables=dict(zip(snakemake.params.spec["checkpoints"], snakemake.input.checkpoints, strict=True)),
        bundle=snakemake.output.bundle,
        sample_dir=snakemake.input.get("sample"),
        tags_path=snakemake.input.get("tags"),
        clamped_percents=snakemake.params.spec["clamped_percents"],
        extra_neurons=[tuple(n) for n in snakemake.params.spec["extra_neurons"]],
        sign_cases_path=snakemake.input.get("sign_cases"),
    )
