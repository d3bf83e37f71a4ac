"""The claims table on hand-made result trees with the spec's columns: verdicts follow the data, absent files say
"not run" and no claim disappears."""

import json

import numpy as np
import polars as pl
import pytest

from wneurons.jobs.report import replication_table_job
from wneurons.report.claims import CLAIMS, FAILS, HOLDS, NO_DATA, NOT_RUN, Run, claim_rows
from wneurons.report.replication import claims_markdown

K = 300  # neurons per layer: 1% = 3 neurons


def neurons_table(negative_heavy: bool, seed: int = 0) -> pl.DataFrame:
    """Three layers; in layer 1 the top-WD neurons put their WD per token on the negative (or positive) side."""
    rng = np.random.default_rng(seed)
    rows = []
    for layer in range(3):
        wd = rng.uniform(0.01, 0.05, K)
        f = rng.uniform(0.3, 0.7, K)
        heavy = wd * 0.5
        if layer == 1:
            wd[:6] = np.linspace(0.9, 0.6, 6)
            f[:6] = 0.5
        share = np.where(np.arange(K) < 6, 0.9 if negative_heavy else 0.1, f) if layer == 1 else f
        rows.append(
            pl.DataFrame(
                {
                    "layer": np.full(K, layer),
                    "neuron": np.arange(K),
                    "wd": wd,
                    "wd_negative": wd * share,
                    "wd_positive": wd * (1 - share),
                    "frac_negative": f,
                    "md": heavy,
                }
            )
        )
    return pl.concat(rows)


def make_run(tmp_path, models: dict[str, dict]) -> Run:
    specs = {}
    for name, m in models.items():
        files = {}
        for key, content in m.get("files", {}).items():
            path = tmp_path / "results" / name / f"{key}{'.csv' if key == 'figure5_pairs' else '.parquet'}"
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, pl.DataFrame):
                content.write_csv(path) if key == "figure5_pairs" else content.write_parquet(path)
            else:
                path = path.with_suffix(".json")
                path.write_text(json.dumps(content))
            files[key] = str(path.relative_to(tmp_path))
        for key in m.get("absent", ()):
            files[key] = f"results/{name}/{key}.parquet"
        specs[name] = {"family": m["family"], "params_b": m.get("params_b", 1.0), "files": files}
    config = {"random_trials": 10, "percents": [1.0], "resamples": 500, "seed": 0}
    return Run(models=specs, config=config, data={}, root=tmp_path)


def rows_for(rows, claim_id):
    return [r for r in rows if r["id"] == claim_id]


def test_every_claim_has_a_row_and_absent_files_say_not_run(tmp_path):
    run = make_run(tmp_path, {"smollm2-135m": {"family": "llama", "absent": ["neurons", "paired_blimp"]}})
    rows = claim_rows(run)
    assert {r["id"] for r in rows} == {c.id for c in CLAIMS} == {f"C{i}" for i in range(1, 31)}
    # Paper models missing from the run stay in the table.
    c9 = {r["model"]: r["verdict"] for r in rows_for(rows, "C9")}
    assert c9["llama-3.1-8b"] == NOT_RUN and "not in this run" in rows_for(rows, "C9")[0]["ours"]
    assert c9["smollm2-135m (not in paper)"] == NOT_RUN
    c1 = [r for r in rows_for(rows, "C1") if r["model"].startswith("smollm2")][0]
    assert c1["verdict"] == NOT_RUN and "absent" in c1["ours"]
    assert all(r["verdict"] in (HOLDS, FAILS, NO_DATA, NOT_RUN) for r in rows)


@pytest.mark.parametrize(
    ("family", "negative_heavy", "expected"),
    [("llama", True, HOLDS), ("llama", False, FAILS), ("opt", False, HOLDS), ("opt", True, FAILS)],
)
def test_c1_uses_per_token_shares_and_the_nonlinearity(tmp_path, family, negative_heavy, expected):
    run = make_run(tmp_path, {"toy": {"family": family, "files": {"neurons": neurons_table(negative_heavy)}}})
    row = [r for r in claim_rows(run) if r["id"] == "C1" and r["model"] == "toy (not in paper)"][0]
    assert row["verdict"] == expected, row
    assert "log[(WD−/f−)/(WD+/f+)]" in row["ours"]


