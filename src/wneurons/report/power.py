"""How large a run must be: per paired comparison of a run, the difference it can detect and the items a target
difference needs (sizing the next run from this one's own spread, as docs/replication-*.md do).

    python -m wneurons.report.power results/smollm2-135m/main/paired/blimp.parquet [--difference 0.01]
        [--alpha 0.01] [--power 0.8] [--reference clean] [--all-groups]

Reads the overall rows of a ``paired/{benchmark}.parquet`` table (:mod:`wneurons.report.replication`). For each
comparison the standard error comes from its own 95% CI at its n (:mod:`wneurons.core.uncertainty`):
the detectable difference at n is ``(z_{1-alpha/2} + z_power) * se``; the items needed for ``--difference`` scale
with its square. For a pooled random control the two-stage CI holds the variance between neuron draws, which more
items do not shrink: its n is then a lower bound (marked).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import polars as pl

from wneurons.core.uncertainty import CI_LEVEL, TWO_STAGE_BOOTSTRAP, detectable_difference, items_to_detect


def power_rows(
    frame: pl.DataFrame, *, difference: float, alpha: float, power: float = 0.8, all_groups: bool = False
) -> list[dict]:
    """One dict per paired row (overall rows unless ``all_groups``): reference, condition, trial, n, drop, its
    discordance (only_reference + only_condition) / n, the difference detectable at n, and the items
    ``difference`` needs (``lower_bound`` where draw variance is in the CI)."""
    if not all_groups and "group_kind" in frame.columns:
        frame = frame.filter(pl.col("group_kind") == "overall")
    out = []
    for row in frame.iter_rows(named=True):
        lo, hi, n = _or_nan(row["ci_lo"]), _or_nan(row["ci_hi"]), int(row["n"])
        out.append(
            {
                "reference": row["reference"],
                "condition": row["condition"],
                "trial": row.get("trial"),
                "group": row.get("group", "all"),
                "n": n,
                "drop": row["drop"],
                "p_value": row["p_value"],
                "discordance": (row["only_reference"] + row["only_condition"]) / n if n else math.nan,
                "detectable_at_n": detectable_difference(lo, hi, alpha=alpha, power=power),
                "items_needed": items_to_detect(n, difference, lo, hi, alpha=alpha, power=power),
                "lower_bound": row.get("ci_method") == TWO_STAGE_BOOTSTRAP,
            }
        )
    return out


def _or_nan(value: float | None) -> float:
    """A CI bound as a float: a null (no CI) is NaN."""
    return math.nan if value is None else float(value)


def _markdown(rows: list[dict], difference: float, alpha: float, power: float) -> str:
    head = (
        f"| reference → condition | trial | n | drop (pts) | p | discordant | detectable at n (pts) | "
        f"n for {100 * difference:g} pt |\n|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        needed = "—" if math.isnan(r["items_needed"]) else f"{'≥ ' if r['lower_bound'] else ''}{r['items_needed']:,}"
        lines.append(
            f"| {r['reference']} → {r['condition']} | {r['trial']} | {r['n']:,} | {100 * r['drop']:.2f} | "
            f"{r['p_value']:.3g} | {100 * r['discordance']:.1f}% | {100 * r['detectable_at_n']:.2f} | {needed} |"
        )
    lines.append(f"\nα = {alpha:g} (two-sided), {power:.0%} power; se from each row's {CI_LEVEL:.0%} CI.")
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str = "python -m wneurons.report.power") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("paired", type=Path, help="a paired/{benchmark}.parquet table of a run")
    parser.add_argument("--difference", type=float, default=0.01, help="target accuracy difference (0.01: 1 pt)")
    parser.add_argument("--alpha", type=float, default=0.01, help="two-sided significance level (default 0.01)")
    parser.add_argument("--power", type=float, default=0.8, help="power to detect --difference (default 0.8)")
    parser.add_argument("--reference", help="only rows with this reference condition (e.g. clean; default: all)")
    parser.add_argument("--all-groups", action="store_true", help="also the per-term / per-family rows")
    args = parser.parse_args(argv)
    if not args.paired.exists():
        print(f"power: no such file: {args.paired}", file=sys.stderr)
        return 2
    frame = pl.read_parquet(args.paired)
    missing = {"reference", "condition", "n", "drop", "ci_lo", "ci_hi", "p_value"} - set(frame.columns)
    if missing:
        print(f"power: {args.paired} is not a paired table (lacks {', '.join(sorted(missing))})", file=sys.stderr)
        return 2
    if args.reference:
        frame = frame.filter(pl.col("reference") == args.reference)
    rows = power_rows(frame, difference=args.difference, alpha=args.alpha, power=args.power, all_groups=args.all_groups)
    print(_markdown(rows, args.difference, args.alpha, args.power))
    return 0


if __name__ == "__main__":
    sys.exit(main())
