from wneurons.jobs import logged_to
from wneurons.report.figures import figure4

with logged_to(snakemake.log[0]):
    figure4(snakemake.input.blimp, snakemake.input.tse, snakemake.output[0])
