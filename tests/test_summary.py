"""`wneurons summary` and the table `wneurons run` ends with: read from a synthetic results tree (seconds)."""

from pathlib import Path

import pytest
import yaml

import wneurons.cli as cli
from wneurons.cli.summary import summary_lines, summary_rows
from wneurons.experiment import paths
from wneurons.experiment.config import validate_config
from wneurons.experiment.grid import Condition
from wneurons.store import io

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run(tmp_path):
    """The demo config, its results in tmp_path/res: clean BLiMP and perplexity, two random trials and W of layer
    group g1 on BLiMP, and the perplexity of W and of a matched control 50% off it, of smollm2-135m; nothing else."""
    cfg = yaml.safe_load((ROOT / "config/demo.yaml").read_text())
    cfg["results_dir"] = "res"
    for spec in cfg["data"].values():
        spec |= {"local_dir": str(tmp_path), "checksums": str(ROOT / spec["checksums"])}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    config = validate_config(cfg, ROOT / "workflow/schemas/config.schema.yaml", tmp_path)
    m, r = "smollm2-135m", "main"

    def write(path: str, scores: dict, condition: dict) -> None:
        io.write_json(tmp_path / path, {"scores": scores, "condition": condition})

    with paths.roots_of(config):
        write(paths.clean(m, r, "blimp"), {"overall": 0.75, "n_pairs": 8}, {"selector": "clean"})
        write(paths.clean(m, r, "ppl"), {"perplexity": 17.5, "n_tokens": 4096}, {"selector": "clean"})
        for trial, score in ((0, 0.5), (1, 0.75)):
            c = Condition("all", "random", "1", trial)
            write(paths.ablation(m, r, c, "blimp"), {"overall": score, "n_pairs": 8},
                  {**c._asdict(), "percent": 1.0, "seed": trial})  # fmt: skip
        c = Condition("g1", "wasserstein", "1", 0)
        write(paths.ablation(m, r, c, "blimp"), {"overall": 0.625, "n_pairs": 8}, {**c._asdict(), "seed": 0})
        search = {"tolerance": 0.05, "converged": True}
        for selector, ppl, extra in (("wasserstein", 20.0, {}), ("matched", 30.0, {"matched_percent": 3.0})):
            c = Condition("all", selector, "1", 0)
            write(paths.ablation(m, r, c, "ppl"), {"perplexity": ppl, "n_tokens": 4096},
                  {**c._asdict(), "seed": 0, "matched_search": search, **extra})  # fmt: skip
    return config, tmp_path


def test_the_summary_pools_random_trials_and_shows_n_and_what_is_missing(run):
    config, workdir = run
    rows, found, expected = summary_rows(config, workdir)
    assert found == 7 and expected > found  # every benchmark x condition of the grid is expected
    by_condition = {row["condition"]: row for row in rows}
    matched = "all/matched/p1 (m=3%, not matched)"  # its perplexity 50% off W's: beyond the search's tolerance
    assert list(by_condition) == [
        "clean",
        "all/wasserstein/p1",
        "all/random/p1 x2 trials",
        matched,
        "g1/wasserstein/p1",
    ]  # grid order
    assert by_condition[matched]["ppl"] == "30.00 (4096)" and by_condition[matched]["blimp"] == "—"
    assert by_condition["clean"]["blimp"] == "75.0 (8)" and by_condition["clean"]["ppl"] == "17.50 (4096)"
    assert by_condition["clean"]["tse"] == "—"
    assert by_condition["all/random/p1 x2 trials"]["blimp"] == "62.5 ±12.5 (8)"  # mean ± SEM of 50 and 75
    lines = summary_lines(config, workdir)
    assert lines[0].startswith(f"res/: 7 of the grid's {expected} scored result files")
    assert lines[1].split("|")[4].strip() == "BLiMP % (pairs)" and len({len(line) for line in lines[1:]}) == 1


def test_run_prints_the_summary_when_snakemake_succeeds_and_summary_reads_it_again(run, monkeypatch, capsys):
    config, workdir = run
    path = workdir / "run.yaml"
    monkeypatch.chdir(workdir)
    monkeypatch.setattr(cli, "repository_root", lambda: workdir)
    monkeypatch.setattr(cli, "SCHEMA", str(ROOT / "workflow/schemas/config.schema.yaml"))
    for code in (1, 0):
        monkeypatch.setattr(cli, "_run_snakemake", lambda cmd, root, code=code: code)
        assert cli.main(["run", str(path)]) == code
        printed = capsys.readouterr().out
        assert ("| clean " in printed) == (code == 0)  # no table after a failed run
    assert cli.main(["run", str(path), "--", "-n"]) == 0 and "| clean " not in capsys.readouterr().out  # a dry run
    assert cli.main(["summary", str(path)]) == 0
    assert capsys.readouterr().out == printed
    assert cli.main(["summary", str(path), "--limit", "2"]) == 0
    assert capsys.readouterr().out.startswith("res-limit2/: 0 of")
