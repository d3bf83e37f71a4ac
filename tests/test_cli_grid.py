"""`wneurons list` and `run --limit` from the grid functions alone, and `status`'s reading of Snakemake's job table."""

import json
from pathlib import Path

import pytest
import yaml

from wneurons.cli import listing, progress
from wneurons.experiment.config import validate_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "workflow/schemas/config.schema.yaml"


@pytest.fixture
def config(tmp_path):
    """The paper grid with a BLiMP of two paradigms (5 and 3 pairs) as its data."""
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    for name in cfg["data"]:
        cfg["data"][name]["local_dir"] = str(tmp_path)
    blimp = tmp_path / "blimp"
    blimp.mkdir()
    for uid, n in (("a_1", 5), ("b_1", 3)):
        rows = [{"sentence_good": "a b", "sentence_bad": "b a", "field": "f", "linguistics_term": "t"}] * n
        lines = [json.dumps(r | {"UID": uid, "pairID": str(i)}) + "\n" for i, r in enumerate(rows)]
        (blimp / f"{uid}.jsonl").write_text("".join(lines))
    cfg["data"]["blimp"]["local_dir"] = str(blimp)
    return validate_config(cfg, SCHEMA, ROOT)


def test_list_counts_the_items_drawn_on_the_data(config, tmp_path):
    config["evaluation"] |= {"blimp_pairs_per_paradigm": 4, "blimp_pairs_offset": 1}
    # Run from tmp_path: in the repository, data that `make demo` fetched (resources/data/blimp) comes first.
    sizes = listing.benchmark_sizes(config, tmp_path)
    assert "no *.pickle files" in sizes["tse"]  # no TSE here: said, not a traceback
    assert sizes["blimp"].startswith("6 items: 4 pairs per paradigm after the first 1 x 2 paradigms of 8")  # 4 + 2
    lines = listing.describe(config, tmp_path)
    assert lines[0] == "results in results/" and any(line.startswith("scoring jobs: ") for line in lines)


def test_limit_caps_every_benchmark_into_its_own_results_dir_and_the_result_validates(config):
    config["evaluation"]["blimp_pairs_per_paradigm"] = 1  # already under the limit: left alone
    overrides, changed = listing.limit_overrides(config, 3)
    window = config["evaluation"]["perplexity_window"]
    assert overrides["results_dir"] == "results-limit3"
    assert "blimp_pairs_per_paradigm" not in overrides["evaluation"]
    assert overrides["evaluation"]["tse_items_per_subtask"] == 3
    assert overrides["evaluation"]["perplexity_max_tokens"] == 3 * window
    tasks = config["evaluation"]["capability"]["tasks"]
    assert overrides["evaluation"]["capability"]["limits"] == dict.fromkeys(tasks, 3)
    assert "evaluation.tse_items_per_subtask null -> 3" in changed
    merged = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    merged["evaluation"] |= {k: v for k, v in overrides["evaluation"].items() if k != "capability"}
    merged["evaluation"]["capability"]["limits"] |= overrides["evaluation"]["capability"]["limits"]
    for name in merged["data"]:
        merged["data"][name]["local_dir"] = str(ROOT)
    validate_config(merged | {"results_dir": overrides["results_dir"]}, SCHEMA, ROOT)  # as Snakemake merges them


def test_job_stats_reads_the_first_table_and_nothing_to_do_is_empty():
    out = "Building DAG of jobs...\nJob stats:\njob           count\n----------  -------\nscore_clean       3\n"
    out += "all               1\ntotal             4\n\nReasons:\n"
    assert progress.job_stats(out + out) == {"score_clean": 3, "all": 1}
    assert progress.job_stats("Building DAG of jobs...\nNothing to be done (all requested files are present).") == {}


def test_status_shows_only_this_configs_run_when_two_share_a_working_directory(tmp_path):
    """Two configs in one working directory (results/ and results-b/): each one's status counts the locks,
    incomplete markers and allocation ledgers that name its own files, and says when only the other's run holds
    the directory."""
    import base64
    import os
    import time

    from wneurons.experiment.paths import Roots
    from wneurons.jobs import ledger

    smk = tmp_path / ".snakemake"
    (smk / "locks").mkdir(parents=True)
    (smk / "locks/0.output.lock").write_text("results-b/m/main/clean/blimp.json\nresources/models/m/config.json\n")
    (smk / "incomplete").mkdir()
    for path in ("results-b/m/main/clean/tse.json", "results/m/main/clean/blimp.json"):
        (smk / "incomplete" / base64.urlsafe_b64encode(path.encode()).decode()).write_text("")
    for run, output in (("run-a", "results/m/main/wd.parquet"), ("run-b", "results-b/m/main/wd.parquet")):
        ledger.write_manifest(tmp_path / ledger.ROOT / run / "g1.json", [("wd", [output], [])])
        os.utime(tmp_path / ledger.ROOT / run, (time.time() + (run == "run-b"), time.time() + (run == "run-b")))
    a = progress.status_lines({"wd": 1}, {"wd": 1}, tmp_path, Roots("results"))
    b = progress.status_lines({"wd": 1}, {"wd": 1}, tmp_path, Roots("results-b"))
    assert (
        "running: none; 1 outputs left incomplete by a stopped run (rerun: they redo); a run of another config "
        "holds this directory"
        in a
        and "  results/m/main/clean/blimp.json" in a
    )
    assert not any("results-b/" in line for line in a), a
    assert any(line.startswith("SLURM allocations of run run-a:") for line in a), a  # not the newer run-b
    assert f"running: a Snakemake run of this config holds {tmp_path}; 1 outputs being written" in b
    assert "  results-b/m/main/clean/tse.json" in b and any(
        line.startswith("SLURM allocations of run run-b:") for line in b
    )
    # Without the other run's lock, config a's line says nobody holds the directory.
    (smk / "locks/0.output.lock").unlink()
    (smk / "incomplete" / base64.urlsafe_b64encode(b"results/m/main/clean/blimp.json").decode()).unlink()
    assert "running: none (no Snakemake run holds this directory)" in progress.status_lines({}, {}, tmp_path, Roots())
