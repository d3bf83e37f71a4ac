from wneurons.figures import figure4
from wneurons.jobs import logged_to

with logged_to(snakemake.log[0]):
    figure4(snakemake.input.blimp, snakemake.input.tse, snakemake.output[0])
