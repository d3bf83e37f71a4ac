"""The notebook path: the workflow's science on any transformers causal LM, in a few lines, without Snakemake.

    from wneurons import api
    table = api.wd_table(model, tokenizer, text)              # one row per (layer, neuron): wd, md, ...
    w = api.Condition.top_wd(table, percent=1)                # the paper's W set: top 1% WD of every layer
    with api.applied(model, w):                               # negative pre-activations clamped to 0
        acc = api.pair_accuracy(model, tokenizer, good, bad)  # BLiMP-style minimal pairs
    saved = api.Condition.from_result("results/m/main/ablations/.../blimp.json")  # a run's own condition

Every function is the one the workflow's jobs call (wneurons.lm.activations, wneurons.core.stats,
wneurons.core.selection, wneurons.lm.ablation, wneurons.lm.scoring); examples/notebook.py runs it end to end.
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

__all__ = ["Condition", "applied", "pair_accuracy", "wd_table"]


def wd_table(
    model,
    tokenizer,
    text: str,
    *,
    window: int = 2048,
    max_tokens: int | None = None,
    md_pairs: int | None = None,
    layers: list[int] | None = None,
    shard_dir: str | os.PathLike | None = None,
) -> pl.DataFrame:
    """The neurons table of ``model`` over ``text``: one row per (layer, neuron), 0-based, with ``wd`` (the
    Wasserstein distance of its standardized pre-activations to a standard normal), its negative / positive split,
    moments and, with ``md_pairs``, mapping difficulty. ``text`` is cut into whole windows of ``window`` tokens (at
    most ``max_tokens``). Activation shards go to ``shard_dir`` (default: a temporary directory, removed after)."""
    from wneurons.core.stats import neuron_statistics
    from wneurons.lm.activations import collect_activation_shards

    with contextlib.ExitStack() as stack:
        out = Path(shard_dir) if shard_dir else Path(stack.enter_context(tempfile.TemporaryDirectory())) / "shards"
        n_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
        usable = min(n_tokens, max_tokens or n_tokens) // window * window
        md_tokens = min(usable, 2 * md_pairs if md_pairs else 2)
        collect_activation_shards(
            model, tokenizer, text, out, window=window, max_tokens=max_tokens, md_tokens=md_tokens, layers=layers
        )
        return neuron_statistics(out, md_pairs=md_pairs, layers=layers)


@dataclasses.dataclass(frozen=True)
class Condition:
    """A set of neurons (layer -> sorted neuron indices, 0-based) and how their pre-activations are clamped:
    ``negative`` (max(a, 0), the paper's ablation), ``positive`` (min(a, 0)) or ``both`` (0)."""

    neurons: dict[int, list[int]]
    mode: str = "negative"

    @classmethod
    def top_wd(cls, table: pl.DataFrame, percent: float, mode: str = "negative", rule: str = "authors") -> Condition:
        """The top ``percent`` of each layer's neurons by WD (``rule``: the count rule, as ablation.count_rule)."""
        from wneurons.core.selection import select_neurons

        layers = sorted(table["layer"].unique().to_list())
        chosen = select_neurons(table, "wasserstein", percent, layers, rule=rule)
        return cls({layer: ids.tolist() for layer, ids in chosen.items()}, mode)

    @classmethod
    def from_result(cls, path: str | os.PathLike) -> Condition:
        """The condition a result file of the workflow records (its ``condition``: ``neurons`` and ``mode``), e.g.
        ``results/{model}/{revision}/ablations/{scope}/{selector}/{percent}/{trial}/blimp.json``; or a file
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
    model, tokenizer, good: Sequence[str], bad: Sequence[str], *, convention: str = "authors", batch_size: int = 64
) -> float:
    """Share of minimal pairs whose good sentence the model scores strictly higher (sum of token log-probs; ties
    wrong, under ``convention``: docs/conventions.md), as the workflow scores BLiMP and TSE."""
    from wneurons.lm.scoring import score_minimal_pairs

    correct = score_minimal_pairs(model, tokenizer, good, bad, convention=convention, batch_size=batch_size)
    return float(np.mean(correct))
