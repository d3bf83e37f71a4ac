"""Run lm-evaluation-harness's BLiMP tasks on local jsonl files; print one JSON result line on stdout.

Runs under the *harness's* interpreter (a separate venv with lm-eval), not the project's: it imports nothing from
wneurons. Times the log-likelihood phase alone (model loading and task building excluded) in wall and CPU seconds.

    python run_harness_blimp.py --model-dir DIR --data-dir DIR --paradigms a,b --limit 100 --batch-size 64
"""

import argparse
import copy
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import yaml  # noqa: E402
from lm_eval import simple_evaluate  # noqa: E402
from lm_eval.models.huggingface import HFLM  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--data-dir", required=True, help="folder with BLiMP <paradigm>.jsonl files")
    parser.add_argument("--paradigms", required=True, help="comma-separated paradigm names")
    parser.add_argument("--limit", type=int, default=None, help="first N pairs of each paradigm")
    parser.add_argument("--batch-size", default="64")
    parser.add_argument("--dtype", default="float32")
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

    lm.loglikelihood = timed_loglikelihood
    results = simple_evaluate(model=lm, tasks=tasks, limit=args.limit, log_samples=True, bootstrap_iters=0)
    per_task, loglik = {}, {}
    for name, res in results["results"].items():
        paradigm = name.removeprefix("blimp_local_")
        per_task[paradigm] = res["acc,none"]
        # resps: one [(loglik, is_greedy)] per choice (good, bad), in doc order.
        loglik[paradigm] = [[s["doc_id"], s["resps"][0][0][0], s["resps"][1][0][0]] for s in results["samples"][name]]
    print(json.dumps({"acc_by_paradigm": per_task, "loglik": loglik, "batch_size": args.batch_size, **timing}))


if __name__ == "__main__":
    main()
