"""Node-local scratch inside a SLURM allocation (issue 27): on the localhost cluster, through profiles/slurm, a
revision whose shards no later job reads is collected and reduced by one neuron_stats job in the allocation's
scratch; nothing reaches the shared activations root, nothing is left in scratch, and the statistics are the bytes
of a local run that collects through the shared file system."""

import pytest
import yaml
from slurm_cluster import allocation_logs, finish, run_slurm
from test_scratch import SCRATCH_MODEL, scratch_project
from tiny_project import dry_run_jobs, snakemake

from wneurons.experiment import paths
from wneurons.jobs.neurons import SCRATCH_FOLDER

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def test_scratch_inside_an_allocation_gives_the_local_runs_statistics(tmp_path):
    root, config_path, config, target = scratch_project(tmp_path)

    # The reference: a local run, collection and statistics as two jobs through resources/activations.
    snakemake(root, "--cores", "2", target)
    local = (root / target).read_bytes()
    (root / target).unlink()

    # The node's scratch: a directory of its own (the one-node cluster's /tmp is this machine's).
    node_local = tmp_path / "node-local"
    node_local.mkdir()
    config["neurons"]["scratch_dir"] = str(node_local)
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert dry_run_jobs(root, target) == {"neuron_stats": 1}
    code, out = finish(run_slurm(root, target))
    assert code == 0, out[-4000:]

    assert (root / target).read_bytes() == local
    logs = allocation_logs(root, SCRATCH_MODEL, "main")
    assert logs and "rule neuron_stats:" in logs[-1].read_text()  # it ran inside the checkpoint's allocation
    log = (root / paths.log_file("neuron_stats", f"{SCRATCH_MODEL}/main")).read_text()
    assert f"collecting the shards in node-local scratch {node_local}/{SCRATCH_FOLDER}/" in log
    assert not (root / paths.shards(SCRATCH_MODEL, "main")).exists()
    assert not any(node_local.iterdir())
