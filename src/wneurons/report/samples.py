"""A run's per-item results in lm-evaluation-harness's ``--log_samples`` shape, so that others can re-pair them.

lm-eval (0.4, ``evaluator.evaluate`` and ``EvaluationTracker.save_results_samples``) writes one JSONL file per task,
one line per document: ``doc_id``, ``doc``, ``target``, ``arguments`` (``{"gen_args_i": {"arg_0": context,
"arg_1": continuation}}``), ``resps`` and ``filtered_resps`` (each request's ``(log-likelihood, is_greedy)``, as
strings), ``filter``, ``metrics``, ``doc_hash`` (sha256 of the doc as ``json.dumps(doc, indent=2,
ensure_ascii=False)``), ``prompt_hash`` (sha256 of the first request's context), ``target_hash`` (sha256 of
``str(target)``) and each metric's value. A minimal pair is lm-eval's BLiMP task: context ``""``, the choices
``" " + sentence_good`` and ``" " + sentence_bad``, target 0, metric ``acc``.

What differs from lm-eval's own files, on purpose:

- the log-likelihoods are the run's (``{benchmark}.items.parquet``): its scoring convention (docs/conventions.md,
  recorded in the parquet's provenance), TSE's mean per token; ``acc`` is the run's ``correct`` (a tie counts as
  the convention says);
- ``is_greedy`` was not computed: it is written ``"None"``;
- files are ``samples_{task}.jsonl`` (no date), task ``blimp_{paradigm}`` (lm-eval's BLiMP task names) or
  ``tse_{task}``; ``doc_id`` is BLiMP's ``pair_id`` (lm-eval's doc index) and, for TSE, the item's index within
  its task in the run's subsample. Perplexity (per token) and the capability suite (lm-eval's own) are not written.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import polars as pl

from wneurons.experiment import paths
from wneurons.store import io
from wneurons.store.data import SOURCE_FILE

# The minimal-pair benchmarks exported, and the column naming an item's task in their items parquet.
TASK_COLUMN = {"blimp": "paradigm", "tse": "task"}
ITEMS_SUFFIX = ".items.parquet"
NOT_GREEDY_KNOWN = "None"  # is_greedy: not computed by the workflow


def sha256_text(text: str) -> str:
    """lm-eval's ``hash_string``: hex sha256 of the UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _doc(benchmark: str, row: dict) -> dict:
    if benchmark == "blimp":
        doc = {k: row[k] for k in ("sentence_good", "sentence_bad", "field", "linguistics_term")}
        return doc | {"UID": row["paradigm"], "pair_id": row["pair_id"]}  # the hub dataset's names
    doc = {k: row[k] for k in ("sentence_good", "sentence_bad", "task", "family", "condition", "idx")}
    return doc | ({"sentence_intrusive": row["sentence_intrusive"]} if row["sentence_intrusive"] is not None else {})


def sample_record(benchmark: str, doc_id: int, row: dict) -> dict:
    """One lm-eval sample line of a scored minimal pair: ``row`` holds the item's data (sentences ...) and its
    results (``logprob_good``, ``logprob_bad``, ``correct``)."""
    doc = _doc(benchmark, row)
    target = 0  # the good sentence: lm-eval's BLiMP doc_to_target
    arguments = [("", " " + row["sentence_good"]), ("", " " + row["sentence_bad"])]
    lls = [row["logprob_good"], row["logprob_bad"]]
    filtered = [[str(ll), NOT_GREEDY_KNOWN] for ll in lls]
    acc = 1.0 if row["correct"] else 0.0
    return {
        "doc_id": int(doc_id),
        "doc": doc,
        "target": str(target),
        "arguments": {f"gen_args_{i}": {f"arg_{j}": a for j, a in enumerate(arg)} for i, arg in enumerate(arguments)},
        "resps": [[pair] for pair in filtered],
        "filtered_resps": filtered,
        "filter": "none",
        "metrics": ["acc"],
        "doc_hash": sha256_text(json.dumps(doc, indent=2, ensure_ascii=False)),
        "prompt_hash": sha256_text(arguments[0][0]),
        "target_hash": sha256_text(str(target)),
        "acc": acc,
    }


