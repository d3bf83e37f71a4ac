"""Run lm-evaluation-harness's BLiMP tasks on local jsonl files, once per line read on stdin; print one JSON result
line on stdout for each.

Runs in a process of its own, from the project's environment (lm-eval is one of its dependencies), and imports
nothing from wneurons. Loads the model once and warms it up on the first ``--warmup-pairs`` pairs of each paradigm,
untimed; then every line on stdin starts one timed run (the benchmark sends one per repeat, so that the harness's
runs interleave with its own), of which the log-likelihood phase alone is timed (task building excluded), in wall
and CPU seconds. Ends at the end of stdin.

    echo run | python run_harness_blimp.py --model-dir DIR --data-dir DIR --paradigms a,b --limit 100 --batch-size 64
"""

import argparse
import copy
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import yaml  # noqa: E402
from lm_eval import simple_evaluate  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402

READY = "harness ready"  # printed once the model is loaded and warmed up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--data-dir", required=True, help="folder with BLiMP <paradigm>.jsonl files")
    parser.add_argument("--paradigms", required=True, help="comma-separated paradigm names")
    parser.add_argument("--limit", type=int, default=None, help="first N pairs of each paradigm")
    parser.add_argument("--batch-size", default="64")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--warmup-pairs", type=int, default=8, help="pairs per paradigm scored untimed first")
    args = parser.parse_args()

    template = yaml.safe_load((Path(__file__).with_name("blimp_local_template.yaml")).read_text())
    tasks = []
    for paradigm in args.paradigms.split(","):
        config = copy.deepcopy(template)
        config["task"] = f"blimp_local_{paradigm}"
        config["dataset_kwargs"] = {"data_files": {"train": str(Path(args.data_dir) / f"{paradigm}.jsonl")}}
        tasks.append(config)

    lm = HFLM(pretrained=args.model_dir, dtype=args.dtype, batch_size=args.batch_size, device="cpu")
    timing = {"wall_s": 0.0, "cpu_s": 0.0, "n_requests": 0}
    inner = lm.loglikelihood

    def timed_loglikelihood(requests, *a, **kw):
        wall, cpu = time.perf_counter(), time.process_time()
        out = inner(requests, *a, **kw)
        timing["wall_s"] += time.perf_counter() - wall
        timing["cpu_s"] += time.process_time() - cpu
        timing["n_requests"] += len(requests)
        return out

    if args.warmup_pairs:  # untimed: the first batches pay one-off allocations (ours is warmed up the same way)
        simple_evaluate(model=lm, tasks=copy.deepcopy(tasks), limit=args.warmup_pairs, bootstrap_iters=0)
    lm.loglikelihood = timed_loglikelihood
    print(READY, flush=True)  # the benchmark times nothing while this process still loads or warms up
    for _ in sys.stdin:
        timing.update(wall_s=0.0, cpu_s=0.0, n_requests=0)
        results = simple_evaluate(
            model=lm, tasks=copy.deepcopy(tasks), limit=args.limit, log_samples=True, bootstrap_iters=0
        )
        per_task, loglik = {}, {}
        for name, res in results["results"].items():
            paradigm = name.removeprefix("blimp_local_")
            per_task[paradigm] = res["acc,none"]
            # resps: one [(loglik, is_greedy)] per choice (good, bad), in doc order.
            samples = results["samples"][name]
            loglik[paradigm] = [[s["doc_id"], s["resps"][0][0][0], s["resps"][1][0][0]] for s in samples]
        result = {"acc_by_paradigm": per_task, "loglik": loglik, "batch_size": args.batch_size, **timing}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
