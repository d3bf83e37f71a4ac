"""The replication layer: paired comparisons from per-item results, and the paper's claims table (C1-C30).

- :func:`paired_comparisons` compares the per-item results (``{benchmark}.items.parquet``, :func:`read_items`) of
  the clean model and every ablation condition of one checkpoint: each comparison the paper makes (W vs clean,
  W vs random, W vs matched, and every control vs clean) per group (overall, BLiMP linguistics term and paradigm,
  TSE family and task) with the paired statistics of :mod:`core.uncertainty`; random controls pooled over trials
  (as the paper's mean; CI: two-stage bootstrap over the neuron draws, then the items; test: the sign test over
  per-item mean differences, named in each row's ``test``) and per trial (exact McNemar); BLiMP / TSE also W of
  each layer group against W of every later group (C14's test).
- :func:`results_summary`: per model, benchmark and all-layer percent, the clean score and W / random / matched
  with their paired change vs clean and its CI (from the aggregates and the paired tables).
- :func:`claims_markdown` and :func:`claims_html` render that summary and the claims table of
  ``docs/analyses.md`` section F (rows from :func:`wneurons.report.claims.claim_rows`) in sections
  (:func:`row_section`: decided on the run's models, not enough data, run facts, not run, not applicable, one line
  per absent paper model), cells short with the whole text one click away; :func:`run_provenance` the provenance.

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


# ---------------------------------------------------------------- the results summary
def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


SUMMARY_BENCHMARKS = ("blimp", "tse", "capability", "ppl")
SUMMARY_SELECTORS = ("wasserstein", "random", "matched")


def _paired_cell(frame: pl.DataFrame | None, key: str) -> dict:
    """The paired comparison clean -> ``key`` (random trials pooled) as drop / ratio with its CI, or {}."""
    from wneurons.report.claims.run import NotRun, paired_row

    if frame is None:
        return {}
    try:
        row = paired_row(frame, "clean", key)
    except NotRun:
        return {}
    value = row["ratio"] if "ratio" in row else row["drop"]
    cell = {"change": value, "ci_lo": row["ci_lo"], "ci_hi": row["ci_hi"], "n": row.get("n") or row.get("n_windows")}
    # no CI under the bootstrap's minimum of units: null (JSON), shown as "—"
    return {k: None if isinstance(v, float) and not np.isfinite(v) else v for k, v in cell.items()}


def results_summary(run) -> list[dict]:
    """One row per model, benchmark and all-layer percent of the run: the clean score and, per selector (W,
    random, matched), the condition's score (random: the mean over its trials) with its paired change vs clean
    from the paired tables (accuracy: drop = clean - condition, fractions; perplexity: ratio condition / clean)
    and 95% CI (one trial: exact paired bootstrap; random trials pooled: two-stage). ``run`` is a
    :class:`wneurons.report.claims.Run`; benchmarks without their aggregate are left out."""
    from wneurons.report.claims.run import NotRun

    rows = []
    for model in run.models:
        for bench in SUMMARY_BENCHMARKS:
            try:
                result, source = run.json(model, bench)
            except NotRun:
                continue
            try:
                frame = run.parquet(model, f"paired_{bench}")[0]
            except NotRun:
                frame = None
            field = "perplexity" if bench == "ppl" else "overall"
            percents = sorted({float(parse_condition_key(k).percent) for k in result["conditions"]
                               if parse_condition_key(k).scope == "all"})  # fmt: skip
            for percent in percents or [None]:
                row = {"model": model, "revision": result.get("revision"), "benchmark": bench, "percent": percent,
                       "clean": result["clean"].get(field), "source": source}  # fmt: skip
                for selector in SUMMARY_SELECTORS if percent is not None else ():
                    key = condition_key("all", selector, percent)
                    cond = result["conditions"].get(key)
                    if cond is None:
                        continue
                    row[selector] = {
                        "score": cond["scores"].get(field),
                        "trials": cond.get("n_trials", 1),
                        "matched_percent": cond.get("matched_percent"),
                        **_paired_cell(frame, key),
                    }
                rows.append(row)
    return rows


def _num(x, digits: int = 1, scale: float = 1.0) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "—"
    return f"{scale * x:.{digits}f}"


def _summary_cells(row: dict) -> list[str]:
    """[model, benchmark, percent, clean, W, random, matched] as text: accuracies in %, drops in points with their
    paired 95% CI; perplexity with the ratio to clean."""
    ppl = row["benchmark"] == "ppl"
    scale, digits = (1.0, 2) if ppl else (100.0, 1)
    cells = [row["model"], row["benchmark"], "—" if row["percent"] is None else f"{row['percent']:g}%",
             _num(row["clean"], digits, scale)]  # fmt: skip
    for selector in SUMMARY_SELECTORS:
        c = row.get(selector)
        if not c:
            cells.append("—")
            continue
        text = _num(c["score"], digits, scale)
        if "change" in c:
            if ppl:
                text += f" (×{_num(c['change'], 2)} [{_num(c['ci_lo'], 2)}, {_num(c['ci_hi'], 2)}])"
            else:
                text += f" (drop {_num(c['change'], 1, 100)} [{_num(c['ci_lo'], 1, 100)}, {_num(c['ci_hi'], 1, 100)}])"
        extra = []
        if selector == "random" and c.get("trials", 1) > 1:
            extra.append(f"{c['trials']} trials")
        if selector == "matched" and c.get("matched_percent") is not None:
            extra.append(f"{c['matched_percent']:.3g}% lowest-WD")
        cells.append(text + (f"; {', '.join(extra)}" if extra else ""))
    return cells


SUMMARY_HEADER = ("model", "benchmark", "% per layer", "clean", "W", "random", "matched")
SUMMARY_WORDS = (
    "Scores of every all-layer condition: accuracy in % (BLiMP, TSE, capability suite) or perplexity; in brackets "
    "the paired change vs clean from the paired tables with its 95% CI: accuracy drop in points (clean − "
    "condition; positive = worse), perplexity ratio (condition / clean). Random: the mean of its trials, the CI "
    "pooled over them (two-stage: neuron draws, then items); matched: the lowest-WD percent that matched W's "
    "perplexity."
)


def summary_markdown(summary: list[dict]) -> list[str]:
    """The results summary as Markdown lines (a table, or a line saying there are no results)."""
    if not summary:
        return ["(no scored results in this run)"]
    lines = [SUMMARY_WORDS, "", "| " + " | ".join(SUMMARY_HEADER) + " |", "|---" * len(SUMMARY_HEADER) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in _summary_cells(r)) + " |" for r in summary]
    return lines


# ---------------------------------------------------------------- the claims table
SECTIONS = (  # (key, Markdown / HTML heading, what the section holds)
    ("decided", "Decided on this run's models", "holds or does not hold"),
    ("no data", "Not enough data", "run, but too few items, layers or checkpoints to decide"),
    ("run fact", "Run facts", "claims about the run's setup (C26-C29), not about a model"),
    ("not run", "Not run", "the files or analyses these rows need are not in this run"),
    ("not applicable", "Not applicable", "analyses these models cannot have"),
)
ABSENT = "is not in this run's config"  # claims.run.Run.spec's reason, for rows without ``in_run``
SHORT_CELL = 90  # characters of a table cell; the whole text is one click away


def row_section(row: dict) -> str:
    """The table section of a claims row: a key of :data:`SECTIONS`, or "absent" (a paper model not in the run)."""
    if row["verdict"] == "not run":
        if not row.get("applies", True):
            return "not applicable"
        return "absent" if not row.get("in_run", ABSENT not in row["ours"]) else "not run"
    if row.get("run_fact"):
        return "run fact"
    return "no data" if row["verdict"] == "not enough data" else "decided"


def short(text: str, limit: int = SHORT_CELL) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters, with "…" when cut."""
    text = str(text)
    if len(text) <= limit:
        return text
    cut = text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + " …"