def scored_items(items_path: str | os.PathLike, workdir: str | os.PathLike = ".") -> tuple[str, pl.DataFrame]:
    """The benchmark of an items parquet and its rows joined with the items' data (sentences ...): the run's seeded
    subsample, drawn again from the verified data under ``workdir`` with the settings in the parquet's provenance.
    A ValueError when that data is not the data the run scored (its sha256 differs)."""
    from wneurons.lm.benchmarks import BENCHMARKS

    meta = io.read_parquet_metadata(items_path)
    benchmark = meta.get("benchmark")
    if benchmark not in TASK_COLUMN:
        raise ValueError(f"{items_path}: benchmark {benchmark!r} is not a minimal-pair benchmark (blimp, tse)")
    data_dir = Path(workdir) / paths.benchmark_data(benchmark)
    source = data_dir / SOURCE_FILE
    if not source.is_file():
        raise ValueError(f"{items_path}: the data it scored is not at {data_dir} (run the workflow's fetch_data)")
    if io.read_json(source)["sha256"] != meta.get("data_sha256"):
        raise ValueError(f"{items_path}: {data_dir} is not the data it scored (data_sha256 differs)")
    data = BENCHMARKS[benchmark].load(str(data_dir), meta["evaluation"])
    items = pl.read_parquet(items_path)
    if data.height != items.height:
        raise ValueError(f"{items_path}: {items.height} items, but its settings draw {data.height} from {data_dir}")
    data = data.with_row_index("item").with_columns(pl.col("item").cast(pl.Int64))
    results = items.select("item", "logprob_good", "logprob_bad", "correct")
    return benchmark, data.join(results, on="item", how="inner", validate="1:1").sort("item")


def export_samples(
    results_dir: str | os.PathLike, out_dir: str | os.PathLike, workdir: str | os.PathLike = "."
) -> list[Path]:
    """Write every BLiMP / TSE items parquet under ``results_dir`` (clean and ablated) as lm-eval sample files:
    ``out_dir/<the parquet's folder relative to results_dir>/samples_{task}.jsonl``; return the files written.
    A ValueError when ``results_dir`` holds no such parquet."""
    results_dir, out_dir = Path(results_dir), Path(out_dir)
    found = sorted(p for p in results_dir.rglob(f"*{ITEMS_SUFFIX}") if p.name.removesuffix(ITEMS_SUFFIX) in TASK_COLUMN)
    if not found:
        raise ValueError(f"{results_dir}: no blimp.items.parquet or tse.items.parquet under it")
    written = []
    for items_path in found:
        benchmark, rows = scored_items(items_path, workdir)
        folder = out_dir / items_path.parent.relative_to(results_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for (task,), group in rows.group_by(TASK_COLUMN[benchmark], maintain_order=True):
            records = group.to_dicts()
            ids = [r["pair_id"] for r in records] if benchmark == "blimp" else range(len(records))
            lines = [
                json.dumps(sample_record(benchmark, i, r), ensure_ascii=False)
                for i, r in zip(ids, records, strict=True)
            ]
            path = folder / f"samples_{benchmark}_{task}.jsonl"
            with io.atomic_output(path, ".jsonl") as tmp:
                Path(tmp).write_text("\n".join(lines) + "\n", encoding="utf-8")
            written.append(path)
    return written


def read_samples(path: str | os.PathLike) -> pl.DataFrame:
    """An lm-eval sample file of minimal pairs as a table: doc_id, logprob_good, logprob_bad (float64, the first
    and second request's log-likelihood), acc, doc_hash."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        sample = json.loads(line)
        good, bad = (float(resp[0]) for resp in sample["filtered_resps"])
        rows.append((sample["doc_id"], good, bad, sample["acc"], sample["doc_hash"]))
    schema = {"doc_id": pl.Int64, "logprob_good": pl.Float64, "logprob_bad": pl.Float64, "acc": pl.Float64}
    return pl.DataFrame(rows, schema=schema | {"doc_hash": pl.String}, orient="row")
