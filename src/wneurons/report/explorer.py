"""Neuron explorer: a static site per (model, revision) to look at Wasserstein neurons, no server and no build step.

``index.html`` lists every neuron of the clamped (W) sets at the run's percents and the top-WD neurons of each
layer: search by layer / neuron / token, filters (layer, clamped set, sign), sortable columns, and a permalink per
neuron (``index.html#L1_N761`` opens its page; in the single-file bundle the same fragment shows its section), all
from a small inline script, no CDN, offline. ``L{layer}_N{neuron}.html`` shows one neuron: its standardized
pre-activation histogram on a log density axis with ticks, N(0,1) overlaid and the bars split by the raw sign,
its WD and the split, MD and ranks, whether it is clamped at each percent and its rank against the cut, the
tokens with the lowest and highest mean pre-activation, its most differentiated token pairs with POS and NN/PN/PP
labels (from the pair sample of the analyses, when there is one), its most negative and most positive contexts
in WikiText-2 test, its WD across checkpoints and links to its neighbours.

Gated MLPs (SwiGLU / GeGLU): each page shows the neuron's four gate x up sign cases (as GLUScope does): how often
act(gate) * up arises from gate+/up+, gate+/up-, gate-/up+ and gate-/up-, its mean size and share per case, and
the top tokens of each case in context, from the table the rule ``sign_cases`` computes with the model
(:mod:`wneurons.core.sign_cases`; the shards hold the gate only). A family without a gate says "not a gated MLP".

Every text that comes from data is escaped with :func:`html.escape`; JSON embedded in a page escapes ``<``,
``>`` and ``&`` so that a token like ``</script>`` cannot end the script element. Histograms are drawn here as
inline SVG, so a neuron page needs no script at all.

This module renders and writes the site from one record per neuron; what a record holds is computed in
:mod:`wneurons.report.explorer_records` (pure, over arrays and tables) and assembled by
:func:`wneurons.jobs.report.explorer_job`.
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from wneurons.store import io

SORT_KEYS = ("layer", "neuron", "wd", "neg_share", "neg_per_token", "md", "wd_rank", "md_rank", "clamped_at")
INDEX_KEYS = (*SORT_KEYS, "layer_size")
LOG_FLOOR = 1e-4  # the log density axis starts here: one token in 10,000 per standardized unit


def page_name(layer: int, neuron: int) -> str:
    return f"L{int(layer)}_N{int(neuron)}.html"


def embed_json(obj: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&`` survives literally."""
    text = json.dumps(obj, allow_nan=False, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


# ---------------------------------------------------------------- HTML
_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;max-width:70em;color:#222}
table{border-collapse:collapse;margin:.5em 0}td,th{border-bottom:1px solid #ddd;padding:.2em .6em;text-align:left}
th button{font:inherit;font-weight:bold;background:none;border:0;cursor:pointer;padding:0}
td.num{text-align:right;font-variant-numeric:tabular-nums}.tok{background:#fde68a;font-weight:bold}
.ctx{font-family:ui-monospace,monospace;white-space:pre-wrap}.note{color:#666}
.nn{color:#b91c1c}.pn{color:#7c3aed}.pp{color:#1d4ed8}
.tokcell{white-space:pre;font-family:ui-monospace,monospace}.filters label{margin-right:1em}
tr.gate-negative td{background:#fef2f2}td.case{white-space:nowrap}
.filters input[type=search]{width:22em}.clamped{color:#b91c1c;font-weight:bold}nav.neighbours a{margin-right:1em}
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


def histogram_svg(hist: dict, width: int = 640, height: int = 280) -> str:
    """Densities on a log y axis (from :data:`LOG_FLOOR`, decade ticks and labels): raw-negative and raw-positive
    tokens as two overlaid bar series (stacking means nothing on a log axis), N(0,1) as a curve, raw zero as a
    dashed line; x ticks every standardized unit, labelled every two."""
    edges = np.asarray(hist["edges"])
    neg = np.asarray(hist["negative"]) * hist["density_scale"]
    pos = np.asarray(hist["positive"]) * hist["density_scale"]
    grid = np.linspace(edges[0], edges[-1], 241)
    normal = np.exp(-(grid**2) / 2) / math.sqrt(2 * math.pi)
    low = math.log10(LOG_FLOOR)
    high = math.ceil(math.log10(max(float(neg.max()), float(pos.max()), float(normal.max()))) + 0.05)
    left, right, top, bottom = 56, 12, 12, 34

    def sx(v):
        return left + (v - edges[0]) / (edges[-1] - edges[0]) * (width - left - right)

    def sy(v):
        v = math.log10(max(float(v), LOG_FLOOR))
        return height - bottom - (v - low) / (high - low) * (height - top - bottom)

    parts = [f"<svg class='hist' xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
             "aria-label='pre-activation density, log scale'>"]  # fmt: skip
    for decade in range(int(low), high + 1):
        y = sy(10.0**decade)
        parts.append(f"<line class='ytick' x1='{left - 4}' x2='{width - right}' y1='{y:.1f}' y2='{y:.1f}' "
                     "stroke='#e5e7eb'/>")  # fmt: skip
        parts.append(f"<text class='ylabel' x='{left - 6}' y='{y + 4:.1f}' font-size='11' text-anchor='end'>"
                     f"10<tspan dy='-5' font-size='8'>{decade}</tspan></text>")  # fmt: skip
    for cls, values, fill in (("neg", neg, "#dc2626"), ("pos", pos, "#2563eb")):
        for lo, hi, v in zip(edges[:-1], edges[1:], values, strict=True):
            if v <= 0:
                continue
            x, w, y = sx(lo), max(sx(hi) - sx(lo) - 0.5, 0.5), sy(v)
            parts.append(f"<rect class='bar {cls}' x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' "
                         f"height='{sy(LOG_FLOOR) - y:.1f}' fill='{fill}' fill-opacity='0.55'/>")  # fmt: skip
    points = " ".join(f"{sx(g):.1f},{sy(v):.1f}" for g, v in zip(grid, normal, strict=True) if v >= LOG_FLOOR)
    parts.append(f"<polyline class='normal' points='{points}' fill='none' stroke='#111' stroke-width='1.5'/>")
    z0 = hist["zero_at"]
    if edges[0] <= z0 <= edges[-1]:
        parts.append(f"<line x1='{sx(z0):.1f}' x2='{sx(z0):.1f}' y1='{top}' y2='{sy(LOG_FLOOR):.1f}' "
                     "stroke='#555' stroke-dasharray='4 3'/>")  # fmt: skip
    base = sy(LOG_FLOOR)
    parts.append(f"<line x1='{left}' x2='{width - right}' y1='{base:.1f}' y2='{base:.1f}' stroke='#999'/>")
    parts.append(f"<line x1='{left}' x2='{left}' y1='{top}' y2='{base:.1f}' stroke='#999'/>")
    for tick in range(math.ceil(edges[0]), math.floor(edges[-1]) + 1):
        parts.append(f"<line class='xtick' x1='{sx(tick):.1f}' x2='{sx(tick):.1f}' y1='{base:.1f}' "
                     f"y2='{base + 4:.1f}' stroke='#999'/>")  # fmt: skip
        if tick % 2 == 0:
            parts.append(f"<text class='xlabel' x='{sx(tick):.1f}' y='{base + 16:.1f}' font-size='11' "
                         f"text-anchor='middle'>{tick}</text>")  # fmt: skip
    parts.append(f"<text x='{(left + width - right) / 2:.0f}' y='{height - 4}' font-size='11' text-anchor='middle'>"
                 "standardized pre-activation (population std)</text>")  # fmt: skip
    parts.append(f"<text x='12' y='{(top + base) / 2:.0f}' font-size='11' text-anchor='middle' "
                 f"transform='rotate(-90 12 {(top + base) / 2:.0f})'>density (log)</text>")  # fmt: skip
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
        f"<p><a href='{_e(back)}'>← all neurons</a></p>",
        _neighbours(rec),
        f"<h1>{_e(title)}</h1>",
        f"<p class='note'>Layer index {_e(rec['layer'])} (0-based; the paper's figures count from 1). "
        f"Permalink: <a class='permalink' href='{_e(rec.get('permalink', ''))}'>{_e(rec.get('permalink', ''))}</a></p>",
        "<table class='stats'>"
        + "".join(f"<tr><th>{_e(k)}</th><td class='num'>{_e(_num(v))}</td></tr>" for k, v in stats)
        + "</table>",
        _clamped(rec),
        "<h2>Pre-activation distribution</h2>",
        histogram_svg(rec["histogram"]),
        f"<p class='note'>{_e(rec['histogram']['n'])} tokens of WikiText-2 test (the activation shards), standardized "
        "(mean 0, population std); bars: <span style='color:#dc2626'>raw pre-activation &lt; 0</span> and "
        "<span style='color:#2563eb'>≥ 0</span> (each a density, overlaid, on a log axis: the negative tail is "
        "visible), curve: N(0,1), dashed: raw zero. Values beyond ±6 are counted in the edge bins.</p>",
        _sign_cases(rec),
        _top_tokens(rec),
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


def _neighbours(rec: dict) -> str:
    links = [f"<a class='{k}' href='{_e(rec[k])}'>{label}</a>" for k, label in (("previous", "← previous neuron"),
             ("next", "next neuron →"), ("layer_index", "this layer's neurons")) if rec.get(k)]  # fmt: skip
    return f"<nav class='neighbours'>{''.join(links)}</nav>" if links else ""


def _clamped(rec: dict) -> str:
    """Whether the neuron is in the clamped (W) set at each percent, and its WD rank against the set's cut."""
    sets = rec.get("clamped") or []
    if not sets:
        return ""
    rows = "".join(
        f"<tr><td class='num'>{_e(_num(c['percent']))}%</td><td class='{'clamped' if c['in_set'] else ''}'>"
        f"{'clamped' if c['in_set'] else 'not clamped'}</td><td>WD rank {_e(rec['wd_rank'])} vs the cut at rank "
        f"{_e(c['set_size'])} of {_e(rec['layer_size'])}</td></tr>"
        for c in sets
    )
    return (
        "<h2>In the clamped sets</h2><table class='clamped-sets'><tr><th>percent per layer</th><th>W set</th>"
        f"<th>rank</th></tr>{rows}</table>"
    )


CASE_WORDS = {
    "gate+ up+": "act(gate) > 0 scales a positive up: a positive product",
    "gate+ up-": "act(gate) > 0 scales a negative up: a negative product",
    "gate- up+": "a negative gate: act(gate) is small and negative, the product small and negative",
    "gate- up-": "a negative gate times a negative up: a small positive product",
}


def _sign_cases(rec: dict) -> str:
    """The gate x up sign cases of a gated MLP's neuron (GLUScope's four cases): how often each arises over the
    explorer's tokens, the size of its product act(gate) * up, and its top tokens in context; what the page says
    instead for a family without a gate, or when no table was computed."""
    head = "<h2>Gate × up sign cases</h2>"
    if not rec.get("gated"):
        family = f" (family {rec['family']}: one projection before the nonlinearity)" if rec.get("family") else ""
        return f"{head}<p class='note sign-cases-none'>not a gated MLP{_e(family)}: no gate × up sign cases.</p>"
    cases = rec.get("sign_cases")
    if not cases:
        return (
            f"{head}<p class='note sign-cases-none'>not computed: no sign-case table was given to the explorer (the "
            "rule sign_cases makes it for gated models).</p>"
        )
    rows = []
    for c in cases:
        tokens = ", ".join(f"{_e(repr(x['token']))} ({_e(_num(x['y'], 3))})" for x in c["examples"][:5])
        examples = "".join(_context_row(x) for x in c["examples"])
        detail = (
            f"<details><summary>{_e(len(c['examples']))} contexts</summary><table class='case-contexts'>"
            f"<tr><th>act(gate)·up</th><th>context</th></tr>{examples}</table></details>"
            if c["examples"]
            else ""
        )
        negative = " class='gate-negative'" if c["gate_sign"] == "-" else ""
        rows.append(
            f"<tr{negative}><td class='case' title='{_e(CASE_WORDS.get(c['case'], ''))}'>{_e(c['case'])}</td>"
            f"<td class='num'>{_e(c['count'])}</td><td class='num'>{_e(_num(c['fraction'], 3))}</td>"
            f"<td class='num'>{_e(_num(c['mean_abs_product']))}</td><td class='num'>{_e(_num(c['abs_share'], 3))}</td>"
            f"<td class='num'>{_e(_num(c['mean_product']))}</td><td class='tokcell'>{tokens}{detail}</td></tr>"
        )
    gate_negative = sum(c["abs_share"] or 0.0 for c in cases if c["gate_sign"] == "-")
    return (
        f"{head}<p class='note'>Gated MLP: the neuron's output is act(gate)·up; the histogram above is the gate's "
        "pre-activation. Each token falls in one case by the raw signs of gate and up (− : &lt; 0). Clamping the "
        "negative gate pre-activations (the paper's ablation) removes the two gate− rows: here "
        f"<b class='gate-negative-share'>{_e(_num(gate_negative, 3))}</b> of the neuron's Σ|act(gate)·up|.</p>"
        "<table class='sign-cases'><tr><th>case</th><th>tokens</th><th>share of tokens</th>"
        "<th>mean |act(gate)·up|</th><th>share of Σ|act(gate)·up|</th><th>mean act(gate)·up</th>"
        f"<th>top tokens by |act(gate)·up|</th></tr>{''.join(rows)}</table>"
    )


def _top_tokens(rec: dict) -> str:
    tops = rec.get("top_tokens")
    if not tops:
        return ""
    out = [f"<h2>Top tokens by mean pre-activation</h2><p class='note'>{_e(tops.get('note', ''))}</p>"]
    for side, name in (("lowest", "lowest mean"), ("highest", "highest mean")):
        out.append(f"<table class='top-tokens {side}'><tr><th>{name}</th><th>mean y</th><th>count</th></tr>")
        out += [
            f"<tr><td class='tokcell'>{_e(t['token'])}</td><td class='num'>{_e(_num(t['mean']))}</td>"
            f"<td class='num'>{_e(t['count'])}</td></tr>"
            for t in tops[side]
        ]
        out.append("</table>")
    return "\n".join(out)


_INDEX_SCRIPT = """<script>
(function () {
  var rows = JSON.parse(document.getElementById('neurons').textContent);
  var body = document.querySelector('#table tbody');
  var search = document.getElementById('search'), layer = document.getElementById('layer');
  var clamped = document.getElementById('clamped'), sign = document.getElementById('sign');
  var count = document.getElementById('count');
  var state = {key: 'layer', descending: false};
  var labels = {};
  // A permalink index.html#L1_N761 opens that neuron's page; in the one-file bundle the fragment is its section.
  function permalink() {
    var m = /^#(L[0-9]+_N[0-9]+)$/.exec(location.hash);
    if (!m || document.getElementById(m[1])) return false;
    var hit = rows.filter(function (r) { return r.id === m[1]; })[0];
    if (hit) { location.replace(hit.page); return true; }
    count.textContent = m[1] + ' has no page in this explorer (it lists the clamped sets and the top neurons)';
    return false;
  }
  function cell(tr, text, cls) {
    var td = document.createElement('td');
    td.textContent = text;
    if (cls) td.className = cls;
    tr.appendChild(td);
  }
  function fmt(v) {
    if (v === null || v === undefined) return '\\u2014';
    return typeof v === 'number' && !Number.isInteger(v) ? v.toPrecision(4) : String(v);
  }
  // "L1 N761", "l1_n761", "layer 1 neuron 761", "layer 1", "n761", "761" (a neuron), else a token's text
  function matches(r, text) {
    var t = text.trim().toLowerCase();
    if (!t) return true;
    var m = /^(?:l(?:ayer)?\\s*([0-9]+))?[\\s_,:/]*(?:n(?:euron)?\\s*([0-9]+))?$/.exec(t);
    if (m && (m[1] || m[2])) return (!m[1] || r.layer === +m[1]) && (!m[2] || r.neuron === +m[2]);
    if (/^[0-9]+$/.test(t)) return r.neuron === +t;
    return r.tokens.some(function (tok) { return tok.trim().toLowerCase().indexOf(t) >= 0; });
  }
  function shown(r) {
    if (layer.value !== '' && r.layer !== +layer.value) return false;
    if (clamped.value === 'any' && r.clamped_at === null) return false;
    if (clamped.value !== '' && clamped.value !== 'any' && !(r.clamped_at !== null && r.clamped_at <= +clamped.value))
      return false;
    if (sign.value === 'negative' && !(r.neg_share > 0.5)) return false;
    if (sign.value === 'positive' && !(r.neg_share <= 0.5)) return false;
    return matches(r, search.value);
  }
  function render() {
    var k = state.key, dir = state.descending ? -1 : 1;
    rows.sort(function (a, b) {
      var x = a[k], y = b[k];
      if (x === y) return a.layer - b.layer || a.wd_rank - b.wd_rank;
      if (x === null) return 1;
      if (y === null) return -1;
      return dir * (x < y ? -1 : 1);
    });
    body.textContent = '';
    var n = 0;
    rows.forEach(function (r) {
      if (!shown(r)) return;
      n += 1;
      var tr = document.createElement('tr');
      tr.id = 'row-' + r.id;
      var td = document.createElement('td'), a = document.createElement('a');
      a.href = r.page; a.textContent = 'L' + r.layer + ' N' + r.neuron;
      td.appendChild(a); tr.appendChild(td);
      ['wd', 'neg_share', 'neg_per_token', 'md', 'wd_rank', 'md_rank'].forEach(function (key) {
        cell(tr, fmt(r[key]), 'num');
      });
      cell(tr, r.clamped_at === null ? '' : r.clamped_at + '%', r.clamped_at === null ? '' : 'clamped');
      cell(tr, r.top_negative_token, 'tokcell');
      cell(tr, r.low_tokens.join(' | '), 'tokcell');
      body.appendChild(tr);
    });
    if (!/^#L[0-9]+_N[0-9]+$/.test(location.hash) || document.getElementById(location.hash.slice(1)))
      count.textContent = n + ' of ' + rows.length + ' neurons shown';
    document.querySelectorAll('th button').forEach(function (b) {
      var on = b.dataset.key === k;
      b.setAttribute('aria-sort', on ? (state.descending ? 'descending' : 'ascending') : 'none');
      b.textContent = labels[b.dataset.key] + (on ? (state.descending ? ' \\u25bc' : ' \\u25b2') : '');
    });
  }
  function remember() {
    try { history.replaceState(null, '', search.value ? '#q=' + encodeURIComponent(search.value) : '#index'); }
    catch (e) { /* a file: URL that refuses it: the filter still works */ }
  }
  document.querySelectorAll('th button').forEach(function (b) {
    labels[b.dataset.key] = b.textContent;
    b.addEventListener('click', function () {
      state.descending = state.key === b.dataset.key ? !state.descending : b.dataset.key !== 'layer';
      state.key = b.dataset.key;
      render();
    });
  });
  [search, layer, clamped, sign].forEach(function (el) {
    ['input', 'change'].forEach(function (kind) {
      el.addEventListener(kind, function () { if (el === search) remember(); render(); });
    });
  });
  if (location.hash.indexOf('#q=') === 0) search.value = decodeURIComponent(location.hash.slice(3));
  window.addEventListener('hashchange', function () {
    if (location.hash.indexOf('#q=') === 0) { search.value = decodeURIComponent(location.hash.slice(3)); render(); }
    else if (!permalink()) render();
  });
  if (!permalink()) render();
})();
</script>"""


def index_html(model: str, revision: str, rows: list[dict], note: str) -> str:
    """The index: rows embedded as JSON and drawn with textContent (no HTML from data), with search and filters."""
    return _page(f"{model} {revision}: Wasserstein neurons", index_body(model, revision, rows, note), _INDEX_SCRIPT)


COLUMN_WORDS = {
    "WD": "Wasserstein distance of the neuron's standardized pre-activations to N(0,1).",
    "negative share of WD": "the part of WD from tokens whose raw pre-activation is negative, as a share of WD.",
    "neg/pos WD per token": "negative WD per negative token divided by positive WD per positive token (> 1: the "
    "negative tail carries more non-Gaussianity per token).",
    "clamped at": "the smallest percent per layer whose W set (top-WD neurons, the ablation's selection) holds the "
    "neuron; empty: in none.",
    "most negative token": "the token at the neuron's most negative pre-activation in WikiText-2 test.",
    "lowest-mean tokens": "tokens (seen at least a few times) with the lowest mean pre-activation.",
}


def index_body(model: str, revision: str, rows: list[dict], note: str) -> str:
    labels = {
        "layer": "neuron",
        "wd": "WD",
        "neg_share": "negative share of WD",
        "neg_per_token": "neg/pos WD per token",
        "md": "MD",
        "wd_rank": "WD rank",
        "md_rank": "MD rank",
        "clamped_at": "clamped at",
    }
    head = "".join(f"<th><button type='button' data-key='{k}'>{_e(v)}</button></th>" for k, v in labels.items())
    layers = sorted({int(r["layer"]) for r in rows if r.get("layer") is not None})
    percents = sorted({float(r["clamped_at"]) for r in rows if r.get("clamped_at") is not None})
    layer_options = "".join(f"<option value='{v}'>layer {v}</option>" for v in layers)
    clamp_options = "".join(f"<option value='{_e(_num(p))}'>clamped at ≤ {_e(_num(p))}%</option>" for p in percents)
    words = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in COLUMN_WORDS.items())
    links = "".join(
        f"<li><a href='{_e(r.get('page', ''))}'>L{_e(r.get('layer'))} N{_e(r.get('neuron'))}</a></li>" for r in rows
    )
    return (
        f"<h1>Wasserstein neurons of {_e(model)} ({_e(revision)})</h1><p class='note'>{_e(note)}</p>"
        "<div class='filters'><label>search <input type='search' id='search' "
        "placeholder='L1 N761, layer 3, neuron 42 or a token'></label>"
        f"<label>layer <select id='layer'><option value=''>all</option>{layer_options}</select></label>"
        "<label>clamped <select id='clamped'><option value=''>all listed</option>"
        f"<option value='any'>in a clamped set</option>{clamp_options}</select></label>"
        "<label>sign <select id='sign'><option value=''>any</option><option value='negative'>negative share &gt; "
        "0.5</option><option value='positive'>negative share ≤ 0.5</option></select></label>"
        "<span id='count' class='note'></span></div>"
        f"<table id='table'><thead><tr>{head}<th>most negative token</th><th>lowest-mean tokens</th></tr></thead>"
        f"<tbody></tbody></table><details><summary>What the columns mean</summary><dl>{words}</dl></details>"
        f"<noscript><p>Search and sorting need JavaScript; every neuron's page:</p><ul>{links}</ul></noscript>"
        f"<script type='application/json' id='neurons'>{embed_json(rows)}</script>"
    )


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


def index_rows(records: list[dict]) -> list[dict]:
    """The index's rows of neuron records (non-finite numbers as null), in (layer, neuron) order, with each row's
    page, id (``L1_N761``, the permalink's fragment) and the tokens the search matches."""
    rows = []
    for rec in sorted(records, key=lambda r: (r["layer"], r["neuron"])):
        row = {k: rec.get(k) for k in INDEX_KEYS}
        row = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
        neg = rec["negative_contexts"]
        tops = rec.get("top_tokens") or {}
        low = [t["token"] for t in tops.get("lowest", [])]
        high = [t["token"] for t in tops.get("highest", [])]
        name = page_name(rec["layer"], rec["neuron"])
        row |= {"page": name, "id": name[:-5], "top_negative_token": neg[0]["token"] if neg else "",
                "low_tokens": low[:5], "tokens": [neg[0]["token"]] * bool(neg) + low + high}  # fmt: skip
        rows.append(row)
    return rows


def _linked(records: list[dict], page, index: str) -> list[dict]:
    """Records with their permalink and the links to the previous / next neuron (layer, neuron order) and to
    the index filtered to their layer; ``page`` maps a record's page name to its link."""
    ordered = sorted(records, key=lambda r: (r["layer"], r["neuron"]))
    names = [page_name(r["layer"], r["neuron"]) for r in ordered]
    out = []
    for i, rec in enumerate(ordered):
        out.append(rec | {
            "permalink": f"{index}#{names[i][:-5]}",
            "previous": page(names[i - 1]) if i > 0 else "",
            "next": page(names[i + 1]) if i + 1 < len(ordered) else "",
            "layer_index": f"{index}#q=" + f"L{rec['layer']}",
        })  # fmt: skip
    return out


def write_explorer(
    out_dir: str | Path, model: str, revision: str, records: list[dict], note: str, bundle: str | Path | None = None
) -> None:
    """Write index.html and one page per record into ``out_dir`` (atomically, as one directory) and, with
    ``bundle``, the same site as one file (:func:`bundle_html`)."""
    rows = index_rows(records)
    with io.atomic_directory(out_dir) as tmp:
        (tmp / "index.html").write_text(index_html(model, revision, rows, note), encoding="utf-8")
        for rec in _linked(records, lambda name: name, "index.html"):
            (tmp / page_name(rec["layer"], rec["neuron"])).write_text(neuron_html(rec), encoding="utf-8")
    if bundle is not None:
        anchored = [r | {"page": "#" + r["id"]} for r in rows]
        linked = _linked(records, lambda name: "#" + name[:-5], "")
        with io.atomic_output(bundle, ".html") as tmp_file:
            tmp_file.write_text(bundle_html(model, revision, anchored, linked, note), encoding="utf-8")
