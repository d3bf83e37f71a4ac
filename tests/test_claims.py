"""The claims table on hand-made result trees with the spec's columns: verdicts follow the data, absent files say
"not run" and no claim disappears."""

import json
import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from wneurons.jobs.report import replication_table_job
from wneurons.report.claims import CLAIMS, FAILS, HOLDS, NO_DATA, NOT_RUN, Run, claim_rows
from wneurons.report.replication import claims_markdown

K = 1000  # neurons per layer: 1% = 10 neurons (the fewest a bootstrap over neurons takes)


def neurons_table(negative_heavy: bool, seed: int = 0) -> pl.DataFrame:
    """Three layers; in layer 1 the top-WD neurons put their WD per token on the negative (or positive) side."""
    rng = np.random.default_rng(seed)
    rows = []
    for layer in range(3):
        wd = rng.uniform(0.01, 0.05, K)
        f = rng.uniform(0.3, 0.7, K)
        heavy = wd * 0.5
        if layer == 1:
            wd[:12] = np.linspace(0.9, 0.6, 12)
            f[:12] = 0.5
        share = np.where(np.arange(K) < 12, 0.9 if negative_heavy else 0.1, f) if layer == 1 else f
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
        specs[name] = {"family": m.get("family"), "params_b": m.get("params_b", 1.0), "files": files}
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
        frac_negative=pl.when((pl.col("layer") == 1) & (pl.col("neuron") < 12)).then(0.9).otherwise("frac_negative")
    )
    table = table.with_columns(
        wd_negative=pl.col("wd") * pl.col("frac_negative"), wd_positive=pl.col("wd") * (1 - pl.col("frac_negative"))
    )
    run = make_run(tmp_path, {"toy": {"family": "llama", "files": {"neurons": table}}})
    row = [r for r in claim_rows(run) if r["id"] == "C1" and r["model"] == "toy (not in paper)"][0]
    assert row["verdict"] != HOLDS
    assert row["verdict"] == NO_DATA and "over 10 neurons" in row["ours"]  # mean log ratio 0 up to rounding
    assert "median WD−−WD+ = 0.6" in row["ours"]  # the plain split would have called it negative


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


def ppl_rows(ratios: dict[tuple[str, str], float], half: float = 0.01, n_windows: int = 40) -> pl.DataFrame:
    """Paired perplexity rows: ratio = ppl(condition) / ppl(reference) over 100,000 tokens, CI ratio ± half."""
    rows = []
    for (ref, cond), r in ratios.items():
        trial = "pooled" if "random" in ref + cond else "t0"
        rows.append({"benchmark": "ppl", "reference": ref, "condition": cond, "trial": trial, "n_windows": n_windows,
                     "n_tokens": 100_000, "ratio": r, "ci_lo": r - half, "ci_hi": r + half,
                     "delta_nll": float(np.log(r))})  # fmt: skip
    return pl.DataFrame(rows)


W1, M1, R1 = "all/wasserstein/p1", "all/matched/p1", "all/random/p1"


def test_c11_needs_both_controls_and_both_benchmarks_significant(tmp_path):
    w = "all/wasserstein/p1"
    table = paired_rows({("all/matched/p1", w): (0.1, 0.02), ("all/random/p1", w): (0.12, 0.02)}, 1e-6)
    ppl = ppl_rows({("clean", W1): 2.0, ("clean", M1): 2.0**0.95})  # the control reaches 95% of W's NLL increase
    files = {"paired_blimp": table, "paired_tse": table, "paired_ppl": ppl}
    run = make_run(tmp_path, {"llama-3.1-8b": {"family": "llama", "files": files}})
    row = [r for r in claim_rows(run) if r["id"] == "C11" and r["model"] == "llama-3.1-8b"][0]
    assert row["verdict"] == HOLDS and "p = 1e-06" in row["ours"]
    weak = paired_rows({("all/matched/p1", w): (0.01, 0.03), ("all/random/p1", w): (0.12, 0.02)}, 0.2)
    files = {"paired_blimp": table, "paired_tse": weak, "paired_ppl": ppl}
    run = make_run(tmp_path / "b", {"llama-3.1-8b": {"family": "llama", "files": files}})
    row = [r for r in claim_rows(run) if r["id"] == "C11" and r["model"] == "llama-3.1-8b"][0]
    assert row["verdict"] == NO_DATA
    # The undecided part says how many items would decide it: 1 point over a CI of ±3 at n = 1,000 items.
    z = stats.norm.ppf(1 - 0.01 / 2) + stats.norm.ppf(0.8)
    needed = math.ceil(1000 * (z * (0.03 / stats.norm.ppf(0.975)) / 0.01) ** 2)
    assert f"n ≈ {needed:,} items would detect it (α = 0.01, 80% power)" in row["ours"]
    assert row["ours"].count("would detect it") == 2  # TSE's two parts (p = 0.2); BLiMP's, decided, say nothing


