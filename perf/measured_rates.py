"""The rates a run's jobs measured against the planner's stated assumptions, and the rates file a site uses to plan
from them (wneurons.experiment.rates; docs/design.md, "SLURM: allocations sized to the site").

    python perf/measured_rates.py results --configfile config/demo.yaml [--out results/rates.json] [--site SITE]

Prints per (rule, precision, device) the median over models of the measured rate, the stated one and their ratio,
then each model's rate; writes RESULTS_DIR/rates.json (or --out). Run it in the run's working directory (where its
capability suite is staged), with the config the run used. Name the file in the site file (``rates: PATH``) to plan
with it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from wneurons.experiment.allocations import Site, stated_rate
from wneurons.experiment.config import validate_config
from wneurons.experiment.rates import RATES_FILE, UNITS, measure, write_rates

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results_dir", help="the run's results_dir (its benchmark tables inside or beside it)")
    parser.add_argument("--configfile", default="config/config.yaml", help="the config the run used")
    parser.add_argument("--out", help=f"the rates file to write (default: RESULTS_DIR/{RATES_FILE})")
    parser.add_argument("--site", help="a site file whose tflops the stated rates are (default: the assumptions)")
    parser.add_argument("--workdir", default=".", help="the run's working directory (its staged capability suite)")
    args = parser.parse_args()
    config = validate_config(
        yaml.safe_load(Path(args.configfile).read_text()), REPO / "workflow/schemas/config.schema.yaml"
    )
    site = Site.from_file(args.site)
    content = measure(config, args.results_dir, args.workdir)
    if not content["rates"]:
        sys.exit(f"{args.results_dir}: no finished job of an allocated rule with a benchmark table")
    print(f"{'rule':<22}{'precision':<11}{'device':<28}{'unit':<9}{'measured':>12}{'stated':>12}{'ratio':>9}")
    for entry in content["rates"]:
        stated = stated_rate(config, site, entry["rule"]) / UNITS[entry["unit"]]
        print(
            f"{entry['rule']:<22}{entry['precision']:<11}{entry['device'][:27]:<28}{entry['unit']:<9}"
            f"{entry['median']:>12.4g}{stated:>12.4g}{entry['median'] / stated:>9.3g}"
        )
        for model, m in entry["models"].items():
            tokens = f"  {m['tokens_per_s']:,.0f} tokens/s" if m["tokens_per_s"] else ""
            print(
                f"  {model:<20}{m['params_b']:>7g} B params  {m['jobs']:>4} jobs {m['seconds']:>9.1f} s  "
                f"{m['rate']:.4g} {entry['unit']}{tokens}"
            )
    out = args.out or str(Path(args.results_dir) / RATES_FILE)
    write_rates(out, content)
    print(
        f"\nwritten {out} (measured until {content['measured_until']}, commit {content['commit']}); plan with it: "
        f"`rates: {out}` in the site file"
    )


if __name__ == "__main__":
    main()
