"""Neuron explorer: a static site per (model, revision) to look at Wasserstein neurons, no server and no build step.

``index.html`` lists the top-WD neurons of each layer (sortable by WD, negative share, MD; a small inline script,
no CDN, works offline); ``L{layer}_N{neuron}.html`` shows one neuron: its standardized pre-activation histogram
with N(0,1) overlaid and the bars split by the raw sign, its WD and the split, MD and ranks, its most
differentiated token pairs with POS and NN/PN/PP labels (from the pair sample of the analyses, when there is
one), its most negative and most positive contexts in WikiText-2 test, and its WD across checkpoints.

Every text that comes from data is escaped with :func:`html.escape`; JSON embedded in a page escapes ``<``,
``>`` and ``&`` so that a token like ``</script>`` cannot end the script element. Histograms are drawn here as
inline SVG, so a neuron page needs no script at all.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from wneurons.store import io

HIST_RANGE = (-6.0, 6.0)  # standardized units; values outside are counted in the edge bins
SORT_KEYS = ("layer", "neuron", "wd", "neg_share", "neg_per_token", "md", "wd_rank", "md_rank")


def page_name(layer: int, neuron: int) -> str:
    return f"L{int(layer)}_N{int(neuron)}.html"


def embed_json(obj: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&`` survives literally."""
    text = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def sign_histogram(y: np.ndarray, bins: int = 80) -> dict:
    """Histogram of one neuron's standardized pre-activations (ddof=0) on HIST_RANGE, split by the raw sign.

    Returns edges, ``negative`` / ``positive`` counts (raw y < 0 / >= 0; values outside the range clipped into
    the edge bins), the density scale (1 / (N * bin width)), n and the standardized position of raw zero.
    """
    y = np.asarray(y, dtype=np.float64)
    mean, std = y.mean(), y.std()
    if not std > 0:
        raise ValueError("explorer: constant neuron (std 0) has no standardized histogram")
    z = np.clip((y - mean) / std, *HIST_RANGE)
    edges = np.linspace(*HIST_RANGE, bins + 1)
    neg, _ = np.histogram(z[y < 0], bins=edges)
    pos, _ = np.histogram(z[y >= 0], bins=edges)
    return {
        "edges": edges.tolist(),
        "negative": neg.tolist(),
        "positive": pos.tolist(),
        "n": int(y.size),
        "density_scale": 1.0 / (y.size * (edges[1] - edges[0])),
        "zero_at": float(-mean / std),
    }


