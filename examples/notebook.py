"""The notebook path in one script: rank a model's neurons by WD, clamp the top 1%, score minimal pairs, and apply a
condition saved by a run (or by this script) to the same model.

    python examples/notebook.py MODEL_DIR TEXT_FILE PAIRS_JSONL [--percent 1] [--window 2048] [--condition FILE]

MODEL_DIR: any saved transformers causal LM of a supported family; TEXT_FILE: plain text to rank neurons over (e.g.
WikiText-2 test); PAIRS_JSONL: BLiMP-style lines with sentence_good / sentence_bad; --condition: a result file of a
run (results/{model}/{revision}/ablations/.../blimp.json) whose neurons and mode are applied as well.

With --run CONFIG --model NAME, run from the run's directory (its resources/data and results_dir), the same numbers
as that run: its seeded BLiMP items (api.run_items) scored per item (api.score), the run's random control of trial
--trial and its perplexity-matched control (api.Condition.of_run, api.matched_control: the run's seeds and search),
and the run's own per-item results where it has scored them (api.read_items), checked equal to this script's.
"""

import argparse
import contextlib
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
parser.add_argument("--run", help="a run's config: score its items and build its controls (from the run's directory)")
parser.add_argument("--model", help="the run's name of MODEL_DIR (a key of the config's models)")
parser.add_argument("--trial", type=int, default=0, help="the run's random trial to rebuild")
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
if args.run:
    config = api.run_config(args.run, workdir=".")
    evaluation = config["evaluation"]
    items = api.run_items(config, "blimp")  # the run's seeded subsample, after its offset

    def run_score(condition: api.Condition | None = None):
        """The run's BLiMP summary and per-item frame, under ``condition`` (None: clean)."""
        with api.applied(model, condition) if condition else contextlib.nullcontext():
            options = {"convention": evaluation["convention"], "batch_size": evaluation["batch_size"]}
            return api.score(model, tokenizer, "blimp", items, **options)

    summary, per_item = run_score()
    print(f"run items: {items.height} BLiMP pairs; clean accuracy {summary['overall']:.3f}")
    random = api.Condition.of_run(config, args.model, table, "random", args.percent, trial=args.trial)
    print(f"random trial {args.trial} ({random.size()} neurons): {run_score(random)[0]['overall']:.3f}")
    matched, search = api.matched_control(model, tokenizer, config, args.model, table, args.percent)
    print(f"matched m={search['percent']:g}% ({matched.size()} neurons): {run_score(matched)[0]['overall']:.3f}")
    revision = config["models"][args.model]["final_revision"]
    try:
        done = api.read_items(config, args.model, revision, "blimp")  # the run's clean per-item results
    except FileNotFoundError:
        print("the run has not scored its clean BLiMP yet")
    else:
        same = done.equals(per_item)
        print(f"run's clean per-item results: {done.height} rows, {'equal to' if same else 'DIFFERENT from'} these")