def test_c11_says_when_the_matched_control_is_weaker(tmp_path):
    # Everything significant, but the matched control reaches 70% of W's NLL increase: it cannot carry C11.
    table = paired_rows({(M1, W1): (0.1, 0.02), (R1, W1): (0.12, 0.02)}, 1e-6)
    ppl = ppl_rows({("clean", W1): 2.0, ("clean", M1): 2.0**0.7})
    files = {"paired_blimp": table, "paired_tse": table, "paired_ppl": ppl}
    row = rows_for(claim_rows(make_run(tmp_path, {"llama-3.1-8b": {"family": "llama", "files": files}})), "C11")[0]
    assert row["verdict"] == NO_DATA and "reaches 70% of W's NLL increase" in row["ours"]
    assert "weaker control" in row["ours"]
    # The random part needs its two-stage CI above 0 as well as p < 0.01.
    wide = paired_rows({(M1, W1): (0.1, 0.02), (R1, W1): (0.02, 0.03)}, 1e-6)
    ppl = ppl_rows({("clean", W1): 2.0, ("clean", M1): 2.0**0.95})
    files = {"paired_blimp": wide, "paired_tse": table, "paired_ppl": ppl}
    row = rows_for(claim_rows(make_run(tmp_path / "r", {"llama-3.1-8b": {"family": "llama", "files": files}})), "C11")
    assert row[0]["verdict"] == NO_DATA


def matched_record(**search) -> dict:
    base = {"percent": 30.0, "perplexity": 20.0, "target_perplexity": 20.2, "relative_gap": 0.01, "tolerance": 0.02,
            "converged": True, "reason": "within tolerance", "clean_perplexity": 17.0,
            "trace": [{"percent": 95.0, "perplexity": 900.0}, {"percent": 30.0, "perplexity": 20.0}]}  # fmt: skip
    base |= search
    record = {"matched_percent": base["percent"], "matched_search": base}
    return {"conditions": {"all/matched/p1": record}}


@pytest.mark.parametrize(
    ("search", "verdict", "words"),
    [
        ({}, HOLDS, "converged: gap 1%"),
        # W lowered perplexity (the demo suite): the search ends at its bound having matched nothing
        ({"percent": 95.0, "perplexity": 228.8, "target_perplexity": 198.39, "clean_perplexity": 198.67,
          "relative_gap": 0.153, "converged": False, "reason": "the clean perplexity already reaches the target",
          "trace": [{"percent": 95.0, "perplexity": 228.8}]}, FAILS, "W does not raise perplexity"),
        ({"percent": 12.0, "relative_gap": 0.08, "converged": False, "reason": "8 evaluations"}, NO_DATA,
         "did not converge"),
        ({"percent": 95.0, "perplexity": 19.0, "relative_gap": 0.06, "converged": False,
          "reason": "clamping the lowest 95% still leaves perplexity below the target"}, HOLDS, "m > 95%"),
    ],
)  # fmt: skip
def test_c9_reads_whether_the_search_converged(tmp_path, search, verdict, words):
    run = make_run(tmp_path, {"toy": {"family": "llama", "files": {"ppl": matched_record(**search)}}})
    row = [r for r in rows_for(claim_rows(run), "C9") if r["model"].startswith("toy")][0]
    assert row["verdict"] == verdict and words in row["ours"], row


