"""The positions minimal-pair scoring feeds on all of BLiMP, per engine: each sentence whole (lm-evaluation-harness),
each distinct sentence whole (this project before prefix trees), and the project's prefix-tree rows
(``wneurons.lm.scoring.pack_prefix_tree``, lexicographic batches of ``--batch-sizes`` sentences), padding counted.

    python perf/scoring_positions.py [--data-dir DIR] [--tokenizer-dir DIR] [--convention harness]

No model runs: only the tokenizer. At a fixed cost per position (a CPU at its compute limit) the ratios bound the
speed-up of feeding fewer positions; the attention over a row's columns and the mask come on top (docs/performance.md,
section 1, measures the time).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from wneurons.lm.scoring import PREFIX_TREE_ROW, PrefixTreeBatch, lexicographic_order, pack_prefix_tree, tokenize


def packed_batches(flat: np.ndarray, offsets: np.ndarray, batch_size: int, row_width: int) -> list[PrefixTreeBatch]:
    """The prefix-tree rows ``wneurons.lm.scoring.batched_logprob_sums`` feeds for these (distinct) sequences: its
    lexicographic order, ``batch_size`` sequences a batch, its own packing."""
    order = lexicographic_order(flat, offsets)
    batches = (order[lo : lo + batch_size] for lo in range(0, len(order), batch_size))
    return [pack_prefix_tree(flat, offsets[rows], offsets[rows + 1] - offsets[rows], row_width) for rows in batches]


def packed_positions(flat: np.ndarray, offsets: np.ndarray, batch_size: int, row_width: int) -> tuple[int, int]:
    """``(nodes, fed)``: the positions of :func:`packed_batches`, without and with padding."""
    batches = packed_batches(flat, offsets, batch_size, row_width)
    return sum(b.nodes for b in batches), sum(b.ids.size for b in batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/blimp/data"))
    parser.add_argument("--tokenizer-dir", default="resources/models/smollm2-135m")
    parser.add_argument("--convention", default="harness")
    parser.add_argument("--batch-sizes", default="64,256")
    parser.add_argument("--row-width", type=int, default=PREFIX_TREE_ROW)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_dir)
    texts = []
    for path in sorted(args.data_dir.glob("*.jsonl")):
        for line in path.open():
            row = json.loads(line)
            texts += [row["sentence_good"], row["sentence_bad"]]
    distinct = list(dict.fromkeys(texts))
    flat, offsets, _ = tokenize(tokenizer, distinct, args.convention)
    fed = offsets[1:] - offsets[:-1] - 1  # the last token predicts nothing
    index = {t: i for i, t in enumerate(distinct)}
    every = int(sum(fed[index[t]] for t in texts))
    whole = int(fed.sum())
    print(f"{len(texts):,} sentences ({len(distinct):,} distinct), convention {args.convention!r}: positions fed")
    print(f"  every sentence whole (lm-evaluation-harness): {every:,} ({every / whole:.3f}x)")
    print(f"  each distinct sentence whole:                 {whole:,} (1x)")
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        nodes, padded = packed_positions(flat, offsets, batch, args.row_width)
        print(
            f"  prefix trees, batches of {batch}, rows of {args.row_width}: {nodes:,} ({nodes / whole:.3f}x), "
            f"with padding {padded:,} ({padded / whole:.3f}x; {every / padded:.2f}x fewer than the harness)"
        )


if __name__ == "__main__":
    main()