def anchor(row: dict) -> str:
    """The id of a row's details: ``c11-smollm2-135m``."""
    return "".join(ch if ch.isalnum() else "-" for ch in f"{row['id']}-{row['model']}".lower()).strip("-")


def _sections(rows: list[dict]) -> dict[str, list[dict]]:
    parts: dict[str, list[dict]] = {key: [] for key, *_ in SECTIONS} | {"absent": []}
    for r in rows:
        parts[row_section(r)].append(r)
    return parts


def _absent_models(rows: list[dict]) -> dict[str, list[str]]:
    """{paper model (row label): claim ids} of the rows that only say the model is not in the run."""
    out: dict[str, list[str]] = {}
    for r in rows:
        out.setdefault(r["model"], []).append(r["id"])
    return out


def _counts(parts: dict[str, list[dict]]) -> str:
    verdicts = ("holds", "does not hold", "not enough data")
    science = parts["decided"] + parts["no data"]
    facts = parts["run fact"]
    text = "On this run's models: " + ", ".join(f"{v}: {sum(r['verdict'] == v for r in science)}" for v in verdicts)
    text += ". Run facts: " + ", ".join(f"{v}: {n}" for v in verdicts if (n := sum(r["verdict"] == v for r in facts)))
    text += (f". Not run: {len(parts['not run'])}; not applicable: {len(parts['not applicable'])}; paper models not "
             f"in this run: {len(_absent_models(parts['absent']))} ({len(parts['absent'])} rows).")  # fmt: skip
    return text