def test_c8_much_less_has_a_margin_and_c6_needs_windows(tmp_path):
    # Random raises NLL by 80% of W's: W / random > 1 (the old rule held), but not "much less".
    ppl = ppl_rows({("clean", W1): 2.0, (R1, W1): 2.0**0.2, ("clean", R1): 2.0**0.8})
    run = make_run(tmp_path, {"toy": {"family": "llama", "files": {"paired_ppl": ppl}}})
    assert rows_for(claim_rows(run), "C8")[-1]["verdict"] == FAILS
    ppl = ppl_rows({("clean", W1): 2.0, (R1, W1): 2.0**0.9, ("clean", "all/wasserstein/p2"): 2.5})
    run = make_run(tmp_path / "ok", {"toy": {"family": "llama", "files": {"paired_ppl": ppl}}})
    verdicts = {r["id"]: r["verdict"] for r in claim_rows(run) if r["model"].startswith("toy")}
    assert verdicts["C8"] == HOLDS and verdicts["C6"] == HOLDS
    few = ppl_rows({("clean", W1): 2.0, (R1, W1): 2.0**0.9, ("clean", "all/wasserstein/p2"): 2.5}, n_windows=4)
    few = few.with_columns(ci_lo=float("nan"), ci_hi=float("nan"))
    run = make_run(tmp_path / "few", {"toy": {"family": "llama", "files": {"paired_ppl": few}}})
    rows = {r["id"]: r for r in claim_rows(run) if r["model"].startswith("toy")}
    assert rows["C6"]["verdict"] == NO_DATA and "not enough data at n = 4 windows" in rows["C6"]["test"]
    assert rows["C8"]["verdict"] == NO_DATA and rows["C6"]["ci"] == "no CI"


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
        {"layer": 1, "step": steps, "share_nn": [0.1, 0.15, 0.35, 0.4], "share_pn": [0.8, 0.75, 0.6, 0.55]}
    ).with_columns(share_pp=1 - pl.col("share_nn") - pl.col("share_pn"))
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
    wd12 = np.linspace(0.1, 1.0, 12)
    falling = [{"selector": s, "benchmark": b, "cohort_wd_mean": x, "error_increase": 0.3 - 0.2 * x}
               for b in ("blimp", "tse") for s in ("wasserstein", "random") for x in wd12]  # fmt: skip
    files["ablation_vs_wd"] = pl.DataFrame(falling)  # W's error falls as WD rises; a control follows WD
    run = make_run(tmp_path / "b", {"pythia-1.4b": {"family": "gpt_neox", "params_b": 1.4, "files": files}})
    c22 = [r for r in claim_rows(run) if r["id"] == "C22"][0]
    assert c22["verdict"] == FAILS and "n = 12" in c22["ours"]


def test_c22_needs_five_checkpoints_and_bounds_the_controls(tmp_path):
    # Three checkpoints: a control with r = 0.99 had p >= 0.05 and passed; now it is not enough data.
    rows = [{"selector": s, "benchmark": b, "cohort_wd_mean": x, "error_increase": 0.2 * x + 0.001 * (s == "random")}
            for b in ("blimp", "tse") for s in ("wasserstein", "random") for x in (0.1, 0.5, 0.9)]  # fmt: skip
    run = make_run(tmp_path, {"pythia-1.4b": {"family": "gpt_neox", "files": {"ablation_vs_wd": pl.DataFrame(rows)}}})
    c22 = [r for r in claim_rows(run) if r["id"] == "C22"][0]
    assert c22["verdict"] == NO_DATA and "not enough data at n = 3 checkpoints" in c22["test"]
    # Eight checkpoints where the random control follows WD as closely as W: it does not hold.
    rows = [{"selector": s, "benchmark": b, "cohort_wd_mean": x, "error_increase": 0.2 * x}
            for b in ("blimp", "tse") for s in ("wasserstein", "random") for x in np.linspace(0.1, 0.9, 8)]  # fmt: skip
    run = make_run(
        tmp_path / "b", {"pythia-1.4b": {"family": "gpt_neox", "files": {"ablation_vs_wd": pl.DataFrame(rows)}}}
    )
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


