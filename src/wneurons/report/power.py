"""How large a run must be: per paired comparison of a run, the difference it can detect and the items a target
difference needs (sizing the next run from this one's own spread, as docs/replication-*.md do).

    python -m wneurons.report.power results/smollm2-135m/main/paired/blimp.parquet [--difference 0.01]
        [--alpha 0.01] [--power 0.8] [--reference clean] [--all-groups]
    python -m wneurons.report.power --discordant 14 --pairs 402 [--difference 0.01] [--step 67]

From a table: reads the overall rows of a ``paired/{benchmark}.parquet`` table (:mod:`wneurons.report.replication`).
For each comparison the standard error comes from its own 95% CI at its n (:mod:`wneurons.core.uncertainty`):
the detectable difference at n is ``(z_{1-alpha/2} + z_power) * se``; the items needed for ``--difference`` scale
with its square. For a pooled random control the two-stage CI holds the variance between neuron draws, which more
items do not shrink: its n is then a lower bound (marked).

From one comparison's discordant pairs (``--discordant K --pairs N``, no table): the pairs a McNemar test needs at
that discordance, by the normal approximation with each hypothesis' variance (``mcnemar_items``) and by the exact
test's own power (``mcnemar_exact_power``: the first multiple of ``--step`` from there on that reaches ``--power``).
Both ways read the same quantity: the table's se is (p_d - d^2) / n with the run's observed d in both terms, from a
bootstrap CI; the formula puts p_d under the null and p_d - difference^2 under the alternative.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import polars as pl

from wneurons.core.uncertainty import (
    CI_LEVEL,
    TWO_STAGE_BOOTSTRAP,
    detectable_difference,
    items_to_detect,
    mcnemar_exact_power,
    mcnemar_items,
)


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


def discordance_lines(
    discordant: int, pairs: int, *, difference: float, alpha: float, power: float, step: int
) -> list[str]:
    """The pairs a McNemar test needs to detect ``difference`` at ``discordant`` of ``pairs`` discordant: by the
    normal approximation, and the first multiple of ``step`` from below it whose exact power reaches ``power``."""
    p_d = discordant / pairs
    approx = mcnemar_items(p_d, difference, alpha=alpha, power=power)
    n = max(step, (int(0.9 * approx) // step) * step)
    while (exact := mcnemar_exact_power(n, p_d, difference, alpha=alpha)) < power:
        n += step
    return [
        f"{discordant:,} of {pairs:,} pairs discordant ({100 * p_d:.2f}%); {100 * difference:g} pt at α = {alpha:g} "
        f"(two-sided), {power:.0%} power:",
        f"McNemar, normal approximation (Connor 1987): {approx:,} pairs",
        f"exact McNemar test: {n:,} pairs ({n // step:,} x {step}; exact power {exact:.2%}; "
        f"{n - step:,}: {mcnemar_exact_power(n - step, p_d, difference, alpha=alpha):.2%})",
    ]


def main(argv: list[str] | None = None, prog: str = "python -m wneurons.report.power") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("paired", type=Path, nargs="?", help="a paired/{benchmark}.parquet table of a run")
    parser.add_argument("--discordant", type=int, help="instead of a table: one comparison's discordant pairs ...")
    parser.add_argument("--pairs", type=int, help="... of this many pairs (with --discordant)")
    parser.add_argument("--step", type=int, default=1, help="with --discordant: n in multiples of this (67 paradigms)")
    parser.add_argument("--difference", type=float, default=0.01, help="target accuracy difference (0.01: 1 pt)")
    parser.add_argument("--alpha", type=float, default=0.01, help="two-sided significance level (default 0.01)")
    parser.add_argument("--power", type=float, default=0.8, help="power to detect --difference (default 0.8)")
    parser.add_argument("--reference", help="only rows with this reference condition (e.g. clean; default: all)")
    parser.add_argument("--all-groups", action="store_true", help="also the per-term / per-family rows")
    args = parser.parse_args(argv)
    if (args.paired is None) == (args.discordant is None) or (args.discordant is None) != (args.pairs is None):
        parser.error("give a paired table, or --discordant K --pairs N (not both)")
    if args.discordant is not None:
        try:
            lines = discordance_lines(
                args.discordant, args.pairs, difference=args.difference, alpha=args.alpha, power=args.power,
                step=args.step,
            )  # fmt: skip
        except ValueError as err:
            print(f"power: --discordant {args.discordant} --pairs {args.pairs}: {err}", file=sys.stderr)
            return 2
        print("\n".join(lines))
        return 0
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
