"""Where every file of the workflow lives: each result and resource template spelled once, under the root constants.

The rules (workflow/rules/*.smk, through common.smk), the target lists (:mod:`wneurons.experiment.targets`) and the
tests read their paths here, so moving a root is one line. Arguments are the values of the path's parts; a rule
passes its Snakemake wildcards in as plain strings (``neurons("{model}", "{revision}")``). Paths are relative to the
workflow's working directory unless a root is absolute.

Three roots are settings of the config (:class:`Roots`): ``results_dir`` (every result, figure, report and explorer,
and with a results_dir other than the default also the rules' logs and benchmark tables), ``neurons.activations_dir``
(the activation shards) and ``neurons.kept_activations_dir`` (the shards later jobs read). The workflow sets them
once per process, as soon as the config is validated (common.smk: :func:`use_roots`); every Snakemake process of a
run (the main one, each SLURM allocation) parses common.smk first, so every path of a run is built under its
config's roots. Code outside the workflow that builds a config's paths does so under ``with roots_of(config):``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

from wneurons.experiment.grid import BENCHMARK_DATASETS, Condition
from wneurons.store.staged import MANIFEST

RESULTS = "results"  # the default of results_dir (the paper grid's and the demo's)
RESOURCES = "resources"
LOGS = "logs"
BENCHMARK_LOGS = "benchmarks"  # Snakemake's `benchmark:` tables (runtime, memory), not the scored benchmarks
FIGURES = f"{RESULTS}/figures"  # under the default results_dir
DATA = f"{RESOURCES}/data"
ACTIVATIONS = f"{RESOURCES}/activations"  # the default of neurons.activations_dir
KEPT_ACTIVATIONS = f"{RESOURCES}/kept-activations"  # the default of neurons.kept_activations_dir
STAGED = f"{RESOURCES}/hub"  # the default of hub.staging_dir: staged hub revisions
STAGED_MANIFEST = MANIFEST  # written last by staging, so a directory with one is complete
# Directories of the working directory that a results_dir must not be or lie in (their files are another stage's).
RESERVED = (RESOURCES, LOGS, BENCHMARK_LOGS, ".snakemake", "config", "workflow", "profiles")


@dataclass(frozen=True)
class Roots:
    """The configurable roots of a run's files: ``results`` (config ``results_dir``), ``activations``
    (``neurons.activations_dir``) and ``kept_activations`` (``neurons.kept_activations_dir``). The logs and
    benchmark tables of the rules are ``logs/`` and ``benchmarks/`` under the default results_dir (the layout the
    paper grid and the demo always had), else inside the results_dir: two configs' runs share no file they write
    but the resources (data, staged and converted models)."""

    results: str = RESULTS
    activations: str = ACTIVATIONS
    kept_activations: str = KEPT_ACTIVATIONS

    def __post_init__(self) -> None:
        for name in ("results", "activations", "kept_activations"):  # "results/" and "./results" are "results"
            object.__setattr__(self, name, os.path.normpath(getattr(self, name)))

    @classmethod
    def of(cls, config: dict) -> Roots:
        """The roots a (validated or raw) config names; a key it lacks keeps its default."""
        neurons = config.get("neurons") or {}
        return cls(
            config.get("results_dir") or RESULTS,
            neurons.get("activations_dir") or ACTIVATIONS,
            neurons.get("kept_activations_dir") or KEPT_ACTIVATIONS,
        )

    @staticmethod
    def lies_in(path: str, root: str) -> bool:
        """Whether ``path`` is ``root`` or lies under it (both relative to one directory, as Snakemake names files)."""
        path = os.path.normpath(path)
        return path == root or path.startswith(root.rstrip("/") + "/")

    @property
    def logs(self) -> str:
        return LOGS if self.results == RESULTS else f"{self.results}/{LOGS}"

    @property
    def benchmarks(self) -> str:
        return BENCHMARK_LOGS if self.results == RESULTS else f"{self.results}/{BENCHMARK_LOGS}"

    @property
    def figures(self) -> str:
        return f"{self.results}/figures"

    def problem(self) -> str | None:
        """One line naming the config key and value when the roots cannot work, else None: a results_dir that is or
        lies in a directory of another stage, and roots inside one another (a shard directory inside the results
        would be read as a model's results; the two activation roots must differ, as temporary shards are deleted
        by revision)."""
        for reserved in RESERVED:
            if self.lies_in(self.results, reserved):
                return f"config: results_dir: {self.results!r} lies in {reserved}/, which holds another stage's files"
        for key, path in (("activations_dir", self.activations), ("kept_activations_dir", self.kept_activations)):
            if self.lies_in(path, self.results) or self.lies_in(self.results, path):
                return f"config: neurons.{key}: {path!r} and results_dir {self.results!r} lie in one another"
        if self.lies_in(self.activations, self.kept_activations) or self.lies_in(
            self.kept_activations, self.activations
        ):
            return (
                f"config: neurons.kept_activations_dir: {self.kept_activations!r} and neurons.activations_dir "
                f"{self.activations!r} lie in one another"
            )
        return None


_roots = Roots()


def roots() -> Roots:
    """The roots every path function of this module builds under now."""
    return _roots


def use_roots(new: Roots) -> Roots:
    """Build every path under ``new`` from now on (the workflow: once, from its config); returns the roots before."""
    global _roots
    previous, _roots = _roots, new
    return previous


@contextlib.contextmanager
def roots_of(config: dict) -> Iterator[Roots]:
    """Build paths under ``config``'s roots inside the ``with`` block (a command or test that reads a config's
    results outside the workflow), and under the previous roots after it."""
    previous = use_roots(Roots.of(config))
    try:
        yield _roots
    finally:
        use_roots(previous)


# ---------------------------------------------------------------- logs and benchmark tables of the rules
def log_file(folder: str, stem: str = "") -> str:
    """``logs/{folder}/{stem}.log`` (``logs/{folder}.log`` without a stem). ``folder``: the rule's name (``figures``
    for the figure rules); ``stem``: the output's wildcards, e.g. ``"{model}/{revision}"``."""
    logs = _roots.logs
    return f"{logs}/{folder}/{stem}.log" if stem else f"{logs}/{folder}.log"


