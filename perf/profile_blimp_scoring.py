"""Where the time of BLiMP scoring goes: the same batches ``score_blimp(convention="harness")`` runs, timed part by
part (issue 46: find where the time goes before cutting).

For the first ``--n-pairs`` pairs of the first ``--n-paradigms`` paradigms, in the engine's batch order (longest
first, ``--batch-size`` sentences a batch), times: tokenizing; the whole forward (``model(...).logits``); the
transformer body alone (``model.model``); the LM head on its output; ``target_logprobs`` (gather and chunked
logsumexp); and the body again without an attention mask on the batches whose sentences all have the same length
(what the mask costs). Prints each part's seconds and share, the positions fed and the share that is padding. Each
part is timed over ``--repeats`` passes, best pass reported (the parts are compared, not the machine).

    OMP_NUM_THREADS=2 python perf/profile_blimp_scoring.py --model-dir resources/models/smollm2-135m --threads 2
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from bench_blimp_vs_harness import DEFAULT_DATA, first_pairs  # this folder: the benchmark's pairs

from wneurons.lm.models import load_model
from wneurons.lm.scoring import batch_tensors, length_order, target_logprobs, tokenize


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
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    _, pairs = first_pairs(args.data_dir, args.n_paradigms, args.n_pairs)
    texts = pairs["sentence_good"].to_list() + pairs["sentence_bad"].to_list()
    model, tokenizer = load_model(local_path=args.model_dir, dtype="float32")
    body, head = model.get_decoder(), model.get_output_embeddings()

    times = {"tokenize": best_of(args.repeats, lambda: tokenize(tokenizer, texts, "harness"))}
    flat, offsets, _ = tokenize(tokenizer, texts, "harness")
    order, inputs = length_order(offsets), []
    for lo in range(0, len(order), args.batch_size):  # the engine's batches (wneurons.lm.scoring)
        inputs_, targets, valid = batch_tensors(flat, offsets, order[lo : lo + args.batch_size])
        inputs.append((inputs_, targets, valid, bool(valid.all())))
    fed = sum(x.numel() for x, *_ in inputs)
    real = int((offsets[1:] - offsets[:-1] - 1).sum())

    with torch.inference_mode():
        hidden = [
            body(input_ids=x, attention_mask=v.long(), use_cache=False).last_hidden_state for x, _, v, _ in inputs
        ]
        logits = [head(h) for h in hidden]

        def forward():
            for x, _, v, _ in inputs:
                model(input_ids=x, attention_mask=v.long(), use_cache=False)

        def body_only():
            for x, _, v, _ in inputs:
                body(input_ids=x, attention_mask=v.long(), use_cache=False)

        def head_only():
            for h in hidden:
                head(h)

        def logprobs():
            for lg, (_, t, _, _) in zip(logits, inputs, strict=True):
                target_logprobs(lg, t)

        uniform = [(x, v) for x, _, v, same in inputs if same]

        def uniform_with_mask():
            for x, v in uniform:
                body(input_ids=x, attention_mask=v.long(), use_cache=False)

        def uniform_without_mask():
            for x, _ in uniform:
                body(input_ids=x, use_cache=False)

        times["forward (body + head)"] = best_of(args.repeats, forward)
        times["body"] = best_of(args.repeats, body_only)
        times["LM head"] = best_of(args.repeats, head_only)
        times["gather + logsumexp"] = best_of(args.repeats, logprobs)
        masked = best_of(args.repeats, uniform_with_mask)
        unmasked = best_of(args.repeats, uniform_without_mask)

    total = times["tokenize"] + times["forward (body + head)"] + times["gather + logsumexp"]
    print(f"{len(texts)} sentences, {len(inputs)} batches of {args.batch_size}, {torch.get_num_threads()} threads")
    print(f"positions fed {fed}, of which padding {fed - real} ({100 * (fed - real) / fed:.1f}%)")
    for name, seconds in times.items():
        print(f"  {name:24} {seconds:7.3f} s  {100 * seconds / total:5.1f}% of tokenize + forward + logprobs")
    print(
        f"  {len(uniform)} batches of one length: body with mask {masked:.3f} s, without {unmasked:.3f} s "
        f"({masked / unmasked:.2f}x)"
        if uniform
        else "  no batch of one length"
    )


if __name__ == "__main__":
    main()