def claims_markdown(
    rows: list[dict], link_base: str | Path, summary: list[dict] | None = None, provenance: dict | None = None
) -> str:
    """The claims table as Markdown: verdict counts, the results ``summary`` (:func:`results_summary`), the rows
    decided on the run's models first, then not enough data, run facts, not run, not applicable, and one line per
    paper model absent from the run; cells are short (:func:`short`) with each row's whole text, test and sources
    under "Details" (linked by :func:`anchor`); sources link relative to ``link_base`` (the .md file's directory);
    then the run's ``provenance``."""
    import os

    def links(r: dict) -> str:
        return ", ".join(f"[{Path(s).name}]({os.path.relpath(s, link_base)})" if s != "config" else "config"
                         for s in r["sources"])  # fmt: skip

    parts = _sections(rows)
    lines = [
        "# Replication: the paper's claims on this run",
        "",
        "One row per claim of `docs/analyses.md` §F and model (paper models, then this run's other models, marked",
        '"not in paper"). ' + _counts(parts),
        "",
        f"CIs: {CI_WORDS}",
        "",
        "## Results: clean, W, random and matched per model and benchmark",
        "",
        *summary_markdown(summary or []),
    ]
    header = ["| id | claim | model | paper | ours | 95% CI | test | verdict | details |", "|---" * 9 + "|"]
    for key, title, words in SECTIONS:
        part = parts[key]
        lines += ["", f"## {title}", "", f"_{words}_", ""]
        if not part:
            lines.append("(none)")
        elif key in ("decided", "no data", "run fact"):
            lines += header
            for r in part:
                cells = [r["id"], r["claim"], r["model"], r["paper"], short(r["ours"]), short(r["ci"]),
                         _test(r, short), _verdict(r, "**{}**", short)]  # fmt: skip
                lines.append("| " + " | ".join(_cell(c) for c in cells) + f" | [details](#{anchor(r)}) |")
        else:
            lines += ["| id | claim | model | why |", "|---" * 4 + "|"]
            for r in part:
                why = r["not_applicable"] if key == "not applicable" else r["ours"]
                lines.append("| " + " | ".join(_cell(c) for c in (r["id"], r["claim"], r["model"], short(why))) + " |")
    absent = _absent_models(parts["absent"])
    lines += ["", "## Paper models not in this run", ""]
    lines += [f"- {m}: {', '.join(ids)}" for m, ids in absent.items()] or ["(none)"]
    lines += ["", "## Details", ""]
    for r in parts["decided"] + parts["no data"] + parts["run fact"]:
        lines += [f'<a id="{anchor(r)}"></a>', "", f"### {r['id']} · {r['model']}: {_verdict(r, '{}')}", ""]
        fields = (("claim", r["claim"]), ("paper", r["paper"]), ("ours", r["ours"]), ("95% CI", r["ci"]),
                  ("test", _test(r)), ("sources", links(r)))  # fmt: skip
        lines += [f"- {name}: {_cell(text)}" for name, text in fields if text]
        lines.append("")
    if provenance is not None:
        lines += ["## Provenance", "", "```json", json.dumps(provenance, indent=2, default=str), "```"]
    return "\n".join(lines).rstrip("\n") + "\n"


CI_WORDS = (
    "95% percentile bootstraps, paired over items (BLiMP, TSE) or windows (perplexity); one trial's accuracy "
    "difference: the bootstrap's exact limit (no Monte Carlo error); pooled random trials resample the neuron "
    "draws, then the items (two-stage), with as many resamples (up to 256,000) as bring each endpoint's 99% Monte "
    "Carlo error bound under half an item step (stated per row in the paired tables, ci_mc_error). Tests: exact "
    "McNemar on one "
    "trial; pooled random trials: exact sign test over per-item mean differences. A difference a claim needs is "
    "also tested for equivalence: its (1 − 2α) interval inside the claim's margin (two one-sided tests at the "
    'claim\'s α) decides "does not hold (equivalent within ±m)". No CI from fewer than 10 items / windows / '
    "neurons or 5 points of a correlation: the reason is given instead."
)


def _identity(text: str) -> str:
    return text


