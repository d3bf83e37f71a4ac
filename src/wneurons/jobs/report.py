"""Jobs of ``workflow/rules/report.smk``: the paired comparisons of one checkpoint, the claims table of a run and the
neuron explorer of one (model, revision). The comparisons and the rendering are :mod:`wneurons.report.replication`,
:mod:`wneurons.report.claims` and :mod:`wneurons.report.explorer`; these jobs read the files and write the outputs.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import polars as pl

from wneurons.experiment.grid import condition_key
from wneurons.jobs.base import configured_tokenizer
from wneurons.store import io

log = logging.getLogger("wneurons")


def paired_job(
    benchmark: str,
    clean_path: str,
    condition_paths: list[str],
    conditions: list[dict],
    out_path: str,
    *,
    resamples: int,
    seed: int,
) -> pl.DataFrame:
    """Paired comparisons of one benchmark at one checkpoint (:func:`wneurons.report.replication.paired_comparisons`);
    ``conditions[i]`` (scope, selector, percent, trial) describes ``condition_paths[i]``. Writes ``out_path``
    (parquet, provenance in its footer) and returns it."""
    from wneurons.report.replication import paired_comparisons, read_items

    start = time.perf_counter()
    if len(condition_paths) != len(conditions):
        raise ValueError(f"{len(condition_paths)} per-item files for {len(conditions)} conditions")
    clean = read_items(clean_path, benchmark)
    tables: dict[str, dict[int, pl.DataFrame]] = defaultdict(dict)
    for path, c in zip(condition_paths, conditions, strict=True):
        tables[condition_key(c["scope"], c["selector"], c["percent"])][int(c["trial"])] = read_items(path, benchmark)
    frame = paired_comparisons(benchmark, clean, tables, resamples=resamples, seed=seed)
    scored = io.read_parquet_metadata(clean_path)  # the clean scoring job's provenance
    meta = {
        **{k: scored.get(k) for k in ("model", "revision", "convention", "data_sha256", "wneurons_version")},
        "benchmark": benchmark,
        "resamples": resamples,
        "seed": seed,
        "ci": "percentile bootstrap 95%, paired: items resampled (ppl: windows); pooled random trials: two-stage "
        "(the neuron draws, then the items); none from fewer than 10 units (column ci_note says why)",
        "test": "per row (column test): exact McNemar on one trial; pooled random trials: exact sign test over "
        "per-item mean differences",
        "clean_items": clean_path,
        "clean_items_sha256": io.sha256_file(clean_path),
        "drop": "acc(reference) - acc(condition); ppl: ratio = ppl(condition) / ppl(reference)",
    }
    io.write_parquet(out_path, frame, metadata=meta)
    log.info("paired %s: %d rows in %.1f s", benchmark, frame.height, time.perf_counter() - start)
    return frame


def replication_table_job(run_spec: dict, out_md: str, out_json: str, out_html: str | None = None) -> list[dict]:
    """Fill the claims table from the result files named in ``run_spec`` (see :class:`wneurons.report.claims.Run`) and
    write it as Markdown, JSON (rows, the results summary of clean / W / random / matched per model and benchmark,
    provenance) and, with ``out_html``, a self-contained HTML page."""
    from wneurons.report.claims import Run, claim_rows
    from wneurons.report.replication import claims_html, claims_markdown, results_summary, row_section, run_provenance

    start = time.perf_counter()
    run = Run(models=run_spec["models"], config=run_spec["config"], data=run_spec["data"])
    rows = claim_rows(run)
    summary = results_summary(run)
    provenance = run_provenance(run_spec)
    io.write_json(out_json, {"claims": rows, "summary": summary, "provenance": provenance})
    with io.atomic_output(out_md, ".md") as tmp:
        tmp.write_text(claims_markdown(rows, Path(out_md).parent, summary=summary, provenance=provenance))
    if out_html:
        with io.atomic_output(out_html, ".html") as tmp:
            tmp.write_text(claims_html(rows, provenance, Path(out_html).parent, summary=summary))
    sections = {k: sum(row_section(r) == k for r in rows) for k in {row_section(r) for r in rows}}
    log.info(
        "replication table: %d rows %s, %d summary rows in %.1f s",
        len(rows),
        sections,
        len(summary),
        time.perf_counter() - start,
    )
    return rows


def _decoded_top_tokens(tokenizer, ids: np.ndarray, y: np.ndarray, k: int, min_count: int, groups) -> dict:
    """:func:`wneurons.report.explorer_records.top_tokens` with each token decoded, and a note of what it is."""
    from wneurons.report.explorer_records import top_tokens

    tops = top_tokens(ids, y, k, min_count, groups)
    out = {side: [t | {"token": tokenizer.decode([t["id"]])} for t in rows] for side, rows in tops.items()}
    return out | {"note": f"mean raw pre-activation per token over the same tokens, tokens seen ≥ {min_count} times"}


def _explorer_tokens(shards_dir: str, wikitext_dir: str, tokenizer):
    """The shards' index and the token stream they were collected from (WikiText-2 test, tokenized without special
    tokens, cut to the shards' tokens): position p of a shard is ``ids[p]``. A text other than the shards' is an
    error."""
    from wneurons.store.data import WIKITEXT_TEST, wikitext_split
    from wneurons.store.shards import ShardIndex

    shard = ShardIndex.load(shards_dir)
    text = wikitext_split(wikitext_dir, "test")
    if hashlib.sha256(text.encode("utf-8")).hexdigest() != shard.meta["text_sha256"]:
        raise ValueError(f"{shards_dir} was not collected from {wikitext_dir}/{WIKITEXT_TEST}")
    ids = np.asarray(tokenizer(text, add_special_tokens=False)["input_ids"][: shard.n_tokens], dtype=np.int64)
    return shard, ids


def _explorer_neurons(neurons_path: str, params: dict, clamped_percents, extra_neurons) -> pl.DataFrame:
    """The neurons the explorer lists (:func:`wneurons.report.explorer_records.listed_neurons`), for the explorer
    and for the sign cases of the same neurons."""
    from wneurons.report.explorer_records import listed_neurons

    return listed_neurons(
        pl.read_parquet(neurons_path), params["neurons_per_layer"], params["layers"], list(clamped_percents),
        list(extra_neurons),
    )  # fmt: skip


def _sign_case_rows(tokenizer, ids: np.ndarray, frame: pl.DataFrame | None, width: int) -> list[dict]:
    """One neuron's four sign-case rows (:mod:`wneurons.core.sign_cases`), each with its top tokens in context."""
    from wneurons.report.explorer_records import token_contexts

    if frame is None:
        raise ValueError("explorer: a listed neuron has no row in the sign-case table (built for other neurons?)")
    rows = []
    for row in frame.sort("case").to_dicts():
        products = dict(zip(row["top_positions"], row["top_products"], strict=True))
        examples = token_contexts(tokenizer, ids, np.asarray(row["top_positions"], dtype=np.int64), products, width)
        rows.append({k: row[k] for k in ("case", "gate_sign", "up_sign", "count", "fraction", "mean_abs_product",
                                         "abs_share", "mean_product")} | {"examples": examples})  # fmt: skip
    return rows


