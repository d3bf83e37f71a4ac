from wneurons.figures import figure3
from wneurons.jobs import logged_to

with logged_to(snakemake.log[0]):
    figure3(snakemake.input.ppl, snakemake.input.blimp, snakemake.input.tse, snakemake.output[0])
