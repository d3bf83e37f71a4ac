"""Where every file of the workflow lives: each result and resource template spelled once, under the root constants.

The rules (workflow/rules/*.smk, through common.smk), the target lists (:mod:`wneurons.experiment.targets`) and the
tests read their paths here, so moving a root is one line. Arguments are the values of the path's parts; a rule
passes its Snakemake wildcards in as plain strings (``neurons("{model}", "{revision}")``). Paths are relative to the
workflow's working directory.
"""

from __future__ import annotations

from wneurons.experiment.grid import BENCHMARK_DATASETS, Condition
from wneurons.store.staged import MANIFEST

RESULTS = "results"
RESOURCES = "resources"
LOGS = "logs"
BENCHMARK_LOGS = "benchmarks"  # Snakemake's `benchmark:` tables (runtime, memory), not the scored benchmarks
FIGURES = f"{RESULTS}/figures"
DATA = f"{RESOURCES}/data"
ACTIVATIONS = f"{RESOURCES}/activations"
KEPT_ACTIVATIONS = f"{RESOURCES}/kept-activations"
STAGED = f"{RESOURCES}/hub"  # the default of hub.staging_dir: staged hub revisions
STAGED_MANIFEST = MANIFEST  # written last by staging, so a directory with one is complete


# ---------------------------------------------------------------- logs and benchmark tables of the rules
def log_file(folder: str, stem: str = "") -> str:
    """``logs/{folder}/{stem}.log`` (``logs/{folder}.log`` without a stem). ``folder``: the rule's name (``figures``
    for the figure rules); ``stem``: the output's wildcards, e.g. ``"{model}/{revision}"``."""
    return f"{LOGS}/{folder}/{stem}.log" if stem else f"{LOGS}/{folder}.log"


def benchmark_file(folder: str, stem: str = "") -> str:
    """``benchmarks/{folder}/{stem}.tsv``: the rule's runtime and memory, named like its :func:`log_file`."""
    return f"{BENCHMARK_LOGS}/{folder}/{stem}.tsv" if stem else f"{BENCHMARK_LOGS}/{folder}.tsv"


# ---------------------------------------------------------------- resources: data, models, activations
def dataset(name: str) -> str:
    """Verified copy of one data set (fetch_data): ``blimp``, ``tse`` or ``wikitext2``."""
    return f"{DATA}/{name}"


def benchmark_data(benchmark: str) -> str:
    """The verified data set a benchmark reads (``ppl``: WikiText-2); not the capability suite's (its tasks:
    :func:`capability_tasks`)."""
    return dataset(BENCHMARK_DATASETS[benchmark])


def capability_tasks(source: str) -> str:
    """The lm-eval tasks the capability suite reads (``evaluation.capability.source``): ``wikitext2``, the task
    files written from the verified WikiText-2 validation split (lmeval_tasks); ``hub``, the datasets cache of
    lm-eval's own hub tasks, staged on the submit host (stage_lmeval_tasks)."""
    return f"{RESOURCES}/lmeval-tasks/{source}"


def converted_model(model: str) -> str:
    """Safetensors copy of a model given as a GGUF (convert_gguf_model)."""
    return f"{RESOURCES}/models/{model}"


def trained_suite(model: str) -> str:
    """A checkpoint suite trained by the workflow (train_suite)."""
    return f"{RESOURCES}/suites/{model}"


def staged_dir(model: str, revision: str, root: str = STAGED) -> str:
    """A hub revision staged for the jobs (wneurons.lm.hub.stage): its config, tokenizer and weight files, pinned
    to one commit. ``root``: the config's ``hub.staging_dir``."""
    return f"{root}/{model}/{revision}"


def staged_manifest(model: str, revision: str, root: str = STAGED) -> str:
    """The manifest of a staged revision (stage_model's output; every job of the revision depends on it)."""
    return f"{staged_dir(model, revision, root)}/{STAGED_MANIFEST}"


def pruned_record(model: str, revision: str, root: str = STAGED) -> str:
    """What prune_staged removed from a staged revision (its marker output), beside the staged directory."""
    return f"{root}/{model}/{revision}.pruned.json"


def shards(model: str, revision: str) -> str:
    """Activation shards of one revision (collect_activations); temporary unless ``neurons.keep_shards``."""
    return f"{ACTIVATIONS}/{model}/{revision}"


def kept_shards(model: str, revision: str) -> str:
    """Hard links to the shards of a revision that a job reads after its statistics (Figure 1): they survive the
    deletion of the temporary shards and cost no disk of their own."""
    return f"{KEPT_ACTIVATIONS}/{model}/{revision}"


# ---------------------------------------------------------------- results of one checkpoint
def checkpoint_dir(model: str, revision: str) -> str:
    return f"{RESULTS}/{model}/{revision}"


def neurons(model: str, revision: str) -> str:
    return f"{checkpoint_dir(model, revision)}/neurons.parquet"


def clean(model: str, revision: str, benchmark: str) -> str:
    return f"{checkpoint_dir(model, revision)}/clean/{benchmark}.json"


def clean_items(model: str, revision: str, benchmark: str) -> str:
    """Per-item (BLiMP, TSE) or per-token (ppl) results beside the clean JSON."""
    return f"{checkpoint_dir(model, revision)}/clean/{benchmark}.items.parquet"


def condition_dir(model: str, revision: str, condition: Condition) -> str:
    """``.../ablations/{scope}/{selector}/p{percent}/t{trial}``: one ablation condition's folder."""
    c = condition
    return f"{checkpoint_dir(model, revision)}/ablations/{c.scope}/{c.selector}/p{c.percent}/t{c.trial}"