def test_c1_is_not_fooled_by_a_large_negative_fraction(tmp_path):
    # WD spread evenly per token but 90% of tokens negative: wd_negative >> wd_positive, yet no negative excess.
    table = neurons_table(True).with_columns(
        frac_negative=pl.when((pl.col("layer") == 1) & (pl.col("neuron") < 6)).then(0.9).otherwise("frac_negative")
    )
    table = table.with_columns(
        wd_negative=pl.col("wd") * pl.col("frac_negative"), wd_positive=pl.col("wd") * (1 - pl.col("frac_negative"))
    )
    run = make_run(tmp_path, {"toy": {"family": "llama", "files": {"neurons": table}}})
    row = [r for r in claim_rows(run) if r["id"] == "C1" and r["model"] == "toy (not in paper)"][0]
    assert row["verdict"] != HOLDS
    assert row["verdict"] == NO_DATA and "= 0 over 3 neurons" in row["ours"]
    assert "median WD−−WD+ = 0.67" in row["ours"]  # the plain split would have called it negative


def paired_rows(drops: dict[tuple[str, str], tuple[float, float]], p: float) -> pl.DataFrame:
    rows = []
    for (reference, condition), (drop, half) in drops.items():
        rows.append(
            {
                "benchmark": "blimp",
                "reference": reference,
                "condition": condition,
                "trial": "pooled" if "random" in reference else "t0",
                "group_kind": "overall",
                "group": "all",
                "n": 1000,
                "acc_reference": 0.8,
                "acc_condition": 0.8 - drop,
                "drop": drop,
                "ci_lo": drop - half,
                "ci_hi": drop + half,
                "only_reference": 100,
                "only_condition": 10,
                "p_value": p,
            }
        )
    return pl.DataFrame(rows)


def test_c11_needs_both_controls_and_both_benchmarks_significant(tmp_path):
    w = "all/wasserstein/p1"
    table = paired_rows({("all/matched/p1", w): (0.1, 0.02), ("all/random/p1", w): (0.12, 0.02)}, 1e-6)
    run = make_run(
        tmp_path, {"llama-3.1-8b": {"family": "llama", "files": {"paired_blimp": table, "paired_tse": table}}}
    )
    row = [r for r in claim_rows(run) if r["id"] == "C11" and r["model"] == "llama-3.1-8b"][0]
    assert row["verdict"] == HOLDS and "p = 1e-06" in row["ours"]
    weak = paired_rows({("all/matched/p1", w): (0.01, 0.03), ("all/random/p1", w): (0.12, 0.02)}, 0.2)
    run = make_run(
        tmp_path / "b", {"llama-3.1-8b": {"family": "llama", "files": {"paired_blimp": table, "paired_tse": weak}}}
    )
    row = [r for r in claim_rows(run) if r["id"] == "C11" and r["model"] == "llama-3.1-8b"][0]
    assert row["verdict"] == NO_DATA