def sign_cases_job(
    spec: dict,
    shards_dir: str,
    neurons_path: str,
    wikitext_dir: str,
    out_path: str,
    params: dict,
    *,
    dtype: str = "float32",
    clamped_percents: list[float] = (1.0,),
    extra_neurons: list[tuple[int, int]] = (),
) -> pl.DataFrame:
    """The gate x up sign cases (:mod:`wneurons.core.sign_cases`) of the explorer's neurons of a gated model, over
    the tokens of its activation shards (the same windows and BOS): the model runs again in ``dtype``
    (``neurons.dtype``, as collection did) and its gate and up projections of just those neurons are reduced
    batch by batch (:func:`wneurons.lm.gate_up.collect_sign_cases`). ``params``, ``clamped_percents`` and
    ``extra_neurons`` choose the neurons as :func:`explorer_job` does; ``params["contexts"]`` top tokens per case.
    Writes ``out_path`` (parquet, one row per neuron and case, provenance in its footer) and returns it."""
    import torch

    from wneurons.core.sign_cases import SignCaseAccumulator
    from wneurons.jobs.base import configured_model, model_provenance
    from wneurons.lm.gate_up import collect_sign_cases
    from wneurons.lm.registry import is_gated

    start = time.perf_counter()
    family = io.read_parquet_metadata(neurons_path).get("family") or spec.get("family")
    # The family is known from the config, or (a model whose config names none) only now, from its neuron table.
    if family is not None and not is_gated(family):
        table = SignCaseAccumulator(0, 1).table(0, []).with_columns(top_tokens=pl.lit([], dtype=pl.List(pl.String)))
        io.write_parquet(out_path, table, metadata=io.provenance(**model_provenance(spec | {"family": family}),
                                                                 gated=False, note="not a gated MLP"))  # fmt: skip
        log.info("sign cases %s %s: family %s is not a gated MLP: empty table", spec["name"], spec["revision"], family)
        return table
    listed = _explorer_neurons(neurons_path, params, clamped_percents, extra_neurons)
    by_layer = listed.partition_by("layer", as_dict=True)
    neurons = {int(key[0]): np.sort(frame["neuron"].to_numpy()) for key, frame in by_layer.items()}
    with configured_model(spec, dtype) as (model, tokenizer):
        shard, ids = _explorer_tokens(shards_dir, wikitext_dir, tokenizer)
        window = int(shard.meta["window"])
        windows = torch.from_numpy(ids).reshape(-1, window)
        bos = shard.meta.get("window_bos_token") if shard.meta.get("window_bos") else None
        table = collect_sign_cases(model, windows, neurons, k=params["contexts"], bos=bos, model_name=spec["name"])
        prov = model_provenance(spec, model)
    positions = table["top_positions"].to_list()
    shown = np.unique(ids[table["top_positions"].explode().drop_nulls().to_numpy()])
    decoded = {int(i): tokenizer.decode([int(i)]) for i in shown}
    top_tokens = [[decoded[int(ids[p])] for p in ps] for ps in positions]  # a few per (neuron, case)
    table = table.with_columns(top_tokens=pl.Series(top_tokens, dtype=pl.List(pl.String)))
    meta = io.provenance(
        **prov,
        gated=True,
        data="wikitext-2 test",
        text_sha256=shard.meta["text_sha256"],
        n_tokens=shard.n_tokens,
        window=window,
        window_bos_token=bos,
        neurons_sha256=io.sha256_file(neurons_path),
        product="act(gate) * up with the model's nonlinearity; sign '-': value < 0, '+': value >= 0",
        top_per_case=params["contexts"],
    )
    io.write_parquet(out_path, table, metadata=meta)
    log.info("sign cases %s %s: %d neurons in %d layers, %d tokens in %.1f s", spec["name"], spec["revision"],
             listed.height, len(neurons), shard.n_tokens, time.perf_counter() - start)  # fmt: skip
    return table


