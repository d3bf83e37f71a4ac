"""``wneurons summary`` and the table ``wneurons run`` prints when it succeeds (as lm-eval prints one): per model and
revision, the clean model and every ablation condition of the config's grid, with each benchmark's headline score and
its n, read from the per-condition result JSONs that exist (the grid: :mod:`wneurons.experiment.grid`; the paths:
:mod:`wneurons.experiment.paths`; random trials pooled as the aggregate job pools them,
:func:`wneurons.jobs.ablate.pooled_conditions`). The claims report's summary with paired CIs is another table:
:func:`wneurons.report.replication.results_summary`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from wneurons.experiment import paths, targets
from wneurons.experiment.grid import benchmarks_at, condition_key, conditions_scored
from wneurons.jobs.ablate import check_matched_gaps, pooled_conditions
from wneurons.store import io


class Headline(NamedTuple):
    """A benchmark's column: the score field of its JSON, the count field, the column's name and the scale shown."""

    score: str
    count: str
    title: str
    scale: float
    digits: int


HEADLINES = {
    "blimp": Headline("overall", "n_pairs", "BLiMP % (pairs)", 100.0, 1),
    "tse": Headline("overall", "n_items", "TSE % (items)", 100.0, 1),
    "ppl": Headline("perplexity", "n_tokens", "perplexity (tokens)", 1.0, 2),
    "capability": Headline("overall", "n_items", "capability % (items)", 100.0, 1),
}
MISSING = "—"


def _cell(scores: dict, sem: dict | None, headline: Headline) -> str:
    """``71.2 ±0.3 (402)``: the score, its SEM over trials where pooled, and n."""
    value = scores.get(headline.score)
    if value is None:
        return MISSING
    text = f"{headline.scale * value:.{headline.digits}f}"
    spread = (sem or {}).get(headline.score)
    if spread is not None:
        text += f" ±{headline.scale * spread:.{headline.digits}f}"
    count = scores.get(headline.count)
    return text + (f" ({count:g})" if count is not None else "")


NOTES = ("n_trials", "matched_percent", "matched_converged")  # what a condition's label says of it


def _label(key: str, notes: dict) -> str:
    """The condition key, with its trial count (random) or the lowest-WD percent that matched W (matched; "not
    matched" where the perplexity gap or the search missed, :func:`wneurons.jobs.ablate.check_matched_gaps`)."""
    if notes.get("n_trials", 1) > 1:
        return f"{key} x{notes['n_trials']} trials"
    if notes.get("matched_percent") is not None:
        missed = ", not matched" if notes.get("matched_converged") is False else ""
        return f"{key} (m={notes['matched_percent']:.3g}%{missed})"
    return key


def _read(path: str, workdir: Path) -> dict | None:
    file = workdir / path
    return io.read_json(file) if file.is_file() else None


def summary_rows(config: dict, workdir: str | os.PathLike = ".") -> tuple[list[dict], int, int]:
    """One row per model, revision and condition ("clean" first) with a result file: ``{"model", "revision",
    "condition", benchmark: cell text, ...}``; and the number of result files found and expected. ``config``:
    validated; its paths are read under its results_dir, relative to ``workdir``."""
    workdir, rows, found, expected = Path(workdir), [], 0, 0
    with paths.roots_of(config):
        for model, revision in targets.model_revisions(config):
            benchmarks = benchmarks_at(config, model, revision)
            cells: dict[str, dict[str, str]] = {}
            notes: dict[str, dict] = {}
            for benchmark in benchmarks:
                headline = HEADLINES[benchmark]
                conditions = conditions_scored(config, model, revision, benchmark)
                expected += 1 + len(conditions)
                clean = _read(paths.clean(model, revision, benchmark), workdir)
                if clean is not None:
                    cells.setdefault("clean", {})[benchmark] = _cell(clean["scores"], None, headline)
                results = [_read(paths.ablation(model, revision, c, benchmark), workdir) for c in conditions]
                results = [r for r in results if r is not None]
                found += (clean is not None) + len(results)
                pooled = pooled_conditions(results)
                check_matched_gaps(pooled)  # on perplexity: matched_converged
                for key, condition in pooled.items():
                    cells.setdefault(key, {})[benchmark] = _cell(condition["scores"], condition.get("sem"), headline)
                    notes.setdefault(key, {}).update({k: condition[k] for k in NOTES if k in condition})
            grid_order = ["clean", *(condition_key(c.scope, c.selector, c.percent) for c in
                                     conditions_scored(config, model, revision, benchmarks[0]))]  # fmt: skip
            for key in dict.fromkeys(k for k in grid_order + list(cells) if k in cells):
                row = {"model": model, "revision": revision, "condition": _label(key, notes.get(key, {}))}
                rows.append(row | {b: cells[key].get(b, MISSING) for b in benchmarks})
    return rows, found, expected


def summary_table(rows: list[dict]) -> list[str]:
    """The rows of :func:`summary_rows` as a Markdown table, columns aligned (benchmarks no row has left out)."""
    benchmarks = [b for b in HEADLINES if any(b in row for row in rows)]
    header = ["model", "revision", "condition", *(HEADLINES[b].title for b in benchmarks)]
    body = [[row["model"], row["revision"], row["condition"], *(row.get(b, MISSING) for b in benchmarks)]
            for row in rows]  # fmt: skip
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    numeric = range(3, len(header))  # right-aligned, as numbers are

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if i in numeric else c.ljust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))) + " |"  # fmt: skip

    rule = "|" + "|".join(("-" * (w + 1) + ":") if i in numeric else "-" * (w + 2) for i, w in enumerate(widths)) + "|"
    return [line(header), rule, *map(line, body)]


def summary_lines(config: dict, workdir: str | os.PathLike = ".") -> list[str]:
    """What ``wneurons summary`` prints: where the results are and how many of the grid's result files exist, then
    :func:`summary_table` (accuracy in %, perplexity; random: mean ±SEM over its trials; n in brackets)."""
    rows, found, expected = summary_rows(config, workdir)
    where = f"{config.get('results_dir', paths.RESULTS)}/"
    head = f"{where}: {found} of the grid's {expected} scored result files"
    if not rows:
        return [f"{head}: nothing to summarise yet"]
    return [f"{head} (random: mean ±SEM over trials; n in brackets)", *summary_table(rows)]
