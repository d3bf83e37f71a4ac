"""examples/notebook.py, the notebook path (wneurons.api), runs on the tiny project's model: WD table, the top-WD
condition clamped, saved and re-applied from its file, and a condition recorded by a workflow result file."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from tiny_project import REPO, make_tiny_project, snakemake

from wneurons import api

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("notebook")
    make_tiny_project(root)
    return root


def test_the_notebook_example_runs(project):
    """Also with --run on the tiny run (its data and clean BLiMP only): the run's seeded items scored, its random and
    matched controls rebuilt, and its clean per-item BLiMP results read back equal to the example's."""
    from wneurons.experiment import paths

    snakemake(project, "--cores", "2", paths.clean_items("tiny-llama", "main", "blimp"), paths.benchmark_data("ppl"))
    cond = project / "w.json"
    args = ["model", "src/wikitext2/wiki.test.raw", "src/blimp/npi_present_1.jsonl", "--percent", "5"]
    args += ["--window", "32", "--save", str(cond), "--condition", str(cond)]
    args += ["--run", "config.yaml", "--model", "tiny-llama", "--trial", "1"]
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples/notebook.py"), *args], cwd=project, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    clamped = next(line for line in lines if line.startswith("top 5% WD clamped"))
    reapplied = next(line for line in lines if line.startswith(str(cond)))
    assert clamped.split(": ")[-1] == reapplied.split(": ")[-1]  # the saved condition is the same clamp
    assert json.loads(cond.read_text())["mode"] == "negative"
    out = proc.stdout
    assert "run items: 24 BLiMP pairs" in out and "random trial 1 (" in out and "matched m=" in out, out
    assert "run's clean per-item results: 24 rows, equal to these" in out, out
    # examples/run_items_equal.py (CI runs it on the demo): the run's clean BLiMP items through the API, same bytes
    check = [
        sys.executable,
        str(REPO / "examples/run_items_equal.py"),
        "config.yaml",
        "tiny-llama",
        "--model-dir",
        "model",
    ]
    proc = subprocess.run(check, cwd=project, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "blimp clean: 24 items, equal to the run's" in proc.stdout, proc.stdout


def test_a_result_files_condition_is_applied_as_recorded(project, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(project / "model").eval()
    result = tmp_path / "blimp.json"  # as wneurons.jobs.ablate.score_job writes it
    record = {"selector": "wasserstein", "mode": "both", "neurons": {"1": [0, 5], "3": []}}
    result.write_text(json.dumps({"benchmark": "blimp", "condition": record, "scores": {}}))
    condition = api.Condition.from_result(result)
    assert condition == api.Condition({1: [0, 5], 3: []}, "both") and condition.size() == 2
    ids = torch.tensor([[4, 5, 6, 7, 8]])
    clean = model(ids).logits
    with api.applied(model, condition):
        clamped = model(ids).logits
    assert not torch.equal(clean, clamped)
    assert torch.equal(model(ids).logits, clean)  # hooks gone after the block
    with api.applied(model, api.Condition({}, "negative")):
        assert torch.equal(model(ids).logits, clean)  # an empty set changes nothing
    clean_json = tmp_path / "clean.json"
    clean_json.write_text(json.dumps({"condition": {"selector": "clean"}}))
    with pytest.raises(ValueError, match="records no neurons"):
        api.Condition.from_result(clean_json)