def group_tables(drops: dict[str, float], term_drops: dict[str, float], p_between: float, p_terms: float, n: int):
    """Paired BLiMP rows of layer groups vs clean (overall and by term) and each group vs every later group, and
    a blimp.json naming each group's layers (groups of 4 of 32 layers)."""
    rows = []

    def row(ref, cond, drop, p, kind="overall", group="all"):
        rows.append({"benchmark": "blimp", "reference": ref, "condition": cond, "trial": "t0", "group_kind": kind,
                     "group": group, "n": n, "drop": drop, "ci_lo": drop - 0.01, "ci_hi": drop + 0.01,
                     "p_value": p})  # fmt: skip

    keys = {g: f"{g}/wasserstein/p1" for g in drops}
    for g, d in drops.items():
        row("clean", keys[g], d, 1e-4)
        for term, td in term_drops.items():
            row("clean", keys[g], td * d / max(drops.values()), p_terms, "linguistics_term", term)
    names = sorted(drops, key=lambda g: int(g[1:]))
    for i, gi in enumerate(names):
        for gj in names[i + 1 :]:
            row(keys[gj], keys[gi], drops[gi] - drops[gj], p_between)
    conditions = {keys[g]: {"layers": list(range(4 * (int(g[1:]) - 1), 4 * int(g[1:])))} for g in drops}
    conditions["all/wasserstein/p1"] = {"layers": list(range(32))}
    return pl.DataFrame(rows), {"conditions": conditions}


TERMS = {"ellipsis": 0.2, "subject_verb_agreement": 0.15, "binding": 0.05, "filler_gap_dependency": 0.04}


@pytest.mark.parametrize(
    ("drops", "terms", "p_between", "p_terms", "verdict"),
    [
        ({"g1": 0.06, "g2": 0.03, "g3": 0.01, "g4": 0.0}, TERMS, 1e-4, 1e-4, HOLDS),
        # the point estimates put g1 first, but no paired test separates it from the later groups
        ({"g1": 0.06, "g2": 0.03, "g3": 0.05, "g4": 0.0}, TERMS, 0.3, 1e-4, NO_DATA),
        # ellipsis without subject-verb agreement among the top terms: the spec asks for both
        ({"g1": 0.06, "g2": 0.03, "g3": 0.01, "g4": 0.0}, {**TERMS, "subject_verb_agreement": 0.01}, 1e-4, 1e-4,
         FAILS),
        # the terms' drops are indistinguishable from none (5 discordant items cannot go below p = 0.0625)
        ({"g1": 0.06, "g2": 0.03, "g3": 0.01, "g4": 0.0}, TERMS, 1e-4, 0.0625, NO_DATA),
        # a late group costs significantly more than every early one
        ({"g1": 0.01, "g2": 0.0, "g3": 0.02, "g4": 0.06}, TERMS, 1e-4, 1e-4, FAILS),
    ],
)  # fmt: skip
def test_c14_decides_on_paired_tests_and_needs_both_terms(tmp_path, drops, terms, p_between, p_terms, verdict):
    table, blimp = group_tables(drops, terms, p_between, p_terms, n=2000)
    run = make_run(tmp_path, {"llama-3.1-8b": {"family": "llama", "files": {"paired_blimp": table, "blimp": blimp}}})
    row = rows_for(claim_rows(run), "C14")[0]
    assert row["verdict"] == verdict, row


def test_c14_groups_too_coarse_to_be_early(tmp_path):
    # Three groups of 10 of 30 layers (the SmolLM2 replication): g1 ends at layer 9 > 30 / 4, so no group is early.
    table, blimp = group_tables({"g1": 0.01, "g2": 0.06, "g3": 0.0}, TERMS, 1e-4, 1e-4, n=670)
    blimp["conditions"] = {f"g{k}/wasserstein/p1": {"layers": list(range(10 * (k - 1), 10 * k))} for k in (1, 2, 3)}
    blimp["conditions"]["all/wasserstein/p1"] = {"layers": list(range(30))}
    run = make_run(tmp_path, {"toy": {"family": "llama", "files": {"paired_blimp": table, "blimp": blimp}}})
    row = rows_for(claim_rows(run), "C14")[-1]
    assert row["verdict"] == NO_DATA and "no group ends in the first quarter of 30 layers" in row["test"]


