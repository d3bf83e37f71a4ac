from wneurons.jobs import convert_model_job, logged_to

with logged_to(snakemake.log[0], snakemake.threads):
    convert_model_job(snakemake.params.gguf, snakemake.output[0])