def test_analyses_claims_read_the_spec_files(tmp_path):
    layers = np.arange(24)
    composition = pl.DataFrame(
        {
            "layer": layers,
            "percent": 5.0,
            "top_k": 100,
            "n_neurons": 410,
            "share_nn": np.where(layers == 1, 0.6, np.where(layers == 0, 0.1, 0.35)),
            "share_pn": 0.4,
            "share_pp": 0.05,
        }
    )
    llama_layers = np.arange(32)
    nn = np.where(llama_layers < 4, 0.2, 0.05)
    layerwise = pl.DataFrame(
        {
            "layer": llama_layers,
            "share_nn": nn,
            "share_pn": 0.9 - nn,
            "share_pp": 0.1 - 0.1 * nn,
            "err_blimp": nn * 0.5 + 0.001 * llama_layers % 3,
            "err_tse": nn * 0.3,
        }
    )
    llama_composition = pl.DataFrame(
        {"layer": llama_layers, "percent": 0.5, "top_k": 50, "share_nn": nn, "share_pn": 0.9 - nn, "share_pp": 0.1}
    )
    pos = pl.DataFrame(
        {
            "upos": ["DET", "PUNCT", "AUX", "PART", "NOUN", "VERB", "ADJ", "ADV"],
            "n": [500] * 8,
            "mean_shifted_dnll": [0.3, 0.2, 0.25, 0.4, -0.1, -0.05, 0.01, -0.2],
            "sem": [0.02] * 8,
        }
    )
    run = make_run(
        tmp_path,
        {
            "pythia-1.4b": {"family": "gpt_neox", "files": {"composition": composition}},
            "llama-3.1-8b": {
                "family": "llama",
                "files": {"layerwise": layerwise, "pos_surprisal": pos, "composition": llama_composition},
            },
        },
    )
    verdicts = {(r["id"], r["model"]): r["verdict"] for r in claim_rows(run)}
    assert verdicts[("C20", "pythia-1.4b")] == HOLDS
    assert verdicts[("C13", "llama-3.1-8b")] == HOLDS
    assert verdicts[("C23", "llama-3.1-8b")] == HOLDS
    assert verdicts[("C24", "llama-3.1-8b")] == HOLDS
    assert verdicts[("C25", "llama-3.1-8b")] == HOLDS
    # Move the NN peak to layer 3 (index 2 stays early) vs a late BLiMP peak: C25 fails.
    late = layerwise.with_columns(err_blimp=pl.when(pl.col("layer") == 30).then(1.0).otherwise("err_blimp"))
    run = make_run(tmp_path / "late", {"llama-3.1-8b": {"family": "llama", "files": {"layerwise": late}}})
    verdicts = {(r["id"], r["model"]): r["verdict"] for r in claim_rows(run)}
    assert verdicts[("C25", "llama-3.1-8b")] == FAILS
    # Pos surprisal with a content class clearly positive fails C13.
    bad = pos.with_columns(mean_shifted_dnll=pl.when(pl.col("upos") == "NOUN").then(0.5).otherwise("mean_shifted_dnll"))
    run = make_run(tmp_path / "pos", {"llama-3.1-8b": {"family": "llama", "files": {"pos_surprisal": bad}}})
    assert [r for r in claim_rows(run) if r["id"] == "C13"][0]["verdict"] == FAILS


def test_training_claims_read_emergence_files(tmp_path):
    steps = np.array([0, 1000, 4000, 16000, 32000, 64000, 143000])
    models = {}
    for i, m in enumerate(["pythia-70m", "pythia-160m", "pythia-410m", "pythia-1b"]):
        wd = np.array([0.1, 0.2, 0.5, 0.95, 1.0, 1.0, 1.0]) * (1 + i)
        emergence = pl.DataFrame({"step": steps, "cohort_wd_mean": wd, "tse_overall": 0.5 + 0.3 * wd / wd.max()})
        models[m] = {"family": "gpt_neox", "params_b": [0.07, 0.16, 0.41, 1.0][i], "files": {"emergence": emergence}}
    rows = claim_rows(make_run(tmp_path, models))
    c3 = rows_for(rows, "C3")[0]
    assert c3["verdict"] == HOLDS and "16000" in c3["ours"]
    assert rows_for(rows, "C5")[0]["verdict"] == HOLDS
    assert rows_for(rows, "C4")[0]["verdict"] == NOT_RUN


def test_emergence_claim_uses_the_fraction_the_run_recorded(tmp_path):
    from wneurons.store import io

    steps = np.array([0, 1000, 4000, 16000, 32000, 64000, 143000])
    wd = np.array([0.1, 0.2, 0.5, 0.95, 1.0, 1.0, 1.0])
    models = {}
    for m in ["pythia-70m", "pythia-160m", "pythia-410m"]:
        path = tmp_path / "results" / m / "emergence.parquet"
        path.parent.mkdir(parents=True)
        table = pl.DataFrame({"step": steps, "cohort_wd_mean": wd, "tse_overall": wd})
        io.write_parquet(path, table, {"emergence_fraction": 0.5})
        models[m] = {"family": "gpt_neox", "files": {"emergence": str(path.relative_to(tmp_path))}}
    config = {"random_trials": 10, "percents": [1.0], "resamples": 500, "seed": 0}
    run = Run(models=models, config=config, data={}, root=tmp_path)
    c3 = rows_for(claim_rows(run), "C3")[0]
    assert "(50% of final)" in c3["ours"] and "pythia-70m: 4000" in c3["ours"]


