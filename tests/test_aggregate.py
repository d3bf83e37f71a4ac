"""Aggregation of per-condition results into blimp.json / tse.json / ppl.json."""

import math

import pytest

from wneurons.jobs.ablate import aggregate_job, mean_and_sem_by_field
from wneurons.store import io


def result(selector, overall, *, trial=0, seed=0, scope="all", percent=1.0, terms=None):
    scores = {"overall": overall, "by_term": terms or {"binding": overall / 2}}
    cond = {"selector": selector}
    if selector != "clean":
        cond |= {"scope": scope, "percent": percent, "trial": trial, "seed": seed, "neurons": {"0": [1, 2]}}
    return {"benchmark": "blimp", "condition": cond, "scores": scores, "provenance": {"model": "m"}}


def test_mean_and_sem_match_the_formula():
    trials = [{"a": 1.0, "b": {"c": 2.0}}, {"a": 3.0, "b": {"c": 2.0}}, {"a": 8.0, "b": {"c": 5.0}}]
    mean, sem = mean_and_sem_by_field(trials)
    assert mean["a"] == pytest.approx(4.0)
    sd = math.sqrt(((1 - 4) ** 2 + (3 - 4) ** 2 + (8 - 4) ** 2) / 2)
    assert sem["a"] == pytest.approx(sd / math.sqrt(3))
    assert mean["b"]["c"] == pytest.approx(3.0)


def test_sem_of_a_single_trial_is_undefined_and_written_as_null(tmp_path):
    mean, sem = mean_and_sem_by_field([{"a": 1.0, "b": {"c": 2}}])
    assert mean == {"a": 1.0, "b": {"c": 2.0}} and sem == {"a": None, "b": {"c": None}}
    paths = []
    for i, r in enumerate([result("clean", 0.8), result("random", 0.78)]):
        paths.append(str(tmp_path / f"r{i}.json"))
        io.write_json(paths[-1], r)
    out = aggregate_job(paths, str(tmp_path / "blimp.json"), "m", "main", "blimp")
    rnd = io.read_json(tmp_path / "blimp.json")["conditions"]["all/random/p1"]
    assert rnd["n_trials"] == 1 and rnd["sem"] == {"overall": None, "by_term": {"binding": None}}
    assert out["conditions"]["all/random/p1"]["scores"]["overall"] == 0.78


def test_aggregate_groups_conditions_and_keeps_trials(tmp_path):
    inputs = [
        result("clean", 0.8),
        result("wasserstein", 0.6),
        result("random", 0.78, trial=0, seed=0),
        result("random", 0.76, trial=1, seed=1),
        result("wasserstein", 0.7, scope="g1"),
    ]
    paths = []
    for i, r in enumerate(inputs):
        p = tmp_path / f"r{i}.json"
        io.write_json(p, r)
        paths.append(str(p))
    out = aggregate_job(paths, str(tmp_path / "blimp.json"), "m", "main", "blimp")
    assert out["clean"]["overall"] == 0.8
    assert set(out["conditions"]) == {"all/wasserstein/p1", "all/random/p1", "g1/wasserstein/p1"}
    rnd = out["conditions"]["all/random/p1"]
    assert rnd["n_trials"] == 2 and rnd["seeds"] == [0, 1]
    assert rnd["scores"]["overall"] == pytest.approx(0.77)
    assert rnd["sem"]["overall"] == pytest.approx(0.01)
    assert [t["overall"] for t in rnd["trials"]] == [0.78, 0.76]
    assert out["conditions"]["all/wasserstein/p1"]["scores"]["overall"] == 0.6
    assert io.read_json(tmp_path / "blimp.json") == out


def test_aggregate_needs_exactly_one_clean(tmp_path):
    p = tmp_path / "r.json"
    io.write_json(p, result("wasserstein", 0.5))
    with pytest.raises(ValueError, match="exactly one clean"):
        aggregate_job([str(p)], str(tmp_path / "out.json"), "m", "main", "blimp")
    assert not (tmp_path / "out.json").exists()


def ppl_result(selector, perplexity, *, percent=1.0, search=None):
    out = result(selector, 0.0, percent=percent)
    out["benchmark"] = "ppl"
    out["scores"] = {"perplexity": perplexity, "n_tokens": 100}
    if search is not None:
        out["condition"] |= {"matched_percent": search["percent"], "matched_search": search}
    return out


@pytest.mark.parametrize(("matched_ppl", "converged"), [(21.3, True), (21.84, False)])
def test_matched_gap_is_the_gap_ppl_json_shows(tmp_path, caplog, matched_ppl, converged):
    # the demo's numbers before the fix: the search claimed 1.3% on its prefix, the final perplexities differ 3.3%
    search = {"percent": 40.0, "relative_gap": 0.013, "tolerance": 0.02, "converged": True}
    inputs = [
        ppl_result("clean", 12.0),
        ppl_result("wasserstein", 21.14),
        ppl_result("matched", matched_ppl, search=search),
    ]
    paths = []
    for i, r in enumerate(inputs):
        io.write_json(tmp_path / f"r{i}.json", r)
        paths.append(str(tmp_path / f"r{i}.json"))
    with caplog.at_level("WARNING", logger="wneurons"):
        out = aggregate_job(paths, str(tmp_path / "ppl.json"), "m", "main", "ppl")
    matched = out["conditions"]["all/matched/p1"]
    assert matched["matched_gap"] == pytest.approx(abs(matched_ppl / 21.14 - 1))
    assert matched["matched_tolerance"] == 0.02
    assert matched["matched_converged"] is converged
    assert ("exceeds tolerance" in caplog.text) is not converged
    from wneurons.report.figures.ablations import figure3, unmatched_controls

    flagged = unmatched_controls(out)
    assert list(flagged) == ([] if converged else [1.0])
    if not converged:
        assert "NOT MATCHED at 1%: gap 3.3% > tolerance 2.0%" == flagged[1.0]
        grammar = {**out, "benchmark": "blimp", "clean": {"overall": 0.8}, "conditions": {}}
        figure3(out, grammar, grammar, tmp_path / "f3.png")  # draws the mark (see its doc)
        assert (tmp_path / "f3.png").stat().st_size > 0
