"""Training dynamics (wneurons.core.dynamics): cohorts, emergence, cosine drift, the integrity gate, correlations."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from wneurons.core import dynamics, uncertainty
from wneurons.store import checkpoints


def _table(wd_by_layer: dict[int, np.ndarray], md_by_layer: dict[int, np.ndarray] | None = None) -> pl.DataFrame:
    frames = []
    for layer, wd in wd_by_layer.items():
        md = md_by_layer[layer] if md_by_layer else np.zeros_like(wd)
        frames.append(
            pl.DataFrame({"layer": np.full(wd.size, layer), "neuron": np.arange(wd.size), "wd": wd, "md": md})
        )
    return pl.concat(frames)


def test_cohort_chosen_at_final_revision_is_looked_up_at_every_checkpoint():
    # Final revision: layer 1's neurons 7 and 3 have the highest WD (top 1% of 200 -> 2 by the authors' rule).
    k = 200
    final_l1 = np.linspace(0.0, 0.1, k)
    final_l1[[7, 3]] = [5.0, 4.0]
    final = _table({0: np.linspace(0, 1, k), 1: final_l1})
    cohorts = dynamics.choose_cohorts(final)
    assert cohorts["wd_layer"]["layers"] == {"1": [3, 7]}
    assert cohorts["wd_all_layers"]["n_per_layer"] == {"0": 10, "1": 10}
    # An early checkpoint where other neurons (0, 1) lead: the cohort stays 3 and 7, with their values there.
    early_l1 = np.ones(k)
    early_l1[[0, 1]] = 9.0
    early_l1[[3, 7]] = [2.0, 4.0]
    early = _table({0: np.zeros(k), 1: early_l1})
    got = dynamics.cohort_statistic(early, cohorts["wd_layer"])
    assert got["cohort_mean"] == pytest.approx(3.0)
    assert got["cohort_sem"] == pytest.approx(np.std([2.0, 4.0], ddof=1) / math.sqrt(2))
    assert got["layer_mean"] == pytest.approx(early_l1.mean())
    assert got["n_cohort"] == 2


def test_md_cohort_uses_the_given_md_values():
    k = 100
    final = _table({0: np.zeros(k), 1: np.zeros(k)}, {0: np.zeros(k), 1: np.arange(k, dtype=float)})
    pair_md = _table({1: np.zeros(k)}, {1: -np.arange(k, dtype=float)}).select("layer", "neuron", "md")
    assert dynamics.choose_cohorts(final)["md_layer"]["layers"]["1"] == [95, 96, 97, 98, 99]
    assert dynamics.choose_cohorts(final, md_values=pair_md)["md_layer"]["layers"]["1"] == [0, 1, 2, 3, 4]


def test_emergence_step_on_a_synthetic_series():
    steps = [0, 1000, 4000, 16000, 32000, 143000]
    values = [0.1, 0.2, 0.5, 0.92, 1.05, 1.0]  # final 1.0: 90% first reached at 16000
    assert dynamics.emergence_step(steps, values) == 16000
    assert dynamics.emergence_step(list(reversed(steps)), list(reversed(values))) == 16000  # order-free
    assert dynamics.emergence_step(steps, values, fraction=0.5) == 4000
    assert dynamics.emergence_step([0, 10], [0.0, 0.0]) is None


def test_cosine_drift_on_hand_made_rows():
    a = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
    b = np.array([[1.0, 0.0], [1.0, 0.0], [-1.0, -1.0], [1.0, 1.0]])
    cd = dynamics.cosine_dissimilarity(a, b)
    np.testing.assert_allclose(cd, [0.0, 1.0, 2.0, 1.0 - 1.0 / math.sqrt(2.0)])
    ncd = dynamics.normalized_drift(a, b)
    assert ncd.mean() == pytest.approx(1.0)  # normalized to the layer's mean
    np.testing.assert_allclose(ncd, cd / cd.mean())
    np.testing.assert_allclose(dynamics.cosine_dissimilarity(a[:2], 3.0 * a[:2]), 0.0, atol=1e-12)  # direction only
    c = b[::-1].copy()
    table = dynamics.cosine_drift({"step20": c, "step0": a, "step10": b}, cohort=np.array([1, 2]))
    assert table["start"].to_list() == ["step0", "step10"]
    assert table["end_step"].to_list() == [10, 20]
    assert table["cohort_ncd_mean"][0] == pytest.approx(ncd[[1, 2]].mean())
    assert table["cohort_ncd_sem"][0] == pytest.approx(ncd[[1, 2]].std(ddof=1) / math.sqrt(2))


def test_identical_checkpoints_have_no_drift_to_normalize():
    a = np.random.default_rng(0).normal(size=(5, 3))
    with pytest.raises(dynamics.CheckpointIntegrityError, match="identical"):
        dynamics.normalized_drift(a, a.copy())


def test_integrity_gate_names_identical_checkpoints():
    hashes = {"step0": "a" * 64, "step1000": "b" * 64, "step2000": "b" * 64, "step3000": "c" * 64}
    with pytest.raises(dynamics.CheckpointIntegrityError, match="step1000, step2000 have identical weights"):
        dynamics.check_integrity(hashes, final_revision="step143000")
    hashes = {"step0": "a" * 64, "step140000": "f" * 64, "step143000": "f" * 64}
    with pytest.raises(dynamics.CheckpointIntegrityError, match="step140000, step143000 equal the final"):
        dynamics.check_integrity(hashes, final_revision="step143000")
    dynamics.check_integrity({"step0": "a" * 64, "step10": "b" * 64}, final_revision="step10")


def test_correlation_with_bootstrap_ci():
    rng = np.random.default_rng(1)
    x = np.arange(12.0)
    y = 2 * x + rng.normal(scale=0.5, size=x.size)
    got = uncertainty.correlation_with_ci(x, y, n_boot=500, seed=3)
    assert got["pearson_r"] > 0.99 and got["spearman_rho"] > 0.95
    assert got["pearson_ci"][0] <= got["pearson_r"] <= got["pearson_ci"][1]
    assert got == uncertainty.correlation_with_ci(x, y, n_boot=500, seed=3)  # seeded
    bowl = uncertainty.correlation_with_ci(x, (x - x.mean()) ** 2, n_boot=500, seed=3)  # r = 0 exactly
    assert bowl["pearson_r"] == pytest.approx(0.0, abs=1e-12)
    assert bowl["pearson_ci"][0] < 0 < bowl["pearson_ci"][1]
    short = uncertainty.correlation_with_ci([1, 2], [3, 4])
    assert short["pearson_r"] is None and short["undefined"] == "2 finite pairs (needs 3)"
    flat = uncertainty.correlation_with_ci(x, np.zeros_like(x))  # e.g. an ablation that changes no decision
    assert flat["spearman_ci"] == [None, None] and flat["undefined"] == "y is constant"
    json.dumps(flat, allow_nan=False)  # results are written with allow_nan=False


def _fake_checkpoint(directory, step_name):
    d = directory / step_name
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    return d


def test_local_suite_steps_from_names_and_from_a_manifest(tmp_path):
    for name in ("checkpoint-500", "step0", "checkpoint-1500"):
        _fake_checkpoint(tmp_path / "named", name)
    (tmp_path / "named" / "logs").mkdir()
    found = checkpoints.suite_checkpoints(tmp_path / "named")
    assert list(found) == ["step0", "step500", "step1500"]
    suite = tmp_path / "listed"
    for name in ("init", "mid", "end"):
        _fake_checkpoint(suite, name)
    manifest = {"checkpoints": [{"step": 9, "path": "end"}, {"step": 0, "path": "init"}, {"step": 4, "path": "mid"}]}
    (suite / "manifest.json").write_text(json.dumps(manifest))
    found = checkpoints.suite_checkpoints(suite, steps_from="manifest")
    assert found == {"step0": str(suite / "init"), "step4": str(suite / "mid"), "step9": str(suite / "end")}
    with pytest.raises(ValueError, match="no checkpoint directories"):
        checkpoints.suite_checkpoints(tmp_path / "listed")


def test_weight_rows_read_from_safetensors_and_bin(tmp_path, tiny_model):
    import torch

    model = tiny_model("gpt_neox")
    name = checkpoints.weight_tensor_name("gpt_neox.layers", "mlp.dense_h_to_4h", 1)
    expected = model.state_dict()[name].numpy()
    model.save_pretrained(tmp_path / "st", safe_serialization=True)
    (tmp_path / "bin").mkdir()
    torch.save(model.state_dict(), tmp_path / "bin" / "pytorch_model.bin")
    assert checkpoints.read_weight_rows(tmp_path / "st", ["model.layers.1.x.weight", name])[0] == name
    np.testing.assert_array_equal(checkpoints.read_weight_rows(tmp_path / "st", name)[1], expected)
    np.testing.assert_array_equal(checkpoints.read_weight_rows(tmp_path / "bin", name)[1], expected)
    with pytest.raises(KeyError, match="no tensor"):
        checkpoints.read_weight_rows(tmp_path / "st", "gpt_neox.layers.9.mlp.dense_h_to_4h.weight")


def test_local_suite_and_hub_revisions_enumerate_the_same_jobs(tmp_path):
    from pathlib import Path

    from wneurons.experiment.config import validate_config
    from wneurons.experiment.grid import conditions_for

    repo = Path(__file__).resolve().parents[1]
    schema = repo / "workflow/schemas/config.schema.yaml"
    data = {
        name: {"local_dir": f"../shared/data/{d}", "checksums": f"resources/checksums/{c}.sha256"}
        for name, d, c in (("blimp", "blimp/data", "blimp"), ("tse", "tse/pickle/EMNLP2018", "tse-pickle"))
    } | {
        "wikitext2": {
            "local_dir": "../shared/data/wikitext-2/raw",
            "checksums": "resources/checksums/wikitext-2.sha256",
        }
    }
    common = {"family": "gpt_neox", "num_layers": 2, "params_b": 0.01, "checkpoint_ablations": ["step1000"]}
    common |= {"weight_checkpoints": ["step0", "step1000", "step2000"]}
    hub = {"hub_id": "EleutherAI/pythia-70m", "final_revision": "step2000", "checkpoints": ["step0", "step1000"]}
    for name in ("checkpoint-1000", "checkpoint-2000", "step0"):
        _fake_checkpoint(tmp_path / "suite", name)
    local = {"checkpoint_suite": {"path": str(tmp_path / "suite")}}
    configs = {}
    for kind, source in (("hub", hub), ("suite", local)):
        # groups of 1 layer: the 2-layer model cannot have the default groups of 4 (one group = the whole model)
        grid = {"ablation": {"layer_groups": {"size": 1}}}
        config = validate_config({"models": {"m": common | source}, "data": data} | grid, schema, workdir=repo)
        spec = config["models"]["m"]
        if kind == "suite":
            dirs = checkpoints.resolve_checkpoint_suite("m", spec, trained_dir="unused")
            assert dirs["step1000"] == str(tmp_path / "suite" / "checkpoint-1000")
        revisions = checkpoints.training_revisions(spec)
        configs[kind] = [(r, conditions_for(config, "m", r)) for r in revisions]
    assert configs["hub"] == configs["suite"]
    assert [r for r, _ in configs["suite"]] == ["step0", "step1000", "step2000"]
    assert configs["suite"][1][1] and not configs["suite"][0][1]  # ablations at step1000 only (and the final)


def test_integrity_gate_on_saved_checkpoints_names_the_identical_pair(tmp_path, tiny_model):
    from wneurons.jobs import training

    records = []
    for revision, seed in (("step0", 0), ("step10", 1), ("step20", 1), ("step30", 2)):
        directory = tmp_path / "suite" / revision
        tiny_model("gpt_neox", seed=seed).save_pretrained(directory, safe_serialization=True)
        family = None if revision == "step30" else "gpt_neox"  # no family: read from the checkpoint's config.json
        spec = {"name": "tiny", "family": family, "revision": revision, "local_path": str(directory)}
        record = tmp_path / f"{revision}.json"
        training.weight_rows_job(spec, 1, str(tmp_path / f"{revision}.npy"), str(record))
        records.append(str(record))
    rows0 = np.load(tmp_path / "step0.npy")
    assert rows0.shape == (96, 32)  # conftest's tiny model: 96 neurons of d_in 32
    with pytest.raises(dynamics.CheckpointIntegrityError, match="step10, step20 have identical weights"):
        training.integrity_job(records, "step30", str(tmp_path / "integrity.json"), mode="error")
    assert not (tmp_path / "integrity.json").exists()
    kept = training.integrity_job(records, "step30", str(tmp_path / "integrity.json"), mode="drop")
    assert kept["dropped"] == ["step20"]


def test_emergence_follows_the_final_cohort_through_checkpoints(tmp_path):
    from wneurons.jobs import training
    from wneurons.store import io

    k, revisions = 300, ["step0", "step100", "step1000"]
    rng = np.random.default_rng(0)
    cohort_wd = {"step0": 0.1, "step100": 0.95, "step1000": 1.0}
    inputs = {"neurons": [], "tse": [], "blimp": []}
    for i, revision in enumerate(revisions):
        wd = rng.uniform(0.0, 0.05, size=k)
        wd[[5, 50, 250]] = cohort_wd[revision]  # the final top-1% of layer 1 ...
        if revision == "step0":
            wd[[1, 2, 3]] = 9.0  # ... while other neurons lead at step 0
        table = _table({0: rng.uniform(size=k), 1: wd})
        inputs["neurons"].append(str(tmp_path / f"{revision}.parquet"))
        table.write_parquet(inputs["neurons"][-1])
        for bench, acc in (("tse", 0.5 + 0.1 * i), ("blimp", 0.6 + 0.1 * i)):
            path = tmp_path / f"{revision}-{bench}.json"
            by_task = {"a": acc - 0.1, "b": acc + 0.05}
            io.write_json(path, {"scores": {"overall": acc, "by_task": by_task}})
            inputs[bench].append(str(path))
    final_table = pl.read_parquet(inputs["neurons"][-1])
    cohorts = {"cohorts": dynamics.choose_cohorts(final_table)}
    assert cohorts["cohorts"]["wd_layer"]["layers"] == {"1": [5, 50, 250]}
    io.write_json(tmp_path / "cohorts.json", cohorts)
    io.write_json(tmp_path / "integrity.json", {"dropped": []})
    inputs |= {"cohorts": str(tmp_path / "cohorts.json"), "integrity": str(tmp_path / "integrity.json")}
    params = {"emergence_fraction": 0.9, "bootstrap": 200, "seed": 0}
    table = training.emergence_job(
        {"name": "tiny"}, revisions, inputs, str(tmp_path / "e.parquet"), str(tmp_path / "e.json"), params, 512
    )
    np.testing.assert_allclose(table["cohort_wd_mean"].to_numpy(), [0.1, 0.95, 1.0])
    assert table["tokens"].to_list() == [0, 51200, 512000]
    assert table["tse_macro"][0] == pytest.approx(0.475)
    summary = io.read_json(tmp_path / "e.json")
    assert summary["emergence_step"] == 100 and summary["emergence_tokens"] == 51200
    assert summary["correlations"]["tse_overall"]["pearson_r"] > 0.8