def explorer_job(
    spec: dict,
    shards_dir: str,
    neurons_path: str,
    wikitext_dir: str,
    out_dir: str,
    params: dict,
    *,
    sample_dir: str | None = None,
    tags_path: str | None = None,
    checkpoint_tables: dict[str, str] | None = None,
    bundle: str | None = None,
    clamped_percents: list[float] = (1.0,),
    extra_neurons: list[tuple[int, int]] = (),
    sign_cases_path: str | None = None,
) -> dict:
    """Build the explorer of one (model, revision) into ``out_dir``; returns a summary (neurons, seconds).

    ``params``: neurons_per_layer, layers (null = all), bins, contexts (per side), context_tokens, top_pairs.
    ``sample_dir``: the analyses' pair sample of this model (x, y, tokens.parquet), ``tags_path`` its POS table;
    ``checkpoint_tables``: revision -> neurons.parquet of the model's other revisions; ``bundle``: also write the
    site as one HTML file there (for the single-file report); ``clamped_percents``: the ablation's percents, whose
    W sets get a page for every neuron (``ablation.percents``; the paper's 1% until the rule passes them);
    ``extra_neurons``: (layer, neuron) pairs that also get a page (e.g. Figure 5's neuron); ``sign_cases_path``:
    the gate x up sign-case table of a gated model's listed neurons (:func:`sign_cases_job`).
    """
    from wneurons import __version__
    from wneurons.core.case_study import top_pair_table
    from wneurons.core.stats import negative_per_token_ratio
    from wneurons.lm.registry import is_gated
    from wneurons.report import explorer, explorer_records
    from wneurons.store.sample import load_sample_layer, sample_tokens

    start = time.perf_counter()
    listed = _explorer_neurons(neurons_path, params, clamped_percents, extra_neurons)
    family = io.read_parquet_metadata(neurons_path).get("family") or spec.get("family")
    gated = bool(family) and is_gated(family)
    tokenizer = configured_tokenizer(spec)
    shard, ids = _explorer_tokens(shards_dir, wikitext_dir, tokenizer)
    tokens, pairs_note, sample_layers = None, "no pair sample of this model in the run (analyses pairs)", {}
    if sample_dir:
        tokens, meta = sample_tokens(sample_dir, tags_path)
        pairs_note = explorer_records.pair_note(meta, tags_path)
    others = {
        rev: pl.read_parquet(p, columns=["layer", "neuron", "wd"]) for rev, p in (checkpoint_tables or {}).items()
    }
    cases = {}
    if sign_cases_path:
        cases = pl.read_parquet(sign_cases_path).partition_by("layer", "neuron", as_dict=True)

    records = []
    min_count, groups = 5, explorer_records.token_groups(ids)
    for row in listed.iter_rows(named=True):  # one page per listed neuron: the clamped sets and the top few
        layer, neuron = int(row["layer"]), int(row["neuron"])
        y = shard.y_neurons(layer, neuron, neuron + 1)[0].astype(np.float64)
        low, high = explorer_records.extreme_positions(y, params["contexts"])
        per_token = negative_per_token_ratio(row["wd_negative"], row["wd_positive"], row["frac_negative"])
        rec = {
            "model": spec["name"],
            "revision": spec["revision"],
            **{k: row[k] for k in ("layer", "neuron", "wd", "wd_negative", "wd_positive", "frac_negative", "md")},
            "wd_rank": int(row["wd_rank"]),
            "md_rank": int(row["md_rank"]),
            "layer_size": int(row["layer_size"]),
            "neg_share": row["wd_negative"] / row["wd"] if row["wd"] else float("nan"),
            "neg_per_token": float(per_token),
            "histogram": explorer_records.sign_histogram(y, params["bins"]),
            "negative_contexts": explorer_records.token_contexts(tokenizer, ids, low, y, params["context_tokens"]),
            "positive_contexts": explorer_records.token_contexts(tokenizer, ids, high, y, params["context_tokens"]),
            "pairs_note": pairs_note,
            "checkpoints": explorer_records.checkpoint_wd(others, layer, neuron),
            "clamped_at": row["clamped_at"],
            "clamped": explorer_records.clamped_sets(row),
            "gated": gated,
            "family": family,
            "sign_cases": _sign_case_rows(tokenizer, ids, cases.get((layer, neuron)), params["context_tokens"])
            if gated and sign_cases_path
            else None,
            "top_tokens": _decoded_top_tokens(tokenizer, ids, y, params["contexts"], min_count, groups),
        }
        if tokens is not None:
            if layer not in sample_layers:  # listed neurons come layer by layer: keep one layer's sample
                sample_layers = {layer: load_sample_layer(sample_dir, layer)}
            x, ys = sample_layers[layer]
            rec["pairs"] = top_pair_table(x, ys[:, neuron], tokens, k=params["top_pairs"]).to_dicts()
        records.append(rec)
    percents = ", ".join(f"{p:g}%" for p in clamped_percents)
    note = (
        f"Every neuron of the clamped (W) sets at {percents} per layer and the top {params['neurons_per_layer']} "
        f"by WD, in each of {listed['layer'].n_unique()} layers ({len(records)} neurons); "
        f"statistics over {shard.n_tokens} WikiText-2 test tokens (text sha256 {shard.meta['text_sha256'][:12]}…, "
        f"neuron table sha256 {io.sha256_file(neurons_path)[:12]}…, wneurons {__version__}). Click a column to sort; "
        "a neuron's permalink is index.html#L<layer>_N<neuron>."
    )
    explorer.write_explorer(out_dir, spec["name"], spec["revision"], records, note, bundle=bundle)
    summary = {"neurons": len(records), "seconds": round(time.perf_counter() - start, 2)}
    log.info(
        "explorer %s %s: %d neuron pages in %.1f s", spec["name"], spec["revision"], len(records), summary["seconds"]
    )
    return summary
