"""One paired comparison decided by C11's part rule, from two conditions' per-item files: the verdict of a
confirmatory run that scores only the two conditions its registered comparison needs (config/confirm-smollm2.yaml),
with no clean model or random draws for the claims table to pair.

    python -m wneurons.report.pair_verdict REFERENCE.items.parquet CONDITION.items.parquet
        [--benchmark blimp] [--search search.json] [--out verdict.json]

``drop`` = accuracy(reference) − accuracy(condition) on the same items (reference = the matched control,
condition = W: C11 says W costs more, drop > 0). The rule is the claims table's own
(:func:`wneurons.report.claims.run.difference_verdict` with C11's margin, ±1 point at α = 0.01) and, with
``--search``, the matched control's guard (:func:`wneurons.report.claims.perturbation.guard_by_match`) from its
search record, as C11 reads it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from wneurons.core.uncertainty import paired_accuracy_difference
from wneurons.report.claims.perturbation import C11_MARGIN, guard_by_match, reach_state, search_match
from wneurons.report.claims.run import difference_verdict
from wneurons.report.replication import read_items
from wneurons.store import io
from wneurons.store.io import sha256_file


def match_state(search: dict) -> tuple[str, str]:
    """The matched control's state from its ``search.json`` (C11's guard): :func:`search_match`, then
    :func:`reach_state` of the NLL increase share the search measured."""
    state, words = search_match({"matched_search": search})
    reach = search.get("nll_increase_ratio")
    if reach is not None:
        words.append(f"reaches {100 * reach:.1f}% of W's NLL increase")
        state = reach_state(state, reach)
    return state, "; ".join(words) or "no perplexities in the search record"


def pair_verdict(
    reference: Path, condition: Path, *, benchmark: str = "blimp", search: dict | None = None, resamples: int = 2000
) -> dict:
    """The paired row (:func:`paired_accuracy_difference`), its verdict and, with ``search``, the match guard."""
    ref, cond = read_items(reference, benchmark), read_items(condition, benchmark)
    if not ref["item"].equals(cond["item"]):
        raise ValueError(f"{reference} and {condition} hold different {benchmark} items: not a paired comparison")
    row = paired_accuracy_difference(ref["correct"].to_numpy(), cond["correct"].to_numpy(), resamples=resamples)
    part = difference_verdict(row, C11_MARGIN)
    state, words = ("not read", "no search given") if search is None else match_state(search)
    if search is not None:
        part = guard_by_match(part, state, w_hurts_more=True)
    return {
        "benchmark": benchmark,
        "reference": str(reference),
        "condition": str(condition),
        "sha256": {str(reference): sha256_file(reference), str(condition): sha256_file(condition)},
        "row": row,
        "match": {"state": state, "words": words},
        "verdict": part.verdict,
        "equivalent": part.equivalent,
        "text": part.text,
        "rule": f"C11's part rule: exact test p < {C11_MARGIN.alpha:g} and 95% CI above 0 holds; 98% interval "
        f"inside {C11_MARGIN.words()} does not hold; otherwise not enough data",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wneurons.report.pair_verdict", description=__doc__.split("\n")[0])
    parser.add_argument("reference", type=Path, help="per-item file of the reference (the matched control)")
    parser.add_argument("condition", type=Path, help="per-item file of the condition (W)")
    parser.add_argument("--benchmark", default="blimp", choices=("blimp", "tse"))
    parser.add_argument("--search", type=Path, help="the matched control's search.json (its match guard)")
    parser.add_argument("--out", type=Path, help="also write the verdict as JSON here")
    args = parser.parse_args(argv)
    for path in (args.reference, args.condition, args.search):
        if path is not None and not path.is_file():
            print(f"error: {path} does not exist", file=sys.stderr)
            return 2
    search = None if args.search is None else json.loads(args.search.read_text())
    result = pair_verdict(args.reference, args.condition, benchmark=args.benchmark, search=search)
    row = result["row"]
    print(
        f"{args.benchmark} W − matched: {100 * row['drop']:+.2f} pts, 95% CI [{100 * row['ci_lo']:.2f}, "
        f"{100 * row['ci_hi']:.2f}], p = {row['p_value']:.3g} ({row['test']}; n = {row['n']}; discordant "
        f"{row['only_reference']} vs {row['only_condition']}); match: {result['match']['state']} "
        f"({result['match']['words']}); verdict: {result['verdict']} — {result['text']}"
    )
    if args.out is not None:
        io.write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
