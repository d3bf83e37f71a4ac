"""Model loads a finished run really paid, read from its job logs: loads, reuses from the per-process pool
(:mod:`wneurons.lm.model_pool`) and loading processes per (model, source, revision, dtype, device).

    python perf/model_loads.py logs/            # after `make demo` (one process: jobs share loaded models)
    python perf/model_loads.py logs/ --json loads.json

Compare with `perf/grid_jobs.py`, which counts what a dry run would load.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from wneurons.lm.model_pool import count_loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log_dir", type=Path, help="the run's logs/ folder (searched recursively for *.log)")
    parser.add_argument("--json", type=Path, default=None, help="also write the counts here")
    args = parser.parse_args()
    files = sorted(args.log_dir.rglob("*.log"))
    if not files:
        raise SystemExit(f"no *.log under {args.log_dir}")
    counts = count_loads(files)
    if not counts:
        raise SystemExit(f"no job log under {args.log_dir} records a model load or reuse")
    width = max((len(k) for k in counts), default=10)
    print(f"{'model key':<{width}}  {'loads':>6}  {'reuses':>6}  {'processes':>9}")
    for key, row in sorted(counts.items()):
        print(f"{key:<{width}}  {row['loads']:>6}  {row['reuses']:>6}  {row['processes']:>9}")
    loads = sum(r["loads"] for r in counts.values())
    uses = loads + sum(r["reuses"] for r in counts.values())
    print(f"total: {uses} model checkouts by jobs, {loads} loads ({len(counts)} distinct models), {len(files)} logs")
    if args.json:
        args.json.write_text(json.dumps(counts, indent=1) + "\n")


if __name__ == "__main__":
    main()