def test_training_claims_read_i12_tables(tmp_path):
    # The columns of issue 12's cosine_drift.parquet, pair_signs.parquet and ablation_vs_wd.parquet.
    drift = pl.DataFrame({"end_step": [10000, 20000, 30000], "cohort_ncd_mean": [1.8, 0.7, 0.6]})
    steps = [0, 1000, 16000, 143000]
    signs = pl.DataFrame(
        {"layer": 1, "step": steps, "share_nn": [0.1, 0.15, 0.35, 0.4], "share_pn": [0.6, 0.5, 0.4, 0.4]}
    )
    wd = np.array([0.1, 0.3, 0.6, 0.9, 1.0])
    rows = []
    for bench in ("blimp", "tse"):
        rows += [{"selector": "wasserstein", "benchmark": bench, "cohort_wd_mean": x, "error_increase": 0.2 * x}
                 for x in wd]  # fmt: skip
        rows += [{"selector": "random", "benchmark": bench, "cohort_wd_mean": x, "error_increase": e}
                 for x, e in zip(wd, [0.01, -0.01, 0.0, 0.01, -0.005], strict=True)]  # fmt: skip
    files = {"cosine_drift": drift, "pair_signs_training": signs, "ablation_vs_wd": pl.DataFrame(rows)}
    run = make_run(tmp_path, {"pythia-1.4b": {"family": "gpt_neox", "params_b": 1.4, "files": files}})
    verdicts = {r["id"]: r["verdict"] for r in claim_rows(run) if r["model"] in ("pythia-1.4b", "pythia-70m…12b")}
    assert verdicts["C4"] == HOLDS and verdicts["C21"] == HOLDS and verdicts["C22"] == HOLDS
    unrelated = pl.Series([0.05, 0.01, 0.04, 0.02, 0.03] * 4)  # W's error no longer follows the cohort's WD
    files["ablation_vs_wd"] = pl.DataFrame(rows).with_columns(
        error_increase=pl.when(pl.col("selector") == "wasserstein").then(unrelated).otherwise("error_increase")
    )
    run = make_run(tmp_path / "b", {"pythia-1.4b": {"family": "gpt_neox", "params_b": 1.4, "files": files}})
    assert [r for r in claim_rows(run) if r["id"] == "C22"][0]["verdict"] == FAILS


def test_markdown_escapes_pipes_and_links_sources(tmp_path):
    rows = [
        {
            "id": "C1",
            "claim": "a | b",
            "model": "m",
            "paper": "x",
            "ours": "1",
            "ci": "",
            "test": "t",
            "verdict": HOLDS,
            "sources": ["results/m/main/neurons.parquet"],
        }
    ]
    md = claims_markdown(rows, "results")
    assert "a \\| b" in md
    assert "[neurons.parquet](m/main/neurons.parquet)" in md
    assert "holds: 1" in md


def test_replication_table_job_writes_md_and_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = {"models": {}, "config": {"random_trials": 3, "percents": [1.0], "resamples": 100, "seed": 0}, "data": {}}
    rows = replication_table_job(spec, "results/replication.md", "results/replication.json")
    saved = json.loads((tmp_path / "results/replication.json").read_text())
    assert len(saved["claims"]) == len(rows) >= 29
    c27 = rows_for(rows, "C27")[0]
    assert c27["verdict"] == FAILS and c27["ours"] == "3 random trials"
    assert "| C27 |" in (tmp_path / "results/replication.md").read_text()


def test_html_table_escapes_every_cell_and_shows_provenance(tmp_path):
    from wneurons.report.replication import claims_html

    row = {
        "id": "C1",
        "claim": "<script>x</script>",
        "model": "m",
        "paper": "p",
        "ours": "a<b",
        "ci": "",
        "test": "t",
        "verdict": NOT_RUN,
        "sources": ["results/m/main/x.json"],
    }
    page = claims_html([row], {"models": {"m": {"revision": "main"}}}, "results")
    assert "<script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page and "a&lt;b" in page
    assert "href='m/main/x.json'" in page and "&quot;revision&quot;: &quot;main&quot;" in page