def ablation(model: str, revision: str, condition: Condition, benchmark: str) -> str:
    return f"{condition_dir(model, revision, condition)}/{benchmark}.json"


def ablation_items(model: str, revision: str, condition: Condition, benchmark: str) -> str:
    """Per-item (BLiMP, TSE) or per-token (ppl) results beside an ablation's JSON."""
    return f"{condition_dir(model, revision, condition)}/{benchmark}.items.parquet"


def matched_search(model: str, revision: str, scope: str, percent: str) -> str:
    """The perplexity-matched control's search (the m% it fixed) for the wasserstein condition at ``percent``."""
    return f"{checkpoint_dir(model, revision)}/ablations/{scope}/matched/p{percent}/search.json"


def aggregate(model: str, revision: str, benchmark: str) -> str:
    """Clean and every condition of one benchmark (random trials pooled)."""
    return f"{checkpoint_dir(model, revision)}/{benchmark}.json"


def paired(model: str, revision: str, benchmark: str) -> str:
    """Paired per-item statistics of every condition against its references (claims table)."""
    return f"{checkpoint_dir(model, revision)}/paired/{benchmark}.parquet"


# ---------------------------------------------------------------- mechanism analyses (paper §3 token level, §5-7)
def pair_sample(model: str, revision: str) -> str:
    return f"{checkpoint_dir(model, revision)}/pairs/sample"


def pair_signs(model: str, revision: str) -> str:
    return f"{checkpoint_dir(model, revision)}/pairs/signs.parquet"


def pair_composition(model: str, revision: str) -> str:
    return f"{checkpoint_dir(model, revision)}/pairs/composition.parquet"


def pos_tags(model: str) -> str:
    """Tags depend on the tokenizer only: one file per model, for every revision."""
    return f"{RESULTS}/{model}/pos/valid.parquet"


def pos_surprisal(model: str, revision: str) -> str:
    return f"{checkpoint_dir(model, revision)}/pos_surprisal.parquet"


def case_study_pairs(model: str, revision: str) -> str:
    """Figure 5's top pairs of the case-study neuron."""
    return f"{checkpoint_dir(model, revision)}/case_study/figure5_pairs.csv"


def case_study_all_pairs(model: str, revision: str) -> str:
    return f"{checkpoint_dir(model, revision)}/case_study/figure5_all_pairs.parquet"


def case_study_robustness(model: str, revision: str) -> str:
    return f"{checkpoint_dir(model, revision)}/case_study/figure5_robustness.json"


def layerwise_table(model: str, revision: str) -> str:
    """Per layer: NN share of the MD cohort vs the single-layer ablation's error (Figure 7)."""
    return f"{checkpoint_dir(model, revision)}/layerwise_nn_vs_error.parquet"


def layerwise_correlations(model: str, revision: str) -> str:
    return f"{checkpoint_dir(model, revision)}/layerwise_correlations.json"


# ---------------------------------------------------------------- training dynamics (Fig. 2b-d, 6b-d)
def weight_rows(model: str, revision: str) -> str:
    return f"{checkpoint_dir(model, revision)}/weight_rows.npy"


def weight_record(model: str, revision: str) -> str:
    return f"{checkpoint_dir(model, revision)}/weight_rows.json"


def training_dir(model: str) -> str:
    return f"{RESULTS}/{model}/training"


def integrity(model: str) -> str:
    return f"{training_dir(model)}/integrity.json"


def cohorts(model: str) -> str:
    return f"{training_dir(model)}/cohorts.json"


def emergence_table(model: str) -> str:
    return f"{training_dir(model)}/emergence.parquet"


def emergence_summary(model: str) -> str:
    return f"{training_dir(model)}/emergence.json"


def cosine_drift(model: str) -> str:
    return f"{training_dir(model)}/cosine_drift.parquet"


def ablation_vs_wd_table(model: str) -> str:
    return f"{training_dir(model)}/ablation_vs_wd.parquet"


def ablation_vs_wd_summary(model: str) -> str:
    return f"{training_dir(model)}/ablation_vs_wd.json"


def pair_signs_training(model: str) -> str:
    return f"{training_dir(model)}/pair_signs.parquet"


# ---------------------------------------------------------------- figures
def figure(name: str, *parts: str) -> str:
    """A figure's PNG: ``results/figures/{name}.png``, or ``results/figures/{name}/{part}/.../{last}.png`` for a
    figure drawn per model (and revision), e.g. ``figure("figure3", model, revision)``. ``name`` is the figure's
    name in the paper ("figure2b"); its rule and row in ``wneurons.jobs.figures.FIGURES`` may draw several."""
    return f"{FIGURES}/{'/'.join((name, *parts))}.png"


# ---------------------------------------------------------------- report
def replication_md() -> str:
    """The claims table (Markdown); its JSON and HTML beside it."""
    return f"{RESULTS}/replication.md"


def replication_json() -> str:
    return f"{RESULTS}/replication.json"


def replication_html() -> str:
    return f"{RESULTS}/replication.html"


def explorer(model: str, revision: str) -> str:
    """The neuron explorer's site (a directory)."""
    return f"{checkpoint_dir(model, revision)}/explorer"


def explorer_bundle(model: str, revision: str) -> str:
    """The explorer as one HTML file: Snakemake's single-file report cannot hold a directory."""
    return f"{checkpoint_dir(model, revision)}/explorer.html"


def report() -> str:
    """Snakemake's single-file report (``snakemake --report``, after the DAG: ``make report``)."""
    return f"{RESULTS}/report.html"
