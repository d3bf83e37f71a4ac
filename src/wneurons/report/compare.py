"""Compare two result trees (e.g. a local run and a SLURM run, or an interrupted-and-resumed run and a clean one).

Used by CI and the resume tests:

    python -m wneurons.report.compare results-a results-b [--subset] [--rtol 1e-12]

Every JSON and parquet file is compared field by field, and each difference is one of three kinds:

- **result**: a computed value differs (beyond the tolerance for floats), a key, column or file is missing, or a
  shape or type differs. Only these fail (exit status 1).
- **provenance**: a field that describes the run, not its result (:func:`is_provenance`): the ``provenance`` block
  (package and library versions), sha256 checksums of inputs, timings, timestamps, commits and data source paths.
  Reported separately; they are expected to differ between runs of different code or machines.
- **within tolerance**: floats that differ by no more than ``rtol`` (default :data:`DEFAULT_RTOL`) times their
  scale: the larger magnitude of the two numbers, or for a parquet column and a JSON list of numbers the largest
  magnitude in the column or list (rounding noise scales with the magnitudes that were summed, not with a
  statistic that cancels to near zero, e.g. an excess kurtosis). Counted, with the largest relative difference
  found. ``rtol=0`` asks for bit-identical floats.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

# A relative difference this small is rounding noise in float64 (machine epsilon is 2.2e-16; a sum over 10^4
# terms in another order moves by a few hundred epsilon), far below anything the analyses resolve.
DEFAULT_RTOL = 1e-12
# Fields (JSON keys, parquet columns) that describe the run rather than its result.
PROVENANCE_KEYS = frozenset({"provenance", "seconds", "data_source", "timestamp", "created", "commit", "git_commit"})
PROVENANCE_SUFFIXES = ("_sha256", "_version", "_seconds")
PROVENANCE_PREFIXES = ("seconds_",)
# Differences listed per file before the rest are counted.
MAX_LISTED = 5


def is_provenance(key: str) -> bool:
    """Whether a JSON key or parquet column describes the run (versions, input checksums, timings, commit, data
    source) rather than a result."""
    return key in PROVENANCE_KEYS or key.endswith(PROVENANCE_SUFFIXES) or key.startswith(PROVENANCE_PREFIXES)


@dataclass
class _FileDiff:
    """What differs in one file: result differences (paths with a reason), provenance paths, and the floats
    that differ within the tolerance (count, largest difference relative to its scale)."""

    results: list[str] = field(default_factory=list)
    provenance: list[str] = field(default_factory=list)
    n_within: int = 0
    max_within: float = 0.0

    def within(self, relative: float) -> None:
        self.n_within += 1
        self.max_within = max(self.max_within, relative)


@dataclass
class Comparison:
    """The outcome of :func:`compare_trees`: one line per file for each kind of difference."""

    n_files: int
    results: list[str]
    provenance: list[str]
    within_tolerance: list[str]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _compare_numbers(x: float, y: float, scale: float, rtol: float, path: str, diff: _FileDiff) -> None:
    if x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)):
        return
    exact = isinstance(x, int) and isinstance(y, int)
    gap = abs(x - y)
    relative = gap / scale if scale > 0 else math.inf
    if exact or not math.isfinite(gap) or relative > rtol:
        diff.results.append(f"{path}: {x!r} vs {y!r}")
    else:
        diff.within(relative)


def _compare_json(a: Any, b: Any, rtol: float, path: str, diff: _FileDiff, scale: float | None = None) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            where = f"{path}.{key}" if path else str(key)
            if is_provenance(str(key)):
                if a.get(key) != b.get(key):
                    diff.provenance.append(where)
            elif key not in a or key not in b:
                diff.results.append(f"{where}: only in {'b' if key not in a else 'a'}")
            else:
                _compare_json(a[key], b[key], rtol, where, diff)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            diff.results.append(f"{path}: {len(a)} vs {len(b)} items")
            return
        numbers = [v for v in a + b if _number(v) and math.isfinite(v)]
        list_scale = max(map(abs, numbers), default=0.0) if len(numbers) == len(a) + len(b) else None
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _compare_json(x, y, rtol, f"{path}[{i}]", diff, list_scale)
    elif _number(a) and _number(b):
        _compare_numbers(a, b, max(abs(a), abs(b)) if scale is None else scale, rtol, path, diff)
    elif a != b:
        diff.results.append(f"{path}: {a!r} vs {b!r}")


def _compare_parquet(a: pl.DataFrame, b: pl.DataFrame, rtol: float, diff: _FileDiff) -> None:
    if a.schema != b.schema or a.height != b.height:
        diff.results.append(f"schema or rows: {dict(a.schema)} ({a.height} rows) vs {dict(b.schema)} ({b.height})")
        return
    for name in a.columns:
        ca, cb = a[name], b[name]
        if ca.equals(cb, null_equal=True):
            continue
        if is_provenance(name):
            diff.provenance.append(f"column {name}")
        elif not ca.dtype.is_float() or not ca.is_null().equals(cb.is_null()):
            diff.results.append(f"column {name}")
        else:
            x, y = ca.drop_nulls().to_numpy(), cb.drop_nulls().to_numpy()
            nan_x, nan_y = np.isnan(x), np.isnan(y)
            if not np.array_equal(nan_x, nan_y):
                diff.results.append(f"column {name}: NaN at different rows")
                continue
            finite = np.abs(np.concatenate([x[~nan_x], y[~nan_y]]))
            finite = finite[np.isfinite(finite)]
            scale = float(finite.max()) if finite.size else 0.0
            with np.errstate(invalid="ignore"):
                gap = np.abs(x[~nan_x] - y[~nan_y])
            gap = np.where(x[~nan_x] == y[~nan_y], 0.0, gap)  # equal infinities
            relative = gap / scale if scale > 0 else np.where(gap > 0, np.inf, 0.0)
            beyond = ~(relative <= rtol)
            if beyond.any():
                diff.results.append(
                    f"column {name}: {int(beyond.sum())} values beyond rtol {rtol:g} (largest {relative.max():.3g} "
                    "of the column's scale)"
                )
            else:
                diff.n_within += int((gap > 0).sum())
                diff.max_within = max(diff.max_within, float(relative.max()))


def _result_files(root: Path) -> set[str]:
    return {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and p.suffix in (".json", ".parquet") and not p.name.startswith(".")
    }


def compare_trees(a: str | Path, b: str | Path, *, subset: bool = False, rtol: float = DEFAULT_RTOL) -> Comparison:
    """Compare two result directories (JSON and parquet files) and sort what differs into results, provenance and
    floats within ``rtol`` (module docstring).

    ``subset=True``: ``b`` may hold only some of ``a``'s files (a run of a few targets against a full run); every
    file of ``b`` must still be in ``a`` and equal to it.
    """
    if rtol < 0:
        raise ValueError(f"rtol must be >= 0, got {rtol}")
    a, b = Path(a), Path(b)
    for root in (a, b):  # a comparison of nothing would report "identical"
        if not root.is_dir():
            raise ValueError(f"compare: {root} is not a directory of results")
    files_a, files_b = _result_files(a), _result_files(b)
    for root, files in ((a, files_a), (b, files_b)):
        if not files:
            raise ValueError(f"compare: {root} holds no result files (*.json, *.parquet)")
    results = [] if subset else [f"only in {a}: {f}" for f in sorted(files_a - files_b)]
    results += [f"only in {b}: {f}" for f in sorted(files_b - files_a)]
    provenance, within = [], []
    for rel in sorted(files_a & files_b):
        diff = _FileDiff()
        if rel.endswith(".json"):
            ja, jb = (json.loads((root / rel).read_text()) for root in (a, b))
            _compare_json(ja, jb, rtol, "", diff)
        else:
            _compare_parquet(pl.read_parquet(a / rel), pl.read_parquet(b / rel), rtol, diff)
        if diff.results:
            more = len(diff.results) - MAX_LISTED
            listed = "; ".join(diff.results[:MAX_LISTED]) + (f"; and {more} more" if more > 0 else "")
            results.append(f"differs: {rel}: {listed}")
        if diff.provenance:
            provenance.append(f"provenance: {rel}: {', '.join(diff.provenance)}")
        if diff.n_within:
            within.append(f"within rtol: {rel}: {diff.n_within} floats, largest {diff.max_within:.3g}")
    n_files = len(files_b if subset else files_a | files_b)
    return Comparison(n_files, results, provenance, within)


def compare_result_trees(
    a: str | Path, b: str | Path, *, subset: bool = False, rtol: float = DEFAULT_RTOL
) -> list[str]:
    """The result differences of :func:`compare_trees` (provenance and floats within ``rtol`` aside); empty when
    the results are equal."""
    return compare_trees(a, b, subset=subset, rtol=rtol).results


def main(argv: list[str] | None = None, prog: str = "python -m wneurons.report.compare") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--subset", action="store_true", help="b may hold only some of a's files")
    parser.add_argument(
        "--rtol",
        type=float,
        default=DEFAULT_RTOL,
        help=f"largest float difference, relative to its scale, that counts as equal (default {DEFAULT_RTOL:g}; "
        "0 = bit-identical)",
    )
    args = parser.parse_args(argv)
    try:
        comparison = compare_trees(args.a, args.b, subset=args.subset, rtol=args.rtol)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    for line in comparison.provenance + comparison.within_tolerance + comparison.results:
        print(line)
    verdict = "identical results" if not comparison.results else f"{len(comparison.results)} result differences"
    print(
        f"compared {comparison.n_files} result files: {verdict} ({len(comparison.provenance)} with provenance "
        f"differences, {len(comparison.within_tolerance)} with floats within rtol {args.rtol:g})"
    )
    return 1 if comparison.results else 0


if __name__ == "__main__":
    sys.exit(main())
