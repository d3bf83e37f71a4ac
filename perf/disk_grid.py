"""Activation-shard disk of a config's grid: per model, the bytes written per revision, in total, and what stays.

    python perf/disk_grid.py [config/config.yaml]

Shards of one revision = layers x d_ff x tokens x 2 bytes (float16; wneurons.experiment.grid.shard_bytes, which adds the
small MD inputs). "Before" = every layer at every revision, never deleted (the workflow before neurons.layers and
temp shards): peak = total. "After" = neurons.layers applied; a revision's shards are deleted once its statistics
are written, except Figure 1's model(s) (kept as hard links), so what stays is those, and the peak is what stays
plus the shards of the collections in flight (at most one revision per concurrent collection job).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from wneurons.experiment.plan import print_disk

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config", nargs="?", default=str(ROOT / "config/config.yaml"), help="the config to size")
    print_disk(parser.parse_args(argv).config, ROOT)


if __name__ == "__main__":
    main()
