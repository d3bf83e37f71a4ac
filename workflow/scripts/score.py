from wneurons.jobs.ablate import score_job
from wneurons.jobs.base import logged_to

condition = getattr(snakemake.params, "condition", None) or {"selector": "clean"}
with logged_to(snakemake.log[0], snakemake.threads):
    score_job(
        snakemake.params.model,
        snakemake.wildcards.benchmark,
        snakemake.input.data,
        snakemake.output.json,
        snakemake.params.evaluation,
        condition,
        neurons_path=snakemake.input.get("neurons"),
        search_path=snakemake.input.get("search"),
        items_out=snakemake.output.per_item,
    )