def npi_table(drop: float, half: float, n: int) -> pl.DataFrame:
    changed = 0 if half == 0 else n // 5  # a CI of width 0: no NPI item changed
    return pl.DataFrame(
        [{"benchmark": "tse", "reference": "clean", "condition": "g1/wasserstein/p1", "trial": "t0",
          "group_kind": "family", "group": "negative_polarity_items", "n": n, "drop": drop, "ci_lo": drop - half,
          "ci_hi": drop + half, "only_reference": changed, "only_condition": changed, "p_value": 1e-3}]
    )  # fmt: skip


@pytest.mark.parametrize(
    ("drop", "half", "n", "verdict"),
    [
        (0.2, 0.03, 800, HOLDS),
        (0.2, 0.08, 150, NO_DATA),  # the CI meets the band but leaves it: the old rule said "holds"
        # the CI [-8.3, 4.3] pts lies wholly below the band (SmolLM2's 60 NPI items): decided at any n
        (-0.02, 0.063, 60, FAILS),
        # no NPI item changed: the bootstrap's [0, 0] is replaced by the exact bound 1 - 0.025^(1/n), which
        # excludes the band at 40 items (8.8 pts) and not at 12 (26 pts)
        (0.0, 0.0, 40, FAILS),
        (0.0, 0.0, 12, NO_DATA),
        (0.0, 0.0, 8, NO_DATA),  # under the 10-item floor of any CI
        (0.02, 0.03, 800, FAILS),
    ],
)
def test_c16_band_and_items(tmp_path, drop, half, n, verdict):
    blimp = {"conditions": {"g1/wasserstein/p1": {"layers": [0, 1, 2, 3]}}}
    files = {"paired_tse": npi_table(drop, half, n), "blimp": blimp}
    row = rows_for(claim_rows(make_run(tmp_path, {"llama-3.1-8b": {"family": "llama", "files": files}})), "C16")[0]
    assert row["verdict"] == verdict, row
    assert row["margin"] == "band 15–25 pts" and row["alpha"] == 0.05
    if n < 10:
        assert f"not enough data at n = {n} NPI items (needs 10)" in row["test"]
    if half == 0 and n >= 10:
        assert "no item differs" in row["ours"]


