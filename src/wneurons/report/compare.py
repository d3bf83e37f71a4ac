"""Compare two result trees (e.g. a local run and a SLURM run, or an interrupted-and-resumed run and a clean one).

Results must be identical in everything computed; only fields that describe the run itself (wall time, data
source paths) may differ. Used by CI and the resume tests:

    python -m wneurons.report.compare results-a results-b
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import polars as pl

# Fields that legitimately differ between two runs of the same computation.
VOLATILE_KEYS = frozenset({"seconds", "data_source"})


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE_KEYS}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _result_files(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and p.suffix in (".json", ".parquet") and not p.name.startswith(".")
    }


def compare_result_trees(a: str | Path, b: str | Path, *, subset: bool = False) -> list[str]:
    """Differences between two result directories (JSON and parquet files); empty when identical.

    ``subset=True``: ``b`` may hold only some of ``a``'s files (a run of a few targets against a full run); every
    file of ``b`` must still be in ``a`` and equal to it.
    """
    a, b = Path(a), Path(b)
    files_a, files_b = _result_files(a), _result_files(b)
    problems = [] if subset else [f"only in {a}: {f}" for f in sorted(files_a - files_b)]
    problems += [f"only in {b}: {f}" for f in sorted(files_b - files_a)]
    for rel in sorted(files_a & files_b):
        if rel.endswith(".json"):
            ja, jb = (_strip(json.loads((root / rel).read_text())) for root in (a, b))
            if ja != jb:
                problems.append(f"differs: {rel}")
        else:
            ta, tb = pl.read_parquet(a / rel), pl.read_parquet(b / rel)
            if not ta.equals(tb, null_equal=True):
                problems.append(f"differs: {rel}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--subset", action="store_true", help="b may hold only some of a's files")
    args = parser.parse_args(argv)
    problems = compare_result_trees(args.a, args.b, subset=args.subset)
    n = len(_result_files(Path(args.b if args.subset else args.a)))
    for line in problems:
        print(line)
    print(f"compared {n} result files: {'identical' if not problems else f'{len(problems)} differences'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