def _test(row: dict, cut=_identity) -> str:
    """The test cell (through ``cut``), ending with the claim's α and equivalence margin when it has them."""
    extra = [f"α = {row['alpha']:g}" if row.get("alpha") is not None else "", row.get("margin") and
             f"equivalence margin {row['margin']}"]  # fmt: skip
    extra = [e for e in extra if e]
    return cut(row["test"]) + (f" [{'; '.join(extra)}]" if extra else "")


def _verdict(row: dict, template: str, cut=_identity) -> str:
    """The verdict (through ``template``) followed by what decided it (through ``cut``), e.g. "(equivalent within
    ±1 pt: …)"."""
    return template.format(row["verdict"]) + (f" ({cut(row['note'])})" if row.get("note") else "")


def claims_html(rows: list[dict], provenance: dict, link_base: str | Path, summary: list[dict] | None = None) -> str:
    """The claims table as one self-contained HTML page (no script): the counts, the results ``summary``, the
    sections of :func:`claims_markdown`, every long cell a ``<details>`` with its whole text one click away, and
    the run's provenance; every cell escaped."""
    import html
    import os

    def e(x) -> str:
        return html.escape(str(x), quote=True)

    def folded(text: str, full: str | None = None) -> str:
        full = text if full is None else full
        if short(full) == full:
            return e(full)
        return f"<details><summary>{e(short(full))}</summary>{e(full)}</details>"

    colour = {"holds": "#15803d", "does not hold": "#b91c1c", "not enough data": "#a16207", "not run": "#6b7280"}
    parts = _sections(rows)
    out = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Replication: claims table</title>",
        "<style>body{font:14px/1.4 system-ui,sans-serif;margin:1.5em}table{border-collapse:collapse}"
        "td,th{border-bottom:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}"
        "td{max-width:28em}summary{cursor:pointer}details[open]{background:#f6f6f6}"
        "pre{background:#f6f6f6;padding:.5em;overflow:auto}</style></head><body>",
        "<h1>The paper's claims on this run</h1>",
        f"<p>{e(_counts(parts))}</p>",
        f"<details><summary>How the CIs and tests are made</summary>{e(CI_WORDS)}</details>",
        "<h2>Results: clean, W, random and matched per model and benchmark</h2>",
    ]
    if summary:
        out.append(f"<p>{e(SUMMARY_WORDS)}</p><table><tr>" + "".join(f"<th>{e(h)}</th>" for h in SUMMARY_HEADER)
                   + "</tr>")  # fmt: skip
        out += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in _summary_cells(r)) + "</tr>" for r in summary]
        out.append("</table>")
    else:
        out.append("<p>(no scored results in this run)</p>")

    def links(r: dict) -> str:
        return ", ".join(
            e(s) if s == "config" else f"<a href='{e(os.path.relpath(s, link_base))}'>{e(Path(s).name)}</a>"
            for s in r["sources"]
        )

    heads = ("id", "claim", "model", "paper", "ours", "95% CI", "test", "verdict", "sources")
    for key, title, words in SECTIONS:
        part = parts[key]
        out.append(f"<h2>{e(title)} ({len(part)})</h2><p><i>{e(words)}</i></p>")
        if not part:
            out.append("<p>(none)</p>")
            continue
        if key in ("decided", "no data", "run fact"):
            out.append("<table><tr>" + "".join(f"<th>{h}</th>" for h in heads) + "</tr>")
            for r in part:
                verdict = f"<b style='color:{colour[r['verdict']]}'>{e(r['verdict'])}</b>" + (
                    f" ({folded(r['note'])})" if r.get("note") else ""
                )
                cells = [e(r[k]) for k in ("id", "claim", "model", "paper")]
                cells += [folded(r["ours"]), folded(r["ci"]), folded(_test(r)), verdict, links(r)]
                out.append(f"<tr id='{anchor(r)}'>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        else:
            out.append("<table><tr><th>id</th><th>claim</th><th>model</th><th>why</th><th>sources</th></tr>")
            for r in part:
                why = r["not_applicable"] if key == "not applicable" else r["ours"]
                cells = [e(r["id"]), e(r["claim"]), e(r["model"]), folded(why), links(r)]
                out.append(f"<tr id='{anchor(r)}'>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        out.append("</table>")
    absent = _absent_models(parts["absent"])
    out.append(f"<h2>Paper models not in this run ({len(absent)})</h2><ul>")
    out += [f"<li>{e(m)}: {e(', '.join(ids))}</li>" for m, ids in absent.items()] or ["<li>(none)</li>"]
    out.append("</ul><h2>Provenance</h2><pre>" + e(json.dumps(provenance, indent=2, default=str)) + "</pre>")
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
