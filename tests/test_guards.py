"""Claims whose guards read the state they depend on (issue 44): C21 checks its "NN(step 0) small" and "PP small"
parts, and C29 reads which WikiText-2 split the perplexity scored from the checksum the result recorded."""

import hashlib
import json

import polars as pl
import pytest
from test_claims import make_run, neurons_table, rows_for

from wneurons.report.claims import FAILS, HOLDS, NO_DATA, claim_rows
from wneurons.report.claims.dynamics import SMALL_SHARE
from wneurons.store import io
from wneurons.store.data import WIKITEXT_TEST, WIKITEXT_VALID, wikitext_split


def c21(tmp_path, share_nn0: float, share_pp: float, sem_pp: float | None = None) -> dict:
    nn = [share_nn0, 2.5 * share_nn0, 0.4, 0.4]
    pp = [share_pp] * 4
    signs = pl.DataFrame({"layer": 1, "step": [0, 1000, 16000, 143000], "share_nn": nn, "share_pp": pp})
    signs = signs.with_columns(share_pn=1 - pl.col("share_nn") - pl.col("share_pp"))
    if sem_pp is not None:
        signs = signs.with_columns(sem_pp=sem_pp)
    # PN must fall for the other parts to decide alone: it does when NN rises more than PP changes (PP constant)
    run = make_run(tmp_path, {"pythia-1.4b": {"family": "gpt_neox", "files": {"pair_signs_training": signs}}})
    return next(r for r in claim_rows(run) if r["id"] == "C21" and r["model"] == "pythia-1.4b")


@pytest.mark.parametrize(
    ("share_nn0", "share_pp", "sem_pp", "verdict", "part"),
    [
        (0.1, 0.05, None, HOLDS, "PP small throughout: holds"),
        (0.15, 0.3, None, FAILS, "PP small throughout: does not hold"),  # PP above chance's 1/4
        (0.15, 0.22, 0.02, NO_DATA, "PP small throughout: not enough data"),  # below 1/4 but within 2 SEM
        (0.3, 0.05, None, FAILS, "NN(step 0) small: does not hold"),  # doubles to 0.75 by 16K, yet not small at 0
    ],
)
def test_c21_checks_that_nn_at_step_0_and_pp_are_small(tmp_path, share_nn0, share_pp, sem_pp, verdict, part):
    row = c21(tmp_path, share_nn0, share_pp, sem_pp)
    assert row["verdict"] == verdict and part in row["ours"], row
    assert f"< {SMALL_SHARE:g} beyond 2 SEM" in row["test"]


@pytest.mark.parametrize(
    ("ppl_split", "verdict", "words"),
    [("valid", HOLDS, WIKITEXT_VALID), ("test", FAILS, WIKITEXT_TEST), (None, NO_DATA, "no checksum")],
)
def test_c29_reads_the_split_the_perplexity_scored(tmp_path, ppl_split, verdict, words):
    data = tmp_path / "wikitext"
    data.mkdir()
    (data / WIKITEXT_TEST).write_text(" = Test = \n\n the test split .\n")
    (data / WIKITEXT_VALID).write_text(" = Valid = \n\n the validation split .\n")
    digest = {s: hashlib.sha256(wikitext_split(data, s).encode("utf-8")).hexdigest() for s in ("test", "valid")}
    neurons = tmp_path / "results" / "toy" / "neurons.parquet"
    neurons.parent.mkdir(parents=True)
    io.write_parquet(neurons, neurons_table(True), {"text_sha256": digest["test"]})
    provenance = {} if ppl_split is None else {"text_sha256": digest[ppl_split]}
    (tmp_path / "results" / "toy" / "ppl.json").write_text(json.dumps({"conditions": {}, "provenance": provenance}))
    run = make_run(tmp_path, {"toy": {"family": "llama"}})
    run.models["toy"]["files"] = {"neurons": "results/toy/neurons.parquet", "ppl": "results/toy/ppl.json"}
    run.data["wikitext2"] = "wikitext"
    row = rows_for(claim_rows(run), "C29")[0]
    assert row["verdict"] == verdict and f"perplexity: {words}" in row["ours"] and WIKITEXT_TEST in row["ours"], row
