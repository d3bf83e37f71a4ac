"""Where the time of BLiMP scoring goes: the same batches ``score_blimp(convention="harness")`` runs, timed part by
part (issue 46: find where the time goes before cutting).

For the first ``--n-pairs`` pairs of the first ``--n-paradigms`` paradigms, in the engine's order (lexicographic,
``--batch-size`` sentences a batch, each packed into prefix-tree rows of ``--row-width`` nodes), times: tokenizing;
sorting and packing; building the attention masks; the whole forward (``model(...).logits``); the transformer body
alone (``model.model``); the LM head on its output; ``query_logprobs`` (gather and chunked logsumexp). Prints each
part's seconds and share, the positions fed against whole sentences, and the share that is padding. Each part is
timed over ``--repeats`` passes, best pass reported (the parts are compared, not the machine).

    OMP_NUM_THREADS=2 python perf/profile_blimp_scoring.py --model-dir resources/models/smollm2-135m --threads 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from bench_blimp_vs_harness import DEFAULT_DATA, first_pairs  # this folder: the benchmark's pairs
from scoring_positions import packed_batches  # this folder: the engine's batches

from wneurons.lm.models import load_model
from wneurons.lm.scoring import PREFIX_TREE_ROW, attention_bias, query_logprobs, tokenize


def best_of(repeats: int, fn) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, help="local safetensors model directory")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--n-paradigms", type=int, default=6)
    parser.add_argument("--n-pairs", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--row-width", type=int, default=PREFIX_TREE_ROW)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    _, pairs = first_pairs(args.data_dir, args.n_paradigms, args.n_pairs)
    texts = list(dict.fromkeys(pairs["sentence_good"].to_list() + pairs["sentence_bad"].to_list()))
    model, tokenizer = load_model(local_path=args.model_dir, dtype="float32")
    body, head = model.get_decoder(), model.get_output_embeddings()
    dtype = next(model.parameters()).dtype

    times = {"tokenize": best_of(args.repeats, lambda: tokenize(tokenizer, texts, "harness"))}
    flat, offsets, _ = tokenize(tokenizer, texts, "harness")

    def packed():
        return packed_batches(flat, offsets, args.batch_size, args.row_width)

    times["sort + pack"] = best_of(args.repeats, packed)
    batches = packed()
    times["attention masks"] = best_of(args.repeats, lambda: [attention_bias(b.allowed, dtype, "cpu") for b in batches])
    inputs = [
        (torch.from_numpy(b.ids), torch.from_numpy(b.positions), attention_bias(b.allowed, dtype, "cpu"))
        for b in batches
    ]
    nodes = sum(b.nodes for b in batches)
    fed = sum(b.ids.size for b in batches)
    whole = int((offsets[1:] - offsets[:-1] - 1).sum())

    with torch.inference_mode():
        kwargs = [dict(input_ids=x, position_ids=p, attention_mask=m, use_cache=False) for x, p, m in inputs]
        hidden = [body(**k).last_hidden_state for k in kwargs]
        logits = [head(h) for h in hidden]

        def forward():
            for k in kwargs:
                model(**k)

        def body_only():
            for k in kwargs:
                body(**k)

        def head_only():
            for h in hidden:
                head(h)

        def logprobs():
            for lg, b in zip(logits, batches, strict=True):
                query_logprobs(lg, torch.from_numpy(b.query), torch.from_numpy(b.target))

        times["forward (body + head)"] = best_of(args.repeats, forward)
        times["body"] = best_of(args.repeats, body_only)
        times["LM head"] = best_of(args.repeats, head_only)
        times["gather + logsumexp"] = best_of(args.repeats, logprobs)

    parts = ("tokenize", "sort + pack", "attention masks", "forward (body + head)", "gather + logsumexp")
    total = sum(times[p] for p in parts)
    rows = sum(b.ids.shape[0] for b in batches)
    print(
        f"{len(texts)} sentences, {len(batches)} batches of {args.batch_size} in {rows} rows of "
        f"{args.row_width}+ nodes, {torch.get_num_threads()} threads"
    )
    print(
        f"positions fed {fed} ({fed / whole:.3f}x the {whole} of whole sentences), of which padding {fed - nodes} "
        f"({100 * (fed - nodes) / fed:.1f}%)"
    )
    for name, seconds in times.items():
        print(f"  {name:24} {seconds:7.3f} s  {100 * seconds / total:5.1f}% of {' + '.join(parts)}")
    print(
        f"scoring total {total:.3f} s: {2 * sum(p.numel() for p in model.parameters()) * fed / total / 1e9:.0f} GFLOP/s"
    )


if __name__ == "__main__":
    main()
