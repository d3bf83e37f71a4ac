"""A finished run's per-item BLiMP and TSE results, recomputed through the notebook API, must be the run's own:
the same items (api.run_items), the same scorer (api.score), each condition's neurons read from its result file
(api.Condition.from_result), compared per item with the run's files (api.read_items) and, pair counts, with its
``paired/{benchmark}.parquet`` rows (issue 43: the demo's SmolLM2 through the API equals the workflow).

    python examples/run_items_equal.py CONFIG MODEL [--model-dir DIR]   # from the run's directory

Checks the clean model, 1% W and the matched control at the run's final revision (those the run
scored); exits 1 naming every difference. Each condition is scored at the torch thread count its result records
(``provenance.torch_threads``; 1, the scoring rules' ``threads``, for results written before it was recorded):
float32 sums split by the thread count, and at 2 threads the demo's BLiMP log-probs differ from its 1-thread
results by up to 1.6e-4 nats (decisions equal), so bytes are compared at equal counts.
"""

import argparse
import contextlib
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from wneurons import api
from wneurons.experiment import paths
from wneurons.experiment.grid import Condition as GridCondition

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("config", help="the run's config file")
parser.add_argument("model", help="the config's name of the model")
parser.add_argument("--model-dir", help="the saved model (default: the run's staged resources/models/MODEL)")
args = parser.parse_args()

config = api.run_config(args.config, workdir=".")
revision = config["models"][args.model]["final_revision"]
model_dir = args.model_dir or f"resources/models/{args.model}"
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="float32").eval()
tokenizer = AutoTokenizer.from_pretrained(model_dir)
options = {"convention": config["evaluation"]["convention"], "batch_size": config["evaluation"]["batch_size"]}
CONDITIONS = [None, ("wasserstein", 0), ("matched", 0)]

differences, compared = [], 0
for benchmark in ("blimp", "tse"):
    correct = {}
    for entry in CONDITIONS:
        name = "clean" if entry is None else f"all/{entry[0]}/p1/t{entry[1]}"
        with paths.roots_of(config):
            if entry is None:
                result = paths.clean(args.model, revision, benchmark)
            else:
                result = paths.ablation(args.model, revision, GridCondition("all", entry[0], "1", entry[1]), benchmark)
        if not Path(result).exists():
            print(f"{benchmark} {name}: not scored by this run, skipped")
            continue
        recorded = json.loads(Path(result).read_text())
        condition = None if entry is None else api.Condition.from_result(result)
        torch.set_num_threads(recorded["provenance"].get("torch_threads", 1))
        with api.applied(model, condition) if condition else contextlib.nullcontext():
            _, ours = api.score(model, tokenizer, benchmark, api.run_items(config, benchmark), **options)
        selector = {} if entry is None else {"selector": entry[0], "percent": 1, "trial": entry[1]}
        theirs = api.read_items(config, args.model, revision, benchmark, **selector)
        same = ours.equals(theirs)
        compared += 1
        print(f"{benchmark} {name}: {ours.height} items, {'equal to' if same else 'DIFFERENT from'} the run's")
        if not same:
            differences.append(f"{benchmark} {name}")
        correct[name] = ours["correct"].to_numpy()
    with paths.roots_of(config):
        paired_path = Path(paths.paired(args.model, revision, benchmark))
    if not paired_path.exists() or "clean" not in correct:
        continue
    paired = pl.read_parquet(paired_path)
    rows = paired.filter((pl.col("group_kind") == "overall") & (pl.col("reference") == "clean"))
    for row in rows.iter_rows(named=True):
        if row["condition"] not in correct or row["trial"] != "t0":
            continue
        clean, cond = correct["clean"], correct[row["condition"]]
        counts = (int(np.sum(clean & ~cond)), int(np.sum(~clean & cond)))
        if counts != (row["only_reference"], row["only_condition"]):
            differences.append(f"{benchmark} paired clean -> {row['condition']}: {counts} vs the run's")
        print(f"{benchmark} paired clean -> {row['condition']}: discordant {counts}, the run's "
              f"({row['only_reference']}, {row['only_condition']})")  # fmt: skip

if differences or not compared:
    sys.exit(f"the API differs from the run on: {', '.join(differences)}" if differences else "nothing to compare")
print(f"the API gives the run's per-item results ({compared} files) and paired counts")
