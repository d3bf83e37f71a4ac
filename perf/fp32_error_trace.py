"""Where a sentence's fp32 log-prob error comes from: each scored token's error against float64, and the float32
error of every layer's hidden state at the token with the largest one (with the largest activation there), for a
model scored alone in a plain forward under the harness convention (docs/performance.md, section 1: the tail of the
benchmark's float64 comparison).

    python perf/fp32_error_trace.py --model-dir resources/models/smollm2-135m --threads 2 \\
        "Sarah doesn't benefit the Clintons." "Naomi had fallen most hats."
"""

from __future__ import annotations

import argparse
import copy

import numpy as np
import torch

from wneurons.lm.models import load_model
from wneurons.lm.scoring import tokenize


def trace(model32, model64, tokenizer, text: str) -> list[str]:
    flat, _, _ = tokenize(tokenizer, [text], "harness")
    ids = torch.from_numpy(flat)[None]
    with torch.inference_mode():
        out32, out64 = (m(input_ids=ids, output_hidden_states=True) for m in (model32, model64))
    targets = ids[0, 1:, None]
    logprobs = [torch.log_softmax(o.logits[0, :-1].double(), -1).gather(1, targets)[:, 0] for o in (out32, out64)]
    error = (logprobs[0] - logprobs[1]).numpy()
    worst = int(np.abs(error).argmax())
    tokens = tokenizer.convert_ids_to_tokens(ids[0].tolist())
    lines = [
        f"{text!r}: fp32 error {error.sum():+.2e} nats; per scored token (position: error):",
        "  " + ", ".join(f"{k + 1} {tokens[k + 1]!r}: {e:+.1e}" for k, e in enumerate(error)),
        f"  hidden states at position {worst} (predicting {tokens[worst + 1]!r}), after each layer: largest fp32 error"
        " / largest |activation|",
    ]
    for layer, (h32, h64) in enumerate(zip(out32.hidden_states, out64.hidden_states, strict=True)):
        at32, at64 = h32[0, worst].double(), h64[0, worst]
        lines.append(f"    {layer:3d}  {(at32 - at64).abs().max().item():.1e} / {at64.abs().max().item():.0f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("texts", nargs="+")
    parser.add_argument("--model-dir", default="resources/models/smollm2-135m")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model32, tokenizer = load_model(local_path=args.model_dir, dtype="fp32")
    model64 = copy.deepcopy(model32).double()
    for text in args.texts:
        print("\n".join(trace(model32, model64, tokenizer, text)))


if __name__ == "__main__":
    main()
