"""Hub downloads of a config's grid: volume, peak disk of the staged weights under hub.stage_ahead, and its wall time.

    python perf/hub_staging.py [config/config.yaml] [--ahead 0 1 2 4] [--shard-gb 10] [--mbps 100]

Estimates from the config, not measurements:
- bytes of a revision = params_b x 2 (every model of the paper grid is stored in 16 bits on the hub); a revision read
  only by weight rows (``targets.weight_rows_only_layers``) fetches the shard holding its layer: ``--shard-gb``
  (transformers' 10 GB shards of the time; layer index 1 in the first), or the whole revision when smaller.
  "Before" = every revision fetched whole (the workflow before issue 27).
- kept = the revisions ``hub.prune`` keeps (the final ones by default); peak disk of a model = kept + the
  stage_ahead + 1 largest pruned revisions (``targets.staging_order``: revisions are staged in stage_ahead + 1
  lanes, each one revision at a time); unbounded, the whole download.
- wall time of a model's staged work, GPUs unlimited: a revision costs its download (``--mbps`` per transfer) then
  its GPU work (the longest allocation the planner makes of it: ``wneurons.experiment.allocations``, the site of the
  config) and ``--queue-min`` of SLURM queue wait. Bounded, a lane runs its revisions one after the other; unbounded,
  every revision starts at once. The difference is the most the bound costs (fewer free GPUs make it less).
- final-revision activation shards held for the explorers (``report.explorer.models``; the final shards live until
  the explorer has read them): every model (the old default) against the configured explorers.
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

from wneurons.experiment import allocations, grid, targets
from wneurons.experiment.config import validate_config

ROOT = Path(__file__).resolve().parents[1]
BYTES_PER_WEIGHT = 2  # float16 / bfloat16 on the hub


def revision_gb(config: dict, model: str, revision: str, shard_gb: float) -> float:
    """GB staged for one revision: the whole weights, or the shard a weight-rows-only revision reads."""
    whole = config["models"][model]["params_b"] * BYTES_PER_WEIGHT
    return min(whole, shard_gb) if targets.weight_rows_only_layers(config, model, revision) else whole


def gpu_minutes(config: dict, planner: allocations.Planner, model: str, revision: str) -> float:
    """Minutes of a revision's longest allocation (its allocations run side by side)."""
    per_allocation: dict[int, int] = {}
    for index, minutes in planner.plan(model, revision).values():
        per_allocation[index] = per_allocation.get(index, 0) + minutes
    return max(per_allocation.values(), default=0)


def with_ahead(config: dict, ahead: int | None) -> dict:
    bounded = copy.deepcopy(config)
    bounded["hub"]["stage_ahead"] = ahead
    return bounded


def peak_gb(config: dict, model: str, shard_gb: float) -> float:
    """Kept revisions + the stage_ahead + 1 largest pruned ones (the whole download when unbounded)."""
    sizes = {r: revision_gb(config, model, r, shard_gb) for r in targets.hub_revisions(config, model)}
    pruned = targets.staging_order(config, model)
    kept = sum(gb for r, gb in sizes.items() if r not in pruned)
    ahead = config["hub"]["stage_ahead"]
    lanes = len(pruned) if ahead is None else ahead + 1
    return kept + sum(sorted((sizes[r] for r in pruned), reverse=True)[:lanes])


