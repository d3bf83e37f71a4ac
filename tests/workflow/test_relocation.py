"""A finished project moved to another directory is still finished: nothing the rules record (code, params, inputs)
depends on where the project lives. (A `script:` rule did: its recorded code named the script relative to the
rule file, and moving the tree reran the trained suite and everything downstream of it.)"""

from __future__ import annotations

import shutil

import pytest
import yaml
from tiny_project import REPO, dry_run_jobs, make_tiny_project, snakemake, write_checksums

from wneurons.experiment import paths

pytestmark = pytest.mark.slow

SUITE = "tiny-suite"


def _with_trained_suite(root) -> None:
    """Add a second article to WikiText-2 test (a trained suite reads the text after what the neuron statistics
    read) and a two-layer GPT-NeoX suite trained for 4 steps."""
    test = root / "src/wikitext2/wiki.test.raw"
    text = test.read_text()
    body = [line for line in text.splitlines(keepends=True) if line.strip() and "=" not in line]
    test.write_text(text + " = Second = \n \n" + "".join(reversed(body[:30])))
    write_checksums(root / "src/wikitext2", root / "checksums/wikitext2.sha256")
    config_path = root / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    train = {"vocab_size": 300, "seq_len": 16, "batch_size": 2, "warmup_steps": 1, "text_start": 0.5}
    arch = {"num_layers": 2, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32}
    config["models"][SUITE] = {
        "family": "gpt_neox",
        "checkpoint_suite": {"train": train | arch},
        "final_revision": "step4",
        "checkpoints": ["step2"],
        "num_layers": 2,
        "params_b": 0.0001,
        "ablate": False,
    }
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))


def test_a_moved_project_plans_nothing(tmp_path):
    """The workflow (Snakefile, rules, scripts) inside the project, as in a clone, and the whole tree copied."""
    root = tmp_path / "here"
    make_tiny_project(root)
    _with_trained_suite(root)
    for name in ("Snakefile", "environment.yml"):
        shutil.copy2(REPO / name, root / name)
    shutil.copytree(REPO / "workflow", root / "workflow", ignore=shutil.ignore_patterns("__pycache__"))
    targets = [paths.trained_suite(SUITE), paths.neurons(SUITE, "step2"), paths.neurons("tiny-llama", "main")]
    snakemake(root, "--cores", "2", *targets, snakefile=root / "Snakefile")
    assert dry_run_jobs(root, *targets, snakefile=root / "Snakefile") == {}

    moved = tmp_path / "elsewhere" / "there"
    shutil.copytree(root, moved, symlinks=True)
    assert dry_run_jobs(moved, *targets, snakefile=moved / "Snakefile") == {}
