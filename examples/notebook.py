"""The notebook path in one script: rank a model's neurons by WD, clamp the top 1%, score minimal pairs, and apply a
condition saved by a run (or by this script) to the same model.

    python examples/notebook.py MODEL_DIR TEXT_FILE PAIRS_JSONL [--percent 1] [--window 2048] [--condition FILE]

MODEL_DIR: any saved transformers causal LM of a supported family; TEXT_FILE: plain text to rank neurons over (e.g.
WikiText-2 test); PAIRS_JSONL: BLiMP-style lines with sentence_good / sentence_bad; --condition: a result file of a
run (results/{model}/{revision}/ablations/.../blimp.json) whose neurons and mode are applied as well.
"""

import argparse
import json
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

from wneurons import api

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("model_dir", help="a saved transformers causal LM")
parser.add_argument("text_file", help="text whose pre-activations rank the neurons")
parser.add_argument("pairs", help="JSONL of minimal pairs (sentence_good, sentence_bad)")
parser.add_argument("--percent", type=float, default=1.0, help="percent of each layer's neurons clamped (1 = 1%%)")
parser.add_argument("--window", type=int, default=2048, help="tokens per window of the text")
parser.add_argument("--condition", help="a run's result file whose condition is applied as well")
parser.add_argument("--save", help="write the top-WD condition here (JSON)")
args = parser.parse_args()

model = AutoModelForCausalLM.from_pretrained(args.model_dir).eval()
tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
rows = [json.loads(line) for line in Path(args.pairs).read_text().splitlines() if line.strip()]
good, bad = [r["sentence_good"] for r in rows], [r["sentence_bad"] for r in rows]

table = api.wd_table(model, tokenizer, Path(args.text_file).read_text(), window=args.window)
print(table.sort("wd", descending=True).head(5).select("layer", "neuron", "wd", "frac_negative"))

w = api.Condition.top_wd(table, percent=args.percent)
print(f"clean: {api.pair_accuracy(model, tokenizer, good, bad):.3f}")
with api.applied(model, w):
    print(
        f"top {args.percent:g}% WD clamped ({w.size()} neurons): {api.pair_accuracy(model, tokenizer, good, bad):.3f}"
    )
if args.save:
    w.save(args.save)
if args.condition:
    saved = api.Condition.from_result(args.condition)
    with api.applied(model, saved):
        accuracy = api.pair_accuracy(model, tokenizer, good, bad)
    print(f"{args.condition} ({saved.mode}, {saved.size()} neurons): {accuracy:.3f}")
