from wneurons.jobs.base import logged_to
from wneurons.jobs.data import convert_gguf_model_job

with logged_to(snakemake.log[0], snakemake.threads):
    convert_gguf_model_job(snakemake.params.gguf, snakemake.output[0])
