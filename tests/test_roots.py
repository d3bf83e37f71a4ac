"""The configurable roots (results_dir, neurons.activations_dir / kept_activations_dir) and node-local scratch:
where each path goes, the one-line errors, which revisions collect in scratch, and what a killed collection in
scratch leaves behind."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from wneurons.experiment import paths, scratch, targets
from wneurons.experiment.config import ConfigError, validate_config
from wneurons.jobs.neurons import SCRATCH_FOLDER, scratch_shard_dir, scratch_shards

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"


def config_of(name: str, tmp_path: Path, **top) -> dict:
    """A shipped config, validated with its data dirs pointed at empty local folders, ``top`` keys replaced."""
    cfg = yaml.safe_load((ROOT / f"config/{name}.yaml").read_text())
    for dname in cfg["data"]:
        (tmp_path / dname).mkdir(exist_ok=True)
        cfg["data"][dname]["local_dir"] = str(tmp_path / dname)
    for key, value in top.items():
        if isinstance(value, dict):
            cfg.setdefault(key, {}).update(value)
        else:
            cfg[key] = value
    return validate_config(cfg, SCHEMA, ROOT)


# ---------------------------------------------------------------- roots
def test_default_roots_are_the_layout_the_paper_grid_and_the_demo_always_had():
    assert paths.roots() == paths.Roots() == paths.Roots.of({"models": {}})
    assert paths.neurons("m", "r") == "results/m/r/neurons.parquet"
    assert paths.figure("figure3", "m", "r") == "results/figures/figure3/m/r.png"
    assert paths.log_file("collect_activations", "m/r") == "logs/collect_activations/m/r.log"
    assert paths.benchmark_file("replication_table") == "benchmarks/replication_table.tsv"
    assert paths.shards("m", "r") == "resources/activations/m/r"
    assert paths.kept_shards("m", "r") == "resources/kept-activations/m/r"


def test_results_dir_moves_results_figures_report_logs_and_benchmarks_and_nothing_else():
    config = {"results_dir": "results-x/", "neurons": {"activations_dir": "/scratch/a", "kept_activations_dir": "k"}}
    with paths.roots_of(config) as roots:
        assert roots.results == "results-x"  # normalised: one spelling per directory
        assert paths.neurons("m", "r") == "results-x/m/r/neurons.parquet"
        assert paths.replication_md() == "results-x/replication.md"
        assert paths.report() == "results-x/report.html"
        assert paths.explorer("m", "r") == "results-x/m/r/explorer"
        assert paths.training_dir("m") == "results-x/m/training"
        assert paths.figure("figure1") == "results-x/figures/figure1.png"
        assert paths.log_file("explorer", "m/r") == "results-x/logs/explorer/m/r.log"
        assert paths.benchmark_file("explorer", "m/r") == "results-x/benchmarks/explorer/m/r.tsv"
        assert paths.shards("m", "r") == "/scratch/a/m/r"
        assert paths.kept_shards("m", "r") == "k/m/r"
        assert paths.dataset("blimp") == "resources/data/blimp"  # resources are shared by every config
        assert paths.staged_dir("m", "r") == "resources/hub/m/r"
    assert paths.neurons("m", "r") == "results/m/r/neurons.parquet"  # the earlier roots again after the block


def test_every_target_of_a_config_lies_under_its_roots(tmp_path):
    config = config_of("replication-smollm2", tmp_path)
    assert config["results_dir"] == "results-replication-smollm2"
    with paths.roots_of(config):
        every = targets.all_targets(config)
    assert every and all(t.startswith("results-replication-smollm2/") for t in every)


@pytest.mark.parametrize(
    ("name", "expected"),
    [("config", "results"), ("demo", "results"), ("replication-smollm2", "results-replication-smollm2")]
    + [("replication-gemma3", "results-replication-gemma3"), ("decisive-smollm2", "results-decisive-smollm2")]
    + [("decisive-gemma3", "results-decisive-gemma3")],
)
def test_each_shipped_config_has_its_own_results_dir(name, expected):
    raw = yaml.safe_load((ROOT / f"config/{name}.yaml").read_text())
    assert paths.Roots.of(raw).results == expected
    # git ignores it, as it does results/ (a committed result tree would be a mistake)
    probe = subprocess.run(["git", "check-ignore", "-q", f"{expected}/x.json"], cwd=ROOT)
    assert probe.returncode == 0


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("results_dir", "resources/results", "config: results_dir: 'resources/results' lies in resources/"),
        ("results_dir", "logs", "config: results_dir: 'logs' lies in logs/"),
        ("results_dir", "results-{model}", "config: results_dir: 'results-{model}' does not match"),
        ("results_dir", "", "config: results_dir: '' should be non-empty"),
        ("activations_dir", "results/acts", "config: neurons.activations_dir: 'results/acts' and results_dir"),
        ("kept_activations_dir", "resources/activations/kept", "config: neurons.kept_activations_dir:"),
        ("scratch_dir", "$TMPDIR/{x}", "config: neurons.scratch_dir: '$TMPDIR/{x}' does not match"),
    ],
)
def test_a_bad_root_is_one_line_naming_key_and_value(tmp_path, key, value, expected):
    top = {key: value} if key == "results_dir" else {"neurons": {key: value}}
    with pytest.raises(ConfigError) as err:
        config_of("demo", tmp_path, **top)
    assert str(err.value).startswith(expected) and "\n" not in str(err.value)


@pytest.mark.parametrize("key", ["results_dir", "activations_dir", "kept_activations_dir"])
def test_a_root_that_is_a_file_is_one_line_naming_the_key(tmp_path, key):
    afile = tmp_path / "a-file"
    afile.write_text("not a directory\n")
    top = {key: str(afile)} if key == "results_dir" else {"neurons": {key: str(afile)}}
    with pytest.raises(ConfigError) as err:
        config_of("demo", tmp_path, **top)
    named = key if key == "results_dir" else f"neurons.{key}"
    assert str(err.value) == f"config: {named}: {str(afile)!r} is a file, not a directory"


@pytest.mark.parametrize("value", ["/", "..", "."])
def test_a_results_dir_at_or_above_the_workflow_is_one_line(tmp_path, value):
    with pytest.raises(ConfigError) as err:
        config_of("demo", tmp_path, results_dir=value)
    message = str(err.value)
    assert message.startswith(f"config: results_dir: {value!r} is the workflow's directory") and "\n" not in message


# ---------------------------------------------------------------- which revisions collect in scratch
def test_only_revisions_whose_shards_nothing_else_reads_collect_in_scratch(tmp_path):
    config = config_of("config", tmp_path, neurons={"scratch_dir": "$TMPDIR"})
    read = scratch.shards_read_later(config)
    fig1 = targets.figure1_models(config)[0]
    assert (fig1, targets.final_revision(config, fig1)) in read
    for m in targets.explorer_models(config):
        assert (m, targets.final_revision(config, m)) in read
    checkpoint = config["models"][fig1]["checkpoints"][0]
    assert scratch.collects_in_scratch(config, fig1, checkpoint, one_allocation=True)
    assert not scratch.collects_in_scratch(config, fig1, checkpoint, one_allocation=False)
    assert not scratch.collects_in_scratch(config, fig1, targets.final_revision(config, fig1), True)
    config["neurons"]["keep_shards"] = True
    assert not scratch.collects_in_scratch(config, fig1, checkpoint, True)
    config["neurons"]["keep_shards"], config["neurons"]["scratch_dir"] = False, None
    assert not scratch.collects_in_scratch(config, fig1, checkpoint, True)


def test_pairs_from_the_test_shards_keep_every_revision_they_are_drawn_at_on_the_shared_file_system(tmp_path):
    config = config_of("config", tmp_path, neurons={"scratch_dir": "/local"}, pairs={"source": "test_shards"})
    read = scratch.shards_read_later(config)
    for m in targets.pair_models(config):
        assert all((m, r) in read for r in targets.revisions(config, m))


# ---------------------------------------------------------------- the scratch directory of a job
def test_scratch_dir_expands_variables_on_the_node_and_names_an_unset_one(tmp_path, monkeypatch):
    monkeypatch.setenv("WNEURONS_TEST_SCRATCH", str(tmp_path))
    path = scratch_shard_dir("$WNEURONS_TEST_SCRATCH/x", "m", "step1")
    assert path.parent.parent.parent == tmp_path / "x" / SCRATCH_FOLDER and path.parts[-2:] == ("m", "step1")
    assert path == scratch_shard_dir("$WNEURONS_TEST_SCRATCH/x", "m", "step1")  # every attempt: one path
    monkeypatch.delenv("WNEURONS_TEST_SCRATCH")
    with pytest.raises(ValueError, match=r"neurons.scratch_dir: '\$WNEURONS_TEST_SCRATCH/x' names an environment"):
        scratch_shard_dir("$WNEURONS_TEST_SCRATCH/x", "m", "step1")


def test_scratch_shards_are_gone_after_the_job_even_when_it_fails(tmp_path):
    with pytest.raises(RuntimeError), scratch_shards(str(tmp_path), "m", "r") as shard_dir:
        shard_dir.mkdir(parents=True)
        (shard_dir / "layer000.y.npy").write_bytes(b"x" * 4096)
        raise RuntimeError("the statistics failed")
    assert list(tmp_path.iterdir()) == []


def test_a_collection_killed_in_scratch_leaves_nothing_after_the_rerun(tmp_path):
    # kill -9 while the collection writes (its temporary sibling) and once it is complete (during the statistics):
    # no cleanup runs in either; the next attempt at the same revision removes both before it collects again.
    code = (
        "import os, signal, sys\n"
        "from wneurons.jobs.neurons import scratch_shards\n"
        "from wneurons.store import io\n"
        "with scratch_shards(sys.argv[1], 'm', sys.argv[2]) as shard_dir:\n"
        "    with io.atomic_directory(shard_dir) as tmp:\n"
        "        (tmp / 'layer000.y.npy').write_bytes(b'x' * 4096)\n"
        "        if sys.argv[2] == 'writing': os.kill(os.getpid(), signal.SIGKILL)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    for moment in ("writing", "reducing"):
        run = subprocess.run([sys.executable, "-c", code, str(tmp_path), moment], cwd=tmp_path)
        assert run.returncode == -signal.SIGKILL
        left = scratch_shard_dir(str(tmp_path), "m", moment, tmp_path).parent
        assert os.listdir(left), moment  # what the kill left
        rerun = (
            "import sys\nfrom wneurons.jobs.neurons import scratch_shards\nfrom wneurons.store import io\n"
            "with scratch_shards(sys.argv[1], 'm', sys.argv[2]) as shard_dir:\n"
            "    with io.atomic_directory(shard_dir) as tmp:\n"
            "        (tmp / 'layer000.y.npy').write_bytes(b'y')\n"
        )
        subprocess.run([sys.executable, "-c", rerun, str(tmp_path), moment], cwd=tmp_path, check=True)
    assert list(tmp_path.iterdir()) == []  # the rerun removed the leftovers, its own shards and the empty folders


# ---------------------------------------------------------------- the command line
def test_wneurons_explore_builds_the_explorer_under_the_configs_results_dir(tmp_path, monkeypatch):
    from wneurons import cli

    cfg = yaml.safe_load((ROOT / "config/demo.yaml").read_text())
    for dname in cfg["data"]:
        (tmp_path / dname).mkdir()
        cfg["data"][dname]["local_dir"] = str(tmp_path / dname)
    cfg["results_dir"] = "results-mine"
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    commands = []
    monkeypatch.setattr(cli, "_run_snakemake", lambda cmd, root: commands.append(cmd) or 1)
    assert cli.main(["explore", str(path)]) == 1
    model = next(iter(cfg["models"]))
    assert commands[0][-1] == f"results-mine/{model}/main/explorer"
