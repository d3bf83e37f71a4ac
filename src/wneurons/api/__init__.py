"""The notebook path: the workflow's science on any transformers causal LM, in a few lines, without Snakemake.

    from wneurons import api
    table = api.wd_table(model, tokenizer, text)              # one row per (layer, neuron): wd, md, ...
    w = api.Condition.top_wd(table, percent=1)                # the paper's W set: top 1% WD of every layer
    with api.applied(model, w):                               # negative pre-activations clamped to 0
        acc = api.pair_accuracy(model, tokenizer, good, bad)  # BLiMP-style minimal pairs
    saved = api.Condition.from_result("results/m/main/ablations/.../blimp.json")  # a run's own condition

A run's own items, conditions and per-item results, for the same numbers as the workflow on the same items:

    config = api.run_config("my.yaml")                          # validated, defaults filled, as the workflow's
    pairs = api.run_items(config, "blimp")                      # the seeded subsample the run scores
    summary, items = api.score(model, tokenizer, "tse", api.run_items(config, "tse"))  # per-item log-probs
    r = api.Condition.of_run(config, "m", table, "random", 1, trial=3)  # the run's random trial 3 at 1%
    matched, search = api.matched_control(model, tokenizer, config, "m", table, 1)  # its perplexity-matched control
    done = api.read_items(config, "m", "main", "blimp", selector="random", percent=1, trial=3)

Every function is the one the workflow's jobs call (wneurons.lm.activations, wneurons.core.stats,
wneurons.core.selection, wneurons.lm.ablation, wneurons.lm.scoring, wneurons.lm.benchmarks, wneurons.experiment.grid);
examples/notebook.py runs it end to end, tests/workflow/test_api_parity.py checks it against a run's files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import polars as pl

__all__ = [
    "Condition",
    "applied",
    "matched_control",
    "pair_accuracy",
    "read_items",
    "run_config",
    "run_items",
    "score",
    "wd_table",
]

# The repository the package was installed from (an editable install): where the workflow's config schema is.
_REPOSITORY = Path(__file__).resolve().parents[3]


def wd_table(
    model,
    tokenizer,
    text: str,
    *,
    window: int = 2048,
    max_tokens: int | None = None,
    md_pairs: int | None = None,
    md_tokens: int | None = None,
    layers: list[int] | None = None,
    shard_dir: str | os.PathLike | None = None,
    window_bos: bool | None = None,
    seed: int = 0,
    shard_dtype: str = "float16",
    wd_method: str = "exact",
) -> pl.DataFrame:
    """The neurons table of ``model`` over ``text``: one row per (layer, neuron), 0-based, with ``wd`` (the
    Wasserstein distance of its standardized pre-activations to a standard normal), its negative / positive split,
    moments and, with ``md_pairs``, mapping difficulty. ``text`` is cut into whole windows of ``window`` tokens (at
    most ``max_tokens``). ``window_bos``: whether each window is fed after a BOS; None decides as the workflow does
    for a config entry without the key (the family's default, else whether the tokenizer prepends one), so the
    table is the run's ``neurons.parquet`` for the same settings (the other keywords are ``neurons.*`` keys of the
    config; ``md_tokens`` None: the ``2 * md_pairs`` positions MD reads). Activation shards go to ``shard_dir``
    (default: a temporary directory, removed after)."""
    from wneurons.core.stats import neuron_statistics
    from wneurons.jobs.base import window_bos_of
    from wneurons.lm.activations import collect_activation_shards

    with contextlib.ExitStack() as stack:
        out = Path(shard_dir) if shard_dir else Path(stack.enter_context(tempfile.TemporaryDirectory())) / "shards"
        if md_tokens is None:
            n_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            usable = min(n_tokens, max_tokens or n_tokens) // window * window
            md_tokens = min(usable, 2 * md_pairs if md_pairs else 2)
        collect_activation_shards(
            model,
            tokenizer,
            text,
            out,
            window=window,
            max_tokens=max_tokens,
            md_tokens=md_tokens,
            layers=layers,
            seed=seed,
            dtype=shard_dtype,
            window_bos=window_bos_of({"window_bos": window_bos}, model, tokenizer)[0],
        )
        return neuron_statistics(out, md_pairs=md_pairs, layers=layers, seed=seed, wd_method=wd_method)


@dataclasses.dataclass(frozen=True)
class Condition:
    """A set of neurons (layer -> sorted neuron indices, 0-based) and how their pre-activations are clamped:
    ``negative`` (max(a, 0), the paper's ablation), ``positive`` (min(a, 0)) or ``both`` (0)."""

    neurons: dict[int, list[int]]
    mode: str = "negative"

    @classmethod
    def select(
        cls,
        table: pl.DataFrame,
        selector: str,
        percent: float,
        *,
        layers: list[int] | None = None,
        seed: int = 0,
        mode: str = "negative",
        rule: str = "authors",
    ) -> Condition:
        """The neurons ``selector`` picks at ``percent`` of each of ``layers`` (default: every layer of ``table``):
        ``wasserstein`` (top WD), ``random`` (as many per layer as wasserstein, drawn with ``seed``), ``lowest`` /
        ``matched`` (bottom WD); ``rule``: the count rule (wneurons.core.selection.select_neurons)."""
        from wneurons.core.selection import select_neurons

        layers = sorted(table["layer"].unique().to_list()) if layers is None else layers
        chosen = select_neurons(table, selector, percent, layers, seed=seed, rule=rule)
        return cls({layer: ids.tolist() for layer, ids in chosen.items()}, mode)

    @classmethod
    def top_wd(cls, table: pl.DataFrame, percent: float, mode: str = "negative", rule: str = "authors") -> Condition:
        """The top ``percent`` of each layer's neurons by WD (``rule``: the count rule, as ablation.count_rule)."""
        return cls.select(table, "wasserstein", percent, mode=mode, rule=rule)

    @classmethod
    def of_run(
        cls,
        config: dict,
        model: str,
        table: pl.DataFrame,
        selector: str,
        percent: float,
        *,
        trial: int = 0,
        scope: str = "all",
    ) -> Condition:
        """The condition a run of ``config`` (:func:`run_config`) scores for ``model``: its scope's layers, the
        trial's seed (random trial t: ``ablation.seed + t``), ``ablation.mode`` and ``ablation.count_rule``, picked
        from ``table`` (the neurons table of the revision whose table chooses, as the run's ``cohort_source``). For
        ``matched``, ``percent`` is the m% its search found (``search.json``'s ``percent``), not W's percent."""
        from wneurons.experiment.grid import layers_for_scope, trial_seed

        ablation = config["ablation"]
        return cls.select(
            table,
            selector,
            percent,
            layers=layers_for_scope(config, model, scope),
            seed=trial_seed(config, trial),
            mode=ablation["mode"],
            rule=ablation["count_rule"],
        )

    @classmethod
    def from_result(cls, path: str | os.PathLike) -> Condition:
        """The condition a result file of the workflow records (its ``condition``: ``neurons`` and ``mode``), e.g.
        ``results/{model}/{revision}/ablations/{scope}/{selector}/p{percent}/t{trial}/blimp.json``; or a file
        written by :meth:`save`."""
        record = json.loads(Path(path).read_text())
        condition = record.get("condition", record)
        if "neurons" not in condition:
            raise ValueError(f"{path}: its condition records no neurons (a clean score?)")
        neurons = {int(layer): [int(i) for i in ids] for layer, ids in condition["neurons"].items()}
        return cls(neurons, condition.get("mode", "negative"))

    def save(self, path: str | os.PathLike) -> None:
        """Write the condition as JSON (``{"neurons": {layer: [...]}, "mode": ...}``), read by :meth:`from_result`."""
        record = {"neurons": {str(k): v for k, v in sorted(self.neurons.items())}, "mode": self.mode}
        Path(path).write_text(json.dumps(record) + "\n")

    def size(self) -> int:
        """Neurons in the set, over all layers."""
        return sum(len(ids) for ids in self.neurons.values())


@contextlib.contextmanager
def applied(model, condition: Condition) -> Iterator[None]:
    """Within the block, every forward of ``model`` clamps the pre-activations of ``condition``'s neurons; the
    hooks are removed on exit, also on an exception (wneurons.lm.ablation.clamp_negative_preactivations)."""
    from wneurons.lm.ablation import clamp_negative_preactivations

    with clamp_negative_preactivations(model, condition.neurons, mode=condition.mode):
        yield


def pair_accuracy(
    model,
    tokenizer,
    good: Sequence[str],
    bad: Sequence[str],
    *,
    benchmark: str = "blimp",
    convention: str = "authors",
    batch_size: int = 64,
) -> float:
    """Share of minimal pairs whose good sentence the model scores strictly higher (ties wrong, under
    ``convention``: docs/conventions.md), as the workflow scores ``benchmark``: BLiMP on the sum of the sentence's
    token log-probs, TSE on their mean per token (wneurons.lm.scoring.PAIR_REDUCTION)."""
    from wneurons.lm.scoring import PAIR_REDUCTION, score_minimal_pairs

    if benchmark not in PAIR_REDUCTION:
        raise ValueError(f"benchmark {benchmark!r} is not a minimal-pair benchmark ({', '.join(PAIR_REDUCTION)})")
    correct = score_minimal_pairs(
        model, tokenizer, good, bad, convention=convention, reduce=PAIR_REDUCTION[benchmark], batch_size=batch_size
    )
    return float(np.mean(correct))


def score(
    model, tokenizer, benchmark: str, items: pl.DataFrame, *, convention: str = "authors", batch_size: int = 64
) -> tuple[dict, pl.DataFrame]:
    """``benchmark`` (``blimp`` or ``tse``) scored on ``items`` (:func:`run_items`, or frames of the same columns)
    by the workflow's own scorer: the summary its ``{benchmark}.json`` records under ``scores`` and the per-item
    frame of its ``{benchmark}.items.parquet`` (log-probs in nats; TSE's are means per token)."""
    from wneurons.lm.benchmarks import BENCHMARKS
    from wneurons.lm.scoring import PAIR_REDUCTION

    if benchmark not in PAIR_REDUCTION:
        raise ValueError(f"benchmark {benchmark!r} is not a minimal-pair benchmark ({', '.join(PAIR_REDUCTION)})")
    evaluation = {"convention": convention, "batch_size": batch_size}
    # window_bos is a perplexity setting: the minimal-pair scorers ignore it.
    return BENCHMARKS[benchmark].score(model, tokenizer, items, evaluation, False)


def matched_control(
    model,
    tokenizer,
    config: dict,
    name: str,
    table: pl.DataFrame,
    percent: float,
    *,
    scope: str = "all",
    workdir: str | os.PathLike = ".",
) -> tuple[Condition, dict]:
    """The perplexity-matched control of W (top ``percent`` WD over ``scope``) for config model ``name``, searched
    as the run's matched_search job searches it (wneurons.jobs.ablate.search_matched_percent): the clean and W
    perplexities of the run's WikiText-2 validation stream under its evaluation settings and window BOS, then the
    lowest-WD m% matching W's. Returns the control (:meth:`Condition.of_run` at m%) and the search's record."""
    from wneurons.experiment import paths
    from wneurons.experiment.grid import evaluation_settings, search_settings
    from wneurons.jobs.ablate import search_matched_percent
    from wneurons.jobs.base import window_bos_of
    from wneurons.lm.benchmarks import score_perplexity, validation_text

    evaluation = evaluation_settings(config, "ppl")
    window_bos = window_bos_of(config["models"][name], model, tokenizer)[0]
    text = validation_text(str(Path(workdir) / paths.benchmark_data("ppl")), evaluation)
    clean = score_perplexity(model, tokenizer, text, evaluation, window_bos)[0]["perplexity"]
    with applied(model, Condition.of_run(config, name, table, "wasserstein", percent, scope=scope)):
        target = score_perplexity(model, tokenizer, text, evaluation, window_bos)[0]["perplexity"]
    search = search_settings(config, name, scope, percent) | {"count_rule": config["ablation"]["count_rule"]}
    record = search_matched_percent(model, tokenizer, table, text, target, clean, evaluation, search, window_bos)
    return Condition.of_run(config, name, table, "matched", record["percent"], scope=scope), record


def run_config(path: str | os.PathLike, workdir: str | os.PathLike | None = None) -> dict:
    """The config at ``path`` validated as the workflow validates it (defaults filled in; relative paths in it are
    read from ``workdir``, default: the config's directory's parent when it is a ``config/`` folder, else its own
    directory). A bad key raises ConfigError with one line naming it."""
    from wneurons.experiment.config import load_yaml_strict, validate_config

    path = Path(path)
    if workdir is None:
        workdir = path.parent.parent if path.parent.name == "config" else path.parent
    return validate_config(load_yaml_strict(path), _REPOSITORY / "workflow/schemas/config.schema.yaml", workdir)


def run_items(config: dict, benchmark: str, workdir: str | os.PathLike = ".") -> pl.DataFrame:
    """The items a run of ``config`` scores on ``benchmark`` (``blimp``, ``tse``): its seeded subsample per
    paradigm / subtask after the configured offset, read from the verified data under ``workdir`` (the run's
    ``resources/data``, written by its fetch_data jobs)."""
    from wneurons.experiment import paths
    from wneurons.experiment.grid import evaluation_settings
    from wneurons.lm.benchmarks import BENCHMARKS

    data_dir = Path(workdir) / paths.benchmark_data(benchmark)
    return BENCHMARKS[benchmark].load(str(data_dir), evaluation_settings(config, benchmark))


def read_items(
    config: dict,
    model: str,
    revision: str,
    benchmark: str,
    *,
    selector: str | None = None,
    percent: float | None = None,
    trial: int = 0,
    scope: str = "all",
    workdir: str | os.PathLike = ".",
) -> pl.DataFrame:
    """A run's per-item results (BLiMP, TSE; per token for ppl) of one checkpoint: the clean model's without
    ``selector``, else the condition's (``scope``, ``selector``, ``percent``, ``trial``), from its results_dir
    under ``workdir``."""
    from wneurons.experiment import paths
    from wneurons.experiment.grid import Condition as GridCondition
    from wneurons.experiment.grid import format_percent

    with paths.roots_of(config):
        if selector is None:
            path = paths.clean_items(model, revision, benchmark)
        else:
            condition = GridCondition(scope, selector, format_percent(percent), trial)
            path = paths.ablation_items(model, revision, condition, benchmark)
    return pl.read_parquet(Path(workdir) / path)
