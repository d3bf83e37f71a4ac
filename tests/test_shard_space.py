"""The shard-space preflight (wneurons.experiment.shard_space; review N9): before any job, collections that cannot
fit where their shards go are one line naming the key."""

from wneurons.experiment.shard_space import MB, shard_space_problems


def _free(gb):
    return lambda _: gb * 1024 * MB


def test_collections_that_fit_pass(tmp_path):
    jobs = [("pythia-70m@step1", str(tmp_path / "a/x"), 2048), ("pythia-70m@step2", str(tmp_path / "a/y"), 2048)]
    assert shard_space_problems(jobs, None, disk_free=_free(10)) == []


def test_a_collection_larger_than_the_free_space_names_the_directory_key(tmp_path):
    jobs = [("pythia-12b@main", str(tmp_path / "shards/pythia-12b/main"), 450 * 1024)]
    (line,) = shard_space_problems(jobs, None, disk_free=_free(100))
    assert line.startswith("neurons.activations_dir: pythia-12b@main writes 450.0 GB")
    assert "100.0 GB free" in line and str(tmp_path) in line


def test_a_budget_above_the_free_space_names_the_resource(tmp_path):
    jobs = [(f"m@step{i}", str(tmp_path / f"s{i}"), 40 * 1024) for i in range(5)]
    (line,) = shard_space_problems(jobs, 1_000_000, disk_free=_free(100))
    assert line.startswith("activations_mb: 5 collections may hold 200.0 GB") and "at most 102400" in line
    assert shard_space_problems(jobs, 100 * 1024, disk_free=_free(100)) == []  # the budget caps them: they fit
