"""The paper grid's pythia-12b statistics in the real DAG (a dry run through profiles/slurm): on a site with
max_runtime 4 h, parts over layer ranges, each in an allocation within 4 h, then neuron_stats joining their tables;
on the default 24 h site, one statistics job over the shards, as before the split existed."""

from __future__ import annotations

from tiny_project import REPO

from wneurons.experiment import paths
from wneurons.experiment.plan import allocation_requests, dry_run

MODEL, REVISION = "pythia-12b", "step143000"


def statistics_jobs(site: str | None):
    target = paths.neurons(MODEL, REVISION)
    jobs = dry_run("config/config.yaml", ["profiles/slurm"], site, REPO, "none", (target,))
    return jobs, [j for j in jobs if j.rule in ("neuron_stats", "neuron_stats_part")]


def test_statistics_longer_than_the_site_allows_run_as_parts_and_a_join(tmp_path):
    (tmp_path / "site.yaml").write_text("max_runtime: 240\n")
    jobs, stats = statistics_jobs(str(tmp_path / "site.yaml"))
    assert [(j.rule, j.wildcards.get("layers")) for j in stats if j.rule == "neuron_stats_part"] == [
        ("neuron_stats_part", r) for r in ("0-11", "12-23", "24-35")
    ]
    (join,) = [j for j in stats if j.rule == "neuron_stats"]
    assert all(j.group for j in stats) and len({j.group for j in stats}) == 3
    requests = allocation_requests(jobs)
    assert all(minutes <= 240 for minutes, _ in requests.values())
    assert int(join.resources["runtime"]) <= 1 and int(join.resources["gpu"]) == 0


def test_statistics_that_fit_stay_one_job_over_the_shards():
    _, stats = statistics_jobs(None)
    assert [j.rule for j in stats] == ["neuron_stats"]
