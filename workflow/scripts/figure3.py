from wneurons.jobs import logged_to
from wneurons.report.figures import figure3

with logged_to(snakemake.log[0]):
    figure3(snakemake.input.ppl, snakemake.input.blimp, snakemake.input.tse, snakemake.output[0])
