"""The replication layer: paired comparisons from per-item results, and the paper's claims table (C1-C29).

- :func:`paired_comparisons` compares the per-item results (``{benchmark}.items.parquet``, :func:`read_items`) of
  the clean model and every ablation condition of one checkpoint: each comparison the paper makes (W vs clean,
  W vs random, W vs matched, and every control vs clean) per group (overall, BLiMP linguistics term and paradigm,
  TSE family and task) with the paired statistics of :mod:`core.uncertainty`; random controls pooled over trials
  (as the paper's mean; CI: two-stage bootstrap over the neuron draws, then the items; test: the sign test over
  per-item mean differences, named in each row's ``test``) and per trial (exact McNemar); BLiMP / TSE also W of
  each layer group against W of every later group (C14's test).
- :func:`claims_markdown` and :func:`claims_html` render the claims table of ``docs/analyses.md``
  section F (rows from :func:`wneurons.report.claims.claim_rows`), :func:`run_provenance` its provenance.

Their jobs (read the files a rule names, write its outputs) are :mod:`wneurons.jobs.report`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

from wneurons.core.uncertainty import paired_accuracy_difference, paired_perplexity_ratio, window_nll_sums
from wneurons.experiment.grid import ConditionKey, condition_key, parse_condition_key
from wneurons.store import io

# Groups of the per-item tables (the paper's figures break BLiMP down by term, TSE by family).
ITEM_GROUPS = {"blimp": ("linguistics_term", "paradigm"), "tse": ("family", "task"), "capability": ("task",)}
ITEM_COLUMNS = {
    "blimp": ("item", "paradigm", "linguistics_term", "correct"),
    "tse": ("item", "task", "family", "correct"),
    "capability": ("item", "task", "correct"),
    "ppl": ("window", "position", "nll"),
}


def read_items(path: str | Path, benchmark: str) -> pl.DataFrame:
    """One per-item table, sorted by item (by position for ppl); a missing column is an error naming the file."""
    frame = pl.read_parquet(path)
    missing = [c for c in ITEM_COLUMNS[benchmark] if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: per-item {benchmark} table lacks column(s) {', '.join(missing)}")
    return frame.sort("position" if benchmark == "ppl" else "item")


def _comparisons(keys: dict[str, ConditionKey], between_groups: bool = False) -> list[tuple[str, str]]:
    """(reference, condition) pairs: every condition vs clean; W vs random and W vs matched at the same scope/p;
    with ``between_groups``, W of layer group gI vs W of every later group gJ at the same percent (reference gJ,
    condition gI: the drop is how much more gI's ablation costs, the paired test C14 decides on)."""
    pairs = [("clean", key) for key in sorted(keys)]
    for key, c in sorted(keys.items()):
        if c.selector != "wasserstein":
            continue
        for control in ("random", "matched"):
            ref = condition_key(c.scope, control, c.percent)
            if ref in keys:
                pairs.append((ref, key))
    if between_groups:
        groups = sorted(
            (int(c.scope[1:]), key)
            for key, c in keys.items()
            if c.selector == "wasserstein" and c.scope[0] == "g" and c.scope[1:].isdigit()
        )
        for i, (gi, key_i) in enumerate(groups):
            for gj, key_j in groups[i + 1 :]:
                if keys[key_i].percent == keys[key_j].percent and gi != gj:
                    pairs.append((key_j, key_i))
    return pairs


def _trial_views(trials: dict[int, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """[T, n] stacks: one trial alone ("t0"); several trials pooled (the paper's mean), then each alone."""
    each = [(f"t{t}", trials[t][None, :]) for t in sorted(trials)]
    if len(trials) == 1:
        return each
    return [("pooled", np.stack([trials[t] for t in sorted(trials)])), *each]


def _accuracy_rows(
    benchmark: str, clean: pl.DataFrame, tables: dict[str, dict[int, pl.DataFrame]], resamples: int, seed: int
) -> list[dict]:
    groups = ITEM_GROUPS[benchmark]
    outcome = {"clean": {0: clean["correct"].to_numpy()}}
    for key, trials in tables.items():
        for t, frame in trials.items():
            if not frame["item"].equals(clean["item"]):
                raise ValueError(f"{benchmark} items of {key} trial {t} differ from the clean model's items")
            outcome.setdefault(key, {})[t] = frame["correct"].to_numpy()
    masks = [("overall", "all", np.ones(clean.height, dtype=bool))]
    for column in groups:
        values = clean[column].to_numpy()
        masks += [(column, str(v), values == v) for v in np.unique(values)]
    rows = []
    keys = {k: parse_condition_key(k) for k in tables}
    for reference, condition in _comparisons(keys, between_groups=True):
        # The side with trials (random) is viewed pooled and per trial; the other side has one outcome vector.
        side = condition if reference == "clean" else reference
        for trial, stack in _trial_views(outcome[side]):
            ref = outcome["clean"][0][None, :] if reference == "clean" else stack
            cond = stack if reference == "clean" else outcome[condition][0][None, :]
            for kind, group, mask in masks:
                stats = paired_accuracy_difference(ref[:, mask], cond[:, mask], resamples=resamples, seed=seed)
                rows.append(
                    {
                        "benchmark": benchmark,
                        "reference": reference,
                        "condition": condition,
                        "trial": trial,
                        "group_kind": kind,
                        "group": group,
                        **stats,
                    }
                )
    return rows


def _ppl_rows(clean: pl.DataFrame, tables: dict[str, dict[int, pl.DataFrame]], resamples: int, seed: int) -> list:
    ids, clean_sums, counts = window_nll_sums(clean["window"].to_numpy(), clean["nll"].to_numpy())
    sums = {"clean": {0: clean_sums}}
    for key, trials in tables.items():
        for t, frame in trials.items():
            w, s, c = window_nll_sums(frame["window"].to_numpy(), frame["nll"].to_numpy())
            if not (np.array_equal(w, ids) and np.array_equal(c, counts)):
                raise ValueError(f"ppl windows of {key} trial {t} differ from the clean model's windows")
            sums.setdefault(key, {})[t] = s
    rows = []
    keys = {k: parse_condition_key(k) for k in tables}
    for reference, condition in _comparisons(keys):
        side = condition if reference == "clean" else reference
        for trial, stack in _trial_views(sums[side]):
            ref = sums["clean"][0] if reference == "clean" else stack
            cond = stack if reference == "clean" else sums[condition][0]
            stats = paired_perplexity_ratio(ref, cond, counts, resamples=resamples, seed=seed)
            rows.append({"benchmark": "ppl", "reference": reference, "condition": condition, "trial": trial, **stats})
    return rows


def paired_comparisons(
    benchmark: str, clean: pl.DataFrame, tables: dict[str, dict[int, pl.DataFrame]], *, resamples: int, seed: int
) -> pl.DataFrame:
    """One row per comparison (and group, for BLiMP / TSE) of one benchmark at one checkpoint: ``clean`` and
    ``tables`` (condition key -> trial -> table) are per-item tables as :func:`read_items` gives them."""
    if benchmark == "ppl":
        return pl.DataFrame(_ppl_rows(clean, tables, resamples, seed))
    return pl.DataFrame(_accuracy_rows(benchmark, clean, tables, resamples, seed))


# ---------------------------------------------------------------- the claims table
def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def claims_markdown(rows: list[dict], link_base: str | Path) -> str:
    """The claims table as Markdown; sources link relative to ``link_base`` (the directory of the .md file)."""
    import os

    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("holds", "does not hold", "not enough data", "not run")}
    header = ["| id | claim | model | paper | ours | 95% CI | test | verdict | source |", "|---" * 9 + "|"]
    lines = [
        "# Replication: the paper's claims on this run",
        "",
        "One row per claim of `docs/analyses.md` §F and model (paper models, then this run's other models, marked",
        '"not in paper"). Verdicts: ' + ", ".join(f"{k}: {v}" for k, v in counts.items()) + ".",
        f"CIs: {CI_WORDS}",
        "",
        "## Decided on this run",
        "",
    ]
    decided, not_run = _split_rows(rows)
    not_run_title = "## Not run (the files or models these rows need are not in this run)"
    for title, part in (("", decided), (not_run_title, not_run)):
        if title:
            lines += ["", title, ""]
        if not part:
            lines.append("(none)")
            continue
        lines += header
        for r in part:
            links = ", ".join(f"[{Path(s).name}]({os.path.relpath(s, link_base)})" if s != "config" else "config"
                              for s in r["sources"])  # fmt: skip
            cells = [r["id"], r["claim"], r["model"], r["paper"], r["ours"], r["ci"], _test(r), _verdict(r, "**{}**")]
            lines.append("| " + " | ".join(_cell(c) for c in [*cells, links]) + " |")
    return "\n".join(lines) + "\n"


CI_WORDS = (
    "95% percentile bootstraps, paired over items (BLiMP, TSE) or windows (perplexity); one trial's accuracy "
    "difference: the bootstrap's exact limit (no Monte Carlo error); pooled random trials resample the neuron "
    "draws, then the items (two-stage), with as many resamples as bring each endpoint's Monte Carlo error under a "
    "quarter of one item step (stated per row in the paired tables, ci_mc_error). Tests: exact McNemar on one "
    "trial; pooled random trials: exact sign test over per-item mean differences. A difference a claim needs is "
    "also tested for equivalence: its (1 − 2α) interval inside the claim's margin (two one-sided tests at the "
    'claim\'s α) decides "does not hold (equivalent within ±m)". No CI from fewer than 10 items / windows / '
    "neurons or 5 points of a correlation: the reason is given instead."
)


def _test(row: dict) -> str:
    """The test cell, ending with the claim's α and equivalence margin when it has them."""
    extra = [f"α = {row['alpha']:g}" if row.get("alpha") is not None else "", row.get("margin") and
             f"equivalence margin {row['margin']}"]  # fmt: skip
    extra = [e for e in extra if e]
    return row["test"] + (f" [{'; '.join(extra)}]" if extra else "")


def _verdict(row: dict, template: str) -> str:
    """The verdict (through ``template``) followed by what decided it, e.g. "(equivalent within ±1 pt: …)"."""
    return template.format(row["verdict"]) + (f" ({row['note']})" if row.get("note") else "")


def _split_rows(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(rows this run decided: holds / does not hold / not enough data, rows that did not run), each in claim order."""
    return [r for r in rows if r["verdict"] != "not run"], [r for r in rows if r["verdict"] == "not run"]


def claims_html(rows: list[dict], provenance: dict, link_base: str | Path) -> str:
    """The claims table as one self-contained HTML page with the run's provenance; every cell escaped."""
    import html
    import os

    def e(x) -> str:
        return html.escape(str(x), quote=True)

    colour = {"holds": "#15803d", "does not hold": "#b91c1c", "not enough data": "#a16207", "not run": "#6b7280"}
    counts = {v: sum(r["verdict"] == v for r in rows) for v in colour}
    out = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Replication: claims table</title>",
        "<style>body{font:14px/1.4 system-ui,sans-serif;margin:1.5em}table{border-collapse:collapse}"
        "td,th{border-bottom:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}"
        "pre{background:#f6f6f6;padding:.5em;overflow:auto}</style></head><body>",
        "<h1>The paper's claims on this run</h1>",
        "<p>" + ", ".join(f"{e(k)}: {v}" for k, v in counts.items()) + f". CIs: {e(CI_WORDS)}</p>",
        "<table><tr>" + "".join(f"<th>{h}</th>" for h in ("id", "claim", "model", "paper", "ours", "95% CI", "test",
                                                          "verdict", "source")) + "</tr>",
    ]  # fmt: skip
    decided, not_run = _split_rows(rows)
    for r in decided + not_run:  # decided rows first
        links = ", ".join(
            e(s) if s == "config" else f"<a href='{e(os.path.relpath(s, link_base))}'>{e(Path(s).name)}</a>"
            for s in r["sources"]
        )
        cells = [e(r[k]) for k in ("id", "claim", "model", "paper", "ours", "ci")] + [e(_test(r))]
        verdict = f"<b style='color:{colour[r['verdict']]}'>{e(r['verdict'])}</b>" + (
            f" ({e(r['note'])})" if r.get("note") else ""
        )
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in [*cells, verdict, links]) + "</tr>")
    out.append("</table><h2>Provenance</h2><pre>" + e(json.dumps(provenance, indent=2, default=str)) + "</pre>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def run_provenance(run_spec: dict) -> dict:
    """Per model, the provenance block of its clean BLiMP / TSE / perplexity results (when present), + config."""
    models = {}
    for name, spec in run_spec["models"].items():
        blocks = {}
        for bench in ("blimp", "tse", "ppl"):
            path = Path(spec["files"].get(bench, ""))
            if path.is_file():
                blocks[bench] = io.read_json(path).get("provenance", {})
        # family: the configured one, else the loaded model's (its results' provenance), as the schema allows
        family = spec.get("family") or next((b["family"] for b in blocks.values() if b.get("family")), None)
        models[name] = {"revision": spec.get("revision"), "family": family, "results": blocks or "not run"}
    return {"config": run_spec["config"], "data": run_spec["data"], "models": models}