def test_claims_about_paper_models_run_on_the_runs_own_models(tmp_path):
    # A training suite of the run (not Pythia) and a model with the Fig. 5/6/7 analyses get rows with verdicts.
    steps = np.array([0, 20, 40, 80, 160, 320])
    emergence = pl.DataFrame({"step": steps, "cohort_wd_mean": [0.05, 0.13, 0.19, 0.2, 0.2, 0.2],
                              "tse_overall": [0.5, 0.55, 0.6, 0.62, 0.63, 0.64]})  # fmt: skip
    drift = pl.DataFrame({"end_step": [40, 80, 120, 160], "cohort_ncd_mean": [1.6, 0.8, 0.7, 0.75],
                          "cohort_ncd_sem": [0.1, 0.05, 0.05, 0.05]})  # fmt: skip
    signs = pl.DataFrame({"layer": 1, "step": [0, 20, 80, 320], "share_nn": [0.03, 0.2, 0.1, 0.1],
                          "share_pn": [0.94, 0.8, 0.84, 0.84], "share_pp": [0.03, 0.0, 0.06, 0.06]})  # fmt: skip
    pairs = pl.DataFrame({"upos_i": ["DET", "ADP"] * 5, "upos_j": ["DET", "NOUN"] * 5, "sign": ["nn"] * 9 + ["pn"]})
    layers = np.arange(12)
    composition = pl.concat(
        [
            pl.DataFrame(
                {
                    "layer": layers,
                    "percent": p,
                    "top_k": k,
                    "share_nn": np.where(layers == 1, 0.5, 0.35),
                    "share_pn": 0.55,
                    "share_pp": 0.05,
                }
            )
            for p, k in ((5.0, 100), (0.5, 50))
        ]  # fmt: skip
    )
    suite = {"emergence": emergence, "cosine_drift": drift, "pair_signs_training": signs}
    files = {"figure5_pairs": pairs, "composition": composition}
    run = make_run(tmp_path, {"mini": {"family": "gpt_neox", "files": suite}, "small": {"files": files}})
    rows = {(r["id"], r["model"]): r for r in claim_rows(run)}
    assert rows[("C3", "mini (not in paper)")]["verdict"] == HOLDS  # step 40 ≤ 25K/143K of 320 steps = 55.9
    assert "55.9" in rows[("C3", "mini (not in paper)")]["test"]
    assert rows[("C4", "mini (not in paper)")]["verdict"] == HOLDS
    assert rows[("C5", "mini (not in paper)")]["verdict"] != "not run"
    assert rows[("C21", "mini (not in paper)")]["verdict"] == HOLDS
    assert rows[("C3", "pythia-70m…12b")]["verdict"] == NOT_RUN
    for claim in ("C18", "C19", "C20", "C23"):
        assert rows[(claim, "small (not in paper)")]["verdict"] != NOT_RUN, rows[(claim, "small (not in paper)")]
    assert rows[("C19", "small (not in paper)")]["verdict"] == HOLDS
    assert rows[("C23", "small (not in paper)")]["verdict"] == NO_DATA  # no Pythia-1.4B to compare with


def test_family_is_read_from_the_results_when_not_configured(tmp_path):
    from wneurons.store import io

    path = tmp_path / "results" / "toy" / "neurons.parquet"
    path.parent.mkdir(parents=True)
    io.write_parquet(path, neurons_table(True), {"family": "llama"})
    config = {"random_trials": 10, "percents": [1.0], "resamples": 500, "seed": 0}
    run = Run(models={"toy": {"family": None, "files": {"neurons": "results/toy/neurons.parquet"}}},
              config=config, data={}, root=tmp_path)  # fmt: skip
    row = [r for r in claim_rows(run) if r["id"] == "C1" and r["model"].startswith("toy")][0]
    assert row["verdict"] == HOLDS and "smooth nonlinearity" in row["ours"]


def test_markdown_leads_with_decided_rows(tmp_path):
    base = {"claim": "c", "paper": "p", "ours": "o", "ci": "", "test": "t", "sources": []}
    rows = [
        {**base, "id": "C1", "model": "a", "verdict": NOT_RUN},
        {**base, "id": "C2", "model": "b", "verdict": FAILS},
    ]
    md = claims_markdown(rows, "results")
    assert md.index("| C2 |") < md.index("## Not run") < md.index("| C1 |")


def test_cumulative_claims_are_not_run_without_cumulative_scopes(tmp_path):
    """g1 doubles as c1, so layer groups alone (layer_groups.cumulative off) are no cumulative run: C15 says
    "not run", not "not enough data at n = 1"; with c2, c3 scored it is decided."""
    individual = {("clean", f"g{k}/wasserstein/p1"): (0.01 * k, 0.005) for k in (1, 2, 3)}
    run = make_run(tmp_path, {"toy": {"family": "llama", "files": {"paired_blimp": paired_rows(individual, 0.01)}}})
    row = [r for r in claim_rows(run) if r["id"] == "C15" and r["model"].startswith("toy")][0]
    assert row["verdict"] == NOT_RUN and "no cumulative layer-group ablation" in row["ours"]
    cumulative = individual | {("clean", f"c{k}/wasserstein/p1"): (0.01 * k, 0.005) for k in (2, 3)}
    run = make_run(
        tmp_path / "c", {"toy": {"family": "llama", "files": {"paired_blimp": paired_rows(cumulative, 0.01)}}}
    )
    row = [r for r in claim_rows(run) if r["id"] == "C15" and r["model"].startswith("toy")][0]
    assert row["verdict"] == HOLDS and "c1..c3: 1/1" in row["ours"]
