"""The workflow's jobs: one function per job, which composes the science, model and storage modules, records
provenance and writes its results atomically. ``workflow/scripts/<rule>.py`` passes Snakemake's input / output /
params to exactly one of them; each is callable (and tested) without Snakemake.

One module per rule file, so that ``workflow/rules/<stage>.smk`` and the code its jobs call pair one to one:

- :mod:`wneurons.jobs.data` — ``data.smk``: fetch and verify the data sets, convert GGUF models.
- :mod:`wneurons.jobs.neurons` — ``neurons.smk``: collect and keep the activation shards, the neuron statistics.
- :mod:`wneurons.jobs.ablate` — ``ablate.smk``: scoring under a condition, the matched search, aggregation.
- :mod:`wneurons.jobs.analyses` — ``analyses.smk``: pair sample, pair signs, POS tags and surprisal, case study,
  layerwise.
- :mod:`wneurons.jobs.training` — ``training.smk``: checkpoint suite, weight rows, integrity, cohorts, emergence,
  cosine drift, ablation vs WD, pair signs over training.
- :mod:`wneurons.jobs.figures` — ``figures.smk``: every figure.
- :mod:`wneurons.jobs.report` — ``report.smk``: paired comparisons, the claims table, the neuron explorer.

:mod:`wneurons.jobs.base` holds what they share (a job's log file, the configured model, provenance) and is the
only job module the others import; :mod:`wneurons.jobs.inprocess` runs jobs inside the Snakemake process.
"""
