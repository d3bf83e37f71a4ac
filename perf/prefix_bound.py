"""How much less work minimal-pair scoring can do at best: the positions a forward must feed for every BLiMP pair,
scored whole (as lm-evaluation-harness and this project do) vs with the pair's shared token prefix fed once.

    python perf/prefix_bound.py [blimp data dir] [tokenizer dir]

No model runs: only the tokenizer. At a CPU's compute limit (or any fixed cost per position) the ratio is an upper
bound on the speed-up that prefix sharing (one key/value cache for both endings) can give; lm-evaluation-harness
also feeds one extra context token per sentence (its empty context becomes the end-of-text token), counted apart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main(data_dir: str, tokenizer_dir: str) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    good, bad = [], []
    for path in sorted(Path(data_dir).glob("*.jsonl")):
        for line in path.open():
            row = json.loads(line)
            good.append(row["sentence_good"])
            bad.append(row["sentence_bad"])
    g = tokenizer(good, add_special_tokens=False)["input_ids"]
    b = tokenizer(bad, add_special_tokens=False)["input_ids"]
    pairs = list(zip(g, b, strict=True))
    # the first position where the two endings differ (zip stops at the shorter: a prefix may be all of it)
    prefix = np.array(
        [next((i for i, (u, v) in enumerate(zip(x, y, strict=False)) if u != v), min(len(x), len(y))) for x, y in pairs]
    )
    whole = sum(len(x) - 1 + len(y) - 1 for x, y in pairs)  # position 0 of each sentence is context only
    shared = whole - int(np.maximum(prefix - 1, 0).sum())
    harness = whole + 2 * len(g)  # + one context token per sentence
    print(
        f"pairs {len(g):,}; tokens per sentence {np.mean([len(x) for x in g]):.2f}; shared prefix {prefix.mean():.2f}"
    )
    print(f"positions fed: whole sentences {whole:,}; prefix fed once {shared:,}; lm-eval {harness:,}")
    print(f"bound on the speed-up of prefix sharing: {whole / shared:.3f}x ours, {harness / shared:.3f}x vs lm-eval")


if __name__ == "__main__":
    main(*(sys.argv[1:] or ["../shared/data/blimp/data", "resources/models/smollm2-135m"]))