def wall_hours(config: dict, planner: allocations.Planner, model: str, args: argparse.Namespace) -> float:
    """Hours until a model's last pruned revision is done, GPUs unlimited (see the module docstring)."""

    def cost(revision: str) -> float:
        download = revision_gb(config, model, revision, args.shard_gb) * 1000 / args.mbps / 60
        return download + args.queue_min + gpu_minutes(config, planner, model, revision)

    order = targets.staging_order(config, model)
    ahead = config["hub"]["stage_ahead"]
    lanes = len(order) if ahead is None else ahead + 1
    return max((sum(cost(r) for r in order[k::lanes]) for k in range(lanes)), default=0.0) / 60


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config", nargs="?", default="config/config.yaml", help="relative: to the repository")
    parser.add_argument("--ahead", type=int, nargs="+", default=[0, 1, 2, 4], help="hub.stage_ahead values to show")
    parser.add_argument("--shard-gb", type=float, default=10.0, help="GB of the shard a weight-rows-only step reads")
    parser.add_argument("--mbps", type=float, default=100.0, help="MB/s of one download")
    parser.add_argument("--queue-min", type=float, default=0.0, help="minutes an allocation waits in the queue")
    args = parser.parse_args(argv)
    import yaml

    config = yaml.safe_load((ROOT / args.config).read_text())  # the path as given is what it prints (review N14)
    validate_config(config, ROOT / "workflow/schemas/config.schema.yaml", ROOT)
    site = allocations.Site.from_file(allocations.site_path(config.get("site"), ROOT))
    models = targets.hub_models(config)
    configs = {a: with_ahead(config, a) for a in [None, *args.ahead]}
    planners = {a: allocations.Planner(c, site) for a, c in configs.items()}

    print(f"hub downloads of {args.config} (GB; weight-rows-only steps fetch a {args.shard_gb:g} GB shard)")
    print(
        f"{'model':<16}{'revs':>5}{'per rev':>9}{'before':>9}{'after':>9}{'kept':>7}{'peak unbounded':>16}"
        + "".join(f"{f'ahead {a}':>10}" for a in args.ahead)
    )
    totals = {"before": 0.0, "after": 0.0, "kept": 0.0, None: 0.0, **{a: 0.0 for a in args.ahead}}
    for m in models:
        revs = targets.hub_revisions(config, m)
        whole = config["models"][m]["params_b"] * BYTES_PER_WEIGHT
        after = sum(revision_gb(config, m, r, args.shard_gb) for r in revs)
        pruned = targets.pruned_revisions(config, m)
        kept = sum(revision_gb(config, m, r, args.shard_gb) for r in revs if r not in pruned)
        peaks = {a: peak_gb(c, m, args.shard_gb) for a, c in configs.items()}
        for key, value in [("before", whole * len(revs)), ("after", after), ("kept", kept), *peaks.items()]:
            totals[key] += value
        print(
            f"{m:<16}{len(revs):>5}{whole:>9.1f}{whole * len(revs):>9.1f}{after:>9.1f}{kept:>7.1f}"
            f"{peaks[None]:>16.1f}" + "".join(f"{peaks[a]:>10.1f}" for a in args.ahead)
        )
    print(
        f"{'total':<30}{totals['before']:>9.1f}{totals['after']:>9.1f}{totals['kept']:>7.1f}{totals[None]:>16.1f}"
        + "".join(f"{totals[a]:>10.1f}" for a in args.ahead)
    )

    print(
        f"\nwall time of each model's staged work, h (GPUs unlimited; {args.mbps:g} MB/s per download, "
        f"{args.queue_min:g} min queue wait per allocation; GPU time: the planner's allocations)"
    )
    print(f"{'model':<16}{'unbounded':>10}" + "".join(f"{f'ahead {a}':>10}" for a in args.ahead))
    for m in [m for m in models if targets.pruned_revisions(config, m)]:  # the others: nothing pruned, no bound
        hours = {a: wall_hours(configs[a], planners[a], m, args) for a in configs}
        print(f"{m:<16}{hours[None]:>10.1f}" + "".join(f"{hours[a]:>10.1f}" for a in args.ahead))

    layers = {m: grid.collected_layers(config, m, targets.final_revision(config, m)) for m in config["models"]}
    final_gb = {m: grid.shard_bytes(config, m, layers[m]) / 1e9 for m in config["models"]}
    explorers = targets.explorer_models(config)
    print(
        f"\nfinal-revision activation shards held for explorers: every model {sum(final_gb.values()):,.0f} GB; "
        f"report.explorer.models {explorers}: {sum(final_gb[m] for m in explorers):,.0f} GB"
    )


if __name__ == "__main__":
    main()