def extreme_positions(y: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the ``k`` most negative (most negative first) and ``k`` most positive values (largest first)."""
    y = np.asarray(y)
    k = min(k, y.size)
    low = np.argpartition(y, k - 1)[:k]
    high = np.argpartition(-y, k - 1)[:k]
    return low[np.argsort(y[low], kind="stable")], high[np.argsort(-y[high], kind="stable")]


# ---------------------------------------------------------------- HTML
_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border-bottom:1px solid #ddd;padding:.2em .6em;text-align:left}
th button{font:inherit;font-weight:bold;background:none;border:0;cursor:pointer;padding:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}.tok{background:#fde68a;font-weight:bold}
.ctx{font-family:ui-monospace,monospace;white-space:pre-wrap}.note{color:#666}
.nn{color:#b91c1c}.pn{color:#7c3aed}.pp{color:#1d4ed8}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(x: Any, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def _page(title: str, body: str, script: str = "") -> str:
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>\n{body}\n{script}</body></html>\n"
    )


def histogram_svg(hist: dict, width: int = 640, height: int = 260) -> str:
    """Stacked bars (raw negative below raw positive) as densities, N(0,1) as a curve, raw zero as a dashed line."""
    edges = np.asarray(hist["edges"])
    neg = np.asarray(hist["negative"]) * hist["density_scale"]
    pos = np.asarray(hist["positive"]) * hist["density_scale"]
    grid = np.linspace(edges[0], edges[-1], 241)
    normal = np.exp(-(grid**2) / 2) / math.sqrt(2 * math.pi)
    top = max(float((neg + pos).max()), float(normal.max())) * 1.05
    pad = 30

    def sx(v):
        return pad + (v - edges[0]) / (edges[-1] - edges[0]) * (width - 2 * pad)

    def sy(v):
        return height - pad - v / top * (height - 2 * pad)

    parts = [f"<svg class='hist' xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img'>"]
    for lo, hi, n, p in zip(edges[:-1], edges[1:], neg, pos, strict=True):
        x, w = sx(lo), max(sx(hi) - sx(lo) - 0.5, 0.5)
        if n > 0:
            parts.append(
                f"<rect class='bar neg' x='{x:.1f}' y='{sy(n):.1f}' width='{w:.1f}' "
                f"height='{sy(0) - sy(n):.1f}' fill='#dc2626'/>"
            )
        if p > 0:
            parts.append(
                f"<rect class='bar pos' x='{x:.1f}' y='{sy(n + p):.1f}' width='{w:.1f}' "
                f"height='{sy(n) - sy(n + p):.1f}' fill='#2563eb'/>"
            )
    points = " ".join(f"{sx(g):.1f},{sy(v):.1f}" for g, v in zip(grid, normal, strict=True))
    parts.append(f"<polyline class='normal' points='{points}' fill='none' stroke='#111' stroke-width='1.5'/>")
    z0 = hist["zero_at"]
    if edges[0] <= z0 <= edges[-1]:
        parts.append(
            f"<line x1='{sx(z0):.1f}' x2='{sx(z0):.1f}' y1='{pad}' y2='{sy(0):.1f}' "
            "stroke='#555' stroke-dasharray='4 3'/>"
        )
    parts.append(f"<line x1='{pad}' x2='{width - pad}' y1='{sy(0):.1f}' y2='{sy(0):.1f}' stroke='#999'/>")
    for tick in range(int(edges[0]), int(edges[-1]) + 1, 2):
        parts.append(f"<text x='{sx(tick):.1f}' y='{height - 10}' font-size='11' text-anchor='middle'>{tick}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _marked(context: str) -> str:
    """A pair-sample context (token in ``[[ ]]``, as the analyses write it), escaped, with the token highlighted."""
    return re.sub(r"\[\[(.*?)\]\]", r"<span class='tok'>\1</span>", _e(context), count=1, flags=re.S)


def _context_row(c: dict) -> str:
    return (
        f"<tr><td class='num'>{_num(c['y'])}</td><td class='ctx'>{_e(c['left'])}"
        f"<span class='tok'>{_e(c['token'])}</span>{_e(c['right'])}</td></tr>"
    )


def _title(rec: dict) -> str:
    return f"{rec['model']} {rec['revision']} layer {rec['layer']} neuron {rec['neuron']}"


def neuron_html(rec: dict) -> str:
    """One neuron's page from its record (see :func:`wneurons.jobs.report.explorer_job` for the fields)."""
    return _page(_title(rec), neuron_body(rec, "index.html"))


def neuron_body(rec: dict, back: str) -> str:
    """The body of a neuron's page; ``back`` is the link to the index."""
    title = _title(rec)
    stats = [
        ("WD (exact, standardized units)", rec["wd"]),
        ("WD from raw-negative tokens", rec["wd_negative"]),
        ("WD from raw-positive tokens", rec["wd_positive"]),
        ("fraction of tokens negative", rec["frac_negative"]),
        ("negative WD per negative token ÷ positive WD per positive token", rec["neg_per_token"]),
        ("MD", rec["md"]),
        (f"WD rank in layer (of {rec['layer_size']})", rec["wd_rank"]),
        (f"MD rank in layer (of {rec['layer_size']})", rec["md_rank"]),
    ]
    body = [
        f"<p><a href='{_e(back)}'>← all neurons</a></p><h1>{_e(title)}</h1>",
        f"<p class='note'>Layer index {_e(rec['layer'])} (0-based; the paper's figures count from 1).</p>",
        "<table class='stats'>"
        + "".join(f"<tr><th>{_e(k)}</th><td class='num'>{_e(_num(v))}</td></tr>" for k, v in stats)
        + "</table>",
        "<h2>Pre-activation distribution</h2>",
        histogram_svg(rec["histogram"]),
        f"<p class='note'>{_e(rec['histogram']['n'])} tokens of WikiText-2 test (the activation shards), standardized "
        "(mean 0, population std); bars: <span style='color:#dc2626'>raw pre-activation &lt; 0</span> and "
        "<span style='color:#2563eb'>≥ 0</span> (stacked densities), curve: N(0,1), dashed: raw zero. "
        "Values beyond ±6 are counted in the edge bins.</p>",
        "<h2>Most differentiated pairs</h2>",
    ]
    pairs = rec.get("pairs")
    if not pairs:
        body.append(
            f"<p class='pairs-missing'>not computed: {_e(rec.get('pairs_note', 'no pair sample for this model'))}</p>"
        )
    else:
        body.append(
            f"<p class='note'>{_e(rec.get('pairs_note', ''))}</p><table class='pairs'><tr><th>rank</th><th>signs</th>"
            "<th>r</th><th>token i (POS, dep)</th><th>y_i</th><th>token j (POS, dep)</th><th>y_j</th></tr>"
        )
        for p in pairs:
            sign = str(p["sign"]).lower()
            body.append(
                f"<tr><td class='num'>{_e(p['rank'])}</td><td class='{_e(sign)}'>{_e(sign.upper())}</td>"
                f"<td class='num'>{_e(_num(p['r']))}</td>"
                f"<td class='ctx'>{_marked(p['context_i'])}<br>"
                f"<span class='note'>{_e(p['upos_i'])}, {_e(p['dep_i'])}</span></td>"
                f"<td class='num'>{_e(_num(p['y_i']))}</td>"
                f"<td class='ctx'>{_marked(p['context_j'])}<br>"
                f"<span class='note'>{_e(p['upos_j'])}, {_e(p['dep_j'])}</span></td>"
                f"<td class='num'>{_e(_num(p['y_j']))}</td></tr>"
            )
        body.append("</table>")
    for name, key in (("Most negative contexts", "negative_contexts"), ("Most positive contexts", "positive_contexts")):
        body.append(f"<h2>{name}</h2><table class='{key}'><tr><th>y</th><th>context</th></tr>")
        body += [_context_row(c) for c in rec[key]]
        body.append("</table>")
    body.append("<h2>WD across checkpoints</h2>")
    if rec.get("checkpoints"):
        body.append("<table class='checkpoints'><tr><th>revision</th><th>WD</th><th>rank in layer</th></tr>")
        body += [
            f"<tr><td>{_e(c['revision'])}</td><td class='num'>{_e(_num(c['wd']))}</td>"
            f"<td class='num'>{_e(c['rank'])}</td></tr>"
            for c in rec["checkpoints"]
        ]
        body.append("</table>")
    else:
        body.append("<p class='note'>no checkpoints of this model in the run</p>")
    return "\n".join(body)


_INDEX_SCRIPT = """<script>
(function () {
  var rows = JSON.parse(document.getElementById('neurons').textContent);
  var body = document.querySelector('#table tbody');
  var state = {key: 'wd', descending: true};
  function cell(tr, text, numeric) {
    var td = document.createElement('td');
    td.textContent = text;
    if (numeric) td.className = 'num';
    tr.appendChild(td);
  }
  function fmt(v) {
    if (v === null) return '\\u2014';
    return typeof v === 'number' && !Number.isInteger(v) ? v.toPrecision(4) : String(v);
  }
  function render() {
    var k = state.key, sign = state.descending ? -1 : 1;
    rows.sort(function (a, b) {
      var x = a[k], y = b[k];
      if (x === y) return a.layer - b.layer || a.neuron - b.neuron;
      if (x === null) return 1;
      if (y === null) return -1;
      return sign * (x < y ? -1 : 1);
    });
    body.textContent = '';
    rows.forEach(function (r) {
      var tr = document.createElement('tr');
      var td = document.createElement('td'), a = document.createElement('a');
      a.href = r.page; a.textContent = 'L' + r.layer + ' N' + r.neuron;
      td.appendChild(a); tr.appendChild(td);
      ['layer', 'neuron', 'wd', 'neg_share', 'neg_per_token', 'md', 'wd_rank', 'md_rank'].forEach(function (key) {
        cell(tr, fmt(r[key]), true);
      });
      cell(tr, r.top_negative_token, false);
      body.appendChild(tr);
    });
    document.querySelectorAll('th button').forEach(function (b) {
      b.setAttribute('aria-sort', b.dataset.key === k ? (state.descending ? 'descending' : 'ascending') : 'none');
    });
  }
  document.querySelectorAll('th button').forEach(function (b) {
    b.addEventListener('click', function () {
      state.descending = state.key === b.dataset.key ? !state.descending : true;
      state.key = b.dataset.key;
      render();
    });
  });
  render();
})();
</script>"""


def index_html(model: str, revision: str, rows: list[dict], note: str) -> str:
    """The sortable index; rows are embedded as JSON and drawn with textContent (no HTML from data)."""
    return _page(f"{model} {revision}: Wasserstein neurons", index_body(model, revision, rows, note), _INDEX_SCRIPT)


def index_body(model: str, revision: str, rows: list[dict], note: str) -> str:
    labels = {
        "layer": "layer",
        "neuron": "neuron",
        "wd": "WD",
        "neg_share": "negative share of WD",
        "neg_per_token": "neg/pos WD per token",
        "md": "MD",
        "wd_rank": "WD rank",
        "md_rank": "MD rank",
    }
    head = "".join(f"<th><button type='button' data-key='{k}'>{_e(v)}</button></th>" for k, v in labels.items())
    body = (
        f"<h1>Wasserstein neurons of {_e(model)} ({_e(revision)})</h1><p class='note'>{_e(note)}</p>"
        f"<table id='table'><thead><tr><th>page</th>{head}<th>most negative token</th></tr></thead>"
        "<tbody></tbody></table><noscript>This table needs JavaScript to draw; every neuron has its page "
        "L&lt;layer&gt;_N&lt;neuron&gt;.html.</noscript>"
        f"<script type='application/json' id='neurons'>{embed_json(rows)}</script>"
    )
    return body


def bundle_html(model: str, revision: str, rows: list[dict], records: list[dict], note: str) -> str:
    """The whole explorer as ONE file (for the single-file HTML report): the index and every neuron page are
    sections shown one at a time by URL fragment (``#L0_N5``), so the links need no other file."""
    sections = [f"<section id='index' class='view'>{index_body(model, revision, rows, note)}</section>"]
    sections += [
        f"<section id='{page_name(r['layer'], r['neuron'])[:-5]}' class='view'>{neuron_body(r, '#index')}</section>"
        for r in records
    ]
    style = (
        "<style>.view{display:none}.view:target{display:block}"
        "body:not(:has(.view:target)) #index{display:block}</style>"
    )
    return _page(f"{model} {revision}: Wasserstein neurons", style + "\n".join(sections), _INDEX_SCRIPT)


def write_explorer(
    out_dir: str | Path, model: str, revision: str, records: list[dict], note: str, bundle: str | Path | None = None
) -> None:
    """Write index.html and one page per record into ``out_dir`` (atomically, as one directory) and, with
    ``bundle``, the same site as one file (:func:`bundle_html`)."""
    keys = ("layer", "neuron", "wd", "neg_share", "neg_per_token", "md", "wd_rank", "md_rank")
    rows = []
    for rec in records:
        row = {k: (None if isinstance(rec[k], float) and not math.isfinite(rec[k]) else rec[k]) for k in keys}
        neg = rec["negative_contexts"]
        row |= {"page": page_name(rec["layer"], rec["neuron"]), "top_negative_token": neg[0]["token"] if neg else ""}
        rows.append(row)
    with io.atomic_directory(out_dir) as tmp:
        (tmp / "index.html").write_text(index_html(model, revision, rows, note), encoding="utf-8")
        for rec in records:
            (tmp / page_name(rec["layer"], rec["neuron"])).write_text(neuron_html(rec), encoding="utf-8")
    if bundle is not None:
        anchored = [r | {"page": "#" + r["page"][:-5]} for r in rows]
        with io.atomic_output(bundle, ".html") as tmp_file:
            tmp_file.write_text(bundle_html(model, revision, anchored, records, note), encoding="utf-8")


# ---------------------------------------------------------------- a neuron's record (its job: wneurons.jobs.report)
def _ranks(values: np.ndarray) -> np.ndarray:
    """1-based rank by descending value (NaN last, ties by index)."""
    key = np.where(np.isnan(values), -np.inf, values)
    order = np.argsort(-key, kind="stable")
    ranks = np.empty(values.size, dtype=np.int64)
    ranks[order] = np.arange(1, values.size + 1)
    return ranks


def listed_neurons(stats: pl.DataFrame, per_layer: int, layers: list[int] | None) -> pl.DataFrame:
    """The top ``per_layer`` WD neurons of each layer with their WD and MD ranks within the layer."""
    frames = []
    for layer in sorted(stats["layer"].unique().to_list()) if layers is None else layers:
        rows = stats.filter(pl.col("layer") == layer).sort("neuron")
        if rows.height == 0:
            raise ValueError(f"explorer: no neuron statistics for layer {layer}")
        rows = rows.with_columns(
            wd_rank=pl.Series(_ranks(rows["wd"].to_numpy().astype(np.float64))),
            md_rank=pl.Series(_ranks(rows["md"].to_numpy().astype(np.float64))),
            layer_size=pl.lit(rows.height),
        )
        frames.append(rows.filter(pl.col("wd_rank") <= per_layer).sort("wd_rank"))
    return pl.concat(frames)


def token_contexts(tokenizer, ids: np.ndarray, positions: np.ndarray, y: np.ndarray, width: int) -> list[dict]:
    """One neuron's value ``y`` at each of ``positions`` of the token stream ``ids``, with the token and ``width``
    tokens of context on each side, decoded."""
    return [
        {
            "y": float(y[p]),
            "left": tokenizer.decode(ids[max(0, p - width) : p].tolist()),
            "token": tokenizer.decode([int(ids[p])]),
            "right": tokenizer.decode(ids[p + 1 : p + 1 + width].tolist()),
        }
        for p in positions.tolist()
    ]


def pair_note(meta: dict, tags_path: str | None) -> str:
    """What a neuron page says of its pairs: how many, from which split and seed, tagged or not."""
    tagged = "POS / dep from spaCy" if meta["split"] == "validation" and tags_path else "no POS tags"
    return (
        f"top pairs by ratio r among {meta['n_pairs']} pairs of WikiText-2 {meta['split']} tokens "
        f"(pair sample seed {meta['seed']}); {tagged}"
    )


def checkpoint_wd(tables: dict[str, pl.DataFrame], layer: int, neuron: int) -> list[dict]:
    """The neuron's WD and rank in its layer at each other revision (revision -> its neuron table)."""
    out = []
    for revision, table in tables.items():
        rows = table.filter(pl.col("layer") == layer).sort("neuron")
        wd = rows["wd"].to_numpy().astype(np.float64)
        if neuron < wd.size:
            out.append({"revision": revision, "wd": float(wd[neuron]), "rank": int(_ranks(wd)[neuron])})
    return out
