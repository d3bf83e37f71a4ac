"""Node-local scratch through the real Snakefile: a revision whose shards no later job reads is collected and reduced
by one neuron_stats job in $TMPDIR, nothing of it reaches the activations root, and its statistics are the same
bytes as those of collection and statistics run as two jobs through the shared file system."""

import os

import yaml
from tiny_project import add_model_copy, dry_run_jobs, make_tiny_project, snakemake

from wneurons.experiment import paths
from wneurons.jobs.neurons import SCRATCH_FOLDER

# A second model over a copy of the same weights, that no figure and no explorer reads: its shards are read only by its
# statistics (the first model is Figure 1's and keeps its shards on the shared file system).
SCRATCH_MODEL = "tiny-llama-b"


def scratch_project(tmp_path) -> tuple:
    """The tiny project with SCRATCH_MODEL beside Figure 1's model: (root, config path, config, its neuron table)."""
    root = tmp_path / "project"
    config_path = make_tiny_project(root)
    config = yaml.safe_load(config_path.read_text())
    add_model_copy(root, config, SCRATCH_MODEL)
    config["figures"]["figure1"]["model"] = "tiny-llama"
    config["report"] = {"explorer": {"models": []}}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return root, config_path, config, paths.neurons(SCRATCH_MODEL, "main")


def test_statistics_collected_in_scratch_are_byte_identical_to_the_shared_file_system_run(tmp_path, monkeypatch):
    root, config_path, config, target = scratch_project(tmp_path)

    # Without scratch: collect_activations, then neuron_stats from resources/activations.
    assert dry_run_jobs(root, target) == {"fetch_data": 1, "collect_activations": 1, "neuron_stats": 1}
    snakemake(root, "--cores", "2", target)
    shared = (root / target).read_bytes()

    # With scratch: one job. $TMPDIR is the scratch; the run's own temporaries go elsewhere.
    node_local = tmp_path / "node-local"
    node_local.mkdir()
    config["neurons"]["scratch_dir"] = "$TMPDIR"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    monkeypatch.setenv("TMPDIR", str(node_local))
    (root / target).unlink()
    assert dry_run_jobs(root, target) == {"neuron_stats": 1}
    snakemake(root, "--cores", "2", target)

    assert (root / target).read_bytes() == shared
    log = (root / paths.log_file("neuron_stats", f"{SCRATCH_MODEL}/main")).read_text()
    assert f"collecting the shards in node-local scratch {node_local}/{SCRATCH_FOLDER}/" in log
    assert not (root / paths.shards(SCRATCH_MODEL, "main")).exists()  # nothing on the shared file system
    assert not any(p.name.startswith(SCRATCH_FOLDER) for p in node_local.iterdir())  # and nothing left in scratch
    # Figure 1's model keeps collecting into the shared activations root, where the figure reads them.
    jobs = dry_run_jobs(root, paths.neurons("tiny-llama", "main"))
    assert jobs.get("collect_activations") == 1 and os.environ["TMPDIR"] == str(node_local)
