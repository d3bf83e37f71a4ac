"""Activation-shard disk of a config's grid: per model, the bytes written per revision, in total, and what stays.

    python perf/disk_grid.py [config/config.yaml]

Shards of one revision = layers x d_ff x tokens x 2 bytes (float16; wneurons.experiment.grid.shard_bytes, which adds the
small MD inputs). "Before" = every layer at every revision, never deleted (the workflow before neurons.layers and
temp shards): peak = total. "After" = neurons.layers applied; a revision's shards are deleted once its statistics
are written, except Figure 1's model(s) (kept as hard links), so what stays is those, and the peak is what stays
plus the shards of the collections in flight (at most one revision per concurrent collection job).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from wneurons.experiment.config import validate_config
from wneurons.experiment.grid import WIKITEXT2_TEST_TOKENS, collected_layers, neurons_per_layer_of, shard_bytes

ROOT = Path(__file__).resolve().parents[1]


def main(path: str) -> None:
    config = yaml.safe_load(Path(path).read_text())
    for spec in config["data"].values():  # the data need not be present to size the grid
        spec["local_dir"] = str(ROOT)
    validate_config(config, ROOT / "workflow/schemas/config.schema.yaml", ROOT)
    tb = 1e12
    tokens = WIKITEXT2_TEST_TOKENS if config["neurons"]["max_tokens"] is None else config["neurons"]["max_tokens"]
    tokens -= tokens % config["neurons"]["window"]
    fig = config["figures"]["figure1"]
    kept_models = [m for m in (fig["model"] or next(iter(config["models"])), fig["contrast"]) if m]
    total_before = total_after = kept = 0
    sizes = []  # bytes of every revision's shards after neurons.layers, except those kept
    print(f"tokens per revision: {tokens:,}; bytes per value: 2 (float16)")
    print(f"{'model':<16}{'L':>4}{'d_ff':>7}{'revs':>6}{'per rev (GB)':>14}{'before (TB)':>13}{'after (TB)':>12}")
    for model, spec in config["models"].items():
        revisions = [spec["final_revision"], *spec["checkpoints"]]
        full = shard_bytes(config, model, None)
        before = full * len(revisions)
        per_revision = [shard_bytes(config, model, collected_layers(config, model, r)) for r in revisions]
        after = sum(per_revision)
        total_before += before
        total_after += after
        if model in kept_models:
            kept += per_revision[0]
            per_revision = per_revision[1:]
        sizes += per_revision
        d_ff = neurons_per_layer_of(config, model)
        print(
            f"{model:<16}{spec['num_layers']:>4}{d_ff:>7}{len(revisions):>6}{full / 1e9:>14.1f}"
            f"{before / tb:>13.2f}{after / tb:>12.2f}"
        )
    print(f"total written: before {total_before / tb:.2f} TB, after {total_after / tb:.2f} TB")
    print(f"left on disk at the end: before {total_before / tb:.2f} TB, after {kept / tb:.3f} TB ({kept_models})")
    sizes.sort(reverse=True)
    for jobs in (1, 4, 16):
        # at most `jobs` revisions hold shards at once (collecting, or waiting for their statistics): the largest
        print(f"peak after, {jobs:>2} revisions in flight: <= {(kept + sum(sizes[:jobs])) / tb:.2f} TB")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "config/config.yaml"))