def benchmark_file(folder: str, stem: str = "") -> str:
    """``benchmarks/{folder}/{stem}.tsv``: the rule's runtime and memory, named like its :func:`log_file`."""
    tables = _roots.benchmarks
    return f"{tables}/{folder}/{stem}.tsv" if stem else f"{tables}/{folder}.tsv"


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
    """A hub revision staged for the jobs (wneurons.lm.hub_staging.stage): its config, tokenizer and weight files,
    pinned to one commit. ``root``: the config's ``hub.staging_dir``."""
    return f"{root}/{model}/{revision}"


def staged_manifest(model: str, revision: str, root: str = STAGED) -> str:
    """The manifest of a staged revision (stage_model's output; every job of the revision depends on it)."""
    return f"{staged_dir(model, revision, root)}/{STAGED_MANIFEST}"


def pruned_record(model: str, revision: str, root: str = STAGED) -> str:
    """What prune_staged removed from a staged revision (its marker output), beside the staged directory."""
    return f"{root}/{model}/{revision}.pruned.json"


def staging_turn(model: str, revision: str, root: str = STAGED) -> str:
    """The empty marker that lets stage_model fetch a revision (hub.stage_ahead): written once the revision its
    staging waits for is pruned, beside the staged directory."""
    return f"{root}/{model}/{revision}.turn"


def shards(model: str, revision: str) -> str:
    """Activation shards of one revision (collect_activations); temporary unless ``neurons.keep_shards``."""
    return f"{_roots.activations}/{model}/{revision}"


def kept_shards(model: str, revision: str) -> str:
    """Hard links to the shards of a revision that a job reads after its statistics (Figure 1): they survive the
    deletion of the temporary shards and cost no disk of their own."""
    return f"{_roots.kept_activations}/{model}/{revision}"


# ---------------------------------------------------------------- results of one checkpoint
def checkpoint_dir(model: str, revision: str) -> str:
    return f"{_roots.results}/{model}/{revision}"


def neurons(model: str, revision: str) -> str:
    return f"{checkpoint_dir(model, revision)}/neurons.parquet"


def neurons_part(model: str, revision: str, layers: str) -> str:
    """The statistics of one range of layers (``"0-8"``), where the planner splits a revision's statistics
    (neuron_stats_part, temporary: joined into :func:`neurons`)."""
    return f"{checkpoint_dir(model, revision)}/neurons-parts/layers-{layers}.parquet"


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
    return f"{_roots.results}/{model}/pos/valid.parquet"


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
    return f"{_roots.results}/{model}/training"


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
    return f"{_roots.figures}/{'/'.join((name, *parts))}.png"


# ---------------------------------------------------------------- report
def replication_md() -> str:
    """The claims table (Markdown); its JSON and HTML beside it."""
    return f"{_roots.results}/replication.md"


def replication_json() -> str:
    return f"{_roots.results}/replication.json"


def replication_html() -> str:
    return f"{_roots.results}/replication.html"


def explorer(model: str, revision: str) -> str:
    """The neuron explorer's site (a directory)."""
    return f"{checkpoint_dir(model, revision)}/explorer"


def explorer_bundle(model: str, revision: str) -> str:
    """The explorer as one HTML file: Snakemake's single-file report cannot hold a directory."""
    return f"{checkpoint_dir(model, revision)}/explorer.html"


def sign_cases(model: str, revision: str) -> str:
    """The gate x up sign cases of the explorer's neurons of a gated model (one row per neuron and case)."""
    return f"{checkpoint_dir(model, revision)}/explorer_sign_cases.parquet"


def report() -> str:
    """Snakemake's single-file report (``snakemake --report``, after the DAG: ``make report``)."""
    return f"{_roots.results}/report.html"
