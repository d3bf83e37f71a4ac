"""Which rules of the workflow declare a given line (``gpu=1,``, ``localrule: True``), read from the Snakefile and
``workflow/rules/*.smk`` themselves. The one place where perf/grid_jobs.py, the SLURM profile's tests and
.ci/slurm/run-demo.sh learn which rules need a GPU and which run on the submitting host.

    python -m wneurons.experiment.rule_files "gpu=1,"       # one rule name per line (run in the repository root)
"""

from __future__ import annotations

import argparse
from pathlib import Path


def rules_with(line_of_rule: str, root: str | Path = ".") -> set[str]:
    """Names of the rules whose block has a line equal (stripped) to ``line_of_rule``."""
    root = Path(root)
    files = [root / "Snakefile", *sorted((root / "workflow" / "rules").glob("*.smk"))]
    if not files[0].is_file():
        raise FileNotFoundError(f"{files[0]}: not a workflow root (no Snakefile)")
    found = set()
    for path in files:
        rule = None  # lines before a file's first rule belong to no rule
        for line in path.read_text().splitlines():
            if line.startswith("rule "):
                rule = line.split()[1].rstrip(":")
            elif rule is not None and line.strip() == line_of_rule:
                found.add(rule)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("line", help='a line of a rule\'s block, e.g. "gpu=1,"')
    parser.add_argument("--root", default=".", help="the workflow's root (holding the Snakefile)")
    args = parser.parse_args()
    print("\n".join(sorted(rules_with(args.line, args.root))))


if __name__ == "__main__":
    main()
